#include "common/mounter.h"

#include <libmount/libmount.h>
#include <sys/mount.h>

#include <cerrno>
#include <sstream>

#include "common/atomic_file.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/span.h"

namespace blockcsi {

const MountEntry* FindMountAt(const std::vector<MountEntry>& table, std::string_view target) {
  const MountEntry* found = nullptr;
  for (const auto& e : table) {
    if (e.target == target) found = &e;
  }
  return found;
}

namespace {

class LibmountMounter final : public Mounter {
 public:
  Status Mount(const std::string& source, const std::string& target, const std::string& fs_type,
               const std::string& options) override {
    Span span("mount", target);
    Status st = RunContext(source, target, fs_type, options, 0, "mount " + source + " at " + target);
    RecordOperation("mount", st);
    return st;
  }

  Status BindMount(const std::string& source, const std::string& target, bool read_only) override {
    Span span("bind_mount", target);
    // libmount performs the bind then the read-only remount when asked "bind,ro".
    Status st =
        RunContext(source, target, "", read_only ? "bind,ro" : "bind", 0, "bind mount " + source + " at " + target);
    RecordOperation("bind_mount", st);
    return st;
  }

  Status Unmount(const std::string& target) override {
    Span span("umount", target);
    libmnt_context* cxt = mnt_new_context();
    if (cxt == nullptr) return ResourceExhausted("libmount context for unmount " + target);
    mnt_context_disable_mtab(cxt, 1);
    mnt_context_set_target(cxt, target.c_str());
    int rc = mnt_context_umount(cxt);
    Status st = ResultOf(cxt, rc, "unmount " + target);
    mnt_free_context(cxt);
    RecordOperation("unmount", st);
    return st;
  }

  Status UnmountLazily(const std::string& target) override {
    Span span("umount-lazy", target);
    libmnt_context* cxt = mnt_new_context();
    if (cxt == nullptr) return ResourceExhausted("libmount context for unmount " + target);
    mnt_context_disable_mtab(cxt, 1);
    mnt_context_enable_lazy(cxt, 1);
    mnt_context_set_target(cxt, target.c_str());
    int rc = mnt_context_umount(cxt);
    Status st = ResultOf(cxt, rc, "lazy unmount " + target);
    mnt_free_context(cxt);
    RecordOperation("unmount", st);
    return st;
  }

  StatusOr<std::vector<MountEntry>> List() override {
    Span span("mountinfo");
    BLOCKCSI_ASSIGN_OR_RETURN(std::string text, ReadFileToString("/proc/self/mountinfo"));
    return ParseMountInfo(text);
  }

 private:
  static Status RunContext(const std::string& source, const std::string& target, const std::string& fs_type,
                           const std::string& options, unsigned long flags, const std::string& what) {
    libmnt_context* cxt = mnt_new_context();
    if (cxt == nullptr) return ResourceExhausted("libmount context for " + what);
    mnt_context_disable_mtab(cxt, 1);
    // No helpers (/sbin/mount.*): we want the syscall, with libmount's error text.
    mnt_context_disable_helpers(cxt, 1);
    mnt_context_set_source(cxt, source.c_str());
    mnt_context_set_target(cxt, target.c_str());
    if (!fs_type.empty()) mnt_context_set_fstype(cxt, fs_type.c_str());
    if (!options.empty()) mnt_context_set_options(cxt, options.c_str());
    if (flags != 0) mnt_context_set_mflags(cxt, flags);
    int rc = mnt_context_mount(cxt);
    Status st = ResultOf(cxt, rc, what);
    mnt_free_context(cxt);
    return st;
  }

  static Status ResultOf(libmnt_context* cxt, int rc, const std::string& what) {
    if (rc == 0 && mnt_context_get_status(cxt) == 1) return OkStatus();
    int syscall_errno = mnt_context_syscall_called(cxt) ? mnt_context_get_syscall_errno(cxt) : 0;
    char buf[BUFSIZ] = {0};
    mnt_context_get_excode(cxt, rc, buf, sizeof buf);
    if (syscall_errno != 0) {
      Status st = ErrnoToStatus(syscall_errno, what);
      return buf[0] != 0 ? Status(st.code(), what + ": " + buf) : st;
    }
    if (rc < 0) return ErrnoToStatus(-rc, what);
    return Internal(what + ": " + (buf[0] != 0 ? std::string(buf) : "libmount error " + std::to_string(rc)));
  }
};

}  // namespace

std::unique_ptr<Mounter> MakeLibmountMounter() { return std::make_unique<LibmountMounter>(); }

}  // namespace blockcsi
