#include "node/fs_maintenance.h"

#include <chrono>
#include <sstream>

#include "common/block_probe.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/mkfs_mount_options.h"
#include "common/strings.h"
#include "common/unique_fd.h"

namespace blockcsi {
namespace {

using std::chrono::minutes;

// What the program said went wrong, in one line (the whole output goes to
// the debug log through DescribeFailure).
std::string Output(const CommandResult& r) {
  std::string text = FirstMeaningfulLine(r.stderr_text);
  if (text.empty()) text = FirstMeaningfulLine(r.stdout_text);
  return text;
}

}  // namespace

namespace {

Status Format(Executor& executor, const std::string& volume_id, const std::string& fs_type, const std::string& device,
              const std::vector<std::string>& extra) {
  std::vector<std::string> argv = MkfsArgv(fs_type, device, extra);
  Command cmd(argv[0]);
  for (size_t i = 1; i < argv.size(); ++i) cmd.Arg(argv[i]);
  // A fresh sparse image formats in well under a second; minutes allow for
  // a slow array without letting a wedged device hang the RPC forever.
  cmd.Timeout(minutes(5));
  LogInfo("formatting", {{"volume_id", volume_id}, {"device", device}, {"fs_type", fs_type}});
  // mkfs.ext4's 1 KiB writes would each read a whole 4 KiB block first
  // (block_probe.h, HoldSectorBlockSize): through a userspace bridge, one
  // round trip to the target each.
  UniqueFd held = HoldSectorBlockSize(device);
  BLOCKCSI_ASSIGN_OR_RETURN(CommandResult r, executor.Run(cmd));
  if (!r.ok()) return Internal("volume " + volume_id + ": " + DescribeFailure(cmd, r));
  return OkStatus();
}

}  // namespace

Status FormatDevice(Executor& executor, const std::string& volume_id, const std::string& fs_type,
                    const std::string& device, const std::vector<std::string>& extra) {
  Status st = Format(executor, volume_id, fs_type, device, extra);
  RecordOperation("format", st);
  return st;
}

Status RepairExt4IfNeeded(Executor& executor, const std::string& volume_id, const std::string& device) {
  BLOCKCSI_ASSIGN_OR_RETURN(CommandResult header,
                            executor.Run(Command("dumpe2fs").Arg("-h").Arg(device).Timeout(minutes(1))));
  if (!header.ok()) {
    return Internal("volume " + volume_id + ": " +
                    DescribeFailure(Command("dumpe2fs").Arg("-h").Arg(device).Timeout(minutes(1)), header));
  }
  bool needs_check = false;
  std::istringstream lines(header.stdout_text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("Filesystem state:", 0) == 0 && TrimWhitespace(line.substr(17)) != "clean") needs_check = true;
    if (line.rfind("Filesystem features:", 0) == 0 && line.find("needs_recovery") != std::string::npos) {
      needs_check = true;
    }
  }
  if (!needs_check) return OkStatus();
  LogInfo("running e2fsck -p before mount", {{"volume_id", volume_id}, {"device", device}});
  auto ran = executor.Run(Command("e2fsck").Arg("-p").Arg(device).Timeout(minutes(30)));
  if (!ran.ok()) {
    RecordOperation("fsck", ran.status());
    return ran.status();
  }
  const CommandResult& fsck = *ran;
  // e2fsck: 0 clean, 1 errors corrected, 2 corrected and "reboot" (only
  // meaningful for the root fs); 4 and up: left uncorrected or failed.
  if (fsck.timed_out || fsck.exit_code < 0 || fsck.exit_code >= 4) {
    RecordOperation("fsck", FailedPrecondition(""));
    return FailedPrecondition("volume " + volume_id + ": the ext4 filesystem on " + device +
                              " has errors e2fsck -p cannot fix unattended (exit " + std::to_string(fsck.exit_code) +
                              "); run e2fsck by hand: " + Output(fsck));
  }
  RecordOperation("fsck", OkStatus());
  return OkStatus();
}

Status GrowFilesystem(Executor& executor, const Host& host, const std::string& volume_id, const std::string& fs_type,
                      const std::string& device, const std::string& mount_path) {
  Command cmd("true");
  if (fs_type == "xfs") {
    cmd = Command("xfs_growfs").Arg(mount_path);
  } else if (fs_type == "ext4") {
    if (!host.HasCapSysResource()) {
      return FailedPrecondition("volume " + volume_id + ": growing the mounted ext4 filesystem on " + device +
                                " needs CAP_SYS_RESOURCE, which this plugin does not have; grant it to the "
                                "node plugin container (or grow while unstaged)");
    }
    cmd = Command("resize2fs").Arg(device);
  } else if (fs_type == "btrfs") {
    cmd = Command("btrfs").Arg("filesystem").Arg("resize").Arg("max").Arg(mount_path);
  } else {
    return InvalidArgument("volume " + volume_id + ": cannot grow filesystem type \"" + fs_type + "\"");
  }
  cmd.Timeout(minutes(30));
  BLOCKCSI_ASSIGN_OR_RETURN(CommandResult r, executor.Run(cmd));
  if (!r.ok()) {
    std::string out = Output(r);
    if (fs_type == "ext4" && (out.find("Permission denied") != std::string::npos ||
                              out.find("Operation not permitted") != std::string::npos)) {
      return FailedPrecondition("volume " + volume_id + ": the kernel refused to grow the mounted ext4 on " + device +
                                " (CAP_SYS_RESOURCE missing?): " + out);
    }
    return Internal("volume " + volume_id + ": " + DescribeFailure(cmd, r));
  }
  return OkStatus();
}

}  // namespace blockcsi
