// What the bridge reads from a LUN about UNMAP, and how it covers a
// punched hole with UNMAP commands and zero writes. The pages are laid out
// as tgtd 1.0.85 returns them for a thin LUN (iscsi-inq -e 1 -c 176/178:
// unlimited unmap counts, granularity 0; LBPU, LBPWS, LBPWS10, LBPRZ).
#include "bridge/discard_plan.h"

#include <gtest/gtest.h>

#include <string>

namespace blockcsi {
namespace {

void Put32(std::string& p, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[at + i] = static_cast<char>(v >> (24 - 8 * i));
}

std::string BlockLimits(uint32_t max_unmap, uint32_t granularity, uint32_t alignment_field) {
  std::string p(64, '\0');
  p[1] = static_cast<char>(0xB0);
  p[3] = 0x3C;
  Put32(p, 20, max_unmap);
  Put32(p, 24, 0xFFFFFFFF);  // block descriptors
  Put32(p, 28, granularity);
  Put32(p, 32, alignment_field);
  return p;
}

std::string Provisioning(unsigned char byte5) {
  std::string p(8, '\0');
  p[1] = static_cast<char>(0xB2);
  p[3] = 4;
  p[5] = static_cast<char>(byte5);
  return p;
}

const std::string kTgtB0 = BlockLimits(0xFFFFFFFF, 0, 0);
const std::string kTgtB2 = Provisioning(0xE4);  // LBPU LBPWS LBPWS10 LBPRZ

TEST(UnmapSupportTest, ThinTgtLunUnmaps) {
  UnmapSupport s = ParseUnmapSupport(true, true, kTgtB0, kTgtB2);
  EXPECT_TRUE(s.enabled);
  EXPECT_EQ(s.max_blocks, 0xFFFFFFFFu);
  EXPECT_EQ(s.granularity, 1u);
  EXPECT_EQ(s.alignment, 0u);
}

TEST(UnmapSupportTest, AnythingMissingMeansNoUnmap) {
  EXPECT_FALSE(ParseUnmapSupport(false, true, kTgtB0, kTgtB2).enabled) << "not thin (tgtd's default)";
  EXPECT_FALSE(ParseUnmapSupport(true, false, kTgtB0, kTgtB2).enabled) << "unmapped blocks need not read as zeros";
  EXPECT_FALSE(ParseUnmapSupport(true, true, kTgtB0, Provisioning(0x64)).enabled) << "no LBPU";
  EXPECT_FALSE(ParseUnmapSupport(true, true, kTgtB0, "").enabled) << "no B2 page";
  EXPECT_FALSE(ParseUnmapSupport(true, true, "", kTgtB2).enabled) << "no B0 page";
  EXPECT_FALSE(ParseUnmapSupport(true, true, kTgtB0.substr(0, 30), kTgtB2).enabled) << "short B0 page";
  EXPECT_FALSE(ParseUnmapSupport(true, true, kTgtB2, kTgtB0).enabled) << "pages swapped";
  EXPECT_FALSE(ParseUnmapSupport(true, true, BlockLimits(0, 0, 0), kTgtB2).enabled) << "max unmap count 0";
}

TEST(UnmapSupportTest, GranularityAndAlignmentOnlyWhenValid) {
  UnmapSupport s = ParseUnmapSupport(true, true, BlockLimits(1024, 8, 0x80000003), kTgtB2);
  EXPECT_EQ(s.granularity, 8u);
  EXPECT_EQ(s.alignment, 3u);
  EXPECT_EQ(ParseUnmapSupport(true, true, BlockLimits(1024, 8, 3), kTgtB2).alignment, 0u) << "UGAVALID clear";
}

TEST(PlanPunchHoleTest, UnlimitedTargetTakesOneUnmap) {
  UnmapSupport s = ParseUnmapSupport(true, true, kTgtB0, kTgtB2);
  auto plan = PlanPunchHole(s, 7, 524288);
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0], (DiscardExtent{7, 524288, true}));
  EXPECT_TRUE(PlanPunchHole(s, 7, 0).empty());
}

TEST(PlanPunchHoleTest, SplitsAtTheTargetsLimitInWholeGranules) {
  UnmapSupport s;
  s.enabled = true;
  s.max_blocks = 20;
  s.granularity = 8;
  // Blocks 0..39: granules of 8, at most 16 blocks (two whole granules) a command.
  auto plan = PlanPunchHole(s, 0, 40);
  std::vector<DiscardExtent> want = {{0, 16, true}, {16, 16, true}, {32, 8, true}};
  EXPECT_EQ(plan, want);
}

TEST(PlanPunchHoleTest, PartialGranulesAtTheEndsAreWrittenAsZeros) {
  UnmapSupport s;
  s.enabled = true;
  s.max_blocks = 0xFFFFFFFF;
  s.granularity = 8;
  s.alignment = 2;  // granules start at 2, 10, 18, ...
  std::vector<DiscardExtent> want = {{5, 5, false}, {10, 16, true}, {26, 3, false}};
  EXPECT_EQ(PlanPunchHole(s, 5, 24), want);
  // No whole granule inside: all zeros.
  std::vector<DiscardExtent> small = {{3, 6, false}};
  EXPECT_EQ(PlanPunchHole(s, 3, 6), small);
  // Before the first aligned granule start.
  std::vector<DiscardExtent> head = {{0, 1, false}};
  EXPECT_EQ(PlanPunchHole(s, 0, 1), head);
}

}  // namespace
}  // namespace blockcsi
