// Fuzz target for the bridge's check of a FUSE io_uring entry: the input's
// first 288 bytes are the entry's header as the kernel would write it (short
// inputs are zero-padded), the rest its payload buffer. Invariants: an
// accepted request fits the buffer and its prefix, its laid-out length adds
// up, a write carries exactly its size and a lookup a NUL-terminated name.
#include <linux/fuse.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bridge/fuse_ring_request.h"

#define FUZZ_CHECK(cond)       \
  do {                         \
    if (!(cond)) std::abort(); \
  } while (0)

#ifdef FUZZ_TARGET_FUSE_RING
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace blockcsi::fuse_ring;
  ReqHeader header{};
  size_t head = size < sizeof header ? size : sizeof header;
  std::memcpy(&header, data, head);
  size_t capacity = size - head;
  // The payload sits after its prefix room, as in a ring slot.
  std::vector<char> slot(kPrefixRoom + capacity + 1);
  char* payload = slot.data() + kPrefixRoom;
  if (capacity > 0) std::memcpy(payload, data + head, capacity);
  RingRequest req;
  RingParse parsed = ParseRingRequest(header, payload, capacity, &req);
  if (parsed != RingParse::kOk) return 0;
  FUZZ_CHECK(req.payload_size <= capacity);
  FUZZ_CHECK(req.arg_size <= sizeof header.op_in);
  FUZZ_CHECK(ArgSizeOf(req.in.opcode) == static_cast<long>(req.arg_size));
  if (req.in.opcode == FUSE_WRITE) {
    fuse_write_in w;
    std::memcpy(&w, header.op_in, sizeof w);
    FUZZ_CHECK(w.size == req.payload_size);
  } else if (req.in.opcode == FUSE_LOOKUP) {
    FUZZ_CHECK(req.payload_size > 0 && payload[req.payload_size - 1] == '\0');
  } else {
    FUZZ_CHECK(req.payload_size == 0);
  }
  char* start = LayOutRequest(header, req, payload);
  FUZZ_CHECK(start >= slot.data());
  fuse_in_header in;
  std::memcpy(&in, start, sizeof in);
  FUZZ_CHECK(in.len == sizeof in + req.arg_size + req.payload_size);
  FUZZ_CHECK(in.opcode == req.in.opcode && in.unique == req.in.unique);
  FUZZ_CHECK(std::memcmp(start + sizeof in, header.op_in, req.arg_size) == 0);
  return 0;
}
#endif
