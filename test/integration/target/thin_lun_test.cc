// Thin LUNs against a real tgtd, with libiscsi as the initiator: a volume's
// LUN advertises logical block provisioning (READ CAPACITY(16) LBPME, VPD
// 0xB2 UNMAP and WRITE SAME with UNMAP, a VPD 0xB0 UNMAP limit) through
// either control, an UNMAP of written blocks gives the image file's space
// back (st_blocks drops) and reads zeros there while the rest reads back
// intact, and a reconcile makes a thick LUN (an older blockcsi's) thin in
// place, under its live session. Root and Debian tgt; skipped otherwise.
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/local/local_backend.h"
#include "backend/local/tgtadm_parser.h"
#include "integration/target/iscsi_client.h"
#include "support/test_util.h"
#include "support/tgtd_backend.h"
#include "support/tgtd_test.h"

namespace blockcsi {
namespace {

using testing::IscsiClient;
using testing::IscsiLogin;
using testing::TgtdDriven;

constexpr uint64_t kMiB = 1024 * 1024;
constexpr uint64_t kBlocksPerMiB = kMiB / 512;
constexpr char kPrefix[] = "iqn.2026-11.io.blockcsi";
constexpr char kNode[] = "iqn.2026-11.io.blockcsi:node:thin";

// Bytes the file system holds for `path` (st_blocks), -1 when it cannot say.
int64_t AllocatedBytes(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_blocks) * 512 : -1;
}

// 1 MiB whose every byte is `fill`.
std::string Chunk(char fill) { return std::string(kMiB, fill); }

class ThinLunTest : public testing::TgtdTest, public ::testing::WithParamInterface<TgtdDriven> {
 protected:
  void SetUp() override {
    TgtdTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    LocalBackendOptions options;
    options.iqn_prefix = kPrefix;
    options.reconcile_interval = std::chrono::milliseconds(0);
    auto backend = testing::OpenBackendOnTgtd(*tgtd_, pool_.path(), options, GetParam());
    ASSERT_TRUE(backend.ok()) << backend.status().ToString();
    backend_ = *backend;
  }

  // A granted volume of `mib` MiB and a session of kNode logged in to it.
  std::unique_ptr<IscsiClient> VolumeWithSession(const std::string& name, uint64_t mib, VolumeRecord* v) {
    CreateVolumeSpec spec;
    spec.name = name;
    spec.size_bytes = mib * kMiB;
    auto made = backend_->CreateVolume(spec);
    EXPECT_TRUE(made.ok()) << made.status().ToString();
    if (!made.ok()) return nullptr;
    *v = *made;
    EXPECT_TRUE(backend_->GrantAccess(v->id, {kNode, "thin", false, "rwo", {}}).ok());
    std::string error;
    auto session = IscsiClient::Login({tgtd_->portal(), v->target_iqn, kNode, "", "", "", ""}, &error);
    EXPECT_NE(session, nullptr) << error;
    return session;
  }
  std::string Image(const VolumeRecord& v) { return pool_.Join("images/" + v.id + ".img"); }
  // LUN 1 of `iqn` as tgtd lists it.
  std::optional<TgtLun> LiveLun(const std::string& iqn) {
    auto parsed = ParseTgtadmTargets(tgtd_->ShowTargets());
    EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
    if (!parsed.ok()) return std::nullopt;
    for (const auto& t : *parsed) {
      if (t.iqn == iqn && t.FindLun(1) != nullptr) return *t.FindLun(1);
    }
    return std::nullopt;
  }

