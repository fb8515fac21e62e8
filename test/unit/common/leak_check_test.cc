// The shared leak checker's reading of tgtd (test/support/leak_check.h),
// against captured `tgtadm --op show --mode target` output.
#include "support/leak_check.h"

#include <gtest/gtest.h>

#include <set>

#include "support/test_util.h"

namespace blockcsi {
namespace {

TEST(LeakCheckTest, TgtdItemsNameTargetsLunsAclsAccountsAndSessions) {
  auto items = testing::TgtdItems(testing::ReadFileOrEmpty(testing::TestDataPath("tgtadm/show_target_sessions.txt")));
  const std::string t1 = "iqn.2026-11.io.blockcsi:vol-0123456789abcdef";
  const std::string t2 = "iqn.2026-11.io.blockcsi:vol-1111111111111111";
  for (const std::string& want :
       std::vector<std::string>{"tgtd target " + t1, "tgtd lun " + t1 + " 1", "tgtd account " + t1 + " alice",
                                "tgtd acl " + t1 + " iqn.2026-11.io.blockcsi:node:n1",
                                "tgtd session " + t1 + " iqn.2026-11.io.blockcsi:node:n1",
                                "tgtd acl " + t2 + " iqn.2026-11.io.blockcsi:node:n2",
                                std::string("tgtd target iqn.2003-01.org.example:foreign")}) {
    EXPECT_TRUE(items.count(want)) << want;
  }
  for (const auto& item : items) {
    EXPECT_EQ(item.find("Backing store"), std::string::npos) << item;
    EXPECT_EQ(item.find("IP Address"), std::string::npos) << item;
  }
}

// An account left in tgtd after its target is gone is in no target's
// listing: the checker reads `--mode account` too.
TEST(LeakCheckTest, TgtdAccountItemsNameEveryAccountBoundOrNot) {
  auto items = testing::TgtdAccountItems("Account list:\n    alice\n    bob-mutual\n");
  EXPECT_EQ(items, (std::set<std::string>{"tgtd user alice", "tgtd user bob-mutual"}));
  EXPECT_TRUE(testing::TgtdAccountItems("Account list:\n").empty());
  EXPECT_TRUE(testing::TgtdAccountItems("tgtadm: can't send the request to the tgt daemon\n").empty());
}

TEST(LeakCheckTest, NewItemsAreWhatAppearedSinceTheFirstSnapshot) {
  testing::LeakSnapshot before{{"mount /a (ext4)", "record vol-1.json"}, {}};
  testing::LeakSnapshot after{{"mount /a (ext4)", "loop /dev/loop3 <- /x/lun (deleted)", "record vol-2.json"}, {}};
  EXPECT_EQ(testing::NewItems(before, after),
            (std::vector<std::string>{"loop /dev/loop3 <- /x/lun (deleted)", "record vol-2.json"}));
  EXPECT_TRUE(testing::NewItems(after, after).empty());
}

// A part of the scope the checker could not read (a tgtd that did not
// answer) proves nothing: reported in every diff, also when the snapshot
// before could not read it either.
TEST(LeakCheckTest, AnUnreadablePartIsReportedWhateverTheSnapshotBeforeHeld) {
  const std::string blind = "unreadable tgtd (control port 7): tgtadm --op show --mode target exited 107";
  testing::LeakSnapshot readable{{"mount /a (ext4)"}, {}};
  testing::LeakSnapshot unreadable{{"mount /a (ext4)"}, {blind}};
  EXPECT_EQ(testing::NewItems(readable, unreadable), std::vector<std::string>{blind});
  EXPECT_EQ(testing::NewItems(unreadable, unreadable), std::vector<std::string>{blind});
  EXPECT_TRUE(testing::NewItems(unreadable, readable).empty());
  // Fixtures that drop the target set-up they made by hand keep it.
  EXPECT_EQ(testing::WithoutTgtdSetUp({blind, "tgtd target iqn.x"}), std::vector<std::string>{blind});
}

// `rbd status --format json` as Ceph 16 prints it: one watcher per open
// librbd client (a bridge's RBD session).
TEST(LeakCheckTest, RbdWatcherItemsNameEachWatcherOfTheImage) {
  const std::string status = R"({"watchers":[{"address":"10.0.0.5:0/1234","client":4151,"cookie":140}, )"
                             R"({"address":"10.0.0.6:0/99","client":4200,"cookie":7}]})";
  EXPECT_EQ(testing::RbdWatcherItems("rbd/img", status),
            (std::set<std::string>{"rbd watcher rbd/img 10.0.0.5:0/1234", "rbd watcher rbd/img 10.0.0.6:0/99"}));
  EXPECT_TRUE(testing::RbdWatcherItems("rbd/img", R"({"watchers":[]})").empty());
  // Not JSON (an error text): nothing, the caller decides what a failed status means.
  EXPECT_TRUE(testing::RbdWatcherItems("rbd/img", "rbd: error opening image img: (2) No such file").empty());
}

// `rbd ls -l --format json` and `rbd image-meta list --format json` as
// Ceph 16 prints them: a snapshot is an entry of its own naming its image.
TEST(LeakCheckTest, RbdPoolItemsNameImagesAndSnapshotsAndMetadataKeys) {
  const std::string ls = R"([{"image":"csi-vol-a","id":"10a2","size":67108864,"format":2},)"
                         R"({"image":"csi-vol-a","id":"10a2","snapshot":"csi-tmp-b","snapshot_id":4,)"
                         R"("size":67108864,"format":2,"protected":"true"}])";
  EXPECT_EQ(testing::RbdPoolItems("rbd", ls),
            (std::set<std::string>{"rbd image rbd/csi-vol-a", "rbd snapshot rbd/csi-vol-a@csi-tmp-b"}));
  EXPECT_TRUE(testing::RbdPoolItems("rbd", "[]").empty());
  EXPECT_TRUE(testing::RbdPoolItems("rbd", "rbd: error opening pool 'x': (2) No such file").empty());
  EXPECT_EQ(testing::RbdMetadataItems("rbd/csi-vol-a", R"({"blockcsi.name":"pvc-1","blockcsi.param.fs":"xfs"})"),
            (std::set<std::string>{"rbd metadata rbd/csi-vol-a blockcsi.name",
                                   "rbd metadata rbd/csi-vol-a blockcsi.param.fs"}));
  EXPECT_TRUE(testing::RbdMetadataItems("rbd/csi-vol-a", "{}").empty());
}

}  // namespace
}  // namespace blockcsi
