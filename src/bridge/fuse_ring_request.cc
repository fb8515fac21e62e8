#include "bridge/fuse_ring_request.h"

#include <cstring>

namespace blockcsi::fuse_ring {

long ArgSizeOf(uint32_t opcode) {
  switch (opcode) {
    case FUSE_LOOKUP:  // the name travels in the payload
    case FUSE_STATFS:
    case FUSE_DESTROY:
      return 0;
    case FUSE_GETATTR:
      return sizeof(fuse_getattr_in);
    case FUSE_OPEN:
    case FUSE_OPENDIR:
      return sizeof(fuse_open_in);
    case FUSE_READ:
    case FUSE_READDIR:
      return sizeof(fuse_read_in);
    case FUSE_WRITE:
      return sizeof(fuse_write_in);
    case FUSE_RELEASE:
    case FUSE_RELEASEDIR:
      return sizeof(fuse_release_in);
    case FUSE_FSYNC:
    case FUSE_FSYNCDIR:
      return sizeof(fuse_fsync_in);
    case FUSE_FLUSH:
      return sizeof(fuse_flush_in);
    case FUSE_FALLOCATE:
      return sizeof(fuse_fallocate_in);
    case FUSE_ACCESS:
      return sizeof(fuse_access_in);
    default:
      return -1;
  }
}

RingParse ParseRingRequest(const ReqHeader& header, const char* payload, size_t capacity, RingRequest* out) {
  std::memcpy(&out->in, header.in_out, sizeof out->in);
  out->payload_size = header.ent.payload_sz;
  long arg = ArgSizeOf(out->in.opcode);
  if (arg < 0) return RingParse::kUnsupported;
  out->arg_size = static_cast<size_t>(arg);
  // Extensions (security contexts, groups) are only sent when asked for.
  if (out->payload_size > capacity || out->in.total_extlen != 0) return RingParse::kMalformed;
  switch (out->in.opcode) {
    case FUSE_WRITE: {
      fuse_write_in w;
      std::memcpy(&w, header.op_in, sizeof w);
      return w.size == out->payload_size ? RingParse::kOk : RingParse::kMalformed;
    }
    case FUSE_LOOKUP:
      return out->payload_size > 0 && payload[out->payload_size - 1] == '\0' ? RingParse::kOk : RingParse::kMalformed;
    default:
      return out->payload_size == 0 ? RingParse::kOk : RingParse::kMalformed;
  }
}

char* LayOutRequest(const ReqHeader& header, const RingRequest& request, char* payload) {
  static_assert(sizeof(fuse_in_header) + sizeof(fuse_write_in) <= kPrefixRoom);
  char* start = payload - sizeof(fuse_in_header) - request.arg_size;
  fuse_in_header in = request.in;
  in.len = static_cast<uint32_t>(sizeof in + request.arg_size + request.payload_size);
  std::memcpy(start, &in, sizeof in);
  std::memcpy(start + sizeof in, header.op_in, request.arg_size);
  return start;
}

}  // namespace blockcsi::fuse_ring
