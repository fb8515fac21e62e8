// The pool's real ImageFiles on a temp dir: what the test one
// (support/recording_image_files.h) cannot show, because it is these calls.
#include "backend/local/image_files.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "common/atomic_file.h"
#include "support/test_util.h"

namespace blockcsi {
namespace {

using testing::TempDir;

TEST(ImageFilesTest, CopyRefusesToShrink) {
  TempDir dir;
  ASSERT_TRUE(WriteFileAtomically(dir.Join("src"), std::string(4096, 'x')).ok());
  EXPECT_EQ(MakeImageFiles()->Clone(dir.Join("src"), dir.Join("dst"), 1024, nullptr).code(), StatusCode::kOutOfRange);
  EXPECT_FALSE(std::filesystem::exists(dir.Join("dst")));
}

TEST(ImageFilesTest, CreateMakesASparseFileOrNothing) {
  TempDir dir;
  auto files = MakeImageFiles();
  ASSERT_TRUE(files->Create(dir.Join("a.img"), 64 << 20).ok());
  EXPECT_EQ(*files->Size(dir.Join("a.img")), uint64_t{64} << 20);
  // A size no file can have: refused, and no empty file left behind.
  EXPECT_FALSE(files->Create(dir.Join("b.img"), uint64_t{1} << 63).ok());
  EXPECT_FALSE(std::filesystem::exists(dir.Join("b.img")));
  EXPECT_EQ(files->Size(dir.Join("b.img")).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(files->Remove(dir.Join("b.img")).ok()) << "a missing file is removed already";
}

TEST(ImageFilesTest, TheLockIsExclusiveUntilReleased) {
  TempDir dir;
  auto files = MakeImageFiles();
  auto held = files->Lock(dir.Join(".lock"));
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  EXPECT_EQ(files->Lock(dir.Join(".lock")).status().code(), StatusCode::kFailedPrecondition);
  held->reset();
  EXPECT_TRUE(files->Lock(dir.Join(".lock")).ok());
}

}  // namespace
}  // namespace blockcsi
