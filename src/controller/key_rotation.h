// Key rotation for encrypted volumes: re-wraps every data key that opens
// under a class's old key-encryption key so that it opens under the new one.
// The data is never touched: a data key (the LUKS2 passphrase) stays what it
// is, only its wrapping changes, so no volume is re-encrypted or even opened.
// A class's volumes are exactly those whose keys open under its KEK (a
// wrapped key names no class), so a volume of another class, or one whose
// key is damaged, opens under neither key: it is left as it is and
// reported. Thread-safe; concurrent CreateVolume, clones and other
// rotations are safe through the backend's compare-and-set.
#pragma once

#include <string>
#include <vector>

#include "backend/backend.h"
#include "common/status.h"
#include "contract/volume_key.h"

namespace blockcsi {

struct RewrapOutcome {
  enum class Kind {
    kRewrapped,   // opened under the old KEK, now wrapped under the new one
    kAlreadyNew,  // already opens under the new KEK (a second run)
    kNotOpened,   // opens under neither: another class's, or damaged; left as is
    kFailed,      // opened, but storing the new wrapping failed; left as is
  };
  std::string id;
  bool snapshot = false;
  Kind kind = Kind::kFailed;
  std::string message;  // why, for kNotOpened and kFailed; never a key
};

struct RewrapReport {
  std::vector<RewrapOutcome> outcomes;  // every encrypted volume, then every snapshot
  // Nothing left under the old key that opens under it: no kFailed.
  bool complete() const;
  // Every encrypted object opened under one key or the other.
  bool all_opened() const;
};

// `dry_run`: decides every outcome (kRewrapped: "would be") and stores
// nothing. An error only when the backend cannot be listed.
StatusOr<RewrapReport> RewrapDataKeys(VolumeBackend& backend, const SecretBytes& old_kek, const SecretBytes& new_kek,
                                      bool dry_run);

const char* RewrapKindName(RewrapOutcome::Kind kind);

}  // namespace blockcsi
