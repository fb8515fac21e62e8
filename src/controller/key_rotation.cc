#include "controller/key_rotation.h"

#include <algorithm>

#include "common/logging.h"

namespace blockcsi {
namespace {

// One wrapped key: `key_volume_id` is the id it is bound to (a snapshot's
// is its source volume's).
RewrapOutcome Rewrap(VolumeBackend& backend, const std::string& id, bool snapshot, const std::string& wrapped,
                     const std::string& key_volume_id, const SecretBytes& old_kek, const SecretBytes& new_kek,
                     bool dry_run) {
  RewrapOutcome out;
  out.id = id;
  out.snapshot = snapshot;
  if (UnwrapDataKey(new_kek, wrapped, key_volume_id).ok()) {
    out.kind = RewrapOutcome::Kind::kAlreadyNew;
    return out;
  }
  auto data_key = UnwrapDataKey(old_kek, wrapped, key_volume_id);
  if (!data_key.ok()) {
    out.kind = RewrapOutcome::Kind::kNotOpened;
    out.message = "opens under neither the old nor the new key (another class's, or damaged); left as it is";
    return out;
  }
  auto rewrapped = WrapDataKey(new_kek, *data_key, key_volume_id);
  Status stored = rewrapped.status();
  if (stored.ok() && !dry_run) stored = backend.SetWrappedDataKey(id, wrapped, *rewrapped);
  out.kind = stored.ok() ? RewrapOutcome::Kind::kRewrapped : RewrapOutcome::Kind::kFailed;
  if (!stored.ok()) out.message = stored.ToString() + "; still under the old key";
  return out;
}

}  // namespace

bool RewrapReport::complete() const {
  return std::none_of(outcomes.begin(), outcomes.end(),
                      [](const RewrapOutcome& o) { return o.kind == RewrapOutcome::Kind::kFailed; });
}

bool RewrapReport::all_opened() const {
  return std::none_of(outcomes.begin(), outcomes.end(),
                      [](const RewrapOutcome& o) { return o.kind == RewrapOutcome::Kind::kNotOpened; });
}

const char* RewrapKindName(RewrapOutcome::Kind kind) {
  switch (kind) {
    case RewrapOutcome::Kind::kRewrapped:
      return "rewrapped";
    case RewrapOutcome::Kind::kAlreadyNew:
      return "already-new";
    case RewrapOutcome::Kind::kNotOpened:
      return "not-opened";
    case RewrapOutcome::Kind::kFailed:
      break;
  }
  return "failed";
}

StatusOr<RewrapReport> RewrapDataKeys(VolumeBackend& backend, const SecretBytes& old_kek, const SecretBytes& new_kek,
                                      bool dry_run) {
  RewrapReport report;
  std::string token;
  do {
    auto page = backend.ListVolumes(token, 0);
    if (!page.ok()) return page.status().WithContext("rewrapping data keys: listing volumes");
    for (const auto& v : page->items) {
      if (v.wrapped_data_key.empty()) continue;
      report.outcomes.push_back(Rewrap(backend, v.id, false, v.wrapped_data_key, v.id, old_kek, new_kek, dry_run));
    }
    token = page->next_token;
  } while (!token.empty());
  // Snapshots after their volumes: where a snapshot shares its volume's key
  // (rbd), the volume's rewrap has already made it new.
  do {
    auto page = backend.ListSnapshots("", token, 0);
    if (!page.ok()) return page.status().WithContext("rewrapping data keys: listing snapshots");
    for (const auto& s : page->items) {
      if (s.wrapped_data_key.empty()) continue;
      report.outcomes.push_back(
          Rewrap(backend, s.id, true, s.wrapped_data_key, s.source_volume_id, old_kek, new_kek, dry_run));
    }
    token = page->next_token;
  } while (!token.empty());
  size_t rewrapped = 0;
  for (const auto& o : report.outcomes) {
    if (o.kind == RewrapOutcome::Kind::kRewrapped) ++rewrapped;
    if (o.kind == RewrapOutcome::Kind::kNotOpened || o.kind == RewrapOutcome::Kind::kFailed) {
      LogWarn("data key not rewrapped", {{o.snapshot ? "snapshot" : "volume", o.id}, {"why", o.message}});
    }
  }
  LogInfo(dry_run ? "data keys that a rewrap would change (dry run)" : "data keys rewrapped",
          {{"rewrapped", std::to_string(rewrapped)}, {"encrypted", std::to_string(report.outcomes.size())}});
  return report;
}

}  // namespace blockcsi
