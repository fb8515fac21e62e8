#include "backend/local/tgt_exporter.h"

#include <algorithm>
#include <map>
#include <set>

#include "backend/volume_id.h"
#include "common/clock.h"
#include "common/logging.h"

namespace blockcsi {
namespace {

// The hex digits a LUN's identity is made of. Volume ids are validated
// before they reach an exporter; this only guards against misuse.
std::string HexOf(const std::string& volume_id) { return std::string(IdHex(volume_id)); }

// What an operator can do about a listing we refuse: it holds something
// blockcsi does not make (an account or target made by hand or by an older
// version), which only they can judge and remove.
constexpr char kUntrustedHint[] =
    " (look for an account or target blockcsi did not make: tgtadm -C <port> --lld iscsi --op show --mode "
    "account|target; remove it with --op delete)";

bool Contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

TgtExporter::TgtExporter(std::shared_ptr<TgtdControl> control, int control_port, std::shared_ptr<Host> host,
                         const std::string& socket_dir, std::chrono::milliseconds listing_max_age)
    : control_(std::move(control)),
      control_port_(control_port),
      socket_path_(socket_dir + "/socket." + std::to_string(control_port)),
      listing_max_age_(listing_max_age),
      host_(std::move(host)) {}

std::string TgtExporter::ScsiIdFor(const std::string& volume_id) { return "b10cc5a1" + HexOf(volume_id); }

ExportedLunIdentity TgtExporter::IdentityFor(const std::string& volume_id) const {
  return {"bcsi" + HexOf(volume_id), "60000000" + ScsiIdFor(volume_id)};
}

Status TgtExporter::Run(const TgtdRequest& request, const std::string& what, TgtdErrors tolerated) {
  auto answer = control_->Send(request);
  listing_.read_back_of.clear();  // tgtd may have changed: no longer a read-back of the last ACL change
  // Any refusal, even one tolerated as "already so", means tgtd was not
  // what the kept listing said: the next call reads it again.
  if (!answer.ok() || !answer->ok()) listing_.valid = false;
  if (!answer.ok()) return Status(answer.status().code(), what + ": " + answer.status().message());
  if (answer->ok() || tolerated.Has(answer->error)) return OkStatus();
  return Internal(what + ": tgtd on control port " + std::to_string(control_port_) + " refused " + request.Describe() +
                  ": " + std::string(TgtdErrorText(answer->error)) + " (tgtd error " +
                  std::to_string(static_cast<uint32_t>(answer->error)) + ")");
}

StatusOr<std::string> TgtExporter::Show(const TgtdRequest& request) {
  BLOCKCSI_ASSIGN_OR_RETURN(TgtdAnswer answer, control_->Send(request));
  if (!answer.ok()) {
    return Unavailable("tgtd on control port " + std::to_string(control_port_) + " does not answer " +
                       request.Describe() + ": " + std::string(TgtdErrorText(answer.error)));
  }
  return std::move(answer.text);
}

StatusOr<std::vector<TgtTarget>> TgtExporter::ShowTargets() {
  // tgtd prints each session's InitiatorAlias, which the initiator chose
  // (any bytes but NUL), unescaped in this listing: a line break in it can
  // forge targets, sections and sessions. A listing that cannot be accounted
  // for is never acted on; the sessions whose alias broke it (found through
  // tgtd's alias-free connection listing) are closed and tgtd read again, so
  // that one initiator cannot stop the agent from serving every volume.
  // Closing alone loses to an initiator that logs in again at once (a login
  // takes well under a millisecond, a listing longer): from the second
  // round on, the ACL entries of the sessions closed are taken out first,
  // for one read, and put back right after it (WithheldAcls).
  constexpr int kRecoveries = 3;
  WithheldAcls withheld;
  for (int round = 0;; ++round) {
    auto shown = Show(TgtdRequest::ShowTargets());
    if (!shown.ok()) return RestoreAcls(withheld, shown.status());
    const std::string& text = *shown;
    int failed_line = 0;
    auto parsed = ParseTgtadmTargets(text, &failed_line);
    // Even a listing that parses is checked where an alias could have
    // forged it: every target that shows a session must exist and show
    // exactly the sessions tgtd's connection listing has. A forged target
    // lies inside the block of the real one before it.
    std::set<int> suspects;  // targets whose every session is closed
    Status why = parsed.status();
    if (parsed.ok()) {
      for (size_t i = 0; i < parsed->size(); ++i) {
        const TgtTarget& t = (*parsed)[i];
        if (t.sessions.empty()) continue;
        auto connections = ShowConnections(t.tid);
        std::set<uint64_t> listed, real;
        for (const auto& s : t.sessions) listed.insert(static_cast<uint64_t>(s.sid));
        if (connections.ok()) {
          for (const auto& c : *connections) real.insert(c.sid);
          if (listed == real) continue;
          suspects.insert(t.tid);
        } else if (connections.status().code() == StatusCode::kNotFound) {
          if (i > 0) suspects.insert((*parsed)[i - 1].tid);
        } else {
          return RestoreAcls(withheld, connections.status());
        }
        why = InvalidArgument("target " + std::to_string(t.tid) +
                              " shows sessions tgtd's connection listing does not have");
      }
      if (why.ok()) {
        BLOCKCSI_RETURN_IF_ERROR(RestoreAcls(withheld, OkStatus()));
        // The listing was read with those entries out; tgtd has them again.
        for (auto& t : *parsed) {
          for (const auto& [tid, initiator] : withheld) {
            if (t.tid == tid && !Contains(t.acls, initiator)) t.acls.push_back(initiator);
          }
        }
        return parsed;
      }
    }
    // Output we cannot account for is tgtd's (or a forger's) problem, not
    // the caller's bad input: INTERNAL, and nothing is changed on its strength.
    Status untrusted =
        Internal("tgtd's target list cannot be trusted, nothing changed: " + why.message() + kUntrustedHint);
    if (round == kRecoveries) return RestoreAcls(withheld, untrusted);
    auto closed = CloseForgingSessions(text, suspects, parsed.ok() ? 0 : failed_line, round == 0 ? nullptr : &withheld);
    if (!closed.ok()) return RestoreAcls(withheld, closed.status());
    if (*closed == 0) return RestoreAcls(withheld, untrusted);
  }
}

Status TgtExporter::RestoreAcls(const WithheldAcls& withheld, Status result) {
  for (const auto& [tid, initiator] : withheld) {
    Status st =
        Run(TgtdRequest::BindInitiator(tid, initiator),
            "give " + initiator + " back its ACL entry on target " + std::to_string(tid), {TgtdError::kAclExists});
    if (!st.ok()) {
      // The record still lists it: the next Apply or reconcile puts it back.
      LogWarn("cannot give back an ACL entry taken out for a listing", {{"error", st.ToString()}});
      if (result.ok()) result = st;
    }
  }
  return result;
}

StatusOr<std::vector<TgtConnectionEntry>> TgtExporter::ShowConnections(int tid) {
  BLOCKCSI_ASSIGN_OR_RETURN(TgtdAnswer answer, control_->Send(TgtdRequest::ShowConnections(tid)));
  if (answer.error == TgtdError::kNoTarget) return NotFound("tgtd has no target " + std::to_string(tid));
  if (!answer.ok()) {
    return Unavailable("tgtd on control port " + std::to_string(control_port_) + " does not answer " +
                       TgtdRequest::ShowConnections(tid).Describe() + ": " + std::string(TgtdErrorText(answer.error)));
  }
  auto parsed = ParseTgtadmConnections(answer.text);
  if (!parsed.ok()) {
    return Internal("tgtd's connection list of target " + std::to_string(tid) +
                    " cannot be trusted: " + parsed.status().message());
  }
  return parsed;
}

StatusOr<size_t> TgtExporter::CloseForgingSessions(const std::string& text, std::set<int> suspects, int failed_line,
                                                   WithheldAcls* withhold) {
  // Every target the listing names, real or forged: tgtd answers NO_TARGET
  // for a forged one. Of the real ones' sessions, each one the listing does
  // not show plainly is one whose alias could have made it what it is; on a
  // suspect target, all: the forgery looks plain there. Where the parse
  // failed and no session looks forged (an alias cut short by tgtd can end
  // in a line that passes), the suspect is the real target whose heading
  // comes last before the line refused.
  std::map<int, std::vector<TgtConnectionEntry>> real;
  int enclosing = 0;
  for (const TgtadmHeading& heading : TgtadmHeadings(text)) {
    if (!real.count(heading.tid)) {
      auto connections = ShowConnections(heading.tid);
      if (connections.status().code() == StatusCode::kNotFound) continue;
      BLOCKCSI_RETURN_IF_ERROR(connections.status());
      real[heading.tid] = std::move(connections).value();
    }
    if (heading.line <= failed_line) enclosing = heading.tid;
  }
  const auto plain = [&](int tid, const TgtConnectionEntry& c) {
    return !suspects.count(tid) && TgtadmShowsSessionPlainly(text, c.sid, c.initiator);
  };
  bool any_forged = false;
  for (const auto& [tid, connections] : real) {
    for (const auto& c : connections) any_forged = any_forged || !plain(tid, c);
  }
  if (!any_forged && enclosing != 0) suspects.insert(enclosing);
  size_t closed = 0;
  for (const auto& [tid, connections] : real) {
    for (const auto& c : connections) {
      if (plain(tid, c)) continue;
      if (withhold != nullptr && !withhold->count({tid, c.initiator})) {
        // Out of the ACL before its sessions close, so that it cannot log in
        // again before the next read; only an entry tgtd had is put back.
        auto unbound = control_->Send(TgtdRequest::UnbindInitiator(tid, c.initiator));
        BLOCKCSI_RETURN_IF_ERROR(unbound.status());
        listing_.valid = false;
        if (unbound->ok()) withhold->insert({tid, c.initiator});
      }
      auto answer = control_->Send(TgtdRequest::DeleteConnection(tid, c.sid, c.cid));
      BLOCKCSI_RETURN_IF_ERROR(answer.status());
      const TgtdErrors gone = {TgtdError::kNoConnection, TgtdError::kNoSession, TgtdError::kNoTarget};
      if (!answer->ok() && !gone.Has(answer->error)) {
        return Internal("close the session of " + c.initiator + " on target " + std::to_string(tid) +
                        " whose alias forges tgtd's target list: tgtd error " +
                        std::to_string(static_cast<uint32_t>(answer->error)));
      }
      ++closed;
      LogWarn("closed a session whose initiator alias may forge tgtd's target list",
              {{"tid", std::to_string(tid)}, {"initiator", c.initiator}, {"sid", std::to_string(c.sid)}});
    }
  }
  return closed;
}

StatusOr<std::vector<std::string>> TgtExporter::ShowAccounts() {
  BLOCKCSI_ASSIGN_OR_RETURN(std::string text, Show(TgtdRequest::ShowAccounts()));
  auto parsed = ParseTgtadmAccounts(text);
  if (!parsed.ok()) {
    return Internal("tgtd's account list cannot be trusted, nothing changed: " + parsed.status().message() +
                    kUntrustedHint);
  }
  return parsed;
}

Status TgtExporter::Healthy() {
  MutexLock lock(mu_);  // a recovery from a forged listing changes ACLs
  return ShowTargets().status();
}

namespace {

// Every account a target binds must be one tgtd lists: anything else means
// the two listings disagree (or one was forged), and nothing is changed.
Status CheckAccountsListed(const std::vector<TgtTarget>& live, const std::vector<std::string>& accounts) {
  for (const auto& t : live) {
    for (const auto* bound : {&t.incoming_accounts, &t.outgoing_accounts}) {
      for (const auto& user : *bound) {
        if (!Contains(accounts, user)) {
          return Internal("tgtd output not accounted for: target " + std::to_string(t.tid) + " binds CHAP account \"" +
                          user + "\" that its account list does not have");
        }
      }
    }
  }
  return OkStatus();
}

}  // namespace

std::vector<Status> TgtExporter::VerifyAclsLocked(const std::vector<AclCheck>& checks, std::vector<TgtTarget>& live) {
  auto shown = ReadLiveLocked();
  if (!shown.ok()) return std::vector<Status>(checks.size(), shown.status());
  for (const auto& c : checks) listing_.read_back_of.insert(c.iqn);
  if (&live != *shown) live = **shown;
  std::vector<Status> out;
  for (const auto& c : checks) {
    const TgtTarget* target = nullptr;
    for (const auto& t : live) {
      if (t.tid == c.tid) target = &t;
    }
    if (target == nullptr || target->iqn != c.iqn) {
      out.push_back(Internal("ACL check of volume " + c.volume_id + ": tgtd's target " + std::to_string(c.tid) +
                             " is " + (target == nullptr ? std::string("gone") : "\"" + target->iqn + "\"") + ", not " +
                             c.iqn));
      continue;
    }
    std::set<std::string> have(target->acls.begin(), target->acls.end());
    if (have != c.want) {
      std::string listed;
      for (const auto& a : have) listed += (listed.empty() ? "" : ", ") + a;
      out.push_back(Internal("ACL check of volume " + c.volume_id + ": tgtd lets in {" + listed +
                             "}, which is not what its record lists"));
      continue;
    }
    out.push_back(OkStatus());
  }
  return out;
}

Status TgtExporter::AddLun(int tid, const DesiredExport& d) {
  BLOCKCSI_RETURN_IF_ERROR(Run(TgtdRequest::NewLun(tid, 1, d.image_path), "add LUN 1 of volume " + d.volume_id));
  // tgtd takes a LUN's serial, SCSI id and thin provisioning only on update,
  // not with new (tgtadm refuses --params there): one update sets all three.
  return Run(TgtdRequest::ConfigureLun(tid, 1, d.serial, ScsiIdFor(d.volume_id)),
             "configure LUN 1 of volume " + d.volume_id);
}

StatusOr<TgtTarget*> TgtExporter::EnsureTargetLocked(const DesiredExport& d, std::vector<TgtTarget>& live,
                                                     std::vector<std::string>& repairs) {
  if (TgtTarget* target = FindLocked(live, d.iqn); target != nullptr) return target;
  int tid = 1;
  for (const auto& t : live) tid = std::max(tid, t.tid + 1);
  // Not even TARGET_EXIST is tolerated: the tid was chosen from a listing
  // (maybe a kept one) and may be another name's; the next call reads again.
  BLOCKCSI_RETURN_IF_ERROR(Run(TgtdRequest::NewTarget(tid, d.iqn), "create target of volume " + d.volume_id));
  TgtTarget fresh;
  fresh.tid = tid;
  fresh.iqn = d.iqn;
  live.push_back(fresh);
  if (&live == &listing_.targets) listing_.by_iqn[d.iqn] = live.size() - 1;
  repairs.push_back("created target " + d.iqn + " (tid " + std::to_string(tid) + ")");
  return &live.back();
}

Status TgtExporter::EnsureLunLocked(TgtTarget& target, const DesiredExport& d, std::vector<std::string>& repairs) {
  // LUN 1. tgtd cannot resize a LUN: a new size (or a wrong image/serial)
  // is applied by deleting and re-adding it; sessions stay logged in and see
  // the new capacity on their next READ CAPACITY.
  const TgtLun* lun = target.FindLun(1);
  bool lun_ok = lun != nullptr && lun->backing_path == d.image_path && lun->scsi_sn == d.serial &&
                lun->size_mb == TgtadmShownMegabytes(d.size_bytes);
  if (lun_ok && lun->thin_provisioning) return OkStatus();
  if (lun_ok) {
    // A LUN made thick (by a blockcsi from before thin LUNs) is switched in
    // place, never re-created for it: tgtd changes the flag on a live LUN and
    // its sessions stay, where a re-add would fail the I/O in flight. The
    // kernel of a node already logged in keeps the discard limits it read at
    // its scan until it rescans the disk (an online grow does) or logs in
    // again (the next stage).
    BLOCKCSI_RETURN_IF_ERROR(
        Run(TgtdRequest::SetLunThin(target.tid, 1), "make LUN 1 of volume " + d.volume_id + " thin"));
    for (TgtLun& l : target.luns) l.thin_provisioning |= l.lun == 1;
    repairs.push_back("made LUN 1 of " + d.iqn + " thin");
    return OkStatus();
  }
  if (lun != nullptr) {
    BLOCKCSI_RETURN_IF_ERROR(
        Run(TgtdRequest::DeleteLun(target.tid, 1), "refresh LUN 1 of volume " + d.volume_id, {TgtdError::kNoLun}));
  }
  const bool added = lun == nullptr;
  BLOCKCSI_RETURN_IF_ERROR(AddLun(target.tid, d));
  // The listing kept in step: LUN 1 as tgtd will show it.
  std::erase_if(target.luns, [](const TgtLun& l) { return l.lun == 1; });
  target.luns.push_back(
      {1, "disk", ScsiIdFor(d.volume_id), d.serial, TgtadmShownMegabytes(d.size_bytes), d.image_path, true});
  repairs.push_back(std::string(added ? "added" : "refreshed") + " LUN 1 of " + d.iqn);
  return OkStatus();
}

StatusOr<bool> TgtExporter::EnsureAclLocked(const DesiredExport& d, TgtTarget& target,
                                            const std::set<std::string>& want_acl, std::vector<std::string>& repairs) {
  bool changed = false;
  for (const auto& initiator : want_acl) {
    if (Contains(target.acls, initiator)) continue;
    changed = true;
    BLOCKCSI_RETURN_IF_ERROR(Run(TgtdRequest::BindInitiator(target.tid, initiator),
                                 "allow " + initiator + " on volume " + d.volume_id, {TgtdError::kAclExists}));
    target.acls.push_back(initiator);
    repairs.push_back("allowed " + initiator + " on " + d.iqn);
  }
  for (const auto& acl : std::vector<std::string>(target.acls)) {
    if (want_acl.count(acl)) continue;
    changed = true;
    // An ACL entry we did not make could be an address; tgtd unbinds those by address.
    bool by_name = acl.find(':') != std::string::npos || acl.rfind("iqn.", 0) == 0 || acl.rfind("eui.", 0) == 0;
    TgtdRequest unbind =
        by_name ? TgtdRequest::UnbindInitiator(target.tid, acl) : TgtdRequest::UnbindAddress(target.tid, acl);
    BLOCKCSI_RETURN_IF_ERROR(
        Run(unbind, "disallow " + acl + " on volume " + d.volume_id, {TgtdError::kAclDoesNotExist}));
    std::erase(target.acls, acl);
    repairs.push_back("disallowed " + acl + " on " + d.iqn);
  }
  return changed;
}

StatusOr<std::vector<std::string>> TgtExporter::ApplyLocked(const DesiredExport& d, std::vector<TgtTarget>& live,
                                                            std::vector<std::string>& live_accounts,
                                                            std::vector<AclCheck>* deferred, size_t slot) {
  std::vector<std::string> repairs;
  BLOCKCSI_RETURN_IF_ERROR(CheckChapLocked(d, live, live_accounts));
  BLOCKCSI_ASSIGN_OR_RETURN(TgtTarget * target, EnsureTargetLocked(d, live, repairs));
  BLOCKCSI_RETURN_IF_ERROR(EnsureLunLocked(*target, d, repairs));
  // Accounts before ACLs: an initiator is let in only once CHAP is in force.
  BLOCKCSI_RETURN_IF_ERROR(EnsureChapLocked(d, live, live_accounts, repairs));
  target = FindLocked(live, d.iqn);

  // ACL by initiator name only (never ALL, never an address).
  std::set<std::string> want_acl;
  for (const auto& acl : d.acls) {
    if (acl.chap && target->incoming_accounts.empty()) {
      repairs.push_back("withheld ACL of " + acl.initiator_iqn + " on " + d.iqn +
                        ": CHAP secret unknown after a restart, grant again");
      continue;
    }
    want_acl.insert(acl.initiator_iqn);
  }
  BLOCKCSI_ASSIGN_OR_RETURN(bool acl_changed, EnsureAclLocked(d, *target, want_acl, repairs));
  // Checked against the record before (want_acl comes from it, the tid from
  // a listing with unique ids and names) and after: read back.
  if (acl_changed) {
    AclCheck check{slot, d.volume_id, d.iqn, target->tid, want_acl};
    if (deferred != nullptr) {
      deferred->push_back(std::move(check));
    } else {
      BLOCKCSI_RETURN_IF_ERROR(VerifyAclsLocked({check}, live).front());
    }
  }
  return repairs;
}

std::vector<StatusOr<std::vector<std::string>>> TgtExporter::ApplyBatchLocked(const std::vector<DesiredExport>& desired,
                                                                              std::vector<TgtTarget>* live,
                                                                              Status read) {
  std::vector<StatusOr<std::vector<std::string>>> out;
  // One read for the whole batch. Every change below goes through
  // ApplyLocked, which keeps `live` in step, and mu_ keeps anyone else from
  // changing tgtd meanwhile — as in Reconcile.
  std::vector<std::string> accounts;
  bool any_chap = std::any_of(desired.begin(), desired.end(), [](const DesiredExport& d) { return !d.chap.empty(); });
  if (read.ok() && any_chap) {
    auto shown = ShowAccounts();
    if (shown.ok()) {
      accounts = std::move(shown).value();
      read = CheckAccountsListed(*live, accounts);
    } else {
      read = shown.status();
    }
  }
  out.reserve(desired.size());
  std::vector<AclCheck> checks;
  for (size_t i = 0; i < desired.size(); ++i) {
    if (!read.ok()) {
      out.push_back(read);
      continue;
    }
    out.push_back(ApplyLocked(desired[i], *live, accounts, &checks, i));
  }
  // Every ACL change of the batch read back with one listing.
  if (!checks.empty()) {
    auto verified = VerifyAclsLocked(checks, *live);
    for (size_t k = 0; k < checks.size(); ++k) {
      if (!verified[k].ok()) out[checks[k].slot] = verified[k];
    }
  }
  if (read.ok() && !unbound_accounts_.empty()) DropUnusedAccountsLocked(*live);
  return out;
}

StatusOr<std::vector<std::string>> TgtExporter::Reconcile(const std::vector<DesiredExport>& desired,
                                                          const std::string& iqn_prefix) {
  MutexLock lock(mu_);
  BLOCKCSI_ASSIGN_OR_RETURN(std::vector<TgtTarget> * read, ReadLiveLocked());
  std::vector<TgtTarget>& live = *read;
  BLOCKCSI_ASSIGN_OR_RETURN(auto accounts, ShowAccounts());
  BLOCKCSI_RETURN_IF_ERROR(CheckAccountsListed(live, accounts));
  std::vector<std::string> repairs;
  std::set<std::string> wanted;
  Status first_error;
  std::vector<AclCheck> checks;
  for (size_t i = 0; i < desired.size(); ++i) {
    const DesiredExport& d = desired[i];
    wanted.insert(d.iqn);
    auto r = ApplyLocked(d, live, accounts, &checks, i);
    if (!r.ok()) {
      // One broken export must not stop the others from being repaired.
      LogError("reconcile: cannot repair export", {{"volume", d.volume_id}, {"error", r.status().ToString()}});
      if (first_error.ok()) first_error = r.status();
      continue;
    }
    repairs.insert(repairs.end(), r->begin(), r->end());
  }
  if (!checks.empty()) {
    auto verified = VerifyAclsLocked(checks, live);
    for (size_t k = 0; k < checks.size(); ++k) {
      if (verified[k].ok()) continue;
      LogError("reconcile: ACL not as recorded", {{"volume", checks[k].volume_id}, {"error", verified[k].ToString()}});
      if (first_error.ok()) first_error = verified[k];
    }
  }
  std::string ns = iqn_prefix + ":";
  for (const auto& t : live) {
    if (t.iqn.rfind(ns, 0) != 0 || wanted.count(t.iqn)) continue;
    BLOCKCSI_RETURN_IF_ERROR(Run(TgtdRequest::DeleteTarget(t.tid), "remove target " + t.iqn + " that has no volume",
                                 {TgtdError::kNoTarget}));
    unbound_accounts_.insert(t.incoming_accounts.begin(), t.incoming_accounts.end());
    unbound_accounts_.insert(t.outgoing_accounts.begin(), t.outgoing_accounts.end());
    repairs.push_back("removed target " + t.iqn + " that has no volume");
  }
  std::erase_if(live, [&](const TgtTarget& t) { return t.iqn.rfind(ns, 0) == 0 && !wanted.count(t.iqn); });
  ReindexLocked();
  DropUnusedAccountsLocked(live);
  if (!first_error.ok()) {
    listing_.valid = false;
    return first_error;
  }
  return repairs;
}

Status TgtExporter::CloseSessions(const std::string& iqn, const std::string& initiator_iqn) {
  MutexLock lock(mu_);
  // The target's id from the revoke's ACL read-back when it is the last
  // thing read from tgtd (and the initiator no longer in that ACL), else
  // from a fresh read. Its sessions from tgtd's connection listing only:
  // the target listing prints each session after an alias the initiator
  // chose, which can forge or hide sessions there.
  int tid = 0;
  if (listing_.read_back_of.count(iqn) && ListingCurrentLocked()) {
    TgtTarget* kept = FindLocked(listing_.targets, iqn);
    if (kept != nullptr && !Contains(kept->acls, initiator_iqn)) tid = kept->tid;
  }
  if (tid == 0) {
    BLOCKCSI_ASSIGN_OR_RETURN(std::vector<TgtTarget> * live, ReadLiveLocked());
    TgtTarget* target = FindLocked(*live, iqn);
    if (target == nullptr) return OkStatus();
    tid = target->tid;
  }
  // A few rounds: a session that was logging in while we looked shows up on
  // the next read (the ACL is already gone, so it cannot come back after).
  // tgtd's management interface is request/response only, with no event for
  // a connection that has ended, so the read is repeated after a pause that
  // doubles from 2 ms (tgtd has usually let go by then) to 64 ms, 126 ms in
  // all. Reached only when a session was open: an unpublish after the node
  // has logged out never waits.
  constexpr std::chrono::milliseconds kPauses[] = {std::chrono::milliseconds(2),  std::chrono::milliseconds(4),
                                                   std::chrono::milliseconds(8),  std::chrono::milliseconds(16),
                                                   std::chrono::milliseconds(32), std::chrono::milliseconds(64)};
  for (auto pause : kPauses) {
    auto connections = ShowConnections(tid);
    if (connections.status().code() == StatusCode::kNotFound) return OkStatus();  // the target is gone
    BLOCKCSI_RETURN_IF_ERROR(connections.status());
    bool any = false;
    for (const auto& c : *connections) {
      if (c.initiator != initiator_iqn) continue;
      any = true;
      // Gone already (the initiator logged out meanwhile) is what is wanted.
      BLOCKCSI_RETURN_IF_ERROR(Run(TgtdRequest::DeleteConnection(tid, c.sid, c.cid),
                                   "close session of " + initiator_iqn + " on " + iqn,
                                   {TgtdError::kNoConnection, TgtdError::kNoSession, TgtdError::kNoTarget}));
      LogInfo("closed session (fencing)",
              {{"target", iqn}, {"initiator", initiator_iqn}, {"sid", std::to_string(c.sid)}});
    }
    if (!any) return OkStatus();
    RealClock()->Sleep(pause);
  }
  return Unavailable("sessions of " + initiator_iqn + " on " + iqn + " did not close");
}

Status TgtExporter::Remove(const std::string& iqn) {
  MutexLock lock(mu_);
  // A fresh read: the target is deleted by its tid, which must be the one
  // tgtd has for this name now.
  BLOCKCSI_ASSIGN_OR_RETURN(std::vector<TgtTarget> * read, ReadLiveLocked());
  std::vector<TgtTarget>& live = *read;
  TgtTarget* target = FindLocked(live, iqn);
  if (target == nullptr) return OkStatus();
  BLOCKCSI_RETURN_IF_ERROR(Run(TgtdRequest::DeleteTarget(target->tid), "remove target " + iqn, {TgtdError::kNoTarget}));
  // Deleting the target unbound its accounts: drop the ones nothing else uses.
  unbound_accounts_.insert(target->incoming_accounts.begin(), target->incoming_accounts.end());
  unbound_accounts_.insert(target->outgoing_accounts.begin(), target->outgoing_accounts.end());
  std::erase_if(live, [&](const TgtTarget& t) { return t.iqn == iqn; });
  ReindexLocked();
  DropUnusedAccountsLocked(live);
  return OkStatus();
}

}  // namespace blockcsi
