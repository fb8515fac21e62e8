// What the node's attach records claim: each volume's staging path (its
// StagedFacts), its publish targets and its LUN. The node service acts only
// on paths its records give to the volume it is called for, refuses a path
// another volume's record holds, and refuses to stage a LUN another volume
// id holds (one LUN mounted twice read-write is corruption). Pure functions
// over records; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "attach/attach_spec.h"
#include "attach/volume_attacher.h"
#include "common/host.h"
#include "common/status.h"

namespace blockcsi {

// One annotation per publish target (key prefix + path, value "ro" or
// "rw"), so that a publish adds and an unpublish erases one key through
// VolumeAttacher::Annotate and no write rewrites another target's entry.
inline constexpr char kPublishedAnnotationPrefix[] = "node.published:";

std::string PublishedAnnotation(const std::string& target);
bool IsPublishedAt(const AttachRecord& record, const std::string& target);
std::vector<std::string> PublishedTargets(const AttachRecord& record);

// Whether `path` is `claimed` or lies under it: a mount inside another
// volume's filesystem is as much that volume's business as its root.
bool PathWithin(const std::string& path, const std::string& claimed);

// FAILED_PRECONDITION naming both volumes when a record other than
// `volume_id`'s claims `path` (its staging path or one of its publish
// targets is `path`, lies above it or below it); OK otherwise.
// `field`: the request field `path` came from, for the message.
Status RefuseOtherVolumesPath(const std::vector<AttachRecord>& records, const std::string& volume_id,
                              const std::string& field, const std::string& path);

// The names under which a LUN is known on this node: "iscsi:<iqn>/<lun>",
// "wwn:<naa>", "rbd:<monitors>|<pool>/<image>", "rbd-id:<image id>". The
// serial alone is not one: tgt's default serials repeat across storage
// hosts, and the target's IQN with the LUN number already names the LUN.
std::vector<std::string> LunKeys(const AttachSpec& spec);
std::vector<std::string> LunKeys(const AttachRecord& record);

// FAILED_PRECONDITION naming the other volume when a record of another
// volume id holds a LUN `spec` names; OK otherwise.
Status RefuseLunOfOtherVolume(const std::vector<AttachRecord>& records, const AttachSpec& spec);

// FAILED_PRECONDITION when `path` (or a directory above it) is a symbolic
// link: the kernel would mount at the link's destination, somewhere no
// record names, and an unpublish of `path` would leave that mount behind.
// What exists of `path` is resolved through the host; the rest is taken as
// given.
Status RefuseSymlinkedPath(const Host& host, const std::string& volume_id, const std::string& field,
                           const std::string& path);

}  // namespace blockcsi
