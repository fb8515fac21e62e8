#include "bridge/fuse_ring_request.h"

#include <gtest/gtest.h>
#include <linux/fuse.h>

#include <cstring>
#include <string>
#include <vector>

namespace blockcsi::fuse_ring {
namespace {

// One ring slot: prefix room, then the payload buffer.
struct Slot {
  explicit Slot(size_t capacity) : bytes(kPrefixRoom + capacity) {}
  char* payload() { return bytes.data() + kPrefixRoom; }
  std::vector<char> bytes;
};

ReqHeader Header(uint32_t opcode, uint64_t unique, const void* arg, size_t arg_size, uint32_t payload_sz) {
  ReqHeader h{};
  fuse_in_header in{};
  in.opcode = opcode;
  in.unique = unique;
  in.nodeid = 2;
  std::memcpy(h.in_out, &in, sizeof in);
  if (arg_size > 0) std::memcpy(h.op_in, arg, arg_size);
  h.ent.commit_id = unique;
  h.ent.payload_sz = payload_sz;
  return h;
}

TEST(FuseRingRequest, AWriteIsLaidOutContiguouslyBeforeItsPayload) {
  Slot slot(8192);
  fuse_write_in w{};
  w.offset = 4096;
  w.size = 4096;
  std::memset(slot.payload(), 0x5a, 4096);
  ReqHeader h = Header(FUSE_WRITE, 7, &w, sizeof w, 4096);
  RingRequest req;
  ASSERT_EQ(ParseRingRequest(h, slot.payload(), 8192, &req), RingParse::kOk);
  EXPECT_EQ(req.arg_size, sizeof(fuse_write_in));
  char* start = LayOutRequest(h, req, slot.payload());
  EXPECT_EQ(start + sizeof(fuse_in_header) + sizeof(fuse_write_in), slot.payload());
  fuse_in_header in;
  std::memcpy(&in, start, sizeof in);
  EXPECT_EQ(in.len, sizeof in + sizeof w + 4096);
  EXPECT_EQ(in.unique, 7u);
  fuse_write_in back;
  std::memcpy(&back, start + sizeof in, sizeof back);
  EXPECT_EQ(back.offset, 4096u);
}

TEST(FuseRingRequest, AWriteWhoseSizeDisagreesWithItsPayloadIsRefused) {
  Slot slot(8192);
  fuse_write_in w{};
  w.size = 8192;
  RingRequest req;
  EXPECT_EQ(ParseRingRequest(Header(FUSE_WRITE, 1, &w, sizeof w, 4096), slot.payload(), 8192, &req),
            RingParse::kMalformed);
}

TEST(FuseRingRequest, APayloadLargerThanTheBufferIsRefused) {
  Slot slot(4096);
  fuse_write_in w{};
  w.size = 8192;
  RingRequest req;
  EXPECT_EQ(ParseRingRequest(Header(FUSE_WRITE, 1, &w, sizeof w, 8192), slot.payload(), 4096, &req),
            RingParse::kMalformed);
}

TEST(FuseRingRequest, ALookupNeedsANulTerminatedName) {
  Slot slot(64);
  std::memcpy(slot.payload(), "lun\0", 4);
  RingRequest req;
  EXPECT_EQ(ParseRingRequest(Header(FUSE_LOOKUP, 1, nullptr, 0, 4), slot.payload(), 64, &req), RingParse::kOk);
  EXPECT_EQ(ParseRingRequest(Header(FUSE_LOOKUP, 1, nullptr, 0, 3), slot.payload(), 64, &req), RingParse::kMalformed);
  EXPECT_EQ(ParseRingRequest(Header(FUSE_LOOKUP, 1, nullptr, 0, 0), slot.payload(), 64, &req), RingParse::kMalformed);
}

TEST(FuseRingRequest, ARequestWithoutPayloadMustNotCarryOne) {
  Slot slot(64);
  fuse_read_in r{};
  r.size = 4096;
  RingRequest req;
  EXPECT_EQ(ParseRingRequest(Header(FUSE_READ, 1, &r, sizeof r, 0), slot.payload(), 64, &req), RingParse::kOk);
  EXPECT_EQ(ParseRingRequest(Header(FUSE_READ, 1, &r, sizeof r, 8), slot.payload(), 64, &req), RingParse::kMalformed);
}

TEST(FuseRingRequest, OpcodesTheBridgeDoesNotServeAreUnsupported) {
  Slot slot(64);
  RingRequest req;
  EXPECT_EQ(ParseRingRequest(Header(FUSE_SETATTR, 1, nullptr, 0, 0), slot.payload(), 64, &req),
            RingParse::kUnsupported);
  EXPECT_EQ(ParseRingRequest(Header(9999, 1, nullptr, 0, 0), slot.payload(), 64, &req), RingParse::kUnsupported);
}

TEST(FuseRingRequest, ExtensionsAreNeverExpected) {
  Slot slot(64);
  ReqHeader h = Header(FUSE_STATFS, 1, nullptr, 0, 0);
  fuse_in_header in;
  std::memcpy(&in, h.in_out, sizeof in);
  in.total_extlen = 2;
  std::memcpy(h.in_out, &in, sizeof in);
  RingRequest req;
  EXPECT_EQ(ParseRingRequest(h, slot.payload(), 64, &req), RingParse::kMalformed);
}

}  // namespace
}  // namespace blockcsi::fuse_ring
