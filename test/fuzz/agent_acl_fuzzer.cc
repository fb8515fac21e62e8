// Fuzz target "agent_acl": arbitrary volume names, initiator
// names and CHAP credentials go through the agent's backend (LocalBackend +
// TgtExporter) driving a scripted tgtd, and after every operation the
// invariant must hold: no target's ACL holds an initiator its volume's record
// does not list, and after a RevokeAccess that succeeded the initiator has no
// session left on that volume's target, whatever alias its logins sent. The scripted tgtd is faithful where an
// injection would live: the "key=value,..." parameters tgtd receives are split on ',' and
// '=' as tgtd does, and `show` prints names raw, newlines and all.
//
// Input: one operation per line, fields separated by '|', "\n" inside a
// field is a newline:
//   C|name                       CreateVolume (4 MiB)
//   G|v|initiator|user|password[|mutual user|mutual password]   GrantAccess
//   R|v|initiator                RevokeAccess
//   K|v                          CheckVolume
//   D|v                          DeleteVolume
//   X                            ReconcileNow
//   L|v|initiator|alias          a login to volume v's target, accepted when
//                                the initiator is in its ACL, carrying that
//                                InitiatorAlias (printed raw, as tgtd does)
// where v picks one of the volumes created so far (modulo their count), and
// "{iqnN}" in a field stands for the target IQN of volume N (an attacker
// learns it from the Volume the agent returns).
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "backend/local/local_backend.h"
#include "backend/local/tgt_exporter.h"
#include "backend/local/tgtd_control.h"
#include "common/logging.h"

#define FUZZ_CHECK(cond)       \
  do {                         \
    if (!(cond)) std::abort(); \
  } while (0)

namespace {

using blockcsi::StatusOr;
using blockcsi::TgtdAnswer;
using blockcsi::TgtdError;
using blockcsi::TgtdRequest;
using Mode = blockcsi::TgtdMode;
using Op = blockcsi::TgtdOp;

// An in-memory tgtd behind the TgtdControl interface. It refuses what
// both real controls refuse (CheckTgtdRequest), then reads the parameters
// from the "key=value,..." text tgtd receives (TgtdParameters), split on ','
// and '=' as tgtd splits it, and answers tgtd's error numbers.
class ScriptedTgtd final : public blockcsi::TgtdControl {
 public:
  struct Target {
    std::string name;
    bool lun = false;
    bool thin = false;   // "Thin-provisioning: Yes" (set by an update)
    uint64_t bytes = 0;  // the backing file's size when the LUN was made
    std::string path, serial;
    std::vector<std::string> in, out, acls;
    struct Session {
      int tsih = 0;
      std::string initiator, alias;
    };
    std::vector<Session> sessions;
  };

  // A login: tgtd checks the ACL, then keeps the alias as sent.
  void Login(const std::string& target_name, const std::string& initiator, const std::string& alias) {
    for (auto& [tid, t] : targets_) {
      if (t.name != target_name) continue;
      if (std::find(t.acls.begin(), t.acls.end(), initiator) == t.acls.end()) return;
      t.sessions.push_back({++last_tsih_, initiator, alias});
    }
  }

