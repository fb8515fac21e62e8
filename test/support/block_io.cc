#include "support/block_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace blockcsi::testing {
namespace {

constexpr size_t kDirectAlignment = 4096;  // covers 512- and 4096-byte sectors

// An aligned buffer for O_DIRECT, freed with its owner.
struct AlignedBuffer {
  explicit AlignedBuffer(size_t len) {
    if (::posix_memalign(&data, kDirectAlignment, len == 0 ? kDirectAlignment : len) != 0) data = nullptr;
  }
  ~AlignedBuffer() { std::free(data); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  void* data = nullptr;
};

struct Fd {
  explicit Fd(int fd) : fd(fd) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int fd;
};

}  // namespace

std::string Pattern(size_t len, char seed) {
  std::string out(len, '\0');
  for (size_t i = 0; i < len; ++i) out[i] = static_cast<char>(seed + (i * 7 + i / 512) % 61);
  return out;
}

int WriteDirect(const std::string& path, uint64_t offset, const std::string& data) {
  Fd fd(::open(path.c_str(), O_RDWR | O_DIRECT | O_CLOEXEC));
  if (fd.fd < 0) return errno;
  AlignedBuffer buf(data.size());
  if (buf.data == nullptr) return ENOMEM;
  std::memcpy(buf.data, data.data(), data.size());
  ssize_t n = ::pwrite(fd.fd, buf.data, data.size(), static_cast<off_t>(offset));
  if (n < 0) return errno;
  if (static_cast<size_t>(n) != data.size()) return EIO;
  if (::fsync(fd.fd) != 0) return errno;
  return 0;
}

std::string ReadDirect(const std::string& path, uint64_t offset, size_t len, std::string* error) {
  auto fail = [&](const std::string& why) {
    if (error != nullptr) *error = why + " " + path + ": " + std::strerror(errno);
    return std::string();
  };
  if (error != nullptr) error->clear();
  Fd fd(::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC));
  if (fd.fd < 0) return fail("open");
  AlignedBuffer buf(len);
  if (buf.data == nullptr) {
    errno = ENOMEM;
    return fail("buffer for");
  }
  size_t done = 0;
  while (done < len) {
    ssize_t n = ::pread(fd.fd, static_cast<char*>(buf.data) + done, len - done, static_cast<off_t>(offset + done));
    if (n < 0) return fail("read");
    if (n == 0) break;  // end of the device or file
    done += static_cast<size_t>(n);
  }
  return std::string(static_cast<char*>(buf.data), done);
}

int WriteFileSynced(const std::string& path, const std::string& data) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.fd < 0) return errno;
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd.fd, data.data() + done, data.size() - done);
    if (n < 0) return errno;
    if (n == 0) return EIO;
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd.fd) != 0) return errno;
  Fd dir(::open(std::filesystem::path(path).parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.fd < 0) return errno;
  return ::fsync(dir.fd) == 0 ? 0 : errno;
}

std::string ReadFileAt(const std::string& path, uint64_t offset, size_t len) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.fd < 0) return "";
  std::string out(len, '\0');
  ssize_t n = ::pread(fd.fd, out.data(), len, static_cast<off_t>(offset));
  out.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return out;
}

}  // namespace blockcsi::testing
