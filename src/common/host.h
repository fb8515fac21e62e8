// Host: the one seam between blockcsi and the machine's files and processes
// (sysfs, configfs, /proc, /dev, target paths, state directories, the
// detached bridge processes). Mounts go through Mounter, programs run to
// completion through Executor, signatures through BlockProbe and time
// through Clock; everything else that touches the host goes through here,
// so tests point it at a temp tree (HostRootedAt) or an in-memory fake.
// Paths passed in are absolute host paths ("/sys/class/iscsi_session"); a
// rooted host prepends its root. Implementations must be thread-safe.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace blockcsi {

struct FsUsage {
  uint64_t total_bytes = 0;
  uint64_t available_bytes = 0;
  uint64_t used_bytes = 0;
  uint64_t total_inodes = 0;
  uint64_t free_inodes = 0;
  uint64_t used_inodes = 0;
  // ST_RDONLY: the mount or its filesystem is read-only (a filesystem the
  // kernel remounted read-only after I/O errors shows up here).
  bool read_only = false;
};

enum class PathKind { kMissing, kDirectory, kBlockDevice, kFile, kSocket, kOther };

// Which file a path names: a file made anew under the same name (a
// restarted daemon's socket) differs in its inode or, if the inode number is
// reused, in its change time.
struct FileIdentity {
  uint64_t device = 0, inode = 0;
  int64_t change_ns = 0;
  bool operator==(const FileIdentity&) const = default;
};

// A process started by SpawnDetached: its pid (already reparented to init)
// and the caller's ends of its stdin (a socket, so that writing to a process
// that died is EPIPE, never SIGPIPE) and stdout (a pipe). The caller closes
// both fds.
struct DetachedProcess {
  int stdin_fd = -1;
  int stdout_fd = -1;
};

class Host {
 public:
  virtual ~Host() = default;

  // ---- files (sysfs attributes, configfs, /proc, node records)
  virtual StatusOr<std::string> ReadFile(const std::string& path) const = 0;
  // One write(2) of the whole value, no temp file: what sysfs and configfs
  // attributes want.
  virtual Status WriteFile(const std::string& path, const std::string& contents) const = 0;
  // Crash-safe replacement of a regular file (temp + fsync + rename, mode
  // 0600), for configuration that may hold secrets (open-iscsi node records):
  // after a crash the file holds the old contents or the new, never a mix.
  virtual Status ReplaceFile(const std::string& path, const std::string& contents) const = 0;
  // Creates or truncates `path` and writes `contents` in one write(2), not
  // atomically: configfs attributes cannot be renamed over (the kernel applies
  // each write whole), and a plain test tree that stands in for configfs
  // needs the file created.
  virtual Status OverwriteFile(const std::string& path, const std::string& contents) const = 0;
  virtual StatusOr<std::vector<std::string>> ListDir(const std::string& path) const = 0;  // sorted names
  virtual StatusOr<std::string> ReadLink(const std::string& path) const = 0;
  // `path` with every symbolic link in it resolved (realpath(3)), as a path
  // of this host: what exists of it is resolved, a missing tail is appended
  // as given (a dangling link is followed to where it points). A path that
  // comes back different leads through a link: the node refuses to mount
  // there, since mount(2) would follow it somewhere no record names.
  virtual StatusOr<std::string> RealPath(const std::string& path) const = 0;
  virtual bool Exists(const std::string& path) const = 0;
  // When `path` was last written (its mtime).
  virtual StatusOr<std::chrono::system_clock::time_point> ModificationTime(const std::string& path) const = 0;
  // The real path the seam maps `path` to (for handing to other programs).
  virtual std::string Resolve(const std::string& path) const = 0;
  // The permission bits (07777) of `path`, symlinks followed: a private key
  // that group or others can read is refused before it is used.
  virtual StatusOr<mode_t> Permissions(const std::string& path) const = 0;
  // chmod: a socket that gRPC made gets the mode the operator asked for.
  virtual Status SetPermissions(const std::string& path, mode_t mode) const = 0;
  virtual StatusOr<FileIdentity> Identity(const std::string& path) const = 0;

  // ---- paths (target paths, configfs directories, bridge directories)
  virtual PathKind Kind(const std::string& path) const = 0;
  // mkdir -p (`mode` for what it creates).
  virtual Status MakeDirectory(const std::string& path, mode_t mode) const = 0;
  // An empty regular file (parents created) for a raw block bind target.
  virtual Status MakeFile(const std::string& path) const = 0;
  // rmdir or unlink; a missing path is OK.
  virtual Status RemovePath(const std::string& path) const = 0;
  // rm -r of a directory this program owns (symlinks removed, not followed);
  // a missing path is OK.
  virtual Status RemoveTree(const std::string& path) const = 0;
  // A symbolic link at `link` to `target` (taken as is); a link already
  // there is OK.
  virtual Status Symlink(const std::string& target, const std::string& link) const = 0;

