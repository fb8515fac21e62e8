// `blockctl inspect DEVICE`: what a block device carries and who uses it —
// libblkid signatures, size, holders, mounts, and the LUN serial when the
// kernel exposes one.

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <ostream>

#include "cli/verb.h"
#include "common/block_probe.h"
#include "common/host.h"
#include "common/mounter.h"

namespace blockcsi::cli {
namespace {

class InspectVerb final : public Verb {
 public:
  std::string Name() const override { return "inspect"; }
  std::string Summary() const override { return "Show a block device's signatures, size, holders, mounts and serial"; }
  void Configure(CLI::App& c) override {
    c.add_option("device", device_, "Block device, e.g. /dev/loop3 or /dev/sdc")->required();
    c.add_option("--sys-root", sys_root_, "Root under which /sys is read (tests)");
    c.add_option("--mountinfo", mountinfo_, "mountinfo file to read (default /proc/self/mountinfo)");
  }

  int Run(const GlobalOptions& options, const Io& io) override {
    auto device_number = options.host->DeviceNumber(device_);
    if (!device_number.ok()) {
      io.Error(device_ + " is not a block device");
      return kExitProblems;
    }
    const std::string& major_minor = *device_number;
    std::string name = device_.substr(device_.rfind('/') + 1);
    auto sys = HostRootedAt(sys_root_);

    nlohmann::json j;
    j["device"] = device_;
    j["major_minor"] = major_minor;
    auto probe = MakeBlkidProbe()->Probe(device_);
    if (probe.ok()) {
      j["size_bytes"] = probe->size_bytes;
      nlohmann::json sigs = nlohmann::json::array();
      for (const auto& s : probe->signatures) {
        sigs.push_back({{"type", s.type}, {"usage", s.usage}, {"uuid", s.uuid}, {"label", s.label}});
      }
      j["signatures"] = sigs;
    } else {
      j["probe_error"] = probe.status().message();
    }
    auto holders = sys->ListDir("/sys/class/block/" + name + "/holders");
    j["holders"] = holders.ok() ? nlohmann::json(*holders) : nlohmann::json::array();
    for (const char* file : {"/device/serial", "/device/vpd_pg80", "/loop/backing_file"}) {
      auto value = ReadTrimmed(*sys, "/sys/class/block/" + name + file);
      if (value.ok() && !value->empty()) {
        std::string printable;
        for (char c : *value) printable += (c >= 32 && c < 127) ? c : '.';
        j[std::string(file).substr(std::string(file).rfind('/') + 1)] = printable;
      }
    }
    std::string mount_text;
    {
      auto text = options.host->ReadFile(mountinfo_);
      if (text.ok()) mount_text = *text;
    }
    nlohmann::json mounts = nlohmann::json::array();
    for (const auto& m : ParseMountInfo(mount_text)) {
      if (m.major_minor == major_minor) {
        mounts.push_back({{"target", m.target}, {"fs_type", m.fs_type}, {"options", m.options}});
      }
    }
    j["mounts"] = mounts;

    if (options.format() == OutputFormat::kJson) {
      io.out << j.dump(2) << "\n";
      return kExitOk;
    }
    io.out << "device:      " << device_ << " (" << major_minor << ")\n";
    if (j.contains("size_bytes")) io.out << "size:        " << j["size_bytes"].get<uint64_t>() << " bytes\n";
    io.out << "signatures:  " << (probe.ok() ? probe->Describe() : j["probe_error"].get<std::string>()) << "\n";
    for (const char* key : {"serial", "vpd_pg80", "backing_file"}) {
      if (j.contains(key))
        io.out << std::string(key) + ":" << std::string(12 - std::string(key).size(), ' ') << j[key].get<std::string>()
               << "\n";
    }
    io.out << "holders:     " << (j["holders"].empty() ? "-" : j["holders"].dump()) << "\n";
    io.out << "mounts:\n";
    if (mounts.empty()) io.out << "  -\n";
    for (const auto& m : mounts) {
      io.out << "  " << m["target"].get<std::string>() << " " << m["fs_type"].get<std::string>() << " "
             << m["options"].get<std::string>() << "\n";
    }
    return kExitOk;
  }

 private:
  std::string device_;
  std::string sys_root_;
  std::string mountinfo_ = "/proc/self/mountinfo";
};

BLOCKCTL_REGISTER_VERB(InspectVerb);

}  // namespace
}  // namespace blockcsi::cli
