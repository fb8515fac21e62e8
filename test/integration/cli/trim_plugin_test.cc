// Trim through the whole userspace path, for real: a private tgtd whose
// LUNs the plugin makes thin, the `blockcsi` binary staging volumes through
// its bridge (libiscsi → FUSE → loop), and `blockctl trim` (the node's
// FITRIM, the same code as --fstrim-interval) on the staging mount. The
// discards go loop → FUSE punch-hole → bridge → SCSI UNMAP → tgtd → a hole
// in the LUN's image in the plugin's pool, which is what is measured. Also
// a trim while fio writes and verifies on the same volume: nothing it wrote
// may change. Needs root, tgtd, FUSE; fio for the I/O tests.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/executor.h"
#include "support/block_io.h"
#include "support/plugin_suite.h"
#include "support/test_util.h"

namespace blockcsi {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t kMiB = 1ULL << 20;
constexpr uint64_t kWritten = 256 * kMiB;

uint64_t AllocatedBytes(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

struct Ran {
  int code = -1;
  std::string out;
  std::string err;
};

class TrimThroughPluginTest : public testing::PluginSuiteTest {
 protected:
  TrimThroughPluginTest() : PluginSuiteTest("n1") {}

  Ran Exec(const Command& cmd) {
    auto r = MakeProcessExecutor()->Run(Command(cmd).Timeout(300s));
    if (!r.ok()) return {-1, "", r.status().ToString()};
    return {r->exit_code, r->stdout_text, r->stderr_text};
  }
  Ran Blockctl(std::vector<std::string> args) {
    args.insert(args.begin(), {"--state-dir", plugin_->state_dir(), "--endpoint", "unix://" + plugin_->socket()});
    return Exec(Command(testing::BinDir() + "/blockctl").Args(args));
  }
  // The LUN's backing file: the volume's image in the plugin's pool.
  std::string Image(const std::string& id) { return plugin_->pool_dir() + "/images/" + id + ".img"; }

  // The loop device the bridge made for `id`, from blockctl's listing.
  std::string Device(const std::string& id) {
    Ran r = Blockctl({"-o", "json", "volumes"});
    EXPECT_EQ(r.code, 0) << r.err;
    for (const auto& row : nlohmann::json::parse(r.out)) {
      if (row["volume"] == id) return row["device"];
    }
    ADD_FAILURE() << id << " not in blockctl volumes: " << r.out;
    return "";
  }

  // `bytes` of non-zero data in 1 MiB pieces that differ, on disk.
  static void WriteFile(const std::string& path, uint64_t bytes, char seed) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    for (uint64_t at = 0; at < bytes; at += kMiB) {
      std::string piece = testing::Pattern(kMiB, static_cast<char>(seed + at / kMiB));
      f.write(piece.data(), static_cast<std::streamsize>(piece.size()));
    }
    f.close();
    ASSERT_TRUE(f) << path;
  }
  static std::string Slurp(const std::string& path) { return testing::ReadFileOrEmpty(path); }

  void Sync(const std::string& dir) { EXPECT_EQ(Exec(Command("sync").Arg("-f").Arg(dir)).code, 0); }
  static bool HaveFio() { return std::filesystem::exists("/usr/bin/fio"); }

  // fio writing 96 MiB of random blocks three times from `offset` of `file`,
  // each verified (crc32c) as it goes and at the end, stopping at the first
  // bad block: the work that runs beside the trims.
  Ran FioWriteAndVerify(const std::string& name, const std::string& file, uint64_t offset) {
    return Exec(Command("fio")
                    .Arg("--name=" + name)
                    .Arg("--filename=" + file)
                    .Arg("--offset=" + std::to_string(offset))
                    .Arg("--size=96M")
                    .Arg("--rw=randwrite")
                    .Arg("--bsrange=4k-256k")
                    .Arg("--direct=1")
                    .Arg("--ioengine=psync")
                    .Arg("--loops=3")
                    .Arg("--verify=crc32c")
                    .Arg("--verify_backlog=64")
                    .Arg("--do_verify=1")
                    .Arg("--verify_fatal=1")
                    .Arg("--output-format=json"));
  }
  // fio ended without an error and read back what it wrote.
  static void ExpectVerifiedWithoutError(const Ran& fio) {
    ASSERT_EQ(fio.code, 0) << fio.err << fio.out.substr(0, 2000);
    auto j = nlohmann::json::parse(fio.out.substr(fio.out.find('{')));
    EXPECT_EQ(j["jobs"][0]["error"], 0) << fio.out;
    EXPECT_GT(j["jobs"][0]["read"]["io_bytes"].get<uint64_t>(), 0u) << "fio verified nothing";
    EXPECT_EQ(fio.err.find("verify"), std::string::npos) << fio.err;
  }
};

class TrimFilesystemThroughPluginTest : public TrimThroughPluginTest,
                                        public ::testing::WithParamInterface<std::string> {};

// Issue figure, userspace connector: 256 MiB written into a volume's
// filesystem, deleted, `blockctl trim`: the LUN's image gives back >= 90 %
// of it; a file that was kept reads back intact after a restage (a new
// bridge, loop device and mount: the bytes come from the target).
TEST_P(TrimFilesystemThroughPluginTest, WriteDeleteTrimGivesTheLunsBlocksBackAndKeepsTheRest) {
  const std::string fs = GetParam();
  const testing::CsiCalls calls(node_id_, fs);
  testing::CsiVolume v = CreatePublished("trim-" + fs, 512 * kMiB, calls);
  ASSERT_FALSE(v.id.empty());
  grpc::Status st = calls.Stage(*plugin_, v);
  ASSERT_TRUE(st.ok()) << st.error_message() << "\n" << GrpcLogTail();
  const std::string staging = Staging(v.id), image = Image(v.id);
  ASSERT_TRUE(std::filesystem::exists(image)) << image;

  WriteFile(staging + "/keep", 4 * kMiB, 'K');
  const std::string kept = Slurp(staging + "/keep");
  Sync(staging);
  const uint64_t before_write = AllocatedBytes(image);
  WriteFile(staging + "/data", kWritten, 'd');
  Sync(staging);
  const uint64_t written = AllocatedBytes(image);
  ASSERT_GE(written - before_write, kWritten * 9 / 10) << "the write did not reach the LUN's image";
  std::filesystem::remove(staging + "/data");
  Sync(staging);
  const uint64_t deleted = AllocatedBytes(image);
  EXPECT_GE(deleted + kWritten / 10, written) << "deleting alone freed the image's blocks";

  Ran r = Blockctl({"-o", "json", "trim", v.id});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 1u) << r.out;
  EXPECT_EQ(j[0]["result"], "trimmed");
  // xfs's FITRIM (Linux 6.7 on) submits an allocation group's discards and
  // goes on without waiting for them: the last ones can still be on their
  // way (loop, FUSE, bridge, UNMAP) when the ioctl returns.
  const auto trim_returned = std::chrono::steady_clock::now();
  uint64_t trimmed = AllocatedBytes(image);
  while (deleted < trimmed + kWritten * 9 / 10 && std::chrono::steady_clock::now() - trim_returned < 60s) {
    std::this_thread::sleep_for(100ms);
    trimmed = AllocatedBytes(image);
  }
  const double settled = std::chrono::duration<double>(std::chrono::steady_clock::now() - trim_returned).count();
  const uint64_t given_back = deleted > trimmed ? deleted - trimmed : 0;
  std::printf(
      "[ figures ] %s over the userspace connector (tgt thin LUN, 512 MiB volume): image %.1f MiB before, "
      "%.1f MiB written, %.1f MiB deleted, %.1f MiB after blockctl trim (kernel: %s B trimmed); "
      "given back %.1f MiB = %.1f %% of 256 MiB, %.1f s after blockctl returned\n",
      fs.c_str(), before_write / double(kMiB), written / double(kMiB), deleted / double(kMiB), trimmed / double(kMiB),
      j[0]["trimmed_bytes"].get<std::string>().c_str(), given_back / double(kMiB),
      100.0 * given_back / double(kWritten), settled);
  EXPECT_GE(given_back, kWritten * 9 / 10) << "the trim gave back less than 90 % of what was deleted";