  // ---- block devices and mounted filesystems
  // "major:minor" of a block device node, as mountinfo prints it.
  virtual StatusOr<std::string> DeviceNumber(const std::string& device) const = 0;
  virtual StatusOr<uint64_t> BlockDeviceSize(const std::string& device) const = 0;
  // What loop device `loop_name` ("loop7") reads from (sysfs backing_file);
  // NOT_FOUND when it is not a configured loop device.
  virtual StatusOr<std::string> LoopBackingFile(const std::string& loop_name) const = 0;
  virtual StatusOr<FsUsage> StatFs(const std::string& path) const = 0;
  // FITRIM: the filesystem mounted at `mount_path` discards its free space
  // on the device below, and the kernel answers how many bytes it trimmed
  // (the filesystem's own count: ext4 and xfs count the free extents they
  // sent discards for, so a second run reports them again). The directory
  // is opened first and its st_dev compared with `expected_device`
  // ("major:minor", as mountinfo has it), so that a staging mount that went
  // away in between is never taken for the filesystem under it:
  // FAILED_PRECONDITION then. UNIMPLEMENTED: the device takes no discards.
  virtual StatusOr<uint64_t> TrimFilesystem(const std::string& mount_path,
                                            const std::string& expected_device) const = 0;

  // ---- this process and the ones it starts
  // CAP_SYS_RESOURCE in the effective set: the kernel asks for it to grow a
  // mounted ext4.
  virtual bool HasCapSysResource() const = 0;
  // Starts argv[0] (an absolute path on this machine, never under a root)
  // detached: double fork, its own session,
  // reparented to init, cwd "/", no fd of ours but stdin/stdout/stderr, so
  // nothing that happens to this process reaches it.
  virtual StatusOr<DetachedProcess> SpawnDetached(const std::vector<std::string>& argv) const = 0;
  // SIGKILL; a process already gone is not an error.
  virtual void Kill(pid_t pid) const = 0;
  // Collects `pid` if it is an exited child of ours (a plugin that is PID 1
  // inherits orphaned bridges); a no-op otherwise.
  virtual void Reap(pid_t pid) const = 0;
  // An fd that becomes readable (POLLIN) once process `pid` has exited,
  // whoever its parent is (the bridges are reparented to init, so waitpid
  // cannot see them): its exit is an event to wait for, never a poll of
  // /proc. It names that one process, so a pid reused later is not mistaken
  // for it. The caller closes it. NOT_FOUND when `pid` is gone already;
  // UNIMPLEMENTED when the kernel has no pidfds (before 5.3).
  virtual StatusOr<int> WatchExit(pid_t pid) const = 0;
};

// The real host under `root` ("" or "/": the machine itself). Not final:
// test fakes derive from it and replace what they simulate.
class RootedHost : public Host {
 public:
  explicit RootedHost(std::string root);

  StatusOr<std::string> ReadFile(const std::string& path) const override;
  Status WriteFile(const std::string& path, const std::string& contents) const override;
  Status ReplaceFile(const std::string& path, const std::string& contents) const override;
  Status OverwriteFile(const std::string& path, const std::string& contents) const override;
  StatusOr<std::vector<std::string>> ListDir(const std::string& path) const override;
  StatusOr<std::string> ReadLink(const std::string& path) const override;
  StatusOr<std::string> RealPath(const std::string& path) const override;
  bool Exists(const std::string& path) const override;
  StatusOr<std::chrono::system_clock::time_point> ModificationTime(const std::string& path) const override;
  std::string Resolve(const std::string& path) const override { return root_ + path; }
  StatusOr<mode_t> Permissions(const std::string& path) const override;
  Status SetPermissions(const std::string& path, mode_t mode) const override;
  StatusOr<FileIdentity> Identity(const std::string& path) const override;

  PathKind Kind(const std::string& path) const override;
  Status MakeDirectory(const std::string& path, mode_t mode) const override;
  Status MakeFile(const std::string& path) const override;
  Status RemovePath(const std::string& path) const override;
  Status RemoveTree(const std::string& path) const override;
  Status Symlink(const std::string& target, const std::string& link) const override;

  StatusOr<std::string> DeviceNumber(const std::string& device) const override;
  StatusOr<uint64_t> BlockDeviceSize(const std::string& device) const override;
  StatusOr<std::string> LoopBackingFile(const std::string& loop_name) const override;
  StatusOr<FsUsage> StatFs(const std::string& path) const override;
  StatusOr<uint64_t> TrimFilesystem(const std::string& mount_path, const std::string& expected_device) const override;

  bool HasCapSysResource() const override;
  StatusOr<DetachedProcess> SpawnDetached(const std::vector<std::string>& argv) const override;
  void Kill(pid_t pid) const override;
  void Reap(pid_t pid) const override;
  StatusOr<int> WatchExit(pid_t pid) const override;

 private:
  std::string root_;
};

// The machine's tree seen from `root` (a test's temp dir): every path is
// taken under it; processes are the machine's. "" or "/" is the machine
// itself: say MachineHost() for that.
std::unique_ptr<Host> HostRootedAt(std::string root);
// The machine itself, shared (stateless). Only the programs' wiring (src/cmd,
// the bridge's own main) and tests call it; everything else is handed the
// Host it uses, so a test can point any of them at a temp tree or a fake
// (hack/check_host_seam.py enforces it).
std::shared_ptr<Host> MachineHost();

// ReadFile with surrounding whitespace trimmed (sysfs values end in '\n').
StatusOr<std::string> ReadTrimmed(const Host& host, const std::string& path);

}  // namespace blockcsi
