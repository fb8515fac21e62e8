#include "common/duration.h"

#include <gtest/gtest.h>

namespace blockcsi {
namespace {

using namespace std::chrono_literals;

TEST(DurationTest, ParsesOurUnits) {
  EXPECT_EQ(*ParseDuration("500ms"), 500ms);
  EXPECT_EQ(*ParseDuration("2s"), 2000ms);
  EXPECT_EQ(*ParseDuration("1m"), 60000ms);
  EXPECT_EQ(*ParseDuration("1h"), 3600000ms);
  EXPECT_EQ(*ParseDuration("0s"), 0ms);
}

TEST(DurationTest, RejectsWithoutUnitOrGarbage) {
  for (const char* bad : {"", "30", "s", "1.5s", "-1s", "10 s", "5d", "1sm", "99999999999999999999s"}) {
    auto r = ParseDuration(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    }
  }
}

TEST(DurationTest, FormatsRoundTrip) {
  for (auto d : {500ms, 2000ms, 60000ms, 3600000ms, 1500ms}) {
    EXPECT_EQ(*ParseDuration(FormatDuration(d)), d);
  }
}

}  // namespace
}  // namespace blockcsi
