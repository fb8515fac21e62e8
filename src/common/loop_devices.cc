#include "common/loop_devices.h"

#include "common/mountinfo.h"

namespace blockcsi {

std::vector<std::string> FindLoopDevicesBackedBy(const Host& fs, const std::string& file) {
  std::vector<std::string> out;
  auto names = fs.ListDir("/sys/block");
  if (!names.ok()) return out;
  for (const auto& name : *names) {
    if (!name.starts_with("loop")) continue;
    auto backing = ReadTrimmed(fs, "/sys/block/" + name + "/loop/backing_file");
    // The kernel appends " (deleted)" when the file was unlinked.
    if (backing.ok() && (*backing == file || *backing == file + " (deleted)")) out.push_back("/dev/" + name);
  }
  return out;
}

std::vector<std::string> MountPointsOfDevice(const Host& fs, const std::string& device,
                                             const std::string& mountinfo_text) {
  std::vector<std::string> out;
  std::string name = device.substr(device.rfind('/') + 1);
  auto dev = ReadTrimmed(fs, "/sys/block/" + name + "/dev");
  for (const auto& entry : ParseMountInfo(mountinfo_text)) {
    if ((dev.ok() && entry.major_minor == *dev) || entry.source == device) out.push_back(entry.target);
  }
  return out;
}

}  // namespace blockcsi
