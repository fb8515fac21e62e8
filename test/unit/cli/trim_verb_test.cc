// `blockctl trim` on a fabricated node: attach records in a temp state dir,
// a mount table, and a host whose FITRIM answers what a test says (the real
// ioctl runs in test/integration/cli/trim_test.cc). Which volumes are
// trimmed, refused or skipped, what is printed, and the exit codes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "attach/attach_record_store.h"
#include "cli/verb.h"
#include "node/staged_facts.h"
#include "node/volume_crypt.h"
#include "support/test_util.h"

namespace blockcsi::cli {
namespace {

// The temp tree as the machine, with devices and FITRIM made up.
class TrimHost final : public RootedHost {
 public:
  explicit TrimHost(const std::string& root) : RootedHost(root) {}
  std::map<std::string, std::string> devices;  // path -> major:minor
  std::map<std::string, uint64_t> freed;       // mount path -> bytes FITRIM answers
  mutable std::vector<std::string> trims;      // "path@major:minor"

  StatusOr<std::string> DeviceNumber(const std::string& device) const override {
    auto it = devices.find(device);
    if (it == devices.end()) return NotFound("no device " + device);
    return it->second;
  }
  StatusOr<uint64_t> TrimFilesystem(const std::string& path, const std::string& expected) const override {
    trims.push_back(path + "@" + expected);
    auto it = freed.find(path);
    if (it == freed.end()) return Unimplemented("FITRIM " + path + ": Operation not supported");
    return it->second;
  }
};

class TrimVerbTest : public ::testing::Test {
 protected:
  TrimVerbTest() : host_(std::make_shared<TrimHost>(root_.path())) {
    std::filesystem::create_directories(root_.Join("proc/self"));
    EXPECT_TRUE(store_.Init().ok());
  }

  // A volume on /dev/loop<n> (7:<n>), staged as `access` ("mount" or
  // "block") at /stage/<id>, mounted there unless `mounted` is false.
  // `encrypted`: its record names a dm-crypt mapping, mounted from that.
  void AddVolume(const std::string& id, int n, const std::string& access, bool mounted = true, bool encrypted = false) {
    AttachRecord r;
    r.volume_id = id;
    r.connector = "userspace";
    r.transport = "iscsi";
    r.state = "attached";
    r.device_path = "/dev/loop" + std::to_string(n);
    StagedFacts facts{
        .access_type = access, .fs_type = access == "block" ? "" : "ext4", .staging_path = "/stage/" + id};
    r.annotations[kStagedAnnotation] = facts.Encode();
    if (encrypted) r.annotations[kCryptAnnotation] = "blockcsi-" + id;
    ASSERT_TRUE(store_.Put(r).ok());
    host_->devices[r.device_path] = "7:" + std::to_string(n);
    if (mounted && access != "block") {
      mountinfo_ += std::to_string(100 + n) + " 25 7:" + std::to_string(n) + " / /stage/" + id +
                    " rw,relatime shared:1 - ext4 " + (encrypted ? "/dev/mapper/blockcsi-" + id : r.device_path) +
                    " rw\n";
    }
  }

  struct Result {
    int code;
    std::string out, err;
  };
  Result Run(std::vector<std::string> args) {
    std::ofstream(root_.Join("proc/self/mountinfo")) << mountinfo_;
    args.insert(args.begin(), {"blockctl", "--state-dir", "/state"});
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    std::ostringstream out, err;
    int code = RunBlockctl(static_cast<int>(argv.size()), argv.data(), out, err, host_);
    return {code, out.str(), err.str()};
  }

