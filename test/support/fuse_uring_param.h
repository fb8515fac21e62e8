// The fuse module's enable_uring parameter, set for a test's or a
// benchmark's run and put back as it was when this object goes. It decides
// at a FUSE mount's INIT whether the kernel offers io_uring, so it picks the
// data path of each bridge started while it is set (bridges already running
// keep theirs). Not thread-safe; one at a time.
#pragma once

#include <fstream>
#include <string>

namespace blockcsi::testing {

class FuseUringParameter {
 public:
  static constexpr char kPath[] = "/sys/module/fuse/parameters/enable_uring";

  // False when the kernel has no such parameter (no CONFIG_FUSE_IO_URING)
  // or it cannot be written (not root).
  bool Set(bool on) {
    if (!saved_) {
      std::ifstream in(kPath);
      if (!std::getline(in, old_)) return false;
      saved_ = true;
    }
    return Write(on ? "Y" : "N");
  }
  ~FuseUringParameter() {
    if (saved_) Write(old_);
  }
  FuseUringParameter() = default;
  FuseUringParameter(const FuseUringParameter&) = delete;
  FuseUringParameter& operator=(const FuseUringParameter&) = delete;

 private:
  static bool Write(const std::string& value) {
    std::ofstream out(kPath);
    out << value << "\n";
    out.flush();
    return static_cast<bool>(out);
  }
  bool saved_ = false;
  std::string old_;
};

}  // namespace blockcsi::testing
