// TgtExporter's kept listing of tgtd's targets: when a call may
// use it instead of reading tgtd again, and the two entry points that
// decide, Apply and ApplyEach. Reading and changing tgtd: tgt_exporter.cc.
#include <algorithm>
#include <exception>
#include <set>

#include "backend/local/tgt_exporter.h"

namespace blockcsi {

StatusOr<std::vector<TgtTarget>*> TgtExporter::ReadLiveLocked() {
  // The socket's identity is taken before the read: a tgtd that restarts
  // during it is seen as a new one by the next call.
  auto socket = host_->Identity(socket_path_);
  listing_.valid = false;
  listing_.read_back_of.clear();
  auto shown = ShowTargets();
  if (!shown.ok()) return shown.status();
  listing_.targets = std::move(shown).value();
  ReindexLocked();
  // Without a socket to identify tgtd by (another layout), nothing is kept.
  listing_.valid = socket.ok();
  listing_.socket = socket.ok() ? *socket : FileIdentity{};
  listing_.read_at = std::chrono::steady_clock::now();
  return &listing_.targets;
}

namespace {

// Whether applying `d` to `target` (nullptr: tgtd has none of that name)
// changes nothing but, at most, makes a new target with its LUN and no ACL.
// Only such an export may be applied on a kept listing: every other change
// (an ACL, an account, a LUN refresh, which deletes the old LUN by tid, a
// thick LUN made thin) is
// decided on a fresh read, as before the listing was kept. A new target on
// a stale listing is safe: tgtd refuses a tid or a name it already has,
// and the call is tried again on a fresh read.
bool NeedsNoFreshRead(const DesiredExport& d, const TgtTarget* target) {
  if (!d.chap.empty()) return false;
  std::set<std::string> want;
  for (const auto& acl : d.acls) {
    if (acl.chap) return false;
    want.insert(acl.initiator_iqn);
  }
  if (target == nullptr) return want.empty();
  const TgtLun* lun = target->FindLun(1);
  return lun != nullptr && lun->backing_path == d.image_path && lun->scsi_sn == d.serial &&
         lun->size_mb == TgtadmShownMegabytes(d.size_bytes) && lun->thin_provisioning &&
         target->incoming_accounts.empty() && target->outgoing_accounts.empty() &&
         std::set<std::string>(target->acls.begin(), target->acls.end()) == want;
}

}  // namespace

void TgtExporter::ReindexLocked() {
  listing_.by_iqn.clear();
  for (size_t i = 0; i < listing_.targets.size(); ++i) listing_.by_iqn[listing_.targets[i].iqn] = i;
}

TgtTarget* TgtExporter::FindLocked(std::vector<TgtTarget>& live, const std::string& iqn) {
  // By the index when it can: a scan of 1,000 targets per volume would make
  // a checked page of 100 grow with the pool.
  if (&live != &listing_.targets) {
    auto found = std::find_if(live.begin(), live.end(), [&](const TgtTarget& t) { return t.iqn == iqn; });
    return found == live.end() ? nullptr : &*found;
  }
  auto it = listing_.by_iqn.find(iqn);
  return it == listing_.by_iqn.end() ? nullptr : &live[it->second];
}

bool TgtExporter::ListingCurrentLocked() {
  if (!listing_.valid || std::chrono::steady_clock::now() - listing_.read_at > listing_max_age_) return false;
  // A tgtd that restarted (or went away) holds nothing of the kept listing.
  auto socket = host_->Identity(socket_path_);
  return socket.ok() && *socket == listing_.socket;
}

std::vector<TgtTarget>* TgtExporter::CachedLocked(const std::vector<const DesiredExport*>& desired) {
  if (!ListingCurrentLocked()) return nullptr;
  for (const DesiredExport* d : desired) {
    if (!NeedsNoFreshRead(*d, FindLocked(listing_.targets, d->iqn))) return nullptr;
  }
  return &listing_.targets;
}

StatusOr<std::vector<std::string>> TgtExporter::Apply(const DesiredExport& desired) {
  QueuedApply mine;
  mine.desired = &desired;
  queue_mu_.Lock();
  queue_.push_back(&mine);
  while (!mine.result.has_value()) {
    if (batch_running_) {
      queue_cv_.Wait(queue_mu_);
      continue;
    }
    // Nobody is at tgtd: this call applies the next batch, its own export
    // and the others' queued so far (or, when its target already has a call
    // in that batch, theirs alone, and then waits for its own turn).
    batch_running_ = true;
    std::vector<QueuedApply*> batch = TakeBatchLocked();
    queue_mu_.Unlock();
    std::vector<StatusOr<std::vector<std::string>>> results;
    try {
      std::vector<DesiredExport> exports;
      exports.reserve(batch.size());
      for (const QueuedApply* q : batch) exports.push_back(*q->desired);
      results = ApplyEach(exports);
    } catch (const std::exception& e) {
      // The others of the batch must not wait for ever (nor every later call).
      results.assign(batch.size(), Internal(std::string("tgt export: ") + e.what()));
    }
    queue_mu_.Lock();
    for (size_t i = 0; i < batch.size(); ++i) {
      batch[i]->result = i < results.size() ? std::move(results[i]) : Internal("tgt export: no result");
    }
    batch_running_ = false;
    queue_cv_.SignalAll();
  }
  queue_mu_.Unlock();
  return std::move(*mine.result);
}

std::vector<TgtExporter::QueuedApply*> TgtExporter::TakeBatchLocked() {
  std::vector<QueuedApply*> batch, later;
  std::set<std::string> targets;
  for (QueuedApply* q : queue_) {
    (targets.insert(q->desired->iqn).second ? batch : later).push_back(q);
  }
  queue_ = std::move(later);
  return batch;
}

size_t TgtExporter::WaitingApplies() {
  MutexLock lock(queue_mu_);
  return queue_.size();
}

std::vector<StatusOr<std::vector<std::string>>> TgtExporter::ApplyEach(const std::vector<DesiredExport>& desired) {
  MutexLock lock(mu_);
  if (desired.empty()) return {};
  std::vector<const DesiredExport*> wanted;
  for (const auto& d : desired) wanted.push_back(&d);
  // On the kept listing when nothing but new targets is needed (CreateVolume,
  // a check that finds everything in place); one fresh read for the whole
  // batch otherwise.
  if (std::vector<TgtTarget>* kept = CachedLocked(wanted); kept != nullptr) {
    auto out = ApplyBatchLocked(desired, kept, OkStatus());
    if (std::all_of(out.begin(), out.end(), [](const auto& r) { return r.ok(); })) return out;
    // tgtd was not as kept (changed behind our back): once more on a fresh
    // read, which finds what the first try made and goes on from there.
    listing_.valid = false;
  }
  auto live = ReadLiveLocked();
  auto out = ApplyBatchLocked(desired, live.ok() ? *live : nullptr, live.status());
  // A failure leaves tgtd in a state the listing may not show.
  if (!std::all_of(out.begin(), out.end(), [](const auto& r) { return r.ok(); })) listing_.valid = false;
  return out;
}

}  // namespace blockcsi