  ASSERT_TRUE(calls.Unstage(*plugin_, v).ok());
  ASSERT_TRUE((st = calls.Stage(*plugin_, v)).ok()) << st.error_message();
  EXPECT_TRUE(Slurp(staging + "/keep") == kept) << "the kept file changed";
  ASSERT_TRUE(calls.Unstage(*plugin_, v).ok());
  UnpublishAndDelete(v);
}

INSTANTIATE_TEST_SUITE_P(Filesystems, TrimFilesystemThroughPluginTest, ::testing::Values("ext4", "xfs"));

// fio with its own verification runs on the volume while other files are
// written, deleted and trimmed beside it, over and over; a discard that
// reached a block fio wrote (a wrong range, a punch reordered past a write)
// shows as a verify error. Every trim must have trimmed something.
TEST_F(TrimThroughPluginTest, TrimsDuringFioWithVerifyLoseNothing) {
  if (!HaveFio()) GTEST_SKIP() << "fio is not installed (Debian package fio)";
  testing::CsiVolume v = CreatePublished("trim-fio", 512 * kMiB);
  ASSERT_FALSE(v.id.empty());
  grpc::Status st = calls_.Stage(*plugin_, v);
  ASSERT_TRUE(st.ok()) << st.error_message() << "\n" << GrpcLogTail();
  const std::string staging = Staging(v.id);

  // The junk file first, fio's file after it, so that the junk's blocks,
  // freed and trimmed over and over, lie near fio's. Near, not right
  // before: ext4 starts each new file at an offset of its own in the
  // block group (by the writer's pid), so a discard landing 1 MiB off its
  // range may miss fio's data here (a bridge made to do that passed this
  // test; the raw block test below and the kept file of the test above
  // failed). What this one proves is a real filesystem's trims beside I/O.
  WriteFile(staging + "/junk", 32 * kMiB, 'a');
  Sync(staging);
  std::atomic<bool> done{false};
  int trims = 0, trim_failures = 0;
  std::string trim_errors;
  std::thread trimmer([&] {
    for (int i = 1; !done; ++i) {
      std::filesystem::remove(staging + "/junk");
      Sync(staging);
      Ran r = Blockctl({"trim", v.id});
      ++trims;
      if (r.code != 0) {
        ++trim_failures;
        trim_errors += r.err;
      }
      WriteFile(staging + "/junk", 32 * kMiB, static_cast<char>('a' + i % 20));
      Sync(staging);
    }
  });
  Ran fio = FioWriteAndVerify("verify-under-trim", staging + "/fio.dat", 0);
  done = true;
  trimmer.join();
  std::printf(
      "[ figures ] fio randwrite+verify 3 x 96 MiB on ext4 through the bridge, %d blockctl trims "
      "beside it (%d failed); fio exit %d\n",
      trims, trim_failures, fio.code);
  ExpectVerifiedWithoutError(fio);
  if (HasFatalFailure()) return;
  EXPECT_GE(trims, 2) << "the trims did not overlap fio";
  EXPECT_EQ(trim_failures, 0) << trim_errors;

  ASSERT_TRUE(calls_.Unstage(*plugin_, v).ok());
  UnpublishAndDelete(v);
}

