// The logging boundary escapes what it prints (issue #21: NUL bytes of a
// volume name reached the log raw) and bounds each value.
#include "common/logging.h"

#include <gtest/gtest.h>

#include <string>

namespace blockcsi {
namespace {

class LoggingTest : public ::testing::Test {
 protected:
  void SetUp() override { SetLogCaptureForTest(&captured_); }
  void TearDown() override {
    SetLogCaptureForTest(nullptr);
    InitLogging("blockcsi", LogFormat::kText, LogLevel::kInfo);
  }
  std::string captured_;
};

void ExpectOneCleanLine(const std::string& text) {
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.find('\n'), text.size() - 1) << "a value split the line";
  for (size_t i = 0; i + 1 < text.size(); ++i) {
    auto c = static_cast<unsigned char>(text[i]);
    EXPECT_TRUE(c >= 0x20 && c < 0x7f) << "raw byte " << int(c) << " at " << i;
  }
}

// A capture is what the secret checks read: it takes every level, so a
// secret logged at debug is seen, and gives the level back when it ends.
TEST(LogCaptureTest, CapturesAtDebugAndRestoresTheLevel) {
  InitLogging("blockcsi", LogFormat::kText, LogLevel::kWarn);
  std::string captured;
  SetLogCaptureForTest(&captured);
  EXPECT_TRUE(LogEnabled(LogLevel::kDebug));
  LogDebug("a debug line", {{"k", "v"}});
  SetLogCaptureForTest(nullptr);
  EXPECT_NE(captured.find("a debug line"), std::string::npos) << captured;
  EXPECT_FALSE(LogEnabled(LogLevel::kInfo)) << "the level before the capture came back";
  EXPECT_TRUE(LogEnabled(LogLevel::kWarn));
  InitLogging("blockcsi", LogFormat::kText, LogLevel::kInfo);
}

TEST_F(LoggingTest, ControlBytesAndNonAsciiAreEscapedInText) {
  InitLogging("blockcsi", LogFormat::kText, LogLevel::kInfo);
  std::string name = std::string("pvc") + '\0' + "x\r\n2026-01-01T00:00:00Z info forged\x1b[2J\x7f\xff";
  LogInfo("volume created", {{"name", name}, {"plain", "pvc-1"}});
  ExpectOneCleanLine(captured_);
  EXPECT_NE(captured_.find("\\u0000"), std::string::npos) << captured_;
  EXPECT_NE(captured_.find("plain=pvc-1"), std::string::npos) << "plain values stay unquoted: " << captured_;
}

TEST_F(LoggingTest, ControlBytesAreEscapedInJson) {
  InitLogging("blockcsi", LogFormat::kJson, LogLevel::kInfo);
  LogInfo("volume created", {{"name", std::string("a\nb") + '\0' + "\xff"}});
  ASSERT_FALSE(captured_.empty());
  EXPECT_EQ(captured_.find('\n'), captured_.size() - 1) << "a value split the line";
  for (size_t i = 0; i + 1 < captured_.size(); ++i) {
    EXPECT_GE(static_cast<unsigned char>(captured_[i]), 0x20) << "raw control byte at " << i;
  }
  EXPECT_NE(captured_.find("a\\nb\\u0000"), std::string::npos) << captured_;
}

TEST_F(LoggingTest, LongValuesAreBounded) {
  InitLogging("blockcsi", LogFormat::kText, LogLevel::kInfo);
  LogInfo("volume created", {{"name", std::string(100 * 1024, 'n')}});
  EXPECT_LT(captured_.size(), 5000u);
  EXPECT_NE(captured_.find("(102400 bytes)"), std::string::npos);
}

}  // namespace
}  // namespace blockcsi
