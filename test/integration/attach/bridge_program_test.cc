// blockcsi-bridge as its own program (issue #17): the plugin starts it from
// its own directory, it links only what its transport needs, and bridges a
// plugin before issue #17 started (`/proc/self/exe bridge ...`) are adopted
// and unstaged by the new plugin through the same control protocol.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "attach/attach_record_store.h"
#include "common/atomic_file.h"
#include "contract/initiator.h"
#include "support/attach_fixture.h"

namespace blockcsi::testing {
namespace {

constexpr uint64_t kMiB = 1024 * 1024;

AttachSpec SpecFor(const std::map<std::string, std::string>& context) {
  auto spec = ParseAttachSpec("vol-a", context, {}, InitiatorIqnForNode(kNodeId));
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  return spec.ok() ? *spec : AttachSpec{};
}

std::string Cmdline(int pid) { return ReadFileOrEmpty("/proc/" + std::to_string(pid) + "/cmdline"); }

// The shared libraries `program` names (readelf -d, NEEDED entries).
std::set<std::string> Needed(const std::string& program) {
  std::string out;
  EXPECT_EQ(RunProgram({"readelf", "-d", program}, &out), 0) << out;
  std::set<std::string> libs;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    size_t open = line.find("(NEEDED)");
    if (open == std::string::npos) continue;
    size_t a = line.find('['), b = line.find(']');
    if (a != std::string::npos && b > a) libs.insert(line.substr(a + 1, b - a - 1));
  }
  return libs;
}

bool NamesLib(const std::set<std::string>& libs, const std::string& stem) {
  for (const auto& l : libs) {
    if (l.starts_with(stem)) return true;
  }
  return false;
}

// The production wiring: bin/blockcsi-bridge, beside the plugin, serves the
// volume; its argv is the program itself, not the plugin's binary.
TEST_F(AttachIntegrationTest, BridgeProgramBesideThePluginServesTheVolume) {
  TestTarget t = MakeTarget("real", 16 * kMiB);
  auto attacher = NewAttacher(1, BinDir());
  ASSERT_TRUE(attacher.ok());
  auto record = (*attacher)->Attach(SpecFor(ContextFor(t)));
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  auto pids = BridgePids();
  ASSERT_EQ(pids.size(), 1u);
  EXPECT_EQ(Cmdline(pids[0]).rfind(BinDir() + "/blockcsi-bridge" + std::string(1, '\0') + "--volume-id", 0), 0u)
      << Cmdline(pids[0]);
  // Direct I/O on the loop device: requests reach the bridge as they come,
  // not through a second page cache that serialises them (issue #17).
  std::string loop = record->device_path.substr(record->device_path.rfind('/') + 1);
  EXPECT_EQ(ReadFileOrEmpty("/sys/block/" + loop + "/loop/dio"), "1\n");
  std::string data = Pattern(65536, 'b');
  ASSERT_EQ(WriteDirect(record->device_path, kMiB, data), 0);
  EXPECT_EQ(ReadFileAt(t.backing_file, kMiB, data.size()), data);
  ASSERT_TRUE((*attacher)->Detach("vol-a").ok());
  ExpectNothingLeft();
}

// What each program maps is what it links: the bridge no gRPC, protobuf,
// spdlog, libmount or libblkid, and Ceph only through dlopen when an RBD
// volume opens; the plugin no FUSE and no libiscsi (it no longer contains
// the bridge).
TEST(BridgeProgramLinks, EachProgramLinksOnlyWhatItUses) {
  auto bridge = Needed(BinDir() + "/blockcsi-bridge");
  ASSERT_FALSE(bridge.empty());
  EXPECT_TRUE(NamesLib(bridge, "libiscsi.so"));
  EXPECT_TRUE(NamesLib(bridge, "libfuse3.so"));
  for (const char* stem : {"libgrpc", "libprotobuf", "librados", "librbd", "libspdlog", "libfmt", "libmount",
                           "libblkid", "libabsl", "libssl", "libcrypto"}) {
    EXPECT_FALSE(NamesLib(bridge, stem)) << "blockcsi-bridge links " << stem;
  }
  auto plugin = Needed(BinDir() + "/blockcsi");
  EXPECT_FALSE(NamesLib(plugin, "libfuse3")) << "the plugin still links the bridge's FUSE";
  EXPECT_FALSE(NamesLib(plugin, "libiscsi")) << "the plugin still links the bridge's libiscsi";
}

// With gRPC 1.51 linked in from its archives (src/cmd/lean_link.cmake), the
// plugin carries only the gRPC components it registers
// (grpc_core_configuration.cc): none of xDS, RLS, grpclb or ring-hash.
TEST(PluginProgramLinks, CarriesOnlyTheGrpcComponentsItRegisters) {
  const std::string plugin = BinDir() + "/blockcsi";
  if (NamesLib(Needed(plugin), "libgrpc")) GTEST_SKIP() << "blockcsi links the shared gRPC (BLOCKCSI_STATIC_GRPC off)";
#ifndef BLOCKCSI_GRPC_REGISTRY_CUT
  GTEST_SKIP() << "not the gRPC release grpc_core_configuration.cc was written for: the plugin keeps gRPC's own "
                  "registry (src/cmd/lean_link.cmake item 4)";
#endif
  std::string symbols;
  ASSERT_EQ(RunProgram({"nm", "-C", plugin}, &symbols), 0);
  EXPECT_NE(symbols.find("grpc_core::BuildCoreConfiguration"), std::string::npos) << "no gRPC in the plugin?";
  for (const char* component : {"XdsClient", "RlsLb", "GrpcLb::", "RingHash", "OutlierDetectionLb", "RbacFilter"}) {
    EXPECT_EQ(symbols.find(component), std::string::npos) << "the plugin links gRPC's " << component;
  }
}

// The plugin is linked with the profiled text layout: the code a volume's
// lifecycle runs sits together at the start of its text (spread over the
// whole text, it kept 8 MiB of it resident). What is checked: the
// profiled section is there and still matches most of the profile (a stale
// script shrinks it), and the functions every CSI call runs are inside it.
TEST(PluginProgramLinks, GathersTheCodeItRunsFirst) {
#ifndef BLOCKCSI_HOT_TEXT_LINKED
  GTEST_SKIP() << "built without the profiled text layout (BLOCKCSI_HOT_TEXT off, or a linker without INSERT)";
#endif
  const std::string plugin = BinDir() + "/blockcsi";
  std::string sections;
  ASSERT_EQ(RunProgram({"readelf", "-SW", plugin}, &sections), 0) << sections;
  uint64_t start = 0, size = 0;
  std::istringstream lines(sections);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line.substr(line.find(']') + 1));
    std::string name, type, address, offset, bytes;
    if (fields >> name >> type >> address >> offset >> bytes && name == ".text.profiled") {
      start = std::stoull(address, nullptr, 16);
      size = std::stoull(bytes, nullptr, 16);
    }
  }
  ASSERT_GT(size, 0u) << "no .text.profiled section in " << plugin;
  EXPECT_GE(size, 2 * kMiB)
      << "hack/profiles/hot_text.symbols matches little of the plugin: regenerate it (hack/profile-text-layout.sh)";
  std::string symbols;
  ASSERT_EQ(RunProgram({"nm", "-C", "--defined-only", plugin}, &symbols), 0);
  for (const std::string wanted : {" T main", " T blockcsi::ControllerService::CreateVolume(",
                                   " T blockcsi::NodeService::NodeStageVolume(", " T grpc_core::Server::Start()"}) {
    const size_t at = symbols.find(wanted + (wanted.ends_with("main") ? "\n" : ""));
    ASSERT_NE(at, std::string::npos) << wanted;
    const uint64_t address = std::stoull(symbols.substr(symbols.rfind('\n', at) + 1, 16), nullptr, 16);
    EXPECT_TRUE(address >= start && address < start + size) << wanted << " is outside .text.profiled";
  }
}

