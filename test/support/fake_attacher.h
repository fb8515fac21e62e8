// In-memory fakes of everything the node service touches, sharing one
// FakeWorld: "devices" (a node path, a device number, a size, what libblkid
// would find on them), the mount table and the paths that exist. mkfs run
// through FakeWorldExecutor writes a signature into the world, so the probe
// sees it afterwards, as it would on a real device; cryptsetup through it
// keeps LUKS headers, their keys and dm-crypt mappings (whose contents
// survive a close and reopen) the same way. Thread-safe (one mutex
// in the world); every fake keeps an action log for assertions.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "attach/volume_attacher.h"
#include "common/block_probe.h"
#include "common/executor.h"
#include "common/host.h"
#include "common/mounter.h"

namespace blockcsi::testing {

struct FakeDevice {
  std::string major_minor;
  uint64_t size_bytes = 1ULL << 30;
  std::vector<BlockSignature> signatures;
  bool present = true;
  // What FITRIM of the filesystem on it would give back (the blocks its
  // filesystem freed since the last trim), and whether it takes discards.
  uint64_t freed_bytes = 0;
  bool discards = true;
};

struct FakeWorld {
  std::mutex mu;
  std::map<std::string, FakeDevice> devices;  // by node path
  std::vector<MountEntry> mounts;
  std::set<std::string> dirs;
  std::set<std::string> files;
  std::map<std::string, std::string> loop_backing;  // "loop50" -> "/dev/fake1"
  // Symbolic links: path -> absolute destination. Only RealPath follows
  // them; the other fakes take paths as given, as mount(2) on a link would
  // act at its destination without saying so.
  std::map<std::string, std::string> symlinks;
  std::vector<std::string> log;  // "mount /dev/fake1 /stage ext4 opts", "mkfs.ext4 ...", "detach vol1"
  int next_mount_id = 100;
  // LUKS: each formatted device's key (what cryptsetup read on stdin; ""
  // for a header without a keyslot, a format cut short), the
  // signatures inside it while its mapping is closed, and the open
  // mappings ("/dev/mapper/<name>" -> the device under it).
  std::map<std::string, std::string> luks_keys;
  std::map<std::string, std::vector<BlockSignature>> luks_contents;
  std::map<std::string, std::string> crypt_mappings;

  // Adds (or replaces) a device node and returns its path.
  std::string AddDevice(const std::string& path, FakeDevice device);
  void SetSignature(const std::string& device, const std::string& type, const std::string& usage);
  std::vector<std::string> Log();
  int Count(const std::string& prefix);
};

class FakeAttacher final : public VolumeAttacher {
 public:
  explicit FakeAttacher(std::shared_ptr<FakeWorld> world) : world_(std::move(world)) {}

  // The device a volume attaches as; tests set it up (signatures) first.
  // Volumes without one get /dev/fake<N>, blank.
  void SetDeviceFor(const std::string& volume_id, const std::string& device);
  void FailAttachWith(Status st);
  // Every Detach fails with `st` until it is set back to OK.
  void FailDetachWith(Status st) {
    std::lock_guard lock(mu_);
    detach_error_ = std::move(st);
  }
  void SetHealth(const std::string& volume_id, AttachHealth health);

  using VolumeAttacher::Attach;
  StatusOr<AttachRecord> Attach(const AttachSpec& spec, const std::optional<AttachRecord>& earlier) override;
  Status Detach(const std::string& volume_id) override;
  StatusOr<AttachRecord> Get(const std::string& volume_id) override;
  StatusOr<std::vector<AttachRecord>> List() override;
  Status Annotate(const std::string& volume_id, const std::string& key, const std::string& value) override;
  StatusOr<uint64_t> Rescan(const std::string& volume_id) override;
  AttachHealth Check(const std::string& volume_id) override;

 private:
  std::shared_ptr<FakeWorld> world_;
  std::mutex mu_;
  std::map<std::string, AttachRecord> records_;
  std::map<std::string, std::string> devices_;
  std::map<std::string, AttachHealth> health_;
  Status attach_error_;
  Status detach_error_;
  int next_device_ = 1;
};

class FakeMounter final : public Mounter {
 public:
  explicit FakeMounter(std::shared_ptr<FakeWorld> world) : world_(std::move(world)) {}
  // The next Mount/BindMount/Unmount on `target` fails with `st`.
  void FailNext(const std::string& target, Status st);