  testing::TempDir root_;
  std::shared_ptr<TrimHost> host_;
  // Writes go to the real path (Put does not go through the host); blockctl
  // reads them through the rooted host at /state.
  AttachRecordStore store_{root_.Join("state"), MachineHost()};
  std::string mountinfo_;
};

TEST_F(TrimVerbTest, TrimsANamedVolumeAndPrintsTheBytesTheKernelReported) {
  AddVolume("vol-a", 3, "mount");
  AddVolume("vol-b", 4, "mount");
  host_->freed["/stage/vol-a"] = 268435456;
  host_->freed["/stage/vol-b"] = 1;
  Result r = Run({"-o", "json", "trim", "vol-a"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(host_->trims, std::vector<std::string>{"/stage/vol-a@7:3"});
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 1u) << r.out;
  EXPECT_EQ(j[0]["volume"], "vol-a");
  EXPECT_EQ(j[0]["result"], "trimmed");
  EXPECT_EQ(j[0]["trimmed_bytes"], "268435456");
  EXPECT_EQ(j[0]["trimmed"], "256Mi");
}

TEST_F(TrimVerbTest, ANamedRawBlockVolumeIsRefusedWithWhy) {
  AddVolume("blk", 5, "block");
  Result r = Run({"trim", "blk"});
  EXPECT_EQ(r.code, kExitProblems);
  EXPECT_TRUE(host_->trims.empty());
  EXPECT_NE(r.err.find("blockctl: volume blk not trimmed: raw block volume: the node cannot know which blocks"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.out.find("refused: raw block"), std::string::npos) << r.out;
}

TEST_F(TrimVerbTest, AllTrimsEachFilesystemVolumeSkipsRawBlockAndFailsOnTheUnmountedOne) {
  AddVolume("vol-a", 3, "mount");
  AddVolume("blk", 5, "block");
  AddVolume("vol-c", 6, "mount", /*mounted=*/false);
  host_->freed["/stage/vol-a"] = 4096;
  Result r = Run({"-o", "json", "trim", "--all"});
  EXPECT_EQ(r.code, kExitProblems) << r.out;  // vol-c failed
  EXPECT_EQ(host_->trims, std::vector<std::string>{"/stage/vol-a@7:3"});
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 3u) << r.out;
  std::map<std::string, std::string> results;
  for (const auto& row : j) results[row["volume"]] = row["result"];
  EXPECT_EQ(results["vol-a"], "trimmed");
  EXPECT_EQ(results["blk"].rfind("skipped: raw block", 0), 0u) << results["blk"];
  EXPECT_NE(results["vol-c"].find("nothing is mounted at its staging path /stage/vol-c"), std::string::npos)
      << results["vol-c"];
}

TEST_F(TrimVerbTest, AnEncryptedVolumeIsRefusedWhenNamedAndSkippedUnderAllSayingWhy) {
  AddVolume("enc", 7, "mount", /*mounted=*/true, /*encrypted=*/true);
  AddVolume("vol-a", 3, "mount");
  host_->freed["/stage/vol-a"] = 4096;
  host_->freed["/stage/enc"] = 4096;  // never asked: dm-crypt would refuse it
  Result r = Run({"trim", "enc"});
  EXPECT_EQ(r.code, kExitProblems);
  EXPECT_TRUE(host_->trims.empty());
  EXPECT_NE(r.err.find("volume enc not trimmed: encrypted: its dm-crypt mapping does not pass discards"),
            std::string::npos)
      << r.err;
  r = Run({"-o", "json", "trim", "--all"});
  EXPECT_EQ(r.code, kExitOk) << r.out << r.err;
  EXPECT_EQ(host_->trims, std::vector<std::string>{"/stage/vol-a@7:3"});
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 2u) << r.out;
  for (const auto& row : j) {
    if (row["volume"] != "enc") continue;
    EXPECT_EQ(row["result"].get<std::string>().rfind("skipped: encrypted", 0), 0u) << r.out;
  }
}

TEST_F(TrimVerbTest, AllWithOnlyRawBlockVolumesIsNotAFailure) {
  AddVolume("blk", 5, "block");
  Result r = Run({"trim", "--all"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_TRUE(host_->trims.empty());
}

TEST_F(TrimVerbTest, AVolumeWithoutARecordOrADeviceWithoutDiscardFails) {
  AddVolume("vol-a", 3, "mount");  // no `freed` entry: the device takes no discards
  Result r = Run({"trim", "vol-a", "ghost"});
  EXPECT_EQ(r.code, kExitProblems);
  EXPECT_NE(r.err.find("ghost is not attached to this node"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Operation not supported"), std::string::npos) << r.err;
}

TEST_F(TrimVerbTest, NeitherVolumesNorAllIsAUsageErrorAndBothAreRefused) {
  EXPECT_EQ(Run({"trim"}).code, kExitUsage);
  EXPECT_EQ(Run({"trim", "--all", "vol-a"}).code, kExitUsage);
}

}  // namespace
}  // namespace blockcsi::cli
