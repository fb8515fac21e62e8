#include "support/leak_check.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/executor.h"
#include "common/mounter.h"
#include "support/test_util.h"

namespace blockcsi::testing {
namespace {

bool Under(const std::string& path, const std::string& dir) {
  return !dir.empty() && (path == dir || path.rfind(dir + "/", 0) == 0);
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  size_t b = s.find_first_not_of(' ');
  return b == std::string::npos ? "" : s.substr(b);
}

void AddMounts(const LeakScope& scope, std::set<std::string>* out) {
  if (scope.dir.empty()) return;
  for (const auto& e : ParseMountInfo(ReadFileOrEmpty("/proc/self/mountinfo"))) {
    if (Under(e.target, scope.dir)) out->insert("mount " + e.target + " (" + e.fs_type + ")");
  }
}

}  // namespace

// Through sysfs: a loop device whose backing file was deleted (the image
// removed) still holds a device and shows its old path with " (deleted)";
// one whose FUSE mount was lazily unmounted shows "/lun". A loop stacked on
// one of ours (the node's read-only layer: a loop device whose backing file
// is /dev/loopN) is ours too, whoever else stacks loops on this machine.
std::vector<std::pair<std::string, std::string>> LoopDevicesBackedUnder(const std::string& dir) {
  std::vector<std::pair<std::string, std::string>> out;
  if (dir.empty()) return out;
  std::map<std::string, std::string> backing_of;  // loop name -> backing file as sysfs shows it
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/sys/block", ec)) {
    std::string name = entry.path().filename();
    if (name.rfind("loop", 0) != 0) continue;
    std::string backing = Trim(ReadFileOrEmpty(entry.path() / "loop" / "backing_file"));
    if (!backing.empty()) backing_of[name] = backing;
  }
  std::set<std::string> ours;
  for (bool grew = true; grew;) {
    grew = false;
    for (const auto& [name, backing] : backing_of) {
      if (ours.contains(name)) continue;
      std::string path = backing;
      if (path.size() > 10 && path.ends_with(" (deleted)")) path.resize(path.size() - 10);
      // A bridge's FUSE file whose mount was lazily unmounted shows only its
      // path inside the detached mount, "/lun": no directory to match, and
      // an orphan on this machine whoever made it, so it counts.
      bool orphaned_bridge_file = path == "/lun";
      if (Under(path, dir) || orphaned_bridge_file || (path.rfind("/dev/", 0) == 0 && ours.contains(path.substr(5)))) {
        ours.insert(name);
        out.emplace_back("/dev/" + name, backing);
        grew = true;
      }
    }
  }
  // Stacked ones were found last: detach them first.
  std::reverse(out.begin(), out.end());
  return out;
}

namespace {

void AddLoops(const LeakScope& scope, std::set<std::string>* out) {
  for (const auto& [device, backing] : LoopDevicesBackedUnder(scope.dir))
    out->insert("loop " + device + " <- " + backing);
}

void AddProcesses(const LeakScope& scope, std::set<std::string>* out) {
  if (scope.dir.empty() && scope.volume_id.empty()) return;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    std::string name = entry.path().filename();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(name));
    if (pid == ::getpid() ||
        std::find(scope.ignore_pids.begin(), scope.ignore_pids.end(), pid) != scope.ignore_pids.end()) {
      continue;
    }
    std::string cmdline = ReadFileOrEmpty(entry.path() / "cmdline");
    if (cmdline.empty()) continue;  // a kernel thread or gone
    bool names = (!scope.dir.empty() && cmdline.find(scope.dir) != std::string::npos) ||
                 (!scope.volume_id.empty() && cmdline.find(scope.volume_id) != std::string::npos);
    if (!names) continue;
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    out->insert("process " + name + ": " + Trim(cmdline).substr(0, 200));
  }
}

void AddFiles(const std::string& dir, const std::string& label, std::set<std::string>* out) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    out->insert(label + entry.path().filename().string());
  }
}

}  // namespace

std::set<std::string> TgtdItems(const std::string& text) {
  std::set<std::string> out;
  std::istringstream lines(text);
  std::string line, target, section;
  while (std::getline(lines, line)) {
    if (line.rfind("Target ", 0) == 0) {
      size_t colon = line.find(": ");
      target = colon == std::string::npos ? line : line.substr(colon + 2);
      section.clear();
      out.insert("tgtd target " + target);
      continue;
    }
    if (line.rfind("    ", 0) == 0 && line.size() > 4 && line[4] != ' ') {
      section = Trim(line);
      continue;
    }
    std::string item = Trim(line);
    if (item.empty()) continue;
    if (section == "ACL information:") {
      out.insert("tgtd acl " + target + " " + item);
    } else if (section == "Account information:") {
      out.insert("tgtd account " + target + " " + item);
    } else if (section == "I_T nexus information:" && item.rfind("Initiator: ", 0) == 0) {
      std::string initiator = item.substr(11);
      initiator = initiator.substr(0, initiator.find(' '));
      out.insert("tgtd session " + target + " " + initiator);
    } else if (section == "LUN information:" && item.rfind("LUN: ", 0) == 0) {
      out.insert("tgtd lun " + target + " " + item.substr(5));
    }
  }
  return out;
}

