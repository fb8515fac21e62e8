// The shared leak checker on a real machine: the loop devices `losetup -l`
// and a path match miss, which a failed stage leaves (root, loop); and a
// tgtd it cannot read, which it reports instead of seeing nothing (root, tgt).
#include <sys/mount.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "common/executor.h"
#include "support/leak_check.h"
#include "support/test_util.h"
#include "support/tgtd_harness.h"

namespace blockcsi::testing {
namespace {

class LoopLeakTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!IsRoot()) GTEST_SKIP() << "requires root (tmpfs mount, loop devices)";
    if (!std::filesystem::exists("/dev/loop-control")) GTEST_SKIP() << "requires loop devices (/dev/loop-control)";
    mnt_ = dir_.Join("fuse");
    std::filesystem::create_directories(mnt_);
    ASSERT_EQ(::mount("tmpfs", mnt_.c_str(), "tmpfs", 0, "size=16m"), 0);
    mounted_ = true;
    std::ofstream(mnt_ + "/lun").close();
    std::filesystem::resize_file(mnt_ + "/lun", 8 << 20);
  }
  void TearDown() override {
    for (const auto& loop : loops_) (void)exec_->Run(Command("losetup").Arg("-d").Arg(loop));
    if (mounted_) ::umount2(mnt_.c_str(), MNT_DETACH);
  }
  std::string Losetup(const std::vector<std::string>& args) {
    auto r = RunChecked(*exec_, Command("losetup").Arg("-f").Arg("--show").Args(args));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return "";
    std::string dev = r->stdout_text.substr(0, r->stdout_text.find('\n'));
    if (!dev.empty()) loops_.insert(loops_.begin(), dev);  // stacked ones first
    return dev;
  }
  bool Found(const std::string& device) {
    auto loops = LoopDevicesBackedUnder(dir_.path());
    return std::any_of(loops.begin(), loops.end(), [&](const auto& l) { return l.first == device; });
  }

  std::unique_ptr<Executor> exec_ = MakeProcessExecutor();
  TempDir dir_;
  std::string mnt_;
  bool mounted_ = false;
  std::vector<std::string> loops_;
};

// The bridge's shape: a loop on a file in a mount (FUSE there, tmpfs here),
// a read-only loop stacked on it; then the mount lazily unmounted, as a
// failed cleanup does. Every one of them is still found.
TEST_F(LoopLeakTest, FindsStackedLoopsAndLoopsWhoseMountWasLazilyUnmounted) {
  std::string base = Losetup({mnt_ + "/lun"});
  ASSERT_FALSE(base.empty());
  std::string layer = Losetup({"--read-only", base});
  ASSERT_FALSE(layer.empty());
  EXPECT_TRUE(Found(base)) << "a loop on a file under the directory";
  EXPECT_TRUE(Found(layer)) << "a loop stacked on one of ours";
  ASSERT_EQ(::umount2(mnt_.c_str(), MNT_DETACH), 0);
  mounted_ = false;
  EXPECT_TRUE(Found(base)) << "a loop whose file's mount was lazily unmounted";
  EXPECT_TRUE(Found(layer)) << "stacked on a loop whose file's mount was lazily unmounted";
  // The snapshot view names them too, so a diff sees them appear. (Only
  // these two are looked for: an orphan of anybody's is counted as well.)
  LeakScope scope;
  scope.dir = dir_.path();
  auto items = TakeLeakSnapshot(scope).items;
  EXPECT_TRUE(items.contains("loop " + base + " <- /lun")) << DescribeItems({items.begin(), items.end()});
  EXPECT_TRUE(items.contains("loop " + layer + " <- " + base)) << DescribeItems({items.begin(), items.end()});
}

// A tgtd that does not answer tgtadm lists nothing; read as "nothing
// left", every check of a test whose tgtd died would pass. The checker
// fails closed: the diff names the tgtd it could not read, also when the
// snapshot before could not read it either.
TEST(TgtdLeakTest, ATgtdThatDoesNotAnswerIsReportedNotReadAsEmpty) {
  std::string error;
  auto tgtd = TgtdHarness::Start(&error);
  BLOCKCSI_REQUIRE_TGTD(tgtd, error);
  LeakScope scope;
  scope.tgtd = tgtd.get();
  const LeakSnapshot answering = TakeLeakSnapshot(scope);
  EXPECT_TRUE(answering.unreadable.empty())
      << DescribeItems({answering.unreadable.begin(), answering.unreadable.end()});
  tgtd->Kill9();
  const LeakSnapshot dead = TakeLeakSnapshot(scope);
  const auto left = NewItems(answering, dead);
  ASSERT_EQ(left.size(), 1u) << DescribeItems(left);
  EXPECT_TRUE(left[0].starts_with("unreadable tgtd (control port " + std::to_string(tgtd->control_port()) + ")"))
      << left[0];
  EXPECT_EQ(NewItems(dead, TakeLeakSnapshot(scope)), left) << "a blind baseline hides a blind snapshot";
  ASSERT_TRUE(tgtd->Restart(&error)) << error;
  EXPECT_TRUE(NewItems(answering, TakeLeakSnapshot(scope)).empty());
}

}  // namespace
}  // namespace blockcsi::testing
