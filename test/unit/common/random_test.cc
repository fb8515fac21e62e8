// RandomU64 (common/random.h): the randomness behind volume ids and temp names.
#include "common/random.h"

#include <gtest/gtest.h>

#include <set>

namespace blockcsi {
namespace {

// Ids take all 64 bits (backend/volume_id.cc prints them as 16 hex digits):
// a source that filled only 32 of them, or repeated itself, would make ids
// guessable and collisions likely.
TEST(RandomTest, ValuesDifferAndFillAllSixtyFourBits) {
  std::set<uint64_t> seen;
  uint64_t high_bits = 0, low_bits = 0;
  for (int i = 0; i < 256; ++i) {
    const uint64_t value = RandomU64();
    seen.insert(value);
    high_bits |= value >> 32;
    low_bits |= value & 0xffffffffu;
  }
  EXPECT_EQ(seen.size(), 256u);
  EXPECT_EQ(high_bits, 0xffffffffu) << "some of the upper 32 bits never set";
  EXPECT_EQ(low_bits, 0xffffffffu) << "some of the lower 32 bits never set";
}

}  // namespace
}  // namespace blockcsi
