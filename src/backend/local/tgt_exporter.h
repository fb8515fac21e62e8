// TgtExporter: the Exporter for Linux tgt, driving a running tgtd through a
// TgtdControl (typed requests; tgtd's error numbers decide, never message
// text). What tgtd prints is trusted only as far as it can be accounted
// for: duplicate target ids or names, accounts bound but not listed,
// malformed names are errors, never acted on; every ACL change is read back
// and compared with the record. tgtd keeps its configuration in memory only,
// so everything here is re-derivable from the pool by Apply/Reconcile. The
// last listing of tgtd's targets is kept in step with our own changes and
// stands in for a fresh read only where nothing but a new target is made or
// everything is already in place (tgt_exporter_listing.cc): so a check
// (ApplyEach of a ListVolumes page) may see a hand-made change up to
// `listing_max_age` late, while every change of access or of a LUN is
// decided on a fresh read and every ACL change read back. Thread-safe: one
// mutex serialises every change (tgtd handles one management request at a
// time anyway, and target ids are allocated from what `show` returns).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/local/exporter.h"
#include "backend/local/tgtadm_parser.h"
#include "backend/local/tgtd_control.h"
#include "common/host.h"
#include "common/mutex.h"

namespace blockcsi {

class TgtExporter final : public Exporter {
 public:
  // `control` reaches the tgtd on `control_port`. `socket_dir` holds that
  // tgtd's management socket (socket.<control port>): its identity tells a
  // restarted tgtd from the one a kept listing came from. A listing is kept
  // at most `listing_max_age` (see CachedLocked).
  TgtExporter(std::shared_ptr<TgtdControl> control, int control_port, std::shared_ptr<Host> host,
              const std::string& socket_dir = kDefaultSocketDir,
              std::chrono::milliseconds listing_max_age = std::chrono::seconds(10));
  static constexpr char kDefaultSocketDir[] = "/var/run/tgtd";

  std::string Kind() const override { return "tgt"; }
  ExportedLunIdentity IdentityFor(const std::string& volume_id) const override;
  // Calls that come while another one is at tgtd wait and are then applied
  // together by one of them, as ApplyEach: each change is still decided on
  // a fresh read and read back, but with one read each way for the batch,
  // where every call made two. tgtd has no read of one target's ACL, and
  // its listing of all targets costs it more than linear time (about 7 ms
  // at 1,000 targets here): concurrent grants at that size would queue
  // behind each other's two listings. A batch holds one call per target;
  // another call for a target already in it waits for the next.
  StatusOr<std::vector<std::string>> Apply(const DesiredExport& desired) override EXCLUDES(queue_mu_, mu_);
  std::vector<StatusOr<std::vector<std::string>>> ApplyEach(const std::vector<DesiredExport>& desired) override
      EXCLUDES(mu_);
  // Apply calls waiting for the next batch (tests use it to hold a batch
  // until others have queued behind it).
  size_t WaitingApplies() EXCLUDES(queue_mu_);
  StatusOr<std::vector<std::string>> Reconcile(const std::vector<DesiredExport>& desired,
                                               const std::string& iqn_prefix) override EXCLUDES(mu_);
  Status CloseSessions(const std::string& iqn, const std::string& initiator_iqn) override EXCLUDES(mu_);
  Status Remove(const std::string& iqn) override EXCLUDES(mu_);
  Status Healthy() override;

  // The SCSI ID tgtd is given for a volume: 24 hex digits. tgtd reports it
  // as the T10 vendor designator and derives its NAA-6 designator from it
  // ("60000000" + these digits), which is the WWN a node verifies.
  static std::string ScsiIdFor(const std::string& volume_id);