  StatusOr<TgtdAnswer> Send(const TgtdRequest& request) override {
    if (auto checked = blockcsi::CheckTgtdRequest(request); !checked.ok()) return checked;
    std::map<std::string, std::string> p;
    std::stringstream ss(blockcsi::TgtdParameters(request));
    for (std::string item; std::getline(ss, item, ',');) {
      auto eq = item.find('=');
      if (eq != std::string::npos) p[item.substr(0, eq)] = item.substr(eq + 1);
    }
    const Mode mode = request.mode;
    const Op op = request.op;
    int tid = request.tid.value_or(-1);
    Target* t = targets_.count(tid) ? &targets_[tid] : nullptr;
    auto fail = [](TgtdError error) { return TgtdAnswer{error, ""}; };
    TgtdAnswer ok;
    if (mode == Mode::kTarget && op == Op::kShow) {
      ok.text = ShowTargets();
    } else if (mode == Mode::kAccount && op == Op::kShow) {
      if (!accounts_.empty()) ok.text = "Account list:\n";
      for (const auto& [name, pw] : accounts_) ok.text += "    " + name + "\n";
    } else if (mode == Mode::kTarget && op == Op::kNew) {
      if (t != nullptr) return fail(TgtdError::kTargetExists);
      targets_[tid].name = p["targetname"];
    } else if (mode == Mode::kTarget && op == Op::kDelete) {
      if (t == nullptr) return fail(TgtdError::kNoTarget);
      targets_.erase(tid);
    } else if (mode == Mode::kTarget && (op == Op::kBind || op == Op::kUnbind)) {
      if (t == nullptr) return fail(TgtdError::kNoTarget);
      std::string who = p.count("initiator-name") ? p["initiator-name"] : p["initiator-address"];
      bool has = std::find(t->acls.begin(), t->acls.end(), who) != t->acls.end();
      if (op == Op::kBind) {
        if (has) return fail(TgtdError::kAclExists);
        t->acls.push_back(who);
      } else {
        if (!has) return fail(TgtdError::kAclDoesNotExist);
        std::erase(t->acls, who);
      }
    } else if (mode == Mode::kLogicalUnit) {
      if (t == nullptr) return fail(TgtdError::kNoTarget);
      if (op == Op::kNew) {
        // tgtd reads the backing file's size once, when it opens it for the
        // new LUN, and shows that size from then on.
        struct stat st {};
        t->lun = true;
        t->thin = false;
        t->path = p["path"];
        t->bytes = ::stat(t->path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
      } else if (op == Op::kDelete) {
        t->lun = false;
      } else if (op == Op::kUpdate) {
        if (!request.scsi_sn.empty()) t->serial = request.scsi_sn;
        if (request.thin_provisioning) t->thin = *request.thin_provisioning;
      }
    } else if (mode == Mode::kAccount && op == Op::kNew) {
      if (accounts_.count(p["user"])) return fail(TgtdError::kUserExists);
      accounts_[p["user"]] = p["password"];
    } else if (mode == Mode::kAccount && op == Op::kDelete) {
      if (!accounts_.erase(p["user"])) return fail(TgtdError::kNoUser);
      for (auto& [id, target] : targets_) {
        std::erase(target.in, p["user"]);
        std::erase(target.out, p["user"]);
      }
    } else if (mode == Mode::kAccount && (op == Op::kBind || op == Op::kUnbind)) {
      if (t == nullptr) return fail(TgtdError::kNoTarget);
      if (!accounts_.count(p["user"])) return fail(TgtdError::kNoUser);
      auto& list = request.outgoing ? t->out : t->in;
      bool has = std::find(list.begin(), list.end(), p["user"]) != list.end();
      if (op == Op::kBind) {
        // tgtd's answers: an incoming account bound twice, any outgoing one
        // while the target has one.
        if (request.outgoing && !list.empty()) return fail(TgtdError::kOutgoingAccountExists);
        if (has) return fail(TgtdError::kUserExists);
        list.push_back(p["user"]);
      } else {
        if (!has) return fail(TgtdError::kNoUser);
        std::erase(list, p["user"]);
      }
    } else if (mode == Mode::kConnection && op == Op::kShow) {
      if (t == nullptr) return fail(TgtdError::kNoTarget);
      for (const auto& session : t->sessions) {  // usr/iscsi/target.c: no alias
        ok.text += "Session: " + std::to_string(session.tsih) +
                   "\n    Connection: 0\n        Initiator: " + session.initiator + "\n        IP Address: 127.0.0.1\n";
      }
    } else if (mode == Mode::kConnection && op == Op::kDelete) {
      if (t == nullptr) return fail(TgtdError::kNoTarget);
      auto gone = std::erase_if(t->sessions, [&](const Target::Session& session) {
        return static_cast<uint64_t>(session.tsih) == request.sid.value_or(0);
      });
      if (gone == 0) return fail(TgtdError::kNoSession);
    } else {
      return fail(TgtdError::kInvalidRequest);
    }
    return ok;
  }

  const std::map<int, Target>& targets() const { return targets_; }

 private:
  // tgtd's format (usr/target.c), names printed raw.
  std::string ShowTargets() const {
    std::string out;
    for (const auto& [tid, t] : targets_) {
      out += "Target " + std::to_string(tid) + ": " + t.name + "\n";
      out += "    System information:\n        Driver: iscsi\n        State: ready\n";
      out += "    I_T nexus information:\n";
      for (const auto& session : t.sessions) {
        // usr/iscsi/session.c: the alias raw, the whole cut at 1,023 bytes.
        std::string info = "            Initiator: " + session.initiator +
                           " alias: " + (session.alias.empty() ? "none" : session.alias) +
                           "\n            Connection: 0\n                IP Address: 127.0.0.1\n";
        out += "        I_T nexus: " + std::to_string(session.tsih) + "\n" + info.substr(0, 1023);
      }
      out += "    LUN information:\n";
      out += "        LUN: 0\n            Type: controller\n            Backing store path: None\n";
      if (t.lun) {
        out += "        LUN: 1\n            Type: disk\n            SCSI SN: " + t.serial + "\n";
        out += "            Size: " + std::to_string(t.bytes / 1000000) + " MB, Block size: 512\n";
        out += std::string("            Thin-provisioning: ") + (t.thin ? "Yes" : "No") + "\n";
        out += "            Backing store path: " + t.path + "\n";
      }
      out += "    Account information:\n";
      for (const auto& a : t.in) out += "        " + a + "\n";
      for (const auto& a : t.out) out += "        " + a + " (outgoing)\n";
      out += "    ACL information:\n";
      for (const auto& a : t.acls) out += "        " + a + "\n";
    }
    return out;
  }

  std::map<int, Target> targets_;
  std::map<std::string, std::string> accounts_;
  int last_tsih_ = 0;
};

std::vector<std::string> Fields(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '|') {
      out.push_back(cur);
      cur.clear();
    } else if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == 'n') {
      cur += '\n';
      ++i;
    } else {
      cur += line[i];
    }
  }
  out.push_back(cur);
  return out;
}

