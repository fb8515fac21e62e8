// The captured kernel RBD sysfs scenarios (test/testdata/krbd/sysfs) and the
// image they map, shared by the krbd connector's and blockctl cleanup's unit
// tests: in "rbd0", /dev/rbd0 is image kImage (id kImageId) of pool "rbd",
// mapped as user "blockcsi".
#pragma once

#include <string>

#include "attach/attach_record_store.h"
#include "support/test_util.h"

namespace blockcsi::krbd_captured {

inline constexpr char kImage[] = "csi-vol-7f3a9c2e41d04b8e9a512c6e1f0b3d47";
inline constexpr char kImageId[] = "1037e80f98be";

// Copies a scenario into the fake root `root` (merging trees, keeping symlinks).
inline void Install(const std::string& scenario, const std::string& root) {
  testing::MergeTreeInto(testing::TestDataPath("krbd/sysfs/" + scenario), root);
}

// An attached record of `volume_id` for kImage, at `device_path`, made by
// `connector`.
inline AttachRecord ImageRecord(const std::string& volume_id, const std::string& connector,
                                const std::string& device_path) {
  AttachRecord r;
  r.volume_id = volume_id;
  r.connector = connector;
  r.transport = "rbd";
  r.rbd_pool = "rbd";
  r.rbd_image = kImage;
  r.rbd_user = "blockcsi";
  r.expected_serial = kImageId;
  r.state = kAttachStateAttached;
  r.device_path = device_path;
  return r;
}

}  // namespace blockcsi::krbd_captured
