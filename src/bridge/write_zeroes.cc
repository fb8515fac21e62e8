#include "bridge/write_zeroes.h"

#include <algorithm>
#include <cstdlib>
#include <memory>

#include "bridge/split_done.h"

namespace blockcsi {
namespace {

constexpr uint64_t kChunk = uint64_t{1024} * 1024;

// One zeroed buffer for every zero write of the process, never written to:
// calloc of this size maps fresh pages, so it costs no resident memory
// until read, and then only the kernel's shared zero page.
const char* Zeros() {
  static const char* zeros = static_cast<const char*>(std::calloc(1, kChunk));
  return zeros;
}

}  // namespace

void WriteZeroesAsync(BridgeTransport& transport, uint64_t offset, uint64_t length, BridgeTransport::Done done) {
  const char* zeros = Zeros();
  if (zeros == nullptr) {
    done(ResourceExhausted("no memory for a buffer of zeros"));
    return;
  }
  if (length == 0) {
    done(OkStatus());
    return;
  }
  auto split = std::make_shared<SplitDone>((length + kChunk - 1) / kChunk, std::move(done));
  for (uint64_t at = 0; at < length; at += kChunk) {
    transport.WriteAsync(offset + at, static_cast<size_t>(std::min(kChunk, length - at)), zeros,
                         SplitDone::Part(split));
  }
}

}  // namespace blockcsi
