// The one leak checker of the test suites (issue #15): what a node, a
// target and a pool hold that a plugin under test can create — processes,
// mounts, loop devices (also those whose backing file is gone), attach
// records, tgtd targets/LUNs/ACLs/accounts (bound or not)/sessions, RBD watchers and pool files — taken
// as a snapshot before a call and compared right after it, before any
// cleanup, so that "a failed call leaves nothing behind" is asserted on the
// machine's real state. Not thread-safe; needs root to see loop devices and
// other users' processes.
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "support/tgtd_harness.h"

namespace blockcsi::testing {

// Where to look. Empty fields are not looked at.
struct LeakScope {
  // The test's own directory: mounts under it, loop devices whose backing
  // file is (or was, before it was deleted) under it, processes naming it.
  std::string dir;
  // Processes naming this volume anywhere in their command line (a bridge
  // names the volume it serves).
  std::string volume_id;
  // The node's attach records: <state_dir>/attachments/*.
  std::string state_dir;
  // The pool's files: volumes/, snapshots/, images/ and tmp/ under it.
  std::string pool_dir;
  // tgtd's live configuration: targets, LUNs, ACL entries, accounts, sessions.
  const TgtdHarness* tgtd = nullptr;
  // RBD images ("pool/image") whose watchers are looked at: a librbd client
  // left open (a bridge's RBD session) watches its image. An image that is
  // gone has none. `rbd_command` is the argv that reaches the cluster, e.g.
  // {"rbd", "-c", conf, "--id", user, "--keyring", keyring}.
  std::vector<std::string> rbd_images;
  std::vector<std::string> rbd_command;
  // A pool whose images and snapshots (`rbd ls -l`) are looked at: a create
  // that failed for good must leave no image, and a clone no temporary
  // snapshot. Reads the whole pool: a test that sets it must not run beside
  // another that changes the pool (ctest RUN_SERIAL).
  std::string rbd_pool;
  // Images ("pool/image") whose metadata keys are looked at.
  std::vector<std::string> rbd_metadata_images;
  // The test's own long-running processes (the plugin, an agent): they name
  // the directory too, and a restart gives them a new pid.
  std::vector<pid_t> ignore_pids;
};

// One line per object, e.g. "mount /tmp/x/staging/vol-1 (ext4)",
// "loop /dev/loop3 <- /tmp/x/bridge/vol-1/disk (deleted)",
// "tgtd acl iqn...:vol-1 iqn...:node:n1".
struct LeakSnapshot {
  std::set<std::string> items;
  // The parts of the scope this snapshot could not read, e.g. "unreadable
  // tgtd (control port 1234): ..." for a tgtd that did not answer tgtadm, or
  // an RBD pool `rbd ls` failed on. A part that cannot be read would look
  // empty, hence clean: NewItems reports each, whatever `before` held.
  std::set<std::string> unreadable;
};

LeakSnapshot TakeLeakSnapshot(const LeakScope& scope);
// Several nodes as one snapshot (each its own directory and state
// directory, e.g. the two nodes of an e2e test): the union of their items.
LeakSnapshot TakeLeakSnapshot(const std::vector<LeakScope>& scopes);

// The loop devices ("/dev/loopN", backing file as the kernel shows it) whose
// backing file is or was (deleted, lazily unmounted) under `dir`, and those
// stacked on them; stacked ones first, so that detaching in order works.
std::vector<std::pair<std::string, std::string>> LoopDevicesBackedUnder(const std::string& dir);

// What `after` holds that `before` did not, sorted, then every part of the
// scope `after` could not read; empty when nothing leaked and all was read.
std::vector<std::string> NewItems(const LeakSnapshot& before, const LeakSnapshot& after);

// NewItems against a fresh snapshot of `scope`, retaken for up to 2 s while
// anything is new. Why: `losetup -d` on a loop device that is still open (the
// last reference of a just-unmounted filesystem) only marks it autoclear; the
// kernel unbinds it a moment later. A real leak is still there after 2 s.
std::vector<std::string> NewItemsAfterSettling(const LeakSnapshot& before, const LeakScope& scope);
std::vector<std::string> NewItemsAfterSettling(const LeakSnapshot& before, const std::vector<LeakScope>& scopes);

// `items` without tgtd's targets, LUNs, ACL entries and accounts, sessions
// kept: for tests that set up the target by hand (an "array"), where the
// node side can leak a session but never a target.
std::vector<std::string> WithoutTgtdSetUp(std::vector<std::string> items);

// What only a node makes: `items` without the pool's files and tgtd's
// set-up (WithoutTgtdSetUp), sessions and unreadable parts kept. For a
// check while the controller side still holds a case's volumes (created
// and published until the CO deletes them), before a node-side cleanup.
std::vector<std::string> NodeSideItems(std::vector<std::string> items);

// NewItemsAfterSettling of what `keep` keeps (e.g. NodeSideItems): the
// items it drops neither count nor make the check wait.
std::vector<std::string> NewItemsAfterSettling(const LeakSnapshot& before, const LeakScope& scope,
                                               std::vector<std::string> (*keep)(std::vector<std::string>));

// For failure messages: the items one per line, or "nothing".
std::string DescribeItems(const std::vector<std::string>& items);

// gtest's verdict on NewItemsAfterSettling: success when nothing new is left
// in `scope` since `before`, else a failure listing what was left behind
// after `after` (use as EXPECT_TRUE(NothingLeftSince(...))).
::testing::AssertionResult NothingLeftSince(const LeakSnapshot& before, const LeakScope& scope,
                                            const std::string& after);

// The parts of `tgtadm --op show --mode target` output the checker keeps.
// Pure (tested against captured output).
std::set<std::string> TgtdItems(const std::string& show_target_output);

// "tgtd user <user>" for each account of `tgtadm --op show --mode
// account` output, bound to a target or not. Pure.
std::set<std::string> TgtdAccountItems(const std::string& show_account_output);

// "rbd watcher <image> <address>" for each watcher in `rbd status --format
// json` output; nothing for output that is not such JSON. Pure.
std::set<std::string> RbdWatcherItems(const std::string& image, const std::string& status_json);

// "rbd image <pool>/<image>" and "rbd snapshot <pool>/<image>@<snap>" for each
// entry of `rbd ls -l --format json <pool>` output; nothing for other text. Pure.
std::set<std::string> RbdPoolItems(const std::string& pool, const std::string& ls_json);

// "rbd metadata <image> <key>" for each key of `rbd image-meta list --format
// json <image>` output; nothing for other text. Pure.
std::set<std::string> RbdMetadataItems(const std::string& image, const std::string& meta_json);

}  // namespace blockcsi::testing