  Status Mount(const std::string& source, const std::string& target, const std::string& fs_type,
               const std::string& options) override;
  Status BindMount(const std::string& source, const std::string& target, bool read_only) override;
  Status Unmount(const std::string& target) override;
  // Never fails: the kernel's MNT_DETACH takes a busy or broken mount too.
  Status UnmountLazily(const std::string& target) override;
  StatusOr<std::vector<MountEntry>> List() override;

 private:
  Status TakeFailure(const std::string& target);
  std::shared_ptr<FakeWorld> world_;
  std::map<std::string, Status> failures_;
};

class FakeProbe final : public BlockProbe {
 public:
  explicit FakeProbe(std::shared_ptr<FakeWorld> world) : world_(std::move(world)) {}
  StatusOr<ProbeResult> Probe(const std::string& device) override;

 private:
  std::shared_ptr<FakeWorld> world_;
};

// Records every argv; answers from a script by program name, else as the
// program would on the fake world: mkfs.<fs> writes <fs> into the named
// device; "losetup --read-only --find --show <dev>" makes /dev/loop<N> over
// it and "losetup --detach" removes it; resize2fs/xfs_growfs/btrfs succeed;
// "dumpe2fs -h" prints a clean header for an ext4 device and fails on any
// other; cryptsetup luksFormat / open / close / resize / luksDump act on the world's
// LUKS state (a wrong key: exit 2, as cryptsetup's "no key available").
// Any other program fails (exit 127): never a made-up success.
class FakeWorldExecutor final : public Executor {
 public:
  explicit FakeWorldExecutor(std::shared_ptr<FakeWorld> world) : world_(std::move(world)) {}
  void Script(const std::string& program, CommandResult result);
  // The same, the result given by its parts (what a test scripts most).
  void Script(const std::string& program, int exit_code, std::string stdout_text, std::string stderr_text = "");
  // Runs before each command, outside the fake's lock (a test can block here).
  void BeforeRun(std::function<void(const std::vector<std::string>&)> hook);
  StatusOr<CommandResult> Run(const Command& command) override;
  std::vector<std::vector<std::string>> Commands();
  // What each command got on stdin, in order, and whether it was marked
  // sensitive (blanked in logs).
  std::vector<std::pair<std::string, bool>> Stdins();

 private:
  std::shared_ptr<FakeWorld> world_;
  std::mutex mu_;
  std::map<std::string, CommandResult> script_;
  std::function<void(const std::vector<std::string>&)> before_run_;
  std::vector<std::vector<std::string>> commands_;
  std::vector<std::pair<std::string, bool>> stdins_;
};

// The node's paths and devices as the world holds them; what it does not
// model (sysfs, processes) goes to a root that does not exist, so a node
// test that reaches for it fails instead of touching this machine.
class FakeHost final : public RootedHost {
 public:
  explicit FakeHost(std::shared_ptr<FakeWorld> world)
      : RootedHost("/nonexistent-blockcsi-fake-host"), world_(std::move(world)) {}
  bool cap_sys_resource = true;
  FsUsage usage{.total_bytes = 1000,
                .available_bytes = 600,
                .used_bytes = 400,
                .total_inodes = 100,
                .free_inodes = 90,
                .used_inodes = 10};

  PathKind Kind(const std::string& path) const override;
  Status MakeDirectory(const std::string& path, mode_t mode) const override;
  Status MakeFile(const std::string& path) const override;
  Status RemovePath(const std::string& path) const override;
  StatusOr<std::string> RealPath(const std::string& path) const override;
  StatusOr<std::string> DeviceNumber(const std::string& device) const override;
  StatusOr<uint64_t> BlockDeviceSize(const std::string& device) const override;
  StatusOr<FsUsage> StatFs(const std::string& path) const override;
  StatusOr<std::string> LoopBackingFile(const std::string& loop_name) const override;
  // As the kernel: the mount at `mount_path` must be on `expected_device`;
  // answers the device's freed_bytes once (a second trim finds none) and
  // logs "fitrim <path>".
  StatusOr<uint64_t> TrimFilesystem(const std::string& mount_path, const std::string& expected_device) const override;
  // /sys/dev/block/<major:minor>/slaves of the world's dm-crypt mappings;
  // any other path as the rooted host reads it (nothing).
  StatusOr<std::vector<std::string>> ListDir(const std::string& path) const override;
  StatusOr<std::string> ReadFile(const std::string& path) const override;
  bool HasCapSysResource() const override { return cap_sys_resource; }

 private:
  std::shared_ptr<FakeWorld> world_;
};

}  // namespace blockcsi::testing