 private:
  // Sends a change to tgtd; `tolerated` are the error numbers that mean
  // "already in that state" (idempotent repeats), which count as success.
  // Any other refusal is INTERNAL naming `what`.
  Status Run(const TgtdRequest& request, const std::string& what, TgtdErrors tolerated = {}) REQUIRES(mu_);
  // The text of a show; a refusal is UNAVAILABLE, as tgtd not answering.
  StatusOr<std::string> Show(const TgtdRequest& request);
  // tgtd's targets; a listing an initiator's alias broke is recovered from
  // by closing the sessions that broke it (CloseForgingSessions) and
  // reading again, a few times at most.
  StatusOr<std::vector<TgtTarget>> ShowTargets() REQUIRES(mu_);
  // ACL entries (tid, initiator) taken out of tgtd for the length of one
  // listing, and put back after it.
  using WithheldAcls = std::set<std::pair<int, std::string>>;
  // Puts `withheld` back; `result`, or the first failure to put one back.
  Status RestoreAcls(const WithheldAcls& withheld, Status result) REQUIRES(mu_);
  // Target `tid`'s connections from tgtd's alias-free listing; NOT_FOUND
  // when tgtd has no such target.
  StatusOr<std::vector<TgtConnectionEntry>> ShowConnections(int tid);
  // Closes every session of a target `text` (an untrusted target listing)
  // names that `text` does not show plainly, and every session of the
  // `suspects` (or, when nothing else looks forged, of the target whose
  // heading comes last before `failed_line`, where the parse stopped); how
  // many.
  // With `withhold`, each of those sessions' initiators is first taken out
  // of that target's ACL and added to it.
  StatusOr<size_t> CloseForgingSessions(const std::string& text, std::set<int> suspects, int failed_line,
                                        WithheldAcls* withhold) REQUIRES(mu_);
  // Reads tgtd's targets into listing_ (fresh, whatever it held) and
  // returns them.
  StatusOr<std::vector<TgtTarget>*> ReadLiveLocked() REQUIRES(mu_);
  // Whether tgtd is still the one listing_ was read from, not longer ago
  // than listing_max_age_.
  bool ListingCurrentLocked() REQUIRES(mu_);
  // listing_, when it may stand in for a fresh read to apply all of
  // `desired`; else nullptr.
  std::vector<TgtTarget>* CachedLocked(const std::vector<const DesiredExport*>& desired) REQUIRES(mu_);
  // The target of that name in `live` (nullptr: none); by listing_'s index
  // when `live` is listing_.
  TgtTarget* FindLocked(std::vector<TgtTarget>& live, const std::string& iqn) REQUIRES(mu_);
  // Rebuilds listing_'s index after targets were read or removed.
  void ReindexLocked() REQUIRES(mu_);
  // Apply() of each export on `live` with one ACL read-back for the batch;
  // `read` is the status of reading `live` (its error is every result).
  std::vector<StatusOr<std::vector<std::string>>> ApplyBatchLocked(const std::vector<DesiredExport>& desired,
                                                                   std::vector<TgtTarget>* live, Status read)
      REQUIRES(mu_);
  StatusOr<std::vector<std::string>> ShowAccounts();
  // An ACL change to read back: the target `tid` must be the volume's and
  // let in exactly `want` (the record's initiators).
  struct AclCheck {
    size_t slot = 0;  // which export of a batch
    std::string volume_id, iqn;
    int tid = 0;
    std::set<std::string> want;
  };
  // ApplyLocked reads an ACL change back at once, or, with `deferred`,
  // leaves the check to the caller (one read per batch).
  StatusOr<std::vector<std::string>> ApplyLocked(const DesiredExport& desired, std::vector<TgtTarget>& live,
                                                 std::vector<std::string>& live_accounts,
                                                 std::vector<AclCheck>* deferred = nullptr, size_t slot = 0)
      REQUIRES(mu_);
  // The steps of ApplyLocked, in order; each appends what it changed to
  // `repairs`.
  StatusOr<TgtTarget*> EnsureTargetLocked(const DesiredExport& desired, std::vector<TgtTarget>& live,
                                          std::vector<std::string>& repairs) REQUIRES(mu_);
  Status EnsureLunLocked(TgtTarget& target, const DesiredExport& desired, std::vector<std::string>& repairs)
      REQUIRES(mu_);
  // Accounts made and bound as the grants ask, others unbound.
  Status EnsureChapLocked(const DesiredExport& desired, std::vector<TgtTarget>& live,
                          std::vector<std::string>& live_accounts, std::vector<std::string>& repairs) REQUIRES(mu_);
  // The target's ACL made exactly `want_acl`; true when it changed.
  StatusOr<bool> EnsureAclLocked(const DesiredExport& desired, TgtTarget& target, const std::set<std::string>& want_acl,
                                 std::vector<std::string>& repairs) REQUIRES(mu_);
  // FAILED_PRECONDITION when d's CHAP credentials cannot be in force
  // without changing another target's: a user name another target binds
  // with another (or an unknown) password, or one name with two passwords.
  // Checked before any change.
  Status CheckChapLocked(const DesiredExport& d, const std::vector<TgtTarget>& live,
                         const std::vector<std::string>& live_accounts) REQUIRES(mu_);
  // Whether `user`'s account, whose password this process does not know,
  // is kept as it is for `d`: d's target and another one bind it already.
  static bool KeptAsBound(const DesiredExport& d, const std::string& user, const std::vector<TgtTarget>& live);
  // Account `user` with `password` in tgtd for `d` (CheckChapLocked passed):
  // replaced in place without a moment where d's target binds no incoming
  // account.
  Status EnsureAccount(const DesiredExport& d, const std::string& user, const std::string& password,
                       std::vector<TgtTarget>& live, std::vector<std::string>& live_accounts,
                       std::vector<std::string>& repairs) REQUIRES(mu_);
  Status AddLun(int tid, const DesiredExport& desired) REQUIRES(mu_);
  // After ACL changes: reads tgtd again (once) and runs each check; one
  // status per check. Refreshes `live`.
  std::vector<Status> VerifyAclsLocked(const std::vector<AclCheck>& checks, std::vector<TgtTarget>& live) REQUIRES(mu_);
  // Deletes the accounts of ours (made by this process, or unbound by it from
  // one of our targets) that no target binds any more, so that a CHAP secret
  // does not outlive its last volume in tgtd's memory. Best effort (logged):
  // the operation that freed them has already succeeded.
  void DropUnusedAccountsLocked(const std::vector<TgtTarget>& live) REQUIRES(mu_);

