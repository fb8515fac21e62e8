// The string helpers every layer shares (common/strings.h).
#include "common/strings.h"

#include <gtest/gtest.h>

namespace blockcsi {
namespace {

TEST(StringsTest, TrimWhitespaceDropsEveryKindOfSpaceAtBothEndsOnly) {
  EXPECT_EQ(TrimWhitespace(" \t a b \r\n"), "a b");
  EXPECT_EQ(TrimWhitespace(" \t\r\n"), "");
  EXPECT_EQ(TrimWhitespace(""), "");
  EXPECT_EQ(TrimWhitespace("x"), "x");
}

TEST(StringsTest, SplitStringKeepsEmptyItemsSoThatCallersCanReportThem) {
  EXPECT_EQ(SplitString("a,,b", ','), (std::vector<std::string>{"a", "", "b"}));
  EXPECT_EQ(SplitString("", ','), (std::vector<std::string>{""}));
  EXPECT_EQ(SplitString("a\n", '\n'), (std::vector<std::string>{"a", ""}));
  EXPECT_EQ(SplitString(std::string_view("a\0b", 3), '\0'), (std::vector<std::string>{"a", "b"}));
}

TEST(StringsTest, JoinStringsIsSplitsInverse) {
  EXPECT_EQ(JoinStrings({}, ", "), "");
  EXPECT_EQ(JoinStrings({"a"}, ", "), "a");
  EXPECT_EQ(JoinStrings({"a", "", "b"}, ","), "a,,b");
  EXPECT_EQ(JoinStrings(SplitString("x:y:z", ':'), ":"), "x:y:z");
}

TEST(StringsTest, LowerAndCaseBlindPrefix) {
  EXPECT_EQ(AsciiLower("MkFs.EXT4 \xC3\x84"), "mkfs.ext4 \xC3\x84");
  EXPECT_TRUE(StartsWithNoCase("Error: x", "error:"));
  EXPECT_FALSE(StartsWithNoCase("Err", "error"));
  EXPECT_TRUE(StartsWithNoCase("anything", ""));
}

TEST(StringsTest, HexEncodeIsTwoLowerDigitsPerByte) {
  EXPECT_EQ(HexEncode(std::string_view("\x00\x0f\xa0\xff", 4)), "000fa0ff");
  EXPECT_EQ(HexEncode(""), "");
}

}  // namespace
}  // namespace blockcsi
