// TgtExporter: the Exporter for Linux tgt, driving a running tgtd through
// `/usr/sbin/tgtadm -C <control port>` (argv via the Executor; CHAP
// passwords marked Secret). What tgtd prints is trusted only as far as it
// can be accounted for: duplicate target ids or names, accounts bound but
// not listed, malformed names are errors, never acted on; every ACL change
// is read back and compared with the record. tgtd keeps its configuration in memory only, so everything here
// is re-derivable from the pool by Apply/Reconcile. The last listing of
// tgtd's targets is kept in step with our own changes and stands in for a
// fresh read only where nothing but a new target is made or everything is
// already in place (tgt_exporter_listing.cc): so a check (ApplyEach of a
// ListVolumes page) may see a hand-made change up to `listing_max_age` late,
// while every change of access or of a LUN is decided on a fresh read and
// every ACL change read back. Thread-safe: one mutex
// serialises every change (tgtd handles one management request at a time
// anyway, and target ids are allocated from what `show` returns).
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/local/exporter.h"
#include "backend/local/tgtadm_parser.h"
#include "common/executor.h"
#include "common/host.h"

namespace blockcsi {

class TgtExporter final : public Exporter {
 public:
  // `tgtadm` is run by this absolute path, never looked up in PATH (a
  // writable directory early in PATH would get every CHAP secret).
  // `socket_dir` holds tgtd's management socket (socket.<control port>):
  // its identity tells a restarted tgtd from the one a kept listing came
  // from. A listing is kept at most `listing_max_age` (see CachedLocked).
  TgtExporter(std::shared_ptr<Executor> executor, int control_port, std::string tgtadm = kDefaultTgtadm,
              std::chrono::milliseconds timeout = std::chrono::seconds(20),
              const std::string& socket_dir = kDefaultSocketDir,
              std::chrono::milliseconds listing_max_age = std::chrono::seconds(10),
              std::shared_ptr<Host> host = MachineHost());
  static constexpr char kDefaultTgtadm[] = "/usr/sbin/tgtadm";
  static constexpr char kDefaultSocketDir[] = "/var/run/tgtd";

  std::string Kind() const override { return "tgt"; }
  ExportedLunIdentity IdentityFor(const std::string& volume_id) const override;
  // Calls that come while another one is at tgtd wait and are then applied
  // together by one of them, as ApplyEach: each change is still decided on
  // a fresh read and read back, but with one read each way for the batch,
  // where every call made two. tgtd has no read of one target's ACL, and
  // its listing of all targets costs it more than linear time (about 7 ms
  // at 1,000 targets here): concurrent grants at that size queued behind
  // each other's two listings (issue #18). A batch holds one call per
  // target; another call for a target already in it waits for the next.
  StatusOr<std::vector<std::string>> Apply(const DesiredExport& desired) override;
  std::vector<StatusOr<std::vector<std::string>>> ApplyEach(const std::vector<DesiredExport>& desired) override;
  // Apply calls waiting for the next batch (tests use it to hold a batch
  // until others have queued behind it).
  size_t WaitingApplies();
  StatusOr<std::vector<std::string>> Reconcile(const std::vector<DesiredExport>& desired,
                                               const std::string& iqn_prefix) override;
  Status CloseSessions(const std::string& iqn, const std::string& initiator_iqn) override;
  Status Remove(const std::string& iqn) override;
  Status Healthy() override;

  // The SCSI ID tgtd is given for a volume: 24 hex digits. tgtd reports it
  // as the T10 vendor designator and derives its NAA-6 designator from it
  // ("60000000" + these digits), which is the WWN a node verifies.
  static std::string ScsiIdFor(const std::string& volume_id);