// The raw block form: blkdiscard punches the first 64 MiB of the device,
// written again before each, over and over, while fio writes and verifies
// the 96 MiB right after them; the discarded range must read zeros
// afterwards.
TEST_F(TrimThroughPluginTest, BlkdiscardBesideFioWithVerifyOnARawBlockVolumeLosesNothing) {
  if (!HaveFio()) GTEST_SKIP() << "fio is not installed (Debian package fio)";
  const testing::CsiCalls block(node_id_, "block");
  testing::CsiVolume v = CreatePublished("trim-fio-blk", 256 * kMiB, block);
  ASSERT_FALSE(v.id.empty());
  grpc::Status st = block.Stage(*plugin_, v);
  ASSERT_TRUE(st.ok()) << st.error_message() << "\n" << GrpcLogTail();
  const std::string dev = Device(v.id);
  ASSERT_EQ(dev.rfind("/dev/loop", 0), 0u) << dev;

  std::atomic<bool> done{false};
  int discards = 0, discard_failures = 0;
  std::string discard_errors;
  std::thread discarder([&] {
    for (int i = 0; !done; ++i) {
      for (uint64_t at = 0; at < 64 * kMiB; at += 8 * kMiB) {
        testing::WriteDirect(dev, at, testing::Pattern(8 * kMiB, static_cast<char>('a' + i % 20)));
      }
      Ran r = Exec(Command("blkdiscard").Arg("-o").Arg("0").Arg("-l").Arg(std::to_string(64 * kMiB)).Arg(dev));
      ++discards;
      if (r.code != 0) {
        ++discard_failures;
        discard_errors += r.err;
      }
    }
  });
  Ran fio = FioWriteAndVerify("verify-under-discard", dev, 64 * kMiB);
  done = true;
  discarder.join();
  std::printf(
      "[ figures ] fio randwrite+verify 3 x 96 MiB on the raw device through the bridge, %d blkdiscards "
      "of 64 MiB beside it (%d failed); fio exit %d\n",
      discards, discard_failures, fio.code);
  ExpectVerifiedWithoutError(fio);
  if (HasFatalFailure()) return;
  EXPECT_GE(discards, 2) << "the discards did not overlap fio";
  EXPECT_EQ(discard_failures, 0) << discard_errors;
  EXPECT_TRUE(testing::ReadDirect(dev, 32 * kMiB, kMiB) == std::string(kMiB, '\0'))
      << "a discarded range must read as zeros";

  ASSERT_TRUE(block.Unstage(*plugin_, v).ok());
  UnpublishAndDelete(v);
}

}  // namespace
}  // namespace blockcsi