// A stand-in for the previous plugin's spawn: its bridges ran as
// `/proc/self/exe bridge --volume-id ...` (the plugin's own binary). The
// record format, socket paths and control protocol are unchanged by issue
// #17, so an old plugin differs only in that command line, which this
// script reproduces byte for byte (bash's exec -a sets argv[0]).
std::string OldPluginBridgeDir(const TempDir& tmp) {
  std::string dir = tmp.Join("old-plugin");
  EXPECT_TRUE(MakeDirectories(dir, 0755).ok());
  std::string shim = dir + "/blockcsi-bridge";
  std::ofstream(shim) << "#!/bin/bash\nexec -a /proc/self/exe " << BinDir() << "/blockcsi-bridge bridge \"$@\"\n";
  ::chmod(shim.c_str(), 0755);
  return dir;
}

TEST_F(AttachIntegrationTest, BridgeOfThePreviousPluginIsAdoptedAndUnstaged) {
  TestTarget t = MakeTarget("old", 16 * kMiB);
  auto old_plugin = NewAttacher(1, OldPluginBridgeDir(*tmp_));
  ASSERT_TRUE(old_plugin.ok());
  auto record = (*old_plugin)->Attach(SpecFor(ContextFor(t)));
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  auto pids = BridgePids();
  ASSERT_EQ(pids.size(), 1u);
  ASSERT_EQ(Cmdline(pids[0]).rfind(std::string("/proc/self/exe\0bridge\0--volume-id", 33), 0), 0u) << Cmdline(pids[0]);
  old_plugin->reset();  // the plugin is replaced; its bridge keeps serving

  auto new_plugin = NewAttacher();
  ASSERT_TRUE(new_plugin.ok());
  AttachHealth health = (*new_plugin)->Check("vol-a");
  EXPECT_FALSE(health.abnormal) << health.message;
  std::string data = Pattern(65536, 'o');
  ASSERT_EQ(WriteDirect(record->device_path, 2 * kMiB, data), 0);
  EXPECT_EQ(ReadFileAt(t.backing_file, 2 * kMiB, data.size()), data);
  ASSERT_TRUE((*new_plugin)->Detach("vol-a").ok());
  EXPECT_EQ(BridgePids(), std::vector<int>{}) << "the old bridge was not stopped";
  ExpectNothingLeft();
}