std::set<std::string> TgtdAccountItems(const std::string& text) {
  std::set<std::string> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("    ", 0) != 0) continue;  // "Account list:" and anything unindented
    std::string user = Trim(line);
    if (!user.empty()) out.insert("tgtd user " + user);
  }
  return out;
}

std::set<std::string> RbdWatcherItems(const std::string& image, const std::string& status_json) {
  std::set<std::string> out;
  auto j = nlohmann::json::parse(status_json, nullptr, false);
  if (!j.is_object() || !j.contains("watchers") || !j["watchers"].is_array()) return out;
  for (const auto& w : j["watchers"]) {
    if (w.is_object()) out.insert("rbd watcher " + image + " " + w.value("address", "?"));
  }
  return out;
}

std::set<std::string> RbdPoolItems(const std::string& pool, const std::string& ls_json) {
  std::set<std::string> out;
  auto j = nlohmann::json::parse(ls_json, nullptr, false);
  if (!j.is_array()) return out;
  for (const auto& e : j) {
    if (!e.is_object() || !e.contains("image") || !e["image"].is_string()) continue;
    std::string image = pool + "/" + e["image"].get<std::string>();
    if (e.contains("snapshot") && e["snapshot"].is_string()) {
      out.insert("rbd snapshot " + image + "@" + e["snapshot"].get<std::string>());
    } else {
      out.insert("rbd image " + image);
    }
  }
  return out;
}

std::set<std::string> RbdMetadataItems(const std::string& image, const std::string& meta_json) {
  std::set<std::string> out;
  auto j = nlohmann::json::parse(meta_json, nullptr, false);
  if (!j.is_object()) return out;
  for (const auto& [key, value] : j.items()) out.insert("rbd metadata " + image + " " + key);
  return out;
}

namespace {

// `rbd <the scope's connection args> <args...>`: its stdout, or nothing when
// it failed (an image that is gone has no watchers and no metadata).
std::optional<std::string> RunRbd(const LeakScope& scope, const std::vector<std::string>& args) {
  Command c(scope.rbd_command[0]);
  for (size_t i = 1; i < scope.rbd_command.size(); ++i) c.Arg(scope.rbd_command[i]);
  for (const auto& a : args) c.Arg(a);
  c.Timeout(std::chrono::seconds(60));
  auto r = MakeProcessExecutor()->Run(c);
  if (!r.ok() || r->exit_code != 0) return std::nullopt;
  return r->stdout_text;
}

void AddRbdPool(const LeakScope& scope, std::set<std::string>* out, std::set<std::string>* unreadable) {
  if (scope.rbd_command.empty()) return;
  if (!scope.rbd_pool.empty()) {
    if (auto ls = RunRbd(scope, {"ls", "-l", "--format", "json", scope.rbd_pool})) {
      for (auto& item : RbdPoolItems(scope.rbd_pool, *ls)) out->insert(item);
    } else {
      unreadable->insert("unreadable rbd pool " + scope.rbd_pool + ": rbd ls failed");
    }
  }
  for (const auto& image : scope.rbd_metadata_images) {
    if (auto meta = RunRbd(scope, {"image-meta", "list", "--format", "json", image})) {
      for (auto& item : RbdMetadataItems(image, *meta)) out->insert(item);
    }
  }
}

// A failed `rbd status` (the image is gone, which is what a deleted volume
// should be) adds nothing; the images that exist are read.
void AddRbdWatchers(const LeakScope& scope, std::set<std::string>* out) {
  if (scope.rbd_command.empty()) return;
  for (const auto& image : scope.rbd_images) {
    auto status = RunRbd(scope, {"status", "--format", "json", image});
    if (status) {
      for (auto& item : RbdWatcherItems(image, *status)) out->insert(item);
    }
  }
}

// tgtd's targets (LUNs, ACLs, accounts, sessions) and its accounts. A
// tgtadm that fails (tgtd dead, stopped, or not answering on its control
// port) prints nothing, which would read as "nothing left": it is recorded
// as unreadable instead, so the check fails closed.
void AddTgtd(const TgtdHarness& tgtd, LeakSnapshot* out) {
  for (const char* mode : {"target", "account"}) {
    int exit_code = 0;
    const std::string text = tgtd.Tgtadm({"--op", "show", "--mode", mode}, &exit_code);
    if (exit_code != 0) {
      out->unreadable.insert("unreadable tgtd (control port " + std::to_string(tgtd.control_port()) +
                             "): tgtadm --op show --mode " + mode + " exited " + std::to_string(exit_code));
      return;
    }
    // An account unbound from its target (or never bound) is not in the
    // targets' listing, yet it keeps a CHAP secret in tgtd.
    for (auto& item : std::string(mode) == "target" ? TgtdItems(text) : TgtdAccountItems(text)) out->items.insert(item);
  }
}

void AddScope(const LeakScope& scope, LeakSnapshot* out) {
  std::set<std::string>* items = &out->items;
  AddMounts(scope, items);
  AddLoops(scope, items);
  AddProcesses(scope, items);
  // The path, not only the file name: two nodes' records of one volume
  // have the same name.
  if (!scope.state_dir.empty()) AddFiles(scope.state_dir + "/attachments", "record " + scope.state_dir + ": ", items);
  if (!scope.pool_dir.empty()) {
    // snapshots/: a snapshot's record outlives its volume unless deleted.
    for (const char* sub : {"volumes", "snapshots", "images", "tmp"}) {
      AddFiles(scope.pool_dir + "/" + sub, std::string("pool ") + sub + "/", items);  // "pool images/vol-x.img"
    }
  }
  if (scope.tgtd != nullptr) AddTgtd(*scope.tgtd, out);
  AddRbdWatchers(scope, items);
  AddRbdPool(scope, items, &out->unreadable);
}

}  // namespace

