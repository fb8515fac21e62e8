#include "support/fake_attacher.h"

#include <algorithm>
#include <utility>

namespace blockcsi::testing {
namespace {

std::string Basename(const std::string& path) { return path.substr(path.rfind('/') + 1); }

// The device behind a bind of a device node (mountinfo root "/<name>").
const FakeDevice* DeviceBehind(const FakeWorld& w, const std::string& path, std::string* name = nullptr) {
  const MountEntry* e = FindMountAt(w.mounts, path);
  if (e == nullptr || e->fs_type != "devtmpfs") return nullptr;
  for (const auto& [dev_path, dev] : w.devices) {
    if ((dev_path.rfind("/dev/", 0) == 0 ? dev_path.substr(4) : "/" + Basename(dev_path)) == e->root) {
      if (name != nullptr) *name = dev_path;
      return &dev;
    }
  }
  return nullptr;
}

// cryptsetup as it acts on the world (the caller holds w.mu). The LUKS2
// header takes 16 MiB of the device, as cryptsetup's default does.
CommandResult RunCryptsetup(FakeWorld& w, const std::vector<std::string>& argv, const std::string& key) {
  constexpr uint64_t kHeaderBytes = 16ULL << 20;
  CommandResult r;
  r.exit_code = 0;
  const std::string& verb = argv.size() > 1 ? argv[1] : "";
  auto fail = [&](int code, std::string why) {
    r.exit_code = code;
    r.stderr_text = why + "\n";
    return r;
  };
  if (verb == "luksFormat") {
    auto dev = w.devices.find(argv.back());
    if (dev == w.devices.end()) return fail(4, "Device " + argv.back() + " does not exist or access denied.");
    dev->second.signatures = {{"crypto_LUKS", "crypto", "", ""}};
    w.luks_keys[argv.back()] = key;
    w.luks_contents[argv.back()] = {};
  } else if (verb == "open") {
    const std::string& device = argv[argv.size() - 2];
    const std::string path = "/dev/mapper/" + argv.back();
    if (!w.luks_keys.contains(device)) return fail(1, "Device " + device + " is not a valid LUKS device.");
    if (w.crypt_mappings.contains(path)) return fail(5, "Device " + argv.back() + " already exists.");
    if (w.luks_keys[device].empty()) return fail(1, "No usable keyslot is available.");
    if (w.luks_keys[device] != key) return fail(2, "No key available with this passphrase.");
    FakeDevice mapping;
    mapping.major_minor = "253:" + std::to_string(w.crypt_mappings.size());
    mapping.size_bytes = w.devices[device].size_bytes - kHeaderBytes;
    mapping.signatures = w.luks_contents[device];
    w.devices[path] = mapping;
    w.crypt_mappings[path] = device;
  } else if (verb == "luksDump") {
    auto header = w.luks_keys.find(argv.back());
    if (header == w.luks_keys.end()) return fail(1, "Device " + argv.back() + " is not a valid LUKS device.");
    // Only the parts a reader looks at; an empty key stands for a header
    // whose format was cut short before its first keyslot.
    r.stdout_text = std::string("{\"keyslots\":{") + (header->second.empty() ? "" : "\"0\":{\"type\":\"luks2\"}") +
                    "},\"segments\":{\"0\":{\"type\":\"crypt\",\"offset\":\"16777216\"}}}";
  } else if (verb == "close" || verb == "resize") {
    const std::string path = "/dev/mapper/" + argv.back();
    auto backing = w.crypt_mappings.find(path);
    if (backing == w.crypt_mappings.end()) return fail(4, "Device " + argv.back() + " is not active.");
    if (verb == "resize") {
      w.devices[path].size_bytes = w.devices[backing->second].size_bytes - kHeaderBytes;
      return r;
    }
    for (const auto& m : w.mounts) {
      if (m.major_minor == w.devices[path].major_minor) return fail(5, "Device " + argv.back() + " is still in use.");
    }
    w.luks_contents[backing->second] = w.devices[path].signatures;
    w.devices.erase(path);
    w.crypt_mappings.erase(backing);
  } else {
    return fail(1, "FakeWorldExecutor: cryptsetup " + verb + " is not modelled");
  }
  return r;
}

}  // namespace

std::string FakeWorld::AddDevice(const std::string& path, FakeDevice device) {
  std::lock_guard lock(mu);
  if (device.major_minor.empty()) device.major_minor = "7:" + std::to_string(devices.size() + 1);
  devices[path] = std::move(device);
  return path;
}

void FakeWorld::SetSignature(const std::string& device, const std::string& type, const std::string& usage) {
  std::lock_guard lock(mu);
  devices[device].signatures.push_back({type, usage, "", ""});
}

std::vector<std::string> FakeWorld::Log() {
  std::lock_guard lock(mu);
  return log;
}

int FakeWorld::Count(const std::string& prefix) {
  std::lock_guard lock(mu);
  return static_cast<int>(
      std::count_if(log.begin(), log.end(), [&](const std::string& l) { return l.rfind(prefix, 0) == 0; }));
}

// ---- FakeAttacher

void FakeAttacher::SetDeviceFor(const std::string& volume_id, const std::string& device) {
  std::lock_guard lock(mu_);
  devices_[volume_id] = device;
}

void FakeAttacher::FailAttachWith(Status st) {
  std::lock_guard lock(mu_);
  attach_error_ = std::move(st);
}

void FakeAttacher::SetHealth(const std::string& volume_id, AttachHealth health) {
  std::lock_guard lock(mu_);
  health_[volume_id] = std::move(health);
}

StatusOr<AttachRecord> FakeAttacher::Attach(const AttachSpec& spec, const std::optional<AttachRecord>&) {
  std::lock_guard lock(mu_);
  {
    std::lock_guard wlock(world_->mu);
    world_->log.push_back("attach " + spec.volume_id);
  }
  if (!attach_error_.ok()) return attach_error_;
  auto it = records_.find(spec.volume_id);
  if (it != records_.end()) {
    // A reused attachment gets the spec's annotations too, as from the real attacher.
    for (const auto& [key, value] : spec.annotations) it->second.annotations[key] = value;
    return it->second;
  }
  std::string device;
  if (auto d = devices_.find(spec.volume_id); d != devices_.end()) {
    device = d->second;
  } else {
    device = "/dev/fake" + std::to_string(next_device_++);
    devices_[spec.volume_id] = device;
  }
  {
    std::lock_guard wlock(world_->mu);
    auto& dev = world_->devices[device];
    if (dev.major_minor.empty()) dev.major_minor = "7:" + std::to_string(100 + world_->devices.size());
    dev.present = true;
  }
  AttachRecord r = NewAttachRecord(spec, "fake");
  r.state = "attached";
  r.device_path = device;
  r.annotations = spec.annotations;  // in the attach write, as the real attacher does
  records_[spec.volume_id] = r;
  return r;
}

Status FakeAttacher::Detach(const std::string& volume_id) {
  std::lock_guard lock(mu_);
  std::lock_guard wlock(world_->mu);
  world_->log.push_back("detach " + volume_id);
  BLOCKCSI_RETURN_IF_ERROR(detach_error_);
  auto it = records_.find(volume_id);
  if (it == records_.end()) return OkStatus();
  world_->devices[it->second.device_path].present = false;
  records_.erase(it);
  return OkStatus();
}

StatusOr<AttachRecord> FakeAttacher::Get(const std::string& volume_id) {
  std::lock_guard lock(mu_);
  auto it = records_.find(volume_id);
  if (it == records_.end()) return NotFound("no attach record for volume " + volume_id);
  return it->second;
}

StatusOr<std::vector<AttachRecord>> FakeAttacher::List() {
  std::lock_guard lock(mu_);
  std::vector<AttachRecord> out;
  for (const auto& [id, r] : records_) out.push_back(r);
  return out;
}

Status FakeAttacher::Annotate(const std::string& volume_id, const std::string& key, const std::string& value) {
  std::lock_guard lock(mu_);
  auto it = records_.find(volume_id);
  if (it == records_.end()) return NotFound("no attach record for volume " + volume_id);
  if (value.empty()) {
    it->second.annotations.erase(key);
  } else {
    it->second.annotations[key] = value;
  }
  return OkStatus();
}

StatusOr<uint64_t> FakeAttacher::Rescan(const std::string& volume_id) {
  std::lock_guard lock(mu_);
  auto it = records_.find(volume_id);
  if (it == records_.end()) return NotFound("no attach record for volume " + volume_id);
  std::lock_guard wlock(world_->mu);
  world_->log.push_back("rescan " + volume_id);
  return world_->devices[it->second.device_path].size_bytes;
}

AttachHealth FakeAttacher::Check(const std::string& volume_id) {
  std::lock_guard lock(mu_);
  auto it = health_.find(volume_id);
  return it == health_.end() ? AttachHealth{} : it->second;
}

// ---- FakeMounter

void FakeMounter::FailNext(const std::string& target, Status st) {
  std::lock_guard lock(world_->mu);
  failures_[target] = std::move(st);
}

Status FakeMounter::TakeFailure(const std::string& target) {
  auto it = failures_.find(target);
  if (it == failures_.end()) return OkStatus();
  Status st = it->second;
  failures_.erase(it);
  return st;
}

Status FakeMounter::Mount(const std::string& source, const std::string& target, const std::string& fs_type,
                          const std::string& options) {
  std::lock_guard lock(world_->mu);
  world_->log.push_back("mount " + source + " " + target + " " + fs_type + " " + options);
  BLOCKCSI_RETURN_IF_ERROR(TakeFailure(target));
  auto dev = world_->devices.find(source);
  if (dev == world_->devices.end() || !dev->second.present) return NotFound("mount: no device " + source);
  if (!world_->dirs.contains(target)) return NotFound("mount: no directory " + target);
  MountEntry e;
  e.mount_id = world_->next_mount_id++;
  e.major_minor = dev->second.major_minor;
  e.root = "/";
  e.target = target;
  e.fs_type = fs_type;
  e.source = source;
  e.options = ("," + options + ",").find(",ro,") != std::string::npos ? "ro,relatime" : "rw,relatime";
  world_->mounts.push_back(e);
  return OkStatus();
}

Status FakeMounter::BindMount(const std::string& source, const std::string& target, bool read_only) {
  std::lock_guard lock(world_->mu);
  world_->log.push_back("bind " + source + " " + target + (read_only ? " ro" : " rw"));
  BLOCKCSI_RETURN_IF_ERROR(TakeFailure(target));
  MountEntry e;
  e.mount_id = world_->next_mount_id++;
  e.target = target;
  e.options = read_only ? "ro,relatime" : "rw,relatime";
  if (auto dev = world_->devices.find(source); dev != world_->devices.end()) {
    if (!world_->files.contains(target)) return NotFound("bind: no file " + target);
    e.major_minor = "0:6";
    e.root = source.rfind("/dev/", 0) == 0 ? source.substr(4) : "/" + Basename(source);
    e.fs_type = "devtmpfs";
    e.source = "devtmpfs";
  } else {
    const MountEntry* src = FindMountAt(world_->mounts, source);
    if (src == nullptr) return NotFound("bind: nothing mounted at " + source);
    if (!world_->dirs.contains(target)) return NotFound("bind: no directory " + target);
    e.major_minor = src->major_minor;
    e.root = src->root;
    e.fs_type = src->fs_type;
    e.source = src->source;
  }
  world_->mounts.push_back(e);
  return OkStatus();
}

Status FakeMounter::Unmount(const std::string& target) {
  std::lock_guard lock(world_->mu);
  world_->log.push_back("umount " + target);
  BLOCKCSI_RETURN_IF_ERROR(TakeFailure(target));
  for (auto it = world_->mounts.rbegin(); it != world_->mounts.rend(); ++it) {
    if (it->target == target) {
      world_->mounts.erase(std::next(it).base());
      return OkStatus();
    }
  }
  return NotFound(target + " is not mounted");
}

Status FakeMounter::UnmountLazily(const std::string& target) {
  std::lock_guard lock(world_->mu);
  world_->log.push_back("umount-lazy " + target);
  for (auto it = world_->mounts.rbegin(); it != world_->mounts.rend(); ++it) {
    if (it->target == target) {
      world_->mounts.erase(std::next(it).base());
      return OkStatus();
    }
  }
  return NotFound(target + " is not mounted");
}

StatusOr<std::vector<MountEntry>> FakeMounter::List() {
  std::lock_guard lock(world_->mu);
  return world_->mounts;
}

// ---- FakeProbe

StatusOr<ProbeResult> FakeProbe::Probe(const std::string& device) {
  std::lock_guard lock(world_->mu);
  world_->log.push_back("probe " + device);
  auto it = world_->devices.find(device);
  if (it == world_->devices.end() || !it->second.present) return NotFound("probe: no device " + device);
  ProbeResult r;
  r.size_bytes = it->second.size_bytes;
  r.signatures = it->second.signatures;
  return r;
}

// ---- FakeWorldExecutor

void FakeWorldExecutor::BeforeRun(std::function<void(const std::vector<std::string>&)> hook) {
  std::lock_guard lock(mu_);
  before_run_ = std::move(hook);
}

void FakeWorldExecutor::Script(const std::string& program, CommandResult result) {
  std::lock_guard lock(mu_);
  script_[program] = std::move(result);
}

void FakeWorldExecutor::Script(const std::string& program, int exit_code, std::string stdout_text,
                               std::string stderr_text) {
  CommandResult result;
  result.exit_code = exit_code;
  result.stdout_text = std::move(stdout_text);
  result.stderr_text = std::move(stderr_text);
  Script(program, std::move(result));
}

StatusOr<CommandResult> FakeWorldExecutor::Run(const Command& command) {
  std::vector<std::string> argv = command.Argv();
  std::function<void(const std::vector<std::string>&)> hook;
  {
    std::lock_guard lock(mu_);
    hook = before_run_;
  }
  if (hook) hook(argv);
  std::lock_guard lock(mu_);
  commands_.push_back(argv);
  stdins_.emplace_back(command.stdin_data(), command.stdin_sensitive());
  std::string line;
  for (const auto& a : argv) line += (line.empty() ? "" : " ") + a;
  std::lock_guard wlock(world_->mu);
  world_->log.push_back("exec " + line);
  CommandResult result;
  result.exit_code = 0;
  if (auto it = script_.find(argv[0]); it != script_.end()) {
    result = it->second;
  } else if (argv[0] == "cryptsetup") {
    result = RunCryptsetup(*world_, argv, command.stdin_data());
  } else if (argv[0] == "dumpe2fs" && argv.size() == 3) {
    // What dumpe2fs -h says of the device as the world holds it: a clean
    // ext4 header, or "Bad magic number" for anything else.
    auto dev = world_->devices.find(argv[2]);
    bool ext4 = dev != world_->devices.end() && !dev->second.signatures.empty() &&
                dev->second.signatures.front().type == "ext4";
    if (ext4) {
      result.stdout_text =
          "Filesystem volume name:   <none>\nFilesystem state:         clean\n"
          "Filesystem features:      has_journal ext_attr resize_inode dir_index filetype extent 64bit\n";
    } else {
      result.exit_code = 1;
      result.stderr_text = "dumpe2fs: Bad magic number in super-block while trying to open " + argv[2] + "\n";
    }
  } else if (argv[0].rfind("mkfs.", 0) != 0 && argv[0] != "losetup" && argv[0] != "resize2fs" &&
             argv[0] != "xfs_growfs" && argv[0] != "btrfs") {
    // Not a program this fake models (its effect on the world is below):
    // fail as a missing program would, so that no test passes on a success
    // the fake made up.
    result.exit_code = 127;
    result.stderr_text = "FakeWorldExecutor: no script for " + argv[0] + "\n";
  }
  if (result.ok() && argv[0].rfind("mkfs.", 0) == 0) {
    world_->devices[argv.back()].signatures = {{argv[0].substr(5), "filesystem", "", ""}};
  }
  if (result.ok() && argv[0] == "losetup" && argv.size() == 5 && argv[1] == "--read-only") {
    std::string name = "loop" + std::to_string(50 + world_->loop_backing.size());
    world_->loop_backing[name] = argv[4];
    FakeDevice layer = world_->devices[argv[4]];
    layer.major_minor = "7:" + name.substr(4);
    world_->devices["/dev/" + name] = layer;
    result.stdout_text = "/dev/" + name + "\n";
  }
  if (result.ok() && argv[0] == "losetup" && argv.size() == 3 && argv[1] == "--detach") {
    world_->loop_backing.erase(argv[2].substr(5));
    world_->devices.erase(argv[2]);
  }
  return result;
}

std::vector<std::pair<std::string, bool>> FakeWorldExecutor::Stdins() {
  std::lock_guard lock(mu_);
  return stdins_;
}

std::vector<std::vector<std::string>> FakeWorldExecutor::Commands() {
  std::lock_guard lock(mu_);
  return commands_;
}

// ---- FakeHost

PathKind FakeHost::Kind(const std::string& path) const {
  std::lock_guard lock(world_->mu);
  if (DeviceBehind(*world_, path) != nullptr) return PathKind::kBlockDevice;
  if (auto it = world_->devices.find(path); it != world_->devices.end()) {
    return it->second.present ? PathKind::kBlockDevice : PathKind::kMissing;
  }
  if (world_->dirs.contains(path)) return PathKind::kDirectory;
  if (world_->files.contains(path)) return PathKind::kFile;
  return PathKind::kMissing;
}

Status FakeHost::MakeDirectory(const std::string& path, mode_t /*mode*/) const {
  std::lock_guard lock(world_->mu);
  world_->dirs.insert(path);
  return OkStatus();
}

Status FakeHost::MakeFile(const std::string& path) const {
  std::lock_guard lock(world_->mu);
  world_->files.insert(path);
  return OkStatus();
}

Status FakeHost::RemovePath(const std::string& path) const {
  std::lock_guard lock(world_->mu);
  if (FindMountAt(world_->mounts, path) != nullptr) return Status(StatusCode::kUnavailable, path + " is busy");
  world_->log.push_back("remove " + path);
  world_->dirs.erase(path);
  world_->files.erase(path);
  return OkStatus();
}

StatusOr<std::string> FakeHost::RealPath(const std::string& path) const {
  std::lock_guard lock(world_->mu);
  std::string out = path;
  for (int hops = 0; hops < 40; ++hops) {
    bool followed = false;
    for (const auto& [link, to] : world_->symlinks) {
      if (out == link || out.compare(0, link.size() + 1, link + "/") == 0) {
        out = to + out.substr(link.size());
        followed = true;
        break;
      }
    }
    if (!followed) return out;
  }
  return Status(StatusCode::kFailedPrecondition, "realpath " + path + ": too many links");
}

StatusOr<std::string> FakeHost::DeviceNumber(const std::string& device) const {
  std::lock_guard lock(world_->mu);
  auto it = world_->devices.find(device);
  if (it == world_->devices.end() || !it->second.present) return NotFound("no device " + device);
  return it->second.major_minor;
}

StatusOr<uint64_t> FakeHost::BlockDeviceSize(const std::string& device) const {
  std::lock_guard lock(world_->mu);
  if (const FakeDevice* d = DeviceBehind(*world_, device)) return d->size_bytes;
  auto it = world_->devices.find(device);
  if (it == world_->devices.end() || !it->second.present) return NotFound("no device " + device);
  return it->second.size_bytes;
}

StatusOr<std::string> FakeHost::LoopBackingFile(const std::string& loop_name) const {
  std::lock_guard lock(world_->mu);
  auto it = world_->loop_backing.find(loop_name);
  if (it == world_->loop_backing.end()) return NotFound(loop_name + " is not a loop device");
  return it->second;
}

StatusOr<uint64_t> FakeHost::TrimFilesystem(const std::string& mount_path, const std::string& expected_device) const {
  std::lock_guard lock(world_->mu);
  const MountEntry* entry = FindMountAt(world_->mounts, mount_path);
  // Unmounted: the directory is on the filesystem below, another device.
  if (entry == nullptr || entry->major_minor != expected_device) {
    return FailedPrecondition(mount_path + " is not on device " + expected_device);
  }
  for (auto& [path, device] : world_->devices) {
    if (device.major_minor != expected_device) continue;
    if (!device.discards) return Unimplemented("FITRIM " + mount_path + ": Operation not supported");
    world_->log.push_back("fitrim " + mount_path);
    return std::exchange(device.freed_bytes, 0);
  }
  return FailedPrecondition(mount_path + ": no device " + expected_device);
}

// The slaves of a mapping: "/sys/dev/block/<mm>/slaves" lists the device
// under it; ".../slaves/<name>/dev" is that device's number.
StatusOr<std::vector<std::string>> FakeHost::ListDir(const std::string& path) const {
  std::lock_guard lock(world_->mu);
  for (const auto& [mapping, backing] : world_->crypt_mappings) {
    if (path == "/sys/dev/block/" + world_->devices[mapping].major_minor + "/slaves") {
      return std::vector<std::string>{Basename(backing)};
    }
  }
  return RootedHost::ListDir(path);
}

StatusOr<std::string> FakeHost::ReadFile(const std::string& path) const {
  std::lock_guard lock(world_->mu);
  for (const auto& [mapping, backing] : world_->crypt_mappings) {
    std::string slaves = "/sys/dev/block/" + world_->devices[mapping].major_minor + "/slaves/";
    if (path == slaves + Basename(backing) + "/dev") return world_->devices[backing].major_minor + "\n";
  }
  return RootedHost::ReadFile(path);
}

StatusOr<FsUsage> FakeHost::StatFs(const std::string& path) const {
  std::lock_guard lock(world_->mu);
  if (!world_->dirs.contains(path)) return NotFound("statvfs " + path);
  return usage;
}

}  // namespace blockcsi::testing
