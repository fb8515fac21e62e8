// TgtExporter's CHAP accounts: made, replaced and bound as the grants ask,
// never one user name with two passwords, never a moment where a target
// that wants CHAP binds no incoming account. The rest: tgt_exporter.cc.
#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "backend/local/tgt_exporter.h"
#include "common/logging.h"
#include "common/random.h"

namespace blockcsi {
namespace {

// Whether `names` (a target's accounts) holds `name`.
bool ListHas(const std::vector<std::string>& names, const std::string& name) {
  return std::count(names.begin(), names.end(), name) > 0;
}

// An account bind tgtd refuses as already so: an incoming account bound
// twice is USER_EXIST (BINDING_EXIST in tgt versions that have it). An
// outgoing bind is refused with OUTACCOUNT_EXIST whichever account holds the
// target's one outgoing slot, so that is never taken as "already so": the
// slot was emptied first, per a fresh read, and someone else's account in it
// must fail the call rather than pass for ours.
TgtdErrors AlreadyBound(bool outgoing) {
  return outgoing ? TgtdErrors{} : TgtdErrors{TgtdError::kUserExists, TgtdError::kBindingExists};
}

// An account unbind of an account the target does not bind: tgtd answers
// NO_USER (for either direction).
const TgtdErrors kNotBound = {TgtdError::kNoUser, TgtdError::kNoBinding};

}  // namespace

Status TgtExporter::CheckChapLocked(const DesiredExport& d, const std::vector<TgtTarget>& live,
                                    const std::vector<std::string>& live_accounts) {
  // tgtd has one account per user name, whichever targets bind it, and no
  // password update: replacing it for this volume would replace it for every
  // other target that binds it (another volume's password would open this
  // one, and its nodes could not log in with theirs). So a user name another
  // target binds is this volume's only with the very password it has there;
  // after a restart that password is not known here, and the grant waits.
  // Two grants of this volume cannot give one name two passwords either.
  std::map<std::string, const std::string*> passwords;
  for (const auto& c : d.chap) {
    if (!c.enabled()) continue;
    for (const auto& [user, password] :
         {std::pair{&c.username, &c.password}, std::pair{&c.mutual_username, &c.mutual_password}}) {
      if (user->empty()) continue;
      auto [it, added] = passwords.emplace(*user, password);
      if (!added && *it->second != *password) {
        return FailedPrecondition("CHAP user " + *user + " is given two passwords by the grants of volume " +
                                  d.volume_id + "; tgtd keeps one account per user name");
      }
    }
  }
  for (const auto& [user, password] : passwords) {
    if (!ListHas(live_accounts, user)) continue;
    auto known = account_passwords_.find(user);
    if (known != account_passwords_.end() && known->second == *password) continue;
    if (known == account_passwords_.end() && KeptAsBound(d, user, live)) continue;
    std::string elsewhere;
    for (const auto& t : live) {
      if (t.iqn == d.iqn || (!ListHas(t.incoming_accounts, user) && !ListHas(t.outgoing_accounts, user))) continue;
      elsewhere += (elsewhere.empty() ? "" : ", ") + t.iqn;
    }
    if (elsewhere.empty()) continue;
    return FailedPrecondition("CHAP user " + user + " of volume " + d.volume_id + " is the account of " + elsewhere +
                              (known == account_passwords_.end()
                                   ? " with a password this agent has not been given since it started"
                                   : " with another password") +
                              "; tgtd keeps one account per user name for every target, so give this volume's "
                              "grant a user name of its own");
  }
  return OkStatus();
}

bool TgtExporter::KeptAsBound(const DesiredExport& d, const std::string& user, const std::vector<TgtTarget>& live) {
  // After a restart no password is known, and volumes of one class share
  // the class's user name and password. Replacing that account for one of
  // them would put a password nobody checked on all of them; refusing would
  // stop every publish of every one of them for as long as any other still
  // binds it (retries and new nodes alike). A volume whose own target
  // already binds the account needs no change to it: it is kept as it is.
  // That opens nothing (tgtd is not touched); a grant that came with
  // another password (a rotation that kept the user name) then gets a login
  // failure on the node instead of FAILED_PRECONDITION here.
  bool here = false, elsewhere = false;
  for (const auto& t : live) {
    if (!ListHas(t.incoming_accounts, user) && !ListHas(t.outgoing_accounts, user)) continue;
    (t.iqn == d.iqn ? here : elsewhere) = true;
  }
  return here && elsewhere;
}

Status TgtExporter::EnsureAccount(const DesiredExport& d, const std::string& user, const std::string& password,
                                  std::vector<TgtTarget>& live, std::vector<std::string>& live_accounts,
                                  std::vector<std::string>& repairs) {
  auto known = account_passwords_.find(user);
  const bool exists = ListHas(live_accounts, user);
  const bool same_password = known != account_passwords_.end() && known->second == password;
  if (exists && same_password) return OkStatus();
  if (exists && known == account_passwords_.end() && KeptAsBound(d, user, live)) return OkStatus();
  std::vector<std::pair<int, bool>> here;  // this target's binds: tid, outgoing
  if (exists) {
    for (const auto& t : live) {
      if (t.iqn != d.iqn) continue;
      if (ListHas(t.incoming_accounts, user)) here.emplace_back(t.tid, false);
      if (ListHas(t.outgoing_accounts, user)) here.emplace_back(t.tid, true);
    }
  }
  // Replaced in place. Deleting the account unbinds it: a target with no
  // incoming account lets every initiator in its ACL in without CHAP. So
  // the target first binds a hold account nobody knows the secret of, which
  // keeps CHAP in force until the new account is bound, also if this process
  // dies in between (a later grant unbinds it as not wanted).
  std::string hold;
  const auto incoming_here = std::find_if(here.begin(), here.end(), [](const auto& b) { return !b.second; });
  if (incoming_here != here.end()) {
    const int tid = incoming_here->first;
    char name[40];
    std::snprintf(name, sizeof(name), "blockcsi-hold-%016llx", static_cast<unsigned long long>(RandomU64()));
    char secret[40];
    std::snprintf(secret, sizeof(secret), "%016llx%016llx", static_cast<unsigned long long>(RandomU64()),
                  static_cast<unsigned long long>(RandomU64()));
    hold = name;
    BLOCKCSI_RETURN_IF_ERROR(
        Run(TgtdRequest::NewAccount(hold, secret), "create a hold account for volume " + d.volume_id));
    live_accounts.push_back(hold);
    BLOCKCSI_RETURN_IF_ERROR(
        Run(TgtdRequest::BindAccount(tid, hold, false), "bind a hold account to volume " + d.volume_id));
    if (TgtTarget* t = FindLocked(live, d.iqn); t != nullptr) t->incoming_accounts.push_back(hold);
  }
  if (exists) {
    BLOCKCSI_RETURN_IF_ERROR(
        Run(TgtdRequest::DeleteAccount(user), "replace CHAP account " + user, {TgtdError::kNoUser}));
  }
  BLOCKCSI_RETURN_IF_ERROR(Run(TgtdRequest::NewAccount(user, password), "create CHAP account " + user));
  account_passwords_[user] = password;
  if (!exists) live_accounts.push_back(user);
  repairs.push_back(std::string(exists ? "reset" : "created") + " CHAP account " + user);
  for (auto [tid, outgoing] : here) {
    BLOCKCSI_RETURN_IF_ERROR(
        Run(TgtdRequest::BindAccount(tid, user, outgoing), "re-bind CHAP account " + user, AlreadyBound(outgoing)));
  }
  if (!hold.empty()) {
    BLOCKCSI_RETURN_IF_ERROR(Run(TgtdRequest::UnbindAccount(incoming_here->first, hold, false),
                                 "unbind the hold account of volume " + d.volume_id, kNotBound));
    if (TgtTarget* t = FindLocked(live, d.iqn); t != nullptr) std::erase(t->incoming_accounts, hold);
    unbound_accounts_.insert(hold);  // deleted with the accounts nothing binds
  }
  return OkStatus();
}

Status TgtExporter::EnsureChapLocked(const DesiredExport& d, std::vector<TgtTarget>& live,
                                     std::vector<std::string>& live_accounts, std::vector<std::string>& repairs) {
  std::set<std::string> want_in, want_out;
  for (const auto& c : d.chap) {
    if (!c.enabled()) continue;
    BLOCKCSI_RETURN_IF_ERROR(EnsureAccount(d, c.username, c.password, live, live_accounts, repairs));
    want_in.insert(c.username);
    if (c.mutual()) {
      BLOCKCSI_RETURN_IF_ERROR(EnsureAccount(d, c.mutual_username, c.mutual_password, live, live_accounts, repairs));
      want_out.insert(c.mutual_username);
    }
  }
  TgtTarget* target = FindLocked(live, d.iqn);  // EnsureAccount may not move it, but stay safe
  const int tid = target->tid;
  for (const auto& user : want_in) {
    if (ListHas(target->incoming_accounts, user)) continue;
    BLOCKCSI_RETURN_IF_ERROR(Run(TgtdRequest::BindAccount(tid, user, false),
                                 "bind CHAP account to volume " + d.volume_id, AlreadyBound(false)));
    target->incoming_accounts.push_back(user);
    repairs.push_back("bound CHAP account " + user + " to " + d.iqn);
  }
  for (const auto& user : want_out) {
    if (ListHas(target->outgoing_accounts, user)) continue;
    for (const auto& other : target->outgoing_accounts) {  // tgtd allows one outgoing account
      BLOCKCSI_RETURN_IF_ERROR(
          Run(TgtdRequest::UnbindAccount(tid, other, true), "unbind mutual CHAP of volume " + d.volume_id, kNotBound));
    }
    target->outgoing_accounts.clear();
    BLOCKCSI_RETURN_IF_ERROR(Run(TgtdRequest::BindAccount(tid, user, true), "bind mutual CHAP to volume " + d.volume_id,
                                 AlreadyBound(true)));
    target->outgoing_accounts.push_back(user);
    repairs.push_back("bound mutual CHAP account " + user + " to " + d.iqn);
  }
  // Accounts no grant asks for any more. When CHAP is wanted but this process
  // does not know the secrets (it restarted), the live accounts are the only
  // thing enforcing CHAP: keep them.
  bool chap_wanted = std::any_of(d.acls.begin(), d.acls.end(), [](const DesiredAcl& a) { return a.chap; });
  if (chap_wanted && want_in.empty()) return OkStatus();
  for (bool outgoing : {false, true}) {
    std::vector<std::string>& bound = outgoing ? target->outgoing_accounts : target->incoming_accounts;
    const std::set<std::string>& want = outgoing ? want_out : want_in;
    for (const auto& user : std::vector<std::string>(bound)) {
      if (want.count(user)) continue;
      const std::string what = outgoing ? "mutual CHAP" : "CHAP account";
      BLOCKCSI_RETURN_IF_ERROR(Run(TgtdRequest::UnbindAccount(tid, user, outgoing),
                                   "unbind " + what + " from volume " + d.volume_id, kNotBound));
      unbound_accounts_.insert(user);
      std::erase(bound, user);
      repairs.push_back("unbound " + std::string(outgoing ? "mutual CHAP account " : "CHAP account ") + user +
                        " from " + d.iqn);
    }
  }
  return OkStatus();
}

void TgtExporter::DropUnusedAccountsLocked(const std::vector<TgtTarget>& live) {
  std::set<std::string> candidates = unbound_accounts_;
  for (const auto& [user, password] : account_passwords_) candidates.insert(user);
  for (const auto& user : candidates) {
    bool bound = std::any_of(live.begin(), live.end(), [&](const TgtTarget& t) {
      return ListHas(t.incoming_accounts, user) || ListHas(t.outgoing_accounts, user);
    });
    if (bound) continue;
    Status st = Run(TgtdRequest::DeleteAccount(user), "delete unused CHAP account " + user, {TgtdError::kNoUser});
    if (!st.ok()) {
      LogWarn("cannot delete an unused CHAP account", {{"user", user}, {"error", st.ToString()}});
      continue;
    }
    account_passwords_.erase(user);
    unbound_accounts_.erase(user);
  }
}

}  // namespace blockcsi
