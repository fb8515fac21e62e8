// The node's facts about a staged volume, kept in the attach record as one
// annotation (kStagedAnnotation = "<access>,<fs type>,<staging path>", e.g.
// "mount,ext4,/var/lib/kubelet/..." or "block,,/var/lib/kubelet/...") so
// that they land together in one durable write: a crash never leaves half
// of them, and staging pays for one fsync, not three. An encrypted volume
// has a second annotation in that same write (kCryptAnnotation,
// node/volume_crypt.h): its dm-crypt mapping's name. Read by the node
// service and by blockctl. Plain value type.
#pragma once

#include <string>

#include "attach/volume_attacher.h"

namespace blockcsi {

inline constexpr char kStagedAnnotation[] = "node.staged";

struct StagedFacts {
  std::string access_type;  // "mount" | "block"; empty when not recorded
  std::string fs_type;      // empty for block
  std::string staging_path;
  // The dm-crypt mapping over the device (encrypted volumes); empty: none.
  std::string crypt_mapping{};
  bool block() const { return access_type == "block"; }
  std::string Encode() const;
  static StagedFacts Of(const AttachRecord& record);
};

// The device the volume's data is read and written through: its dm-crypt
// mapping (/dev/mapper/<name>) when it is encrypted, else the attached
// device. What is formatted, mounted and bound for the pods.
std::string DataDevice(const AttachRecord& record);

}  // namespace blockcsi
