// The node's facts about a staged volume, kept in the attach record as one
// annotation (kStagedAnnotation = "<access>,<fs type>,<staging path>", e.g.
// "mount,ext4,/var/lib/kubelet/..." or "block,,/var/lib/kubelet/...") so
// that they land together in one durable write: a crash never leaves half
// of them, and staging pays for one fsync, not three. Read by the node
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
  bool block() const { return access_type == "block"; }
  std::string Encode() const;
  static StagedFacts Of(const AttachRecord& record);
};

}  // namespace blockcsi