// An old bridge that died (kill -9) while its plugin was replaced: the new
// plugin's NodeUnstage still removes its loop device and FUSE mount.
TEST_F(AttachIntegrationTest, DeadBridgeOfThePreviousPluginIsCleanedUpAtUnstage) {
  TestTarget t = MakeTarget("olddead", 16 * kMiB);
  auto old_plugin = NewAttacher(1, OldPluginBridgeDir(*tmp_));
  ASSERT_TRUE(old_plugin.ok());
  ASSERT_TRUE((*old_plugin)->Attach(SpecFor(ContextFor(t))).ok());
  old_plugin->reset();
  auto pids = BridgePids();
  ASSERT_EQ(pids.size(), 1u);
  ::kill(pids[0], SIGKILL);
  for (int i = 0; i < 100 && !BridgePids().empty(); ++i) ::usleep(20000);
  auto new_plugin = NewAttacher();
  ASSERT_TRUE(new_plugin.ok());
  EXPECT_TRUE((*new_plugin)->Check("vol-a").abnormal);
  ASSERT_TRUE((*new_plugin)->Detach("vol-a").ok());
  ExpectNothingLeft();
}

// Durability: what an fsync on the loop device returned for is on the
// target, whatever happens to the bridge after it. Buffered writes (the
// page cache of the loop device holds them until fsync), fsync, then the
// bridge is killed (its session to the target dies with it) before anything
// else runs; a new bridge reads every fsync'd byte back.
TEST_F(AttachIntegrationTest, EveryFsyncedByteSurvivesABridgeKill9) {
  TestTarget t = MakeTarget("durable", 16 * kMiB);
  auto attacher = NewAttacher();
  ASSERT_TRUE(attacher.ok());
  auto record = (*attacher)->Attach(SpecFor(ContextFor(t)));
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  std::string data = Pattern(3 * kMiB + 8192, 'f');
  int fd = ::open(record->device_path.c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, data.data(), data.size(), 4096), static_cast<ssize_t>(data.size()));
  ASSERT_EQ(::fsync(fd), 0) << std::strerror(errno);
  auto pids = BridgePids();
  ASSERT_EQ(pids.size(), 1u);
  ::kill(pids[0], SIGKILL);
  ::close(fd);
  for (int i = 0; i < 100 && !BridgePids().empty(); ++i) ::usleep(20000);
  EXPECT_EQ(ReadFileAt(t.backing_file, 4096, data.size()), data) << "an fsync'd byte is not on the target";
  ASSERT_TRUE((*attacher)->Detach("vol-a").ok());
  auto again = (*attacher)->Attach(SpecFor(ContextFor(t)));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(ReadDirect(again->device_path, 4096, data.size()), data);
  ASSERT_TRUE((*attacher)->Detach("vol-a").ok());
  ExpectNothingLeft();
}

}  // namespace
}  // namespace blockcsi::testing
