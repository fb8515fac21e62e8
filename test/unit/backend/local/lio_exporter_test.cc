#include "backend/local/lio_exporter.h"

#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support/test_util.h"

namespace blockcsi {
namespace {

using testing::ReadFileOrEmpty;
using testing::TempDir;

constexpr char kIqn[] = "iqn.2026-11.io.blockcsi:vol-00000000000000aa";
constexpr char kVol[] = "vol-00000000000000aa";
constexpr char kNode[] = "iqn.2026-11.io.blockcsi:node:a";

DesiredExport Desired(const std::string& image) {
  DesiredExport d;
  d.iqn = kIqn;
  d.volume_id = kVol;
  d.image_path = image;
  d.size_bytes = 64 << 20;
  d.serial = "bcsi00000000000000aa";
  d.wwn = LioExporter::LioWwnForSerial(d.serial);
  return d;
}

std::string Link(const std::string& path) {
  char buf[4096];
  ssize_t n = ::readlink(path.c_str(), buf, sizeof buf);
  return n < 0 ? "" : std::string(buf, static_cast<size_t>(n));
}

bool IsDir(const std::string& path) { return std::filesystem::is_directory(path); }

TEST(LioExporterTest, WwnFollowsLioNaaRule) {
  EXPECT_EQ(LioExporter::LioWwnForSerial("bcsi0123456789abcdef"), "6001405bc0123456789abcdef0000000");
  LioExporter lio("/nonexistent");
  ExportedLunIdentity id = lio.IdentityFor(kVol);
  EXPECT_EQ(id.serial, "bcsi00000000000000aa");
  EXPECT_EQ(id.wwn.size(), 32u);
}

TEST(LioExporterTest, CreateWritesBackstoreTargetAndLunWithoutAcl) {
  TempDir root;
  LioExporter lio(root.path(), {"127.0.0.1:3260"});
  auto repairs = lio.Apply(Desired("/pool/images/vol-00000000000000aa.img"));
  ASSERT_TRUE(repairs.ok()) << repairs.status().ToString();
  EXPECT_FALSE(repairs->empty());
  std::string core = root.Join("target/core/fileio_0/vol-00000000000000aa");
  EXPECT_EQ(ReadFileOrEmpty(core + "/control"),
            "fd_dev_name=/pool/images/vol-00000000000000aa.img,fd_dev_size=67108864\n");
  EXPECT_EQ(ReadFileOrEmpty(core + "/udev_path"), "/pool/images/vol-00000000000000aa.img\n");
  EXPECT_EQ(ReadFileOrEmpty(core + "/wwn/vpd_unit_serial"), "bcsi00000000000000aa\n");
  EXPECT_EQ(ReadFileOrEmpty(core + "/enable"), "1\n");
  EXPECT_EQ(ReadFileOrEmpty(core + "/attrib/emulate_tpu"), "1\n") << "the backstore does not advertise UNMAP";
  EXPECT_EQ(ReadFileOrEmpty(core + "/attrib/emulate_tpws"), "1\n");
  std::string tpg = root.Join("target/iscsi/") + kIqn + "/tpgt_1";
  EXPECT_EQ(ReadFileOrEmpty(tpg + "/enable"), "1\n");
  EXPECT_EQ(ReadFileOrEmpty(tpg + "/attrib/generate_node_acls"), "0\n");
  EXPECT_EQ(ReadFileOrEmpty(tpg + "/attrib/demo_mode_write_protect"), "1\n");
  EXPECT_EQ(ReadFileOrEmpty(tpg + "/attrib/authentication"), "0\n");
  EXPECT_TRUE(IsDir(tpg + "/np/127.0.0.1:3260"));
  // configfs resolves a link's target against the caller's working directory: absolute.
  EXPECT_EQ(Link(tpg + "/lun/lun_1/vol-00000000000000aa"), core);
  EXPECT_TRUE(std::filesystem::exists(tpg + "/lun/lun_1/vol-00000000000000aa")) << "link must resolve";
  EXPECT_FALSE(IsDir(tpg + "/acls")) << "no initiator may log in before a grant";

  // Applying again changes nothing.
  auto again = lio.Apply(Desired("/pool/images/vol-00000000000000aa.img"));
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->empty()) << again->front();
}

TEST(LioExporterTest, SerialAsConfigfsShowsItIsTheSameBackstore) {
  TempDir root;
  LioExporter lio(root.path());
  ASSERT_TRUE(lio.Apply(Desired("/img")).ok());
  // configfs shows the serial with a label; reading it back must not make
  // every Apply re-create the backstore (and unhook the LUN under a session).
  std::string serial = root.Join("target/core/fileio_0/vol-00000000000000aa/wwn/vpd_unit_serial");
  std::ofstream(serial, std::ios::trunc) << "T10 VPD Unit Serial Number: bcsi00000000000000aa\n";
  auto again = lio.Apply(Desired("/img"));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(again->empty()) << again->front();
}

// A backstore an older blockcsi left thick (configfs shows "0") is made thin
// in place: the LUN stays linked, nothing else is re-created.
TEST(LioExporterTest, AThickBackstoreIsMadeThinInPlace) {
  TempDir root;
  LioExporter lio(root.path());
  ASSERT_TRUE(lio.Apply(Desired("/img")).ok());
  const std::string core = root.Join("target/core/fileio_0/vol-00000000000000aa");
  std::ofstream(core + "/attrib/emulate_tpu", std::ios::trunc) << "0\n";
  std::ofstream(core + "/attrib/emulate_tpws", std::ios::trunc) << "0\n";
  const std::string link = root.Join("target/iscsi/") + kIqn + "/tpgt_1/lun/lun_1/vol-00000000000000aa";
  struct stat before {};
  ASSERT_EQ(::lstat(link.c_str(), &before), 0);
  auto repairs = lio.Apply(Desired("/img"));
  ASSERT_TRUE(repairs.ok()) << repairs.status().ToString();
  EXPECT_EQ(*repairs, std::vector<std::string>{"made backstore of vol-00000000000000aa thin"});
  EXPECT_EQ(ReadFileOrEmpty(core + "/attrib/emulate_tpu"), "1\n");
  EXPECT_EQ(ReadFileOrEmpty(core + "/attrib/emulate_tpws"), "1\n");
  struct stat after {};
  ASSERT_EQ(::lstat(link.c_str(), &after), 0);
  EXPECT_EQ(before.st_ino, after.st_ino) << "the LUN was unlinked and linked again";
}

TEST(LioExporterTest, GrantWithMutualChapWritesAclAuthAndMappedLun) {
  TempDir root;
  LioExporter lio(root.path());
  DesiredExport d = Desired("/img");
  d.acls.push_back({kNode, true, "user1"});
  d.chap.push_back({"user1", "secretpass12", "tgtuser", "mutualpass12"});
  ASSERT_TRUE(lio.Apply(d).ok());
  std::string acl = root.Join("target/iscsi/") + kIqn + "/tpgt_1/acls/" + kNode;
  // Exactly the bytes of the credentials: LIO keeps a trailing newline as
  // part of the value, and no login would match it.
  EXPECT_EQ(ReadFileOrEmpty(acl + "/auth/userid"), "user1");
  EXPECT_EQ(ReadFileOrEmpty(acl + "/auth/password"), "secretpass12");
  EXPECT_EQ(ReadFileOrEmpty(acl + "/auth/userid_mutual"), "tgtuser");
  EXPECT_EQ(ReadFileOrEmpty(acl + "/auth/password_mutual"), "mutualpass12");
  EXPECT_EQ(Link(acl + "/lun_1/lun_1"), root.Join("target/iscsi/") + kIqn + "/tpgt_1/lun/lun_1");
  EXPECT_EQ(ReadFileOrEmpty(root.Join("target/iscsi/") + kIqn + "/tpgt_1/attrib/authentication"), "1\n");

  // Revoke: the ACL directory goes (the kernel then drops the sessions).
  d.acls.clear();
  d.chap.clear();
  ASSERT_TRUE(lio.Apply(d).ok());
  ASSERT_TRUE(lio.CloseSessions(kIqn, kNode).ok());
  EXPECT_FALSE(IsDir(acl));
}

TEST(LioExporterTest, ChapAclWithUnknownSecretIsWithheldNotOpened) {
  TempDir root;
  LioExporter lio(root.path());
  DesiredExport d = Desired("/img");
  d.acls.push_back({kNode, true, ""});  // CHAP asked, secret not known (restart)
  auto repairs = lio.Apply(d);
  ASSERT_TRUE(repairs.ok());
  EXPECT_FALSE(IsDir(root.Join("target/iscsi/") + kIqn + "/tpgt_1/acls/" + kNode));
  bool withheld = false;
  for (const auto& r : *repairs) withheld |= r.rfind("withheld", 0) == 0;
  EXPECT_TRUE(withheld);
}

TEST(LioExporterTest, NewSizeRecreatesBackstore) {
  TempDir root;
  LioExporter lio(root.path());
  DesiredExport d = Desired("/img");
  ASSERT_TRUE(lio.Apply(d).ok());
  d.size_bytes = 128 << 20;
  ASSERT_TRUE(lio.Apply(d).ok());
  EXPECT_EQ(ReadFileOrEmpty(root.Join("target/core/fileio_0/vol-00000000000000aa/control")),
            "fd_dev_name=/img,fd_dev_size=134217728\n");
  EXPECT_TRUE(IsDir(root.Join("target/iscsi/") + kIqn + "/tpgt_1/lun/lun_1"));
}

TEST(LioExporterTest, ReconcileRemovesOurOrphansOnlyAndRemoveIsIdempotent) {
  TempDir root;
  LioExporter lio(root.path());
  ASSERT_TRUE(lio.Apply(Desired("/img")).ok());
  ASSERT_TRUE(std::filesystem::create_directories(root.Join("target/iscsi/iqn.2003-01.org.other:keep/tpgt_1")));
  auto repairs = lio.Reconcile({}, "iqn.2026-11.io.blockcsi");
  ASSERT_TRUE(repairs.ok()) << repairs.status().ToString();
  EXPECT_FALSE(IsDir(root.Join("target/iscsi/") + kIqn));
  EXPECT_FALSE(IsDir(root.Join("target/core/fileio_0/vol-00000000000000aa")));
  EXPECT_TRUE(IsDir(root.Join("target/iscsi/iqn.2003-01.org.other:keep")));
  EXPECT_TRUE(lio.Remove(kIqn).ok());
}

}  // namespace
}  // namespace blockcsi
