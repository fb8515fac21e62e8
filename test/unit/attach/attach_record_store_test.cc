#include "attach/attach_record_store.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/atomic_file.h"
#include "common/fault_points.h"
#include "support/test_util.h"

namespace blockcsi {
namespace {

AttachRecord SampleRecord(const std::string& id) {
  AttachRecord r;
  r.volume_id = id;
  r.connector = "userspace";
  r.transport = "iscsi";
  r.portals = {"192.0.2.10:3260", "[2001:db8::1]:3260"};
  r.target_iqn = "iqn.2026-11.io.blockcsi:vol-1";
  r.lun = 3;
  r.expected_serial = "sn1";
  r.expected_wwn = "6000000000000000000000007f3a9c2e";
  r.initiator_iqn = "iqn.2026-11.io.blockcsi:node:worker-1";
  r.read_only = true;
  r.state = kAttachStateAttached;
  r.device_path = "/dev/loop3";
  r.size_bytes = 1ull << 40;
  r.connector_state = {{"bridge_pid", "1234"}};
  r.annotations = {{"staging_path", "/var/lib/kubelet/x"}};
  return r;
}

TEST(AttachRecordStoreTest, RoundTripsEveryField) {
  testing::TempDir dir;
  AttachRecordStore store(dir.path(), MachineHost());
  ASSERT_TRUE(store.Init().ok());
  AttachRecord r = SampleRecord("vol-1");
  ASSERT_TRUE(store.Put(r).ok());
  auto back = store.Get("vol-1");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(AttachRecordToJson(*back), AttachRecordToJson(r));
  EXPECT_EQ(back->size_bytes, 1ull << 40);
  EXPECT_EQ(back->portals, r.portals);
  EXPECT_EQ(back->annotations, r.annotations);

  struct stat st {};
  ASSERT_EQ(::stat(store.PathFor("vol-1").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat(store.dir().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

TEST(AttachRecordStoreTest, MissingIsNotFoundAndRemoveIsIdempotent) {
  testing::TempDir dir;
  AttachRecordStore store(dir.path(), MachineHost());
  ASSERT_TRUE(store.Init().ok());
  EXPECT_EQ(store.Get("nope").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(store.Remove("nope").ok());
  ASSERT_TRUE(store.Put(SampleRecord("a")).ok());
  EXPECT_TRUE(store.Remove("a").ok());
  EXPECT_EQ(store.Get("a").status().code(), StatusCode::kNotFound);
}

TEST(AttachRecordStoreTest, AnyVolumeIdMapsToOneSafeFileName) {
  for (std::string id : {"pool/vol-1", "../../etc/passwd", ".hidden", "a%2Fb", "vol 1", "üñí"}) {
    std::string name = EscapeVolumeIdForFile(id);
    EXPECT_EQ(name.find('/'), std::string::npos) << id;
    EXPECT_NE(name.front(), '.') << id;
    auto back = UnescapeVolumeIdFromFile(name);
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, id);
  }
  EXPECT_NE(EscapeVolumeIdForFile("a/b"), EscapeVolumeIdForFile("a%2Fb"));
  EXPECT_FALSE(UnescapeVolumeIdFromFile("bad%4").ok());
  EXPECT_FALSE(UnescapeVolumeIdFromFile("bad%zz").ok());
}

TEST(AttachRecordStoreTest, ListSkipsTempAndMalformedFiles) {
  testing::TempDir dir;
  AttachRecordStore store(dir.path(), MachineHost());
  ASSERT_TRUE(store.Init().ok());
  ASSERT_TRUE(store.Put(SampleRecord("a")).ok());
  ASSERT_TRUE(store.Put(SampleRecord("pool/b")).ok());
  std::ofstream(store.dir() + "/c.json.tmp-123") << "{";  // an interrupted write
  std::ofstream(store.dir() + "/d.json") << "{not json";
  auto list = store.List();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].volume_id, "a");
  EXPECT_EQ((*list)[1].volume_id, "pool/b");
  EXPECT_EQ(store.Get("d").status().code(), StatusCode::kDataLoss);
}

// kill -9 inside Put, at each of its crash points: the store then holds the
// old record or the new one, whole, and no temp file is listed as a record.
// A death test in "threadsafe" style re-runs this body in a fresh process,
// where the fault point list ($BLOCKCSI_FAULT_POINT, read once per process)
// is read for the first time inside the statement; the old record is written
// without Put, so nothing before the statement reads it. The re-run makes its
// own TempDir: the parent's directory reaches it through the environment
// (set without overwrite, so the child keeps the parent's).
TEST(AttachRecordStoreDeathTest, KilledInsidePutLeavesTheOldRecordOrTheNew) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  constexpr char kBaseEnv[] = "BLOCKCSI_TEST_RECORD_STORE_BASE";
  testing::TempDir base_dir;
  ::setenv(kBaseEnv, base_dir.path().c_str(), /*overwrite=*/0);
  const std::string base = std::getenv(kBaseEnv);
  for (const char* point :
       {"node.record.temp-written", "node.record.temp-synced", "node.record.renamed", "node.record.dir-synced"}) {
    SCOPED_TRACE(point);
    AttachRecordStore store(base + "/" + point, MachineHost());
    ASSERT_TRUE(store.Init().ok());
    AttachRecord old_record = SampleRecord("vol-1");
    old_record.state = kAttachStateAttaching;
    ASSERT_TRUE(WriteFileAtomically(store.PathFor("vol-1"), AttachRecordToJson(old_record)).ok());
    EXPECT_EXIT(
        {
          ::setenv(kFaultPointEnv, point, 1);
          (void)store.Put(SampleRecord("vol-1"));
          ::_exit(3);  // the point was not reached
        },
        ::testing::KilledBySignal(SIGKILL), "");
    auto listed = store.List();
    ASSERT_TRUE(listed.ok()) << listed.status().ToString();
    ASSERT_EQ(listed->size(), 1u);
    bool renamed = std::string(point) == "node.record.renamed" || std::string(point) == "node.record.dir-synced";
    EXPECT_EQ(listed->front().state, renamed ? kAttachStateAttached : kAttachStateAttaching);
    EXPECT_EQ(listed->front().target_iqn, old_record.target_iqn);
    // The restarted plugin's Init removes what the killed write left.
    ASSERT_TRUE(store.Init().ok());
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(store.dir())) names.push_back(entry.path().filename());
    EXPECT_EQ(names, std::vector<std::string>{EscapeVolumeIdForFile("vol-1") + ".json"});
  }
  ::unsetenv(kBaseEnv);
}

TEST(AttachRecordStoreTest, NoDirectoryMeansNoRecords) {
  testing::TempDir dir;
  AttachRecordStore store(dir.Join("never-created"), MachineHost());
  auto list = store.List();
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE(list->empty());
}

}  // namespace
}  // namespace blockcsi