// The invariant, on the scripted tgtd's own state (not through our parser).
void CheckAcls(blockcsi::LocalBackend& backend, const ScriptedTgtd& tgtd) {
  auto page = backend.ListVolumes("", 0);
  FUZZ_CHECK(page.ok());
  std::map<std::string, std::set<std::string>> allowed;  // target IQN -> initiators the record lists
  for (const auto& v : page->items) {
    for (const auto& g : v.grants) allowed[v.target_iqn].insert(g.initiator_iqn);
  }
  for (const auto& [tid, t] : tgtd.targets()) {
    for (const auto& acl : t.acls) FUZZ_CHECK(allowed[t.name].count(acl) == 1);
  }
}

// One pool directory (on tmpfs) for the whole run, emptied after each input:
// every input still opens the backend on an empty pool, without making and
// removing the directory tree each time. Removed when the process exits.
// (Never destroyed: the exit handler that removes it runs after static destructors.)
const std::string& PoolDir() {
  static const std::string* const dir = [] {
    char dir_template[] = "/dev/shm/blockcsi-fuzz-XXXXXX";
    FUZZ_CHECK(::mkdtemp(dir_template) != nullptr);
    auto* made = new std::string(dir_template);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(PoolDir(), ec);
    });
    return made;
  }();
  return *dir;
}

// Everything an input left in the pool, its directories and lock file kept.
void EmptyPool(const std::string& pool) {
  std::error_code ec;
  for (const char* sub : {"/volumes", "/snapshots", "/images", "/tmp"}) {
    for (const auto& entry : std::filesystem::directory_iterator(pool + sub, ec)) {
      std::filesystem::remove_all(entry.path(), ec);
      FUZZ_CHECK(!ec);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static std::string log_sink;
  static bool quiet = [] {
    blockcsi::InitLogging("fuzz", blockcsi::LogFormat::kText, blockcsi::LogLevel::kError);
    blockcsi::SetLogCaptureForTest(&log_sink);
    return true;
  }();
  (void)quiet;
  log_sink.clear();  // what one input logged; kept from growing over the run
  if (size > 4096) return 0;
  const std::string& pool = PoolDir();
  auto tgtd = std::make_shared<ScriptedTgtd>();
  {
    blockcsi::LocalBackendOptions options;
    options.portals = {"127.0.0.1:3260"};
    options.reconcile_interval = std::chrono::milliseconds(0);
    options.overcommit_ratio = 1000;
    auto exporter = std::make_shared<blockcsi::TgtExporter>(tgtd, 1, blockcsi::MachineHost());
    auto opened = blockcsi::LocalBackend::Open(pool, exporter, options);
    FUZZ_CHECK(opened.ok());
    blockcsi::LocalBackend& backend = **opened;
    std::vector<std::string> volumes;
    std::stringstream lines(std::string(reinterpret_cast<const char*>(data), size));
    int ops = 0;
    for (std::string line; std::getline(lines, line) && ops < 32; ++ops) {
      for (size_t n = 0; n < volumes.size() && n < 10; ++n) {
        const std::string key = "{iqn" + std::to_string(n) + "}";
        for (size_t at; (at = line.find(key)) != std::string::npos;) {
          line.replace(at, key.size(), "iqn.2026-11.io.blockcsi:" + volumes[n]);
        }
      }
      auto f = Fields(line);
      auto vol = [&](size_t i) -> std::string {
        if (volumes.empty() || f.size() <= i) return "vol-0000000000000000";
        return volumes[static_cast<size_t>(std::atoi(f[i].c_str())) % volumes.size()];
      };
      auto field = [&](size_t i) { return f.size() > i ? f[i] : std::string(); };
      if (f[0] == "C") {
        blockcsi::CreateVolumeSpec spec;
        spec.name = field(1);
        spec.size_bytes = 4u << 20;
        auto v = backend.CreateVolume(spec);
        if (v.ok()) volumes.push_back(v->id);
      } else if (f[0] == "G") {
        blockcsi::AccessGrant grant;
        grant.initiator_iqn = field(2);
        grant.node_id = "n";
        grant.capability = "rwo";
        grant.chap = {field(3), field(4), field(5), field(6)};
        (void)backend.GrantAccess(vol(1), grant);
      } else if (f[0] == "R") {
        if (backend.RevokeAccess(vol(1), field(2)).ok()) {
          // Fenced: no session of that initiator is left on the target.
          for (const auto& [tid, t] : tgtd->targets()) {
            if (t.name != "iqn.2026-11.io.blockcsi:" + vol(1)) continue;
            for (const auto& session : t.sessions) FUZZ_CHECK(session.initiator != field(2));
          }
        }
      } else if (f[0] == "L") {
        tgtd->Login("iqn.2026-11.io.blockcsi:" + vol(1), field(2), field(3));
      } else if (f[0] == "K") {
        (void)backend.CheckVolume(vol(1));
      } else if (f[0] == "D") {
        (void)backend.DeleteVolume(vol(1));
      } else if (f[0] == "X") {
        (void)backend.ReconcileNow();
      }
      CheckAcls(backend, *tgtd);
    }
  }
  EmptyPool(pool);
  return 0;
}
