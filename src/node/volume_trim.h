// Trimming a staged volume: FITRIM on its staging mount, so that the blocks
// its filesystem has freed go back to the storage (holes in a sparse image,
// RBD objects released) through the discards the device below passes on.
// The one mechanism behind `blockctl trim` and the node plugin's periodic
// trim (NodeService::TrimStagedVolumes). Pure decisions plus one Host call;
// stateless, thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attach/volume_attacher.h"
#include "common/host.h"
#include "common/mountinfo.h"
#include "common/status.h"

namespace blockcsi {

// Whether the node trims a volume, from its attach record alone, and why
// not. kNotOurs: not staged (attached only, or a stage cut short), staged
// as raw block (the node cannot know which of the device's blocks hold the
// pod's data: only the pod may discard them), or attached read-only (a
// discard is a write); the periodic trim passes these over without a word.
// kSkipped: a staged filesystem the node would trim, but whose trim cannot
// reach the storage: encrypted, its dm-crypt mapping opened without
// allow_discards on purpose (a discard would show the storage which blocks
// of the ciphertext are unused); the periodic trim counts and logs these.
struct TrimVerdict {
  enum Kind { kTrim, kNotOurs, kSkipped };
  Kind kind = kTrim;
  std::string why;  // empty for kTrim
};
TrimVerdict TrimVerdictFor(const AttachRecord& record);

// TrimVerdictFor(record).why: empty when the volume is one to trim.
std::string WhyNotTrimmable(const AttachRecord& record);

// FITRIM on the volume's staging mount, after checking that the mount at the
// staging path is its filesystem: from its own device and read-write.
// Answers the bytes trimmed as the kernel reports them. FAILED_PRECONDITION
// naming the volume when it is not trimmable (WhyNotTrimmable) or not
// mounted as staged; UNIMPLEMENTED when its device takes no discards.
// Blocks for as long as the filesystem takes (seconds on a large, fragmented
// volume): no timeout can interrupt the ioctl.
StatusOr<uint64_t> TrimVolume(const Host& host, const AttachRecord& record, const std::vector<MountEntry>& table);

}  // namespace blockcsi
