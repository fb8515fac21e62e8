#include "node/node_claims.h"

#include <algorithm>

#include "node/staged_facts.h"

namespace blockcsi {

std::string PublishedAnnotation(const std::string& target) { return kPublishedAnnotationPrefix + target; }

bool IsPublishedAt(const AttachRecord& record, const std::string& target) {
  return record.annotations.contains(PublishedAnnotation(target));
}

std::vector<std::string> PublishedTargets(const AttachRecord& record) {
  std::vector<std::string> out;
  const std::string prefix = kPublishedAnnotationPrefix;
  for (auto it = record.annotations.lower_bound(prefix);
       it != record.annotations.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
    out.push_back(it->first.substr(prefix.size()));
  }
  return out;
}

bool PathWithin(const std::string& path, const std::string& claimed) {
  if (claimed.empty()) return false;
  if (path == claimed) return true;
  const std::string dir = claimed == "/" ? claimed : claimed + "/";
  return path.compare(0, dir.size(), dir) == 0;
}

Status RefuseOtherVolumesPath(const std::vector<AttachRecord>& records, const std::string& volume_id,
                              const std::string& field, const std::string& path) {
  for (const AttachRecord& other : records) {
    if (other.volume_id == volume_id) continue;
    // Either way round: a mount inside another volume's path writes into
    // its filesystem, one above it hides it from its own unpublish.
    auto overlaps = [&](const std::string& claimed) { return PathWithin(path, claimed) || PathWithin(claimed, path); };
    std::string what;
    std::string claimed = StagedFacts::Of(other).staging_path;
    if (overlaps(claimed)) {
      what = "staging path";
    } else {
      for (const std::string& target : PublishedTargets(other)) {
        if (overlaps(target)) {
          what = "publish target";
          claimed = target;
          break;
        }
      }
    }
    if (what.empty()) continue;
    const char* relation = path == claimed ? " is " : PathWithin(path, claimed) ? " is inside " : " holds ";
    return FailedPrecondition("volume " + volume_id + ": " + field + " " + path + relation + "the " + what + " " +
                              claimed + " of volume " + other.volume_id + " on this node; refusing to touch it");
  }
  return OkStatus();
}

namespace {

std::vector<std::string> Keys(const std::string& transport, const std::string& target_iqn, int lun,
                              const std::string& wwn, const std::string& rbd_monitors, const std::string& rbd_pool,
                              const std::string& rbd_image, const std::string& rbd_image_id) {
  std::vector<std::string> keys;
  if (transport == "rbd") {
    if (!rbd_pool.empty() && !rbd_image.empty())
      keys.push_back("rbd:" + rbd_monitors + "|" + rbd_pool + "/" + rbd_image);
    if (!rbd_image_id.empty()) keys.push_back("rbd-id:" + rbd_image_id);
    return keys;
  }
  if (!target_iqn.empty()) keys.push_back("iscsi:" + target_iqn + "/" + std::to_string(lun));
  if (!wwn.empty()) keys.push_back("wwn:" + wwn);
  return keys;
}

}  // namespace

std::vector<std::string> LunKeys(const AttachSpec& s) {
  return Keys(s.transport, s.target_iqn, s.lun, s.expected_wwn, s.rbd.monitors, s.rbd.pool, s.rbd.image,
              s.rbd.image_id);
}

// An rbd record keeps the image id where the spec had it: in expected_serial.
std::vector<std::string> LunKeys(const AttachRecord& r) {
  return Keys(r.transport, r.target_iqn, r.lun, r.expected_wwn, r.rbd_monitors, r.rbd_pool, r.rbd_image,
              r.transport == "rbd" ? r.expected_serial : "");
}

Status RefuseLunOfOtherVolume(const std::vector<AttachRecord>& records, const AttachSpec& spec) {
  const std::vector<std::string> wanted = LunKeys(spec);
  for (const AttachRecord& other : records) {
    if (other.volume_id == spec.volume_id) continue;
    for (const std::string& key : LunKeys(other)) {
      if (std::find(wanted.begin(), wanted.end(), key) == wanted.end()) continue;
      return FailedPrecondition("volume " + spec.volume_id + ": its publish_context names LUN " + key +
                                ", which this node holds for volume " + other.volume_id +
                                "; one LUN is staged under one volume id only");
    }
  }
  return OkStatus();
}

Status RefuseSymlinkedPath(const Host& host, const std::string& volume_id, const std::string& field,
                           const std::string& path) {
  BLOCKCSI_ASSIGN_OR_RETURN(std::string real, host.RealPath(path));
  if (real == path) return OkStatus();
  return FailedPrecondition("volume " + volume_id + ": " + field + " " + path + " leads through a symbolic link to " +
                            real + "; the node mounts only at paths without links");
}

}  // namespace blockcsi