  testing::TempDir pool_;
  std::shared_ptr<LocalBackend> backend_;
};

TEST_P(ThinLunTest, UnmapOfWrittenBlocksGivesTheImagesSpaceBackAndKeepsTheRest) {
  VolumeRecord v;
  auto session = VolumeWithSession("pvc-thin", 64, &v);
  ASSERT_NE(session, nullptr);
  auto lun = LiveLun(v.target_iqn);
  ASSERT_TRUE(lun.has_value()) << tgtd_->ShowTargets();
  EXPECT_TRUE(lun->thin_provisioning) << tgtd_->ShowTargets();

  IscsiClient::Provisioning p;
  std::string error;
  ASSERT_TRUE(session->ReadProvisioning(&p, &error)) << error;
  // What the kernel's sd driver needs before it offers discard.
  EXPECT_TRUE(p.lbpme) << "READ CAPACITY(16) does not set LBPME";
  EXPECT_TRUE(p.lbpu) << "VPD 0xB2 does not advertise UNMAP";
  EXPECT_TRUE(p.lbpws) << "VPD 0xB2 does not advertise WRITE SAME(16) with UNMAP";
  EXPECT_GT(p.max_unmap_lba_count, 0u) << "VPD 0xB0 allows no UNMAP";

  // 16 MiB to delete at 0, 1 MiB to keep at 32 MiB.
  for (uint64_t mib = 0; mib < 16; ++mib) {
    ASSERT_TRUE(session->Write(mib * kBlocksPerMiB, Chunk('d'), &error)) << error;
  }
  ASSERT_TRUE(session->Write(32 * kBlocksPerMiB, Chunk('k'), &error)) << error;
  const int64_t written = AllocatedBytes(Image(v));
  ASSERT_GE(written, static_cast<int64_t>(17 * kMiB)) << "the writes did not allocate the image";

  ASSERT_TRUE(session->Unmap(0, 16 * kBlocksPerMiB, &error)) << "UNMAP refused: " << error;
  const int64_t trimmed = AllocatedBytes(Image(v));
  // At least 90 % of what was unmapped is given back.
  EXPECT_LE(written - trimmed, static_cast<int64_t>(17 * kMiB)) << "more was freed than was unmapped";
  EXPECT_GE(written - trimmed, static_cast<int64_t>(16 * kMiB * 9 / 10))
      << "allocated " << written << " bytes before the UNMAP, " << trimmed << " after";

  std::string block;
  ASSERT_TRUE(session->Read(5 * kBlocksPerMiB, &block, &error)) << error;
  EXPECT_EQ(block, std::string(512, '\0')) << "an unmapped block does not read zeros (tgtd reports LBPRZ)";
  ASSERT_TRUE(session->Read(32 * kBlocksPerMiB + 7, &block, &error)) << error;
  EXPECT_EQ(block, std::string(512, 'k')) << "data that was not unmapped changed";
}

// A LUN an older blockcsi made thick is switched in place: the logged-in
// session stays and sees LBPME on its next READ CAPACITY(16), and the LUN
// is not re-created (no repair but the switch).
TEST_P(ThinLunTest, ReconcileMakesAThickLunThinUnderItsSession) {
  VolumeRecord v;
  auto session = VolumeWithSession("pvc-thick", 16, &v);
  ASSERT_NE(session, nullptr);
  auto live = ParseTgtadmTargets(tgtd_->ShowTargets());
  ASSERT_TRUE(live.ok());
  std::string tid;
  for (const auto& t : *live) {
    if (t.iqn == v.target_iqn) tid = std::to_string(t.tid);
  }
  ASSERT_FALSE(tid.empty());
  int code = -1;
  tgtd_->Tgtadm(
      {"--op", "update", "--mode", "logicalunit", "--tid", tid, "--lun", "1", "--params", "thin_provisioning=0"},
      &code);
  ASSERT_EQ(code, 0);
  IscsiClient::Provisioning p;
  std::string error;
  ASSERT_TRUE(session->ReadProvisioning(&p, &error)) << error;
  ASSERT_FALSE(p.lbpme) << "tgtd did not make the LUN thick";
  ASSERT_TRUE(session->Write(3, std::string(512, 'w'), &error)) << error;

  auto repairs = backend_->ReconcileNow();
  ASSERT_TRUE(repairs.ok()) << repairs.status().ToString();
  EXPECT_EQ(*repairs, std::vector<std::string>{"made LUN 1 of " + v.target_iqn + " thin"});
  auto lun = LiveLun(v.target_iqn);
  ASSERT_TRUE(lun.has_value());
  EXPECT_TRUE(lun->thin_provisioning);
  ASSERT_TRUE(session->ReadProvisioning(&p, &error)) << "the session did not survive the switch: " << error;
  EXPECT_TRUE(p.lbpme);
  EXPECT_TRUE(p.lbpu);
  std::string block;
  ASSERT_TRUE(session->Read(3, &block, &error)) << error;
  EXPECT_EQ(block, std::string(512, 'w'));

  repairs = backend_->ReconcileNow();
  ASSERT_TRUE(repairs.ok()) << repairs.status().ToString();
  EXPECT_TRUE(repairs->empty()) << "a thin LUN was changed again: " << ::testing::PrintToString(*repairs);
}

INSTANTIATE_TEST_SUITE_P(BothControls, ThinLunTest, ::testing::Values(TgtdDriven::kBySocket, TgtdDriven::kByTgtadm),
                         [](const ::testing::TestParamInfo<TgtdDriven>& info) {
                           return info.param == TgtdDriven::kBySocket ? "Socket" : "Tgtadm";
                         });

}  // namespace
}  // namespace blockcsi
