// How the iSCSI transport deallocates a byte range (fallocate PUNCH_HOLE,
// which is what the loop device turns discard and write-zeroes into): what
// the LUN promises about UNMAP, read from READ CAPACITY(16) and the Block
// Limits (B0h) and Logical Block Provisioning (B2h) VPD pages, and the
// UNMAP commands and zero writes that cover a range within those limits.
// Pure functions on values; thread-safe.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <vector>

namespace blockcsi {

struct UnmapSupport {
  // The target deallocates with UNMAP and unmapped blocks read back as
  // zeros: LBPME (thin), LBPU (UNMAP implemented) and LBPRZ all set. Without
  // LBPRZ a punched hole could read back as old data, which the loop
  // device's write-zeroes (also a punch hole) must never do.
  bool enabled = false;
  // Blocks one UNMAP may name (Maximum Unmap LBA Count; 0xFFFFFFFF: no limit).
  uint32_t max_blocks = 0;
  // Optimal Unmap Granularity and its alignment, in blocks (at least 1):
  // a target may leave a partial granule mapped, with its old data.
  uint32_t granularity = 1;
  uint32_t alignment = 0;
};

namespace discard_internal {

inline uint32_t Be32(std::string_view p, size_t at) {
  auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(p[at + i])); };
  return b(0) << 24 | b(1) << 16 | b(2) << 8 | b(3);
}

}  // namespace discard_internal

// `lbpme`/`lbprz`: READ CAPACITY(16) byte 14 bits 7/6. `b0`/`b2`: the raw
// pages (header included) or empty when the target did not return them;
// a page too short to hold the fields, or on another page code, counts as
// absent. Anything missing means no UNMAP: guessing would turn a discard
// into an error (or worse, a silent no-op) at the first fstrim.
inline UnmapSupport ParseUnmapSupport(bool lbpme, bool lbprz, std::string_view b0, std::string_view b2) {
  using discard_internal::Be32;
  UnmapSupport s;
  if (!lbpme || !lbprz) return s;
  // B2h: byte 5 bit 7 is LBPU.
  if (b2.size() < 6 || static_cast<unsigned char>(b2[1]) != 0xB2) return s;
  if ((static_cast<unsigned char>(b2[5]) & 0x80) == 0) return s;
  // B0h (page length 3Ch): bytes 20..23 Maximum Unmap LBA Count, 28..31
  // Optimal Unmap Granularity, 32..35 UGAVALID (bit 31) and the alignment.
  if (b0.size() < 36 || static_cast<unsigned char>(b0[1]) != 0xB0) return s;
  s.max_blocks = Be32(b0, 20);
  if (s.max_blocks == 0) return s;  // the target does not implement UNMAP
  s.granularity = std::max<uint32_t>(1, Be32(b0, 28));
  uint32_t align = Be32(b0, 32);
  s.alignment = (align & 0x80000000u) != 0 ? (align & 0x7FFFFFFFu) % s.granularity : 0;
  s.enabled = true;
  return s;
}

// One piece of a punched hole, in blocks: UNMAP it, or write zeros to it.
struct DiscardExtent {
  uint64_t lba = 0;
  uint64_t blocks = 0;
  bool unmap = false;
  bool operator==(const DiscardExtent&) const = default;
};

// The blocks [lba, lba + blocks) as UNMAP commands over the whole granules
// (each within max_blocks) and zero writes for the partial granules at
// either end, which the target may leave holding old data. Empty for an
// empty range; only zero writes when no whole granule fits.
inline std::vector<DiscardExtent> PlanPunchHole(const UnmapSupport& s, uint64_t lba, uint64_t blocks) {
  std::vector<DiscardExtent> out;
  if (blocks == 0) return out;
  const uint64_t g = std::max<uint32_t>(1, s.granularity);
  const uint64_t end = lba + blocks;
  auto up = [&](uint64_t x) { return x < s.alignment ? s.alignment : (x - s.alignment + g - 1) / g * g + s.alignment; };
  auto down = [&](uint64_t x) { return x < s.alignment ? 0 : (x - s.alignment) / g * g + s.alignment; };
  uint64_t first = up(lba), last = down(end);
  if (first >= last || last > end) {
    out.push_back({lba, blocks, false});
    return out;
  }
  if (first > lba) out.push_back({lba, first - lba, false});
  const uint64_t per = std::max<uint64_t>(g, uint64_t{s.max_blocks} / g * g);
  for (uint64_t at = first; at < last; at += per) out.push_back({at, std::min(per, last - at), true});
  if (last < end) out.push_back({last, end - last, false});
  return out;
}

}  // namespace blockcsi
