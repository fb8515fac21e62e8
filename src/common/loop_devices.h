// Loop devices through the rooted sysfs view: which loop devices sit on a
// given file (so cleanup finds them after a crash, whoever made them), and
// whether a device is still mounted. Pure reads; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "common/host.h"
#include "common/status.h"

namespace blockcsi {

// "/dev/loopN" for every loop device whose backing_file is `file`.
std::vector<std::string> FindLoopDevicesBackedBy(const Host& fs, const std::string& file);

// Mount points (from `mountinfo_text`) of block device `device` ("/dev/loop3"),
// matched by major:minor read from sysfs.
std::vector<std::string> MountPointsOfDevice(const Host& fs, const std::string& device,
                                             const std::string& mountinfo_text);

}  // namespace blockcsi