 private:
  Command Tgtadm() const;
  // Runs a tgtadm command; `tolerated` is a stderr fragment meaning "already
  // in that state" (idempotent repeats), which counts as success.
  Status Run(const Command& command, const std::string& what, const std::string& tolerated = "");
  StatusOr<std::vector<TgtTarget>> ShowTargets();
  // Reads tgtd's targets into listing_ (fresh, whatever it held) and
  // returns them. Needs mu_.
  StatusOr<std::vector<TgtTarget>*> ReadLiveLocked();
  // Whether tgtd is still the one listing_ was read from, not longer ago
  // than listing_max_age_. Needs mu_.
  bool ListingCurrentLocked();
  // listing_, when it may stand in for a fresh read to apply all of
  // `desired`; else nullptr. Needs mu_.
  std::vector<TgtTarget>* CachedLocked(const std::vector<const DesiredExport*>& desired);
  // The target of that name in `live` (nullptr: none); by listing_'s index
  // when `live` is listing_. Needs mu_.
  TgtTarget* FindLocked(std::vector<TgtTarget>& live, const std::string& iqn);
  // Rebuilds listing_'s index after targets were read or removed. Needs mu_.
  void ReindexLocked();
  // Apply() of each export on `live` with one ACL read-back for the batch;
  // `read` is the status of reading `live` (its error is every result).
  // Needs mu_.
  std::vector<StatusOr<std::vector<std::string>>> ApplyBatchLocked(const std::vector<DesiredExport>& desired,
                                                                   std::vector<TgtTarget>* live, Status read);
  StatusOr<std::vector<std::string>> ShowAccounts();
  // An ACL change to read back: the target `tid` must be the volume's and
  // let in exactly `want` (the record's initiators).
  struct AclCheck {
    size_t slot = 0;  // which export of a batch
    std::string volume_id, iqn;
    int tid = 0;
    std::set<std::string> want;
  };
  // Both need mu_ held. ApplyLocked reads an ACL change back at once, or,
  // with `deferred`, leaves the check to the caller (one read per batch).
  StatusOr<std::vector<std::string>> ApplyLocked(const DesiredExport& desired, std::vector<TgtTarget>& live,
                                                 std::vector<std::string>& live_accounts,
                                                 std::vector<AclCheck>* deferred = nullptr, size_t slot = 0);
  // The steps of ApplyLocked, in order; each appends what it changed to
  // `repairs`. Need mu_.
  StatusOr<TgtTarget*> EnsureTargetLocked(const DesiredExport& desired, std::vector<TgtTarget>& live,
                                          std::vector<std::string>& repairs);
  Status EnsureLunLocked(TgtTarget& target, const DesiredExport& desired, std::vector<std::string>& repairs);
  // Accounts made and bound as the grants ask, others unbound.
  Status EnsureChapLocked(const DesiredExport& desired, std::vector<TgtTarget>& live,
                          std::vector<std::string>& live_accounts, std::vector<std::string>& repairs);
  // The target's ACL made exactly `want_acl`; true when it changed.
  StatusOr<bool> EnsureAclLocked(const DesiredExport& desired, TgtTarget& target, const std::set<std::string>& want_acl,
                                 std::vector<std::string>& repairs);
  Status EnsureAccount(const std::string& user, const std::string& password, std::vector<TgtTarget>& live,
                       std::vector<std::string>& live_accounts, std::vector<std::string>& repairs);
  Status AddLun(int tid, const DesiredExport& desired);
  // After ACL changes: reads tgtd again (once) and runs each check; one
  // status per check. Refreshes `live`. Needs mu_.
  std::vector<Status> VerifyAclsLocked(const std::vector<AclCheck>& checks, std::vector<TgtTarget>& live);
  // Deletes the accounts of ours (made by this process, or unbound by it from
  // one of our targets) that no target binds any more, so that a CHAP secret
  // does not outlive its last volume in tgtd's memory. Best effort (logged):
  // the operation that freed them has already succeeded. Needs mu_.
  void DropUnusedAccountsLocked(const std::vector<TgtTarget>& live);

  // One Apply call waiting for, or in, a batch; lives on the caller's stack.
  struct QueuedApply {
    const DesiredExport* desired = nullptr;
    std::optional<StatusOr<std::vector<std::string>>> result;  // set when its batch is done
  };
  // Takes from queue_ the calls of the next batch, in arrival order, at
  // most one per target. Needs queue_mu_.
  std::vector<QueuedApply*> TakeBatchLocked();

  const std::shared_ptr<Executor> executor_;
  const int control_port_;
  const std::string tgtadm_;
  const std::chrono::milliseconds timeout_;
  const std::string socket_path_;
  const std::chrono::milliseconds listing_max_age_;
  const std::shared_ptr<Host> host_;  // the socket's identity
  std::mutex mu_;
  // tgtd's targets as last read, kept in step with every change made here,
  // so that a call at 1,000 targets need not read (and parse) all of them
  // again (issue #18). Sessions in it are as last read: used only by
  // CloseSessions, and only from a read-back of an ACL change (see there).
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
    // emptied by any other read and by every command (Run).
    std::set<std::string> read_back_of;
  };
  Listing listing_;  // guarded by mu_
  // The password each tgtd account was last created with by this process;
  // memory only (never persisted, never logged).
  std::map<std::string, std::string> account_passwords_;  // guarded by mu_
  // Accounts this process unbound from one of our targets (it may not know
  // their password after a restart); candidates for DropUnusedAccountsLocked.
  std::set<std::string> unbound_accounts_;  // guarded by mu_
  // Apply's batches. Lock order: queue_mu_ is never held while taking mu_.
  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::vector<QueuedApply*> queue_;  // guarded by queue_mu_
  bool batch_running_ = false;       // guarded by queue_mu_
};

}  // namespace blockcsi
