// BlockProbe against real images in regular files (libblkid probes files as
// it does devices): needs mkfs.ext4, mkfs.xfs and sfdisk, no root.
#include "common/block_probe.h"

#include <gtest/gtest.h>

#include "common/executor.h"
#include "support/test_util.h"

namespace blockcsi {
namespace {

class BlockProbeTest : public ::testing::Test {
 protected:
  std::string MakeImage(const std::string& name, size_t mib) {
    std::string path = dir_.Join(name);
    EXPECT_TRUE(exec_->Run(Command("truncate").Arg("-s").Arg(std::to_string(mib) + "M").Arg(path)).ok());
    return path;
  }
  void Run(Command cmd) {
    auto r = RunChecked(*exec_, cmd);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  testing::TempDir dir_;
  std::unique_ptr<Executor> exec_ = MakeProcessExecutor();
  std::unique_ptr<BlockProbe> probe_ = MakeBlkidProbe();
};

TEST_F(BlockProbeTest, BlankImageHasNoSignature) {
  std::string img = MakeImage("blank", 64);
  auto r = probe_->Probe(img);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->blank());
  EXPECT_EQ(r->size_bytes, 64u << 20);
}

TEST_F(BlockProbeTest, FindsExt4AndXfs) {
  std::string ext4 = MakeImage("ext4", 64);
  Run(Command("mkfs.ext4").Arg("-q").Arg("-F").Arg(ext4));
  auto r = probe_->Probe(ext4);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->signatures.size(), 1u) << r->Describe();
  EXPECT_EQ(r->signatures[0].type, "ext4");
  EXPECT_EQ(r->signatures[0].usage, "filesystem");
  EXPECT_FALSE(r->signatures[0].uuid.empty());

  std::string xfs = MakeImage("xfs", 300);
  Run(Command("mkfs.xfs").Arg("-q").Arg(xfs));
  r = probe_->Probe(xfs);
  ASSERT_TRUE(r.ok());
  ASSERT_FALSE(r->blank());
  EXPECT_EQ(r->signatures[0].type, "xfs");
}

TEST_F(BlockProbeTest, FindsAPartitionTableWithNoFilesystem) {
  std::string img = MakeImage("parted", 64);
  Run(Command("sfdisk").Arg("--quiet").Arg(img).Stdin("label: dos\n,,L\n"));
  auto r = probe_->Probe(img);
  ASSERT_TRUE(r.ok());
  ASSERT_FALSE(r->blank()) << "a partition table must count as a signature";
  EXPECT_EQ(r->signatures[0].type, "dos");
  EXPECT_EQ(r->signatures[0].usage, "partition_table");
  EXPECT_NE(r->Describe().find("dos"), std::string::npos);
}

TEST_F(BlockProbeTest, MissingDeviceIsNotFound) {
  auto r = probe_->Probe(dir_.Join("no-such-device"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace blockcsi
