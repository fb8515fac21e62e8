#include "backend/volume_id.h"

#include <gtest/gtest.h>

#include <set>

namespace blockcsi {
namespace {

TEST(VolumeIdTest, AcceptsOnlyPrefixAndSixteenLowerHexDigits) {
  EXPECT_TRUE(IsVolumeId("vol-0123456789abcdef"));
  EXPECT_TRUE(IsSnapshotId("snap-0123456789abcdef"));
  for (const char* bad : {"", "vol-", "vol-0123456789abcde", "vol-0123456789abcdef0", "vol-0123456789ABCDEF",
                          "../../etc", "vol-../../../etc/pas", "snap-0123456789abcdef", "vol-0123456789abcde/",
                          "VOL-0123456789abcdef", "vol-0123456789abcdeg"}) {
    EXPECT_FALSE(IsVolumeId(bad)) << bad;
  }
  EXPECT_FALSE(IsSnapshotId("vol-0123456789abcdef"));
}

TEST(VolumeIdTest, ValidationNamesTheIdAndIsInvalidArgument) {
  Status st = ValidateVolumeId("../../etc");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("\"../../etc\""), std::string::npos) << st.message();
  EXPECT_TRUE(ValidateVolumeId("vol-00000000000000ff").ok());
}

TEST(VolumeIdTest, NewIdsAreValidAndDistinct) {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    std::string id = NewVolumeId();
    ASSERT_TRUE(IsVolumeId(id)) << id;
    seen.insert(id);
  }
  EXPECT_EQ(seen.size(), 1000u);
  EXPECT_TRUE(IsSnapshotId(NewSnapshotId()));
  EXPECT_EQ(IdHex("vol-0123456789abcdef"), "0123456789abcdef");
}

TEST(VolumeIdTest, QuoteIdBoundsLengthAndHidesControlCharacters) {
  EXPECT_EQ(QuoteId("a\nb"), "\"a?b\"");
  EXPECT_EQ(QuoteId(std::string(100, 'x')).size(), 64u + 2 + 3);
}

}  // namespace
}  // namespace blockcsi
