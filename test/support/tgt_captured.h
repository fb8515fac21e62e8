// The captured tgtadm listings (test/testdata/tgtadm) and the exports they
// hold, shared by the TgtExporter unit tests: target 2 is recorded as
// vol-1111111111111111 on /tmp/bk/b.img, granted to nodes n1 and n2;
// vol-2222222222222222 is in none of them.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/local/tgt_exporter.h"
#include "support/fake_executor.h"
#include "support/test_util.h"

namespace blockcsi::tgt_captured {

inline constexpr char kN1[] = "iqn.2026-11.io.blockcsi:node:n1";
inline constexpr char kN2[] = "iqn.2026-11.io.blockcsi:node:n2";
inline constexpr char kVol2[] = "vol-1111111111111111";
inline constexpr char kIqn2[] = "iqn.2026-11.io.blockcsi:vol-1111111111111111";
inline constexpr char kNewVol[] = "vol-2222222222222222";
inline constexpr char kNewIqn[] = "iqn.2026-11.io.blockcsi:vol-2222222222222222";

inline std::string Captured(const std::string& name) {
  return testing::ReadFileOrEmpty(testing::TestDataPath("tgtadm/" + name));
}

// `text` with the first occurrence of `from` replaced: a listing after a
// change, derived from the captured one.
inline std::string Edited(std::string text, const std::string& from, const std::string& to) {
  auto at = text.find(from);
  EXPECT_NE(at, std::string::npos) << "captured output lacks: " << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

// The argv the exporter runs for `args` against tgtd's control port `port`.
inline std::vector<std::string> TgtadmArgv(int port, std::vector<std::string> args) {
  std::vector<std::string> argv = {"/usr/sbin/tgtadm", "-C", std::to_string(port), "--lld", "iscsi"};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

inline DesiredAcl Allow(const std::string& initiator, const std::string& chap_username = "") {
  DesiredAcl acl;
  acl.initiator_iqn = initiator;
  acl.chap = !chap_username.empty();
  acl.chap_username = chap_username;
  return acl;
}

// Target 2 as recorded: LUN 1 on b.img (34 MB as tgtd rounds), both nodes.
inline DesiredExport Volume2() {
  return {.iqn = kIqn2,
          .volume_id = kVol2,
          .image_path = "/tmp/bk/b.img",
          .size_bytes = 34'000'000,
          .serial = "bcsi1111111111111111",
          .wwn = "",
          .acls = {Allow(kN1), Allow(kN2)},
          .chap = {}};
}

// A volume tgtd does not have yet, with no grant (as CreateVolume makes it).
inline DesiredExport NewVolume() {
  return {.iqn = kNewIqn,
          .volume_id = kNewVol,
          .image_path = "/pool/v2.img",
          .size_bytes = 64 << 20,
          .serial = "bcsi2222222222222222",
          .wwn = "",
          .acls = {},
          .chap = {}};
}

// Expects, on `executor`, the tgtadm commands (tgtd's control port `port`)
// that make `d` from nothing as target `tid`: the target, LUN 1 on d's image
// with its serial and SCSI id, then one bind per ACL (ACLs without CHAP).
inline void ExpectExportMade(testing::FakeExecutor& executor, int port, int tid, const DesiredExport& d) {
  const std::string t = std::to_string(tid);
  executor.ExpectOk(TgtadmArgv(port, {"--op", "new", "--mode", "target", "--tid", t, "-T", d.iqn}));
  executor.ExpectOk(
      TgtadmArgv(port, {"--op", "new", "--mode", "logicalunit", "--tid", t, "--lun", "1", "-b", d.image_path}));
  executor.ExpectOk(TgtadmArgv(port, {"--op", "update", "--mode", "logicalunit", "--tid", t, "--lun", "1", "--params",
                                      "scsi_sn=" + d.serial + ",scsi_id=" + TgtExporter::ScsiIdFor(d.volume_id)}));
  for (const auto& acl : d.acls) {
    executor.ExpectOk(
        TgtadmArgv(port, {"--op", "bind", "--mode", "target", "--tid", t, "--initiator-name", acl.initiator_iqn}));
  }
}

}  // namespace blockcsi::tgt_captured
