// WriteOrder: a flush waits for exactly the writes submitted before it, in
// whatever order they complete, and never for a later one.
#include "bridge/write_order.h"

#include <gtest/gtest.h>

namespace blockcsi {
namespace {

TEST(WriteOrderTest, WithNothingOutstandingTheActionRunsAtOnce) {
  WriteOrder order;
  bool ran = false;
  order.AfterPriorWrites([&] { ran = true; });
  EXPECT_TRUE(ran);
  order.End(order.Begin());
  ran = false;
  order.AfterPriorWrites([&] { ran = true; });
  EXPECT_TRUE(ran);
}

TEST(WriteOrderTest, WaitsForEveryEarlierWriteWhateverOrderTheyComplete) {
  WriteOrder order;
  uint64_t a = order.Begin();
  uint64_t b = order.Begin();
  uint64_t c = order.Begin();
  int ran = 0;
  order.AfterPriorWrites([&] { ++ran; });
  order.End(c);
  EXPECT_EQ(ran, 0);
  order.End(a);
  EXPECT_EQ(ran, 0);
  order.End(b);
  EXPECT_EQ(ran, 1);
  EXPECT_EQ(order.outstanding(), 0u);
}

TEST(WriteOrderTest, ALaterWriteDoesNotHoldAnEarlierFlush) {
  WriteOrder order;
  uint64_t before = order.Begin();
  int first = 0, second = 0;
  order.AfterPriorWrites([&] { ++first; });
  uint64_t after = order.Begin();
  order.AfterPriorWrites([&] { ++second; });
  order.End(before);
  EXPECT_EQ(first, 1);
  EXPECT_EQ(second, 0);  // `after` is still out and came before the second flush
  order.End(after);
  EXPECT_EQ(first, 1);
  EXPECT_EQ(second, 1);
}

}  // namespace
}  // namespace blockcsi
