#include "common/random.h"

#include <sys/random.h>

#include <cerrno>
#include <random>

namespace blockcsi {

uint64_t RandomU64() {
  uint64_t value = 0;
  for (;;) {
    // Up to 256 bytes come whole once the kernel's pool is ready; before
    // that (early boot) the call waits, and a signal may interrupt it.
    ssize_t n = ::getrandom(&value, sizeof value, 0);
    if (n == static_cast<ssize_t>(sizeof value)) return value;
    if (n < 0 && errno == EINTR) continue;
    break;
  }
  // No getrandom (a kernel before 3.17): the same CSPRNG through /dev/urandom.
  std::random_device device("/dev/urandom");
  return (static_cast<uint64_t>(device()) << 32) | device();
}

}  // namespace blockcsi