  // One Apply call waiting for, or in, a batch; lives on the caller's stack.
  struct QueuedApply {
    const DesiredExport* desired = nullptr;
    std::optional<StatusOr<std::vector<std::string>>> result;  // set when its batch is done
  };
  // Takes from queue_ the calls of the next batch, in arrival order, at
  // most one per target.
  std::vector<QueuedApply*> TakeBatchLocked() REQUIRES(queue_mu_);

  const std::shared_ptr<TgtdControl> control_;
  const int control_port_;
  const std::string socket_path_;
  const std::chrono::milliseconds listing_max_age_;
  const std::shared_ptr<Host> host_;  // the socket's identity
  Mutex mu_;
  // tgtd's targets as last read, kept in step with every change made here,
  // so that a call at 1,000 targets need not read (and parse) all of them
  // again. Its sessions are never used (see CloseSessions).
  struct Listing {
    std::vector<TgtTarget> targets;
    std::unordered_map<std::string, size_t> by_iqn;  // index into targets
    bool valid = false;                              // false after a failed command or read: re-read
    // The socket file's identity when it was read: its inode number may be
    // reused by a restarted tgtd's new socket, its change time (ns) is not.
    FileIdentity socket;
    std::chrono::steady_clock::time_point read_at;
    // The targets whose ACL change this listing was read back for
    // (VerifyAclsLocked), while no request has been sent to tgtd since;
    // emptied by any other read and by every change (Run).
    std::set<std::string> read_back_of;
  };
  Listing listing_ GUARDED_BY(mu_);
  // The password each tgtd account was last created with by this process;
  // memory only (never persisted, never logged).
  std::map<std::string, std::string> account_passwords_ GUARDED_BY(mu_);
  // Accounts this process unbound from one of our targets (it may not know
  // their password after a restart); candidates for DropUnusedAccountsLocked.
  std::set<std::string> unbound_accounts_ GUARDED_BY(mu_);
  // Apply's batches. queue_mu_ is never held while taking mu_ (a batch is
  // applied with queue_mu_ released).
  Mutex queue_mu_;
  CondVar queue_cv_;
  std::vector<QueuedApply*> queue_ GUARDED_BY(queue_mu_);
  bool batch_running_ GUARDED_BY(queue_mu_) = false;
};

}  // namespace blockcsi