LeakSnapshot TakeLeakSnapshot(const std::vector<LeakScope>& scopes) {
  LeakSnapshot s;
  for (const auto& scope : scopes) AddScope(scope, &s);
  // A process of one node's scope may be another's ignored long-running
  // process (a node plugin naming the shared root): ignored in any, ignored.
  std::set<pid_t> ignored;
  for (const auto& scope : scopes) ignored.insert(scope.ignore_pids.begin(), scope.ignore_pids.end());
  std::erase_if(s.items, [&](const std::string& item) {
    if (item.rfind("process ", 0) != 0) return false;
    return ignored.contains(static_cast<pid_t>(std::atol(item.c_str() + 8)));
  });
  return s;
}

LeakSnapshot TakeLeakSnapshot(const LeakScope& scope) { return TakeLeakSnapshot(std::vector<LeakScope>{scope}); }

std::vector<std::string> NewItems(const LeakSnapshot& before, const LeakSnapshot& after) {
  std::vector<std::string> out;
  std::set_difference(after.items.begin(), after.items.end(), before.items.begin(), before.items.end(),
                      std::back_inserter(out));
  out.insert(out.end(), after.unreadable.begin(), after.unreadable.end());
  return out;
}

namespace {

std::vector<std::string> KeepAll(std::vector<std::string> items) { return items; }

std::vector<std::string> Settled(const LeakSnapshot& before, const std::vector<LeakScope>& scopes,
                                 std::vector<std::string> (*keep)(std::vector<std::string>)) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  std::vector<std::string> left = keep(NewItems(before, TakeLeakSnapshot(scopes)));
  while (!left.empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    left = keep(NewItems(before, TakeLeakSnapshot(scopes)));
  }
  return left;
}

}  // namespace

std::vector<std::string> NewItemsAfterSettling(const LeakSnapshot& before, const std::vector<LeakScope>& scopes) {
  return Settled(before, scopes, KeepAll);
}

std::vector<std::string> NewItemsAfterSettling(const LeakSnapshot& before, const LeakScope& scope) {
  return Settled(before, {scope}, KeepAll);
}

std::vector<std::string> NewItemsAfterSettling(const LeakSnapshot& before, const LeakScope& scope,
                                               std::vector<std::string> (*keep)(std::vector<std::string>)) {
  return Settled(before, {scope}, keep);
}

std::vector<std::string> WithoutTgtdSetUp(std::vector<std::string> items) {
  std::erase_if(items, [](const std::string& item) {
    return item.rfind("tgtd ", 0) == 0 && item.rfind("tgtd session ", 0) != 0;
  });
  return items;
}

std::vector<std::string> NodeSideItems(std::vector<std::string> items) {
  items = WithoutTgtdSetUp(std::move(items));
  std::erase_if(items, [](const std::string& item) { return item.rfind("pool ", 0) == 0; });
  return items;
}

std::string DescribeItems(const std::vector<std::string>& items) {
  if (items.empty()) return "nothing";
  std::string out;
  for (const auto& i : items) out += "\n  " + i;
  return out;
}

::testing::AssertionResult NothingLeftSince(const LeakSnapshot& before, const LeakScope& scope,
                                            const std::string& after) {
  auto left = NewItemsAfterSettling(before, scope);
  if (left.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "left behind after " << after << ":\n" << DescribeItems(left);
}

}  // namespace blockcsi::testing
