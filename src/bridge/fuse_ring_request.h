// FUSE over io_uring: the part of the kernel's ABI (FUSE 7.42, Linux 6.14)
// that Debian's headers (7.38) lack, and the pure check of what the kernel
// wrote into one ring entry before libfuse's handlers see it. Pure functions;
// thread-compatible.
#pragma once

#include <linux/fuse.h>

#include <cstddef>
#include <cstdint>

namespace blockcsi::fuse_ring {

// The INIT flag (in flags2, so with FUSE_INIT_EXT) by which the kernel offers
// the ring (only while fuse's enable_uring parameter is on) and the server
// accepts it.
inline constexpr uint64_t kFuseOverIoUring = uint64_t{1} << 41;
// IORING_OP_URING_CMD commands on /dev/fuse (the SQE's cmd_op).
inline constexpr uint32_t kCmdRegister = 1;        // hand an entry to the kernel
inline constexpr uint32_t kCmdCommitAndFetch = 2;  // answer its request, wait for the next

// The entry's trailer: the kernel fills it with a request, the server with
// its answer's payload size.
struct EntInOut {
  uint64_t flags;
  uint64_t commit_id;  // echoed in CmdReq to say which request is answered
  uint32_t payload_sz;
  uint32_t padding;
  uint64_t reserved;
};

// iov[0] of a registered entry; the payload buffer is iov[1].
struct ReqHeader {
  char in_out[128];  // fuse_in_header of the request, fuse_out_header of the answer
  char op_in[128];   // the opcode's fixed argument (fuse_write_in, ...)
  EntInOut ent;
};

// In the 80-byte command area of a 128-byte SQE.
struct CmdReq {
  uint64_t flags;
  uint64_t commit_id;
  uint16_t qid;  // the queue: one per possible CPU
  uint8_t padding[6];
};

static_assert(sizeof(EntInOut) == 32 && sizeof(ReqHeader) == 288 && sizeof(CmdReq) == 24,
              "FUSE io_uring ABI sizes changed");

// Room kept in front of each payload buffer, so that a request is laid out
// contiguously (header, argument, payload) for libfuse without copying the
// payload.
inline constexpr size_t kPrefixRoom = 256;

enum class RingParse {
  kOk,
  kUnsupported,  // an opcode the bridge does not serve: answered ENOSYS
  kMalformed,    // sizes that do not add up: answered EIO, never guessed at
};

struct RingRequest {
  fuse_in_header in{};
  size_t arg_size = 0;      // bytes of the opcode's argument (from op_in)
  size_t payload_size = 0;  // bytes in the payload buffer
};

// The fixed argument's size for the opcodes the bridge serves, -1 for others.
long ArgSizeOf(uint32_t opcode);

// Checks one entry as the kernel filled it: a served opcode, a payload that
// fits `capacity` and matches the argument (a write's size, a lookup's
// NUL-terminated name, nothing for the rest).
RingParse ParseRingRequest(const ReqHeader& header, const char* payload, size_t capacity, RingRequest* out);

// Writes header and argument into the kPrefixRoom bytes before `payload`
// and returns where the contiguous request starts; its length is
// sizeof(fuse_in_header) + arg_size + payload_size.
char* LayOutRequest(const ReqHeader& header, const RingRequest& request, char* payload);

}  // namespace blockcsi::fuse_ring
