// Golden tests for blockctl's help text and listing formats. To accept a
// deliberate change: BLOCKCSI_UPDATE_GOLDEN=1 ./cli_unit_tests (it rewrites the
// files that differ and fails, so an update run is never a green run), review
// the diff, then run again without it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "cli/table.h"
#include "cli/verb.h"
#include "support/test_util.h"

namespace blockcsi::cli {
namespace {

struct RunResult {
  int code;
  std::string out;
  std::string err;
};

RunResult Blockctl(std::vector<std::string> args) {
  args.insert(args.begin(), "blockctl");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  std::ostringstream out, err;
  int code = RunBlockctl(static_cast<int>(argv.size()), argv.data(), out, err, MachineHost());
  return {code, out.str(), err.str()};
}

void ExpectGolden(const std::string& name, const std::string& actual) {
  std::string path = testing::TestDataPath("blockctl/" + name);
  // Compared before any update: the file is never both written and checked
  // in one run, so the comparison cannot agree with itself.
  std::string expected = testing::ReadFileOrEmpty(path);
  if (actual == expected) return;
  if (std::getenv("BLOCKCSI_UPDATE_GOLDEN") != nullptr) {
    std::ofstream(path) << actual;
    ADD_FAILURE() << "golden " << name << " rewritten (BLOCKCSI_UPDATE_GOLDEN): review the diff, run again without it";
    return;
  }
  ASSERT_FALSE(expected.empty()) << "missing golden file " << path;
  EXPECT_EQ(actual, expected) << "golden " << name << " differs";
}

TEST(BlockctlGoldenTest, TopLevelHelp) {
  auto r = Blockctl({"--help"});
  EXPECT_EQ(r.code, kExitOk);
  ExpectGolden("help.txt", r.out);
}

TEST(BlockctlGoldenTest, EveryVerbHasHelp) {
  for (const auto& factory : VerbRegistry()) {
    auto verb = factory();
    auto r = Blockctl({verb->Name(), "--help"});
    EXPECT_EQ(r.code, kExitOk) << verb->Name();
    ExpectGolden("help-" + verb->Name() + ".txt", r.out);
  }
}

TEST(BlockctlGoldenTest, UsageErrorsExitTwoOnStderr) {
  auto r = Blockctl({"check-target"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_TRUE(r.out.empty());
  EXPECT_EQ(r.err.rfind("blockctl: ", 0), 0u) << r.err;
  r = Blockctl({"-o", "yaml", "inspect", "/dev/null"});
  EXPECT_EQ(r.code, kExitUsage);
  r = Blockctl({});
  EXPECT_EQ(r.code, kExitUsage);
}

TEST(BlockctlGoldenTest, TableAndJsonFromTheSameRows) {
  Table table({"volume", "device", "state"});
  table.AddRow({"vol-a", "/dev/loop3", "healthy"});
  table.AddRow({"vol-bb", "", "stale record"});
  std::ostringstream text, json;
  table.Print(text, OutputFormat::kTable);
  table.Print(json, OutputFormat::kJson);
  ExpectGolden("table.txt", text.str());
  ExpectGolden("table.json", json.str());
}

// Issue #15: without --node-id the node id is found (here: the state dir,
// no plugin answering) and the output says where from. Port 1 on loopback
// refuses at once: the diagnosis is "unreachable", which is not the point.
TEST(BlockctlGoldenTest, CheckTargetSaysWhereItsNodeIdCameFrom) {
  testing::TempDir state;
  std::ofstream(state.Join("node-id")) << "n7\n";
  auto r = Blockctl(
      {"--state-dir", state.path(), "--endpoint", "unix://" + state.Join("no.sock"), "check-target", "127.0.0.1:1"});
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.out.find("initiator: iqn.2026-11.io.blockcsi:node:n7 (node id \"n7\" from the state dir ("),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("diagnosis: unreachable"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace blockcsi::cli
