// BufferPool: large buffers come back for reuse up to the number it keeps,
// small ones never stay, and Trim leaves nothing kept.
#include "bridge/buffer_pool.h"

#include <gtest/gtest.h>

#include <cstring>

namespace blockcsi {
namespace {

constexpr size_t kLargest = size_t{1024} * 1024;

TEST(BufferPoolTest, ALargeBufferIsReusedAndHoldsTheLargestRequest) {
  BufferPool pool(kLargest, 2);
  char* a = pool.Take(512 * 1024);
  ASSERT_NE(a, nullptr);
  std::memset(a, 1, kLargest);  // any large buffer has room for the largest request
  pool.Give(a, 512 * 1024);
  EXPECT_EQ(pool.kept(), 1u);
  EXPECT_EQ(pool.Take(kLargest), a);
  EXPECT_EQ(pool.kept(), 0u);
  pool.Give(a, kLargest);
}

TEST(BufferPoolTest, KeepsNoMoreThanAskedAndNoSmallOnes) {
  BufferPool pool(kLargest, 2);
  char* large[3] = {pool.Take(kLargest), pool.Take(kLargest), pool.Take(kLargest)};
  char* small = pool.Take(4096);
  ASSERT_NE(small, nullptr);
  for (char* p : large) pool.Give(p, kLargest);
  pool.Give(small, 4096);
  EXPECT_EQ(pool.kept(), 2u);
  pool.Trim();
  EXPECT_EQ(pool.kept(), 0u);
}

TEST(BufferPoolTest, KeepingNoneFreesEveryBuffer) {
  BufferPool pool(kLargest, 0);
  pool.Give(pool.Take(kLargest), kLargest);
  EXPECT_EQ(pool.kept(), 0u);
  pool.set_keep(1);
  pool.Give(pool.Take(kLargest), kLargest);
  EXPECT_EQ(pool.kept(), 1u);
}

}  // namespace
}  // namespace blockcsi
