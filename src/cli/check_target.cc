// `blockctl check-target PORTAL`: can this node reach a target, log in, see
// the LUN? Each step is timed and the failure is named in plain words. Uses
// libiscsi, so it works on any node, with or without a kernel initiator.
#include <grpcpp/grpcpp.h>
#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <chrono>
#include <nlohmann/json.hpp>
#include <ostream>

#include "attach/attach_record_store.h"
#include "cli/table.h"
#include "cli/verb.h"
#include "common/atomic_file.h"
#include "common/endpoint.h"
#include "common/host.h"
#include "contract/initiator.h"
#include "csi.grpc.pb.h"
#include "node/node_wiring.h"

namespace blockcsi::cli {
namespace {

struct StepResult {
  std::string name;
  bool ok = false;
  double millis = 0;
  std::string detail;
};

class IscsiContext {
 public:
  IscsiContext(const std::string& initiator, bool discovery) : ctx_(iscsi_create_context(initiator.c_str())) {
    if (ctx_ == nullptr) return;
    iscsi_set_session_type(ctx_, discovery ? ISCSI_SESSION_DISCOVERY : ISCSI_SESSION_NORMAL);
    iscsi_set_header_digest(ctx_, ISCSI_HEADER_DIGEST_NONE_CRC32C);
    // A diagnosis must answer promptly and never sit in libiscsi's reconnect loop.
    iscsi_set_timeout(ctx_, 10);
    iscsi_set_reconnect_max_retries(ctx_, 0);
  }
  ~IscsiContext() {
    if (ctx_ != nullptr) {
      if (logged_in_) iscsi_logout_sync(ctx_);
      iscsi_destroy_context(ctx_);
    }
  }
  IscsiContext(const IscsiContext&) = delete;
  IscsiContext& operator=(const IscsiContext&) = delete;
  iscsi_context* get() { return ctx_; }
  std::string error() {
    std::string text = ctx_ != nullptr ? iscsi_get_error(ctx_) : "cannot create libiscsi context";
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    return text;
  }
  void set_logged_in() { logged_in_ = true; }

 private:
  iscsi_context* ctx_;
  bool logged_in_ = false;
};

std::string SenseText(const scsi_task* task) {
  return std::string(scsi_sense_key_str(task->sense.key)) + "/" + scsi_sense_ascq_str(task->sense.ascq);
}

// The login failure classes a target reports (RFC 3720 status class 2).
std::string ClassifyLoginError(const std::string& error) {
  if (error.find("Authentication failure") != std::string::npos) return "chap-failed";
  if (error.find("Target not found") != std::string::npos || error.find("Authorization failure") != std::string::npos ||
      error.find("not authorized") != std::string::npos) {
    return "refused-by-acl";
  }
  if (error.find("connect") != std::string::npos || error.find("Connection refused") != std::string::npos) {
    return "unreachable";
  }
  return "login-failed";
}

struct NodeIdChoice {
  std::string id;
  std::string source;  // for the operator: where the id came from
};

// The running plugin knows best (NodeGetInfo on --endpoint); a stopped one
// left its id in the state dir (node-id, else the initiator name of any
// attach record); a node named after its host is the last guess.
StatusOr<NodeIdChoice> FindNodeId(const GlobalOptions& options) {
  if (auto socket = ParseUnixEndpoint(options.endpoint); socket.ok() && options.host->Exists(*socket)) {
    auto channel = grpc::CreateChannel("unix:" + *socket, grpc::InsecureChannelCredentials());
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
    csi::v1::NodeGetInfoResponse info;
    grpc::Status st = csi::v1::Node::NewStub(channel)->NodeGetInfo(&ctx, csi::v1::NodeGetInfoRequest(), &info);
    if (st.ok() && ValidateNodeId(info.node_id()).ok()) {
      return NodeIdChoice{info.node_id(), "the running plugin's NodeGetInfo (" + options.endpoint + ")"};
    }
  }
  const std::string recorded = options.state_dir + "/" + kNodeIdFileName;
  if (auto text = options.host->ReadFile(recorded); text.ok()) {
    std::string id = *text;
    while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
    if (ValidateNodeId(id).ok()) return NodeIdChoice{id, "the state dir (" + recorded + ")"};
  }
  const std::string records_dir = options.state_dir + "/attachments";
  auto names = options.host->ListDir(records_dir);
  for (const std::string& name : names.ok() ? *names : std::vector<std::string>{}) {
    const std::string path = records_dir + "/" + name;
    auto text = options.host->ReadFile(path);
    if (!text.ok()) continue;
    auto record = AttachRecordFromJson(*text, path);
    if (!record.ok()) continue;
    if (auto id = NodeIdFromInitiatorIqn(record->initiator_iqn); id && ValidateNodeId(*id).ok()) {
      return NodeIdChoice{*id, "the state dir's attach record " + path};
    }
  }
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0) {
    std::string id = host;
    // Kubernetes names a node after its host name, lower-cased.
    std::transform(id.begin(), id.end(), id.begin(), [](unsigned char c) { return std::tolower(c); });
    if (ValidateNodeId(id).ok()) return NodeIdChoice{id, "the host name"};
  }
  return InvalidArgument("cannot tell this node's id: no plugin answers on " + options.endpoint + ", no " + recorded +
                         " and the host name is not a node name");
}

class CheckTargetVerb final : public Verb {
 public:
  std::string Name() const override { return "check-target"; }
  std::string Summary() const override {
    return "Discover, log in, inquire and read capacity on a target, with latencies and a diagnosis";
  }
  void Configure(CLI::App& c) override {
    c.add_option("portal", portal_, "Target portal HOST:PORT")->required();
    c.add_option("--iqn", iqn_, "Target IQN (default: the first one discovery returns)");
    c.add_option("--lun", lun_, "LUN to inquire")->capture_default_str();
    c.add_option("--initiator", initiator_, "Initiator name to log in as (default: this node's, from --node-id)");
    c.add_option("--node-id", node_id_,
                 "Node id whose initiator name to use (default: the running plugin's NodeGetInfo, else the state "
                 "dir's, else the host name)");
    c.add_option("--chap-user", chap_user_, "CHAP user name");
    c.add_option("--chap-secret-file", chap_secret_file_, "File holding the CHAP secret (never on the command line)");
  }

  int Run(const GlobalOptions& options, const Io& io) override {
    std::string node_id_source = "--node-id";
    if (initiator_.empty()) {
      if (node_id_.empty()) {
        auto found = FindNodeId(options);
        if (!found.ok()) {
          io.Error(found.status().message() + "; give --node-id NODE or --initiator IQN");
          return kExitUsage;
        }
        node_id_ = found->id;
        node_id_source = found->source;
      }
      initiator_ = InitiatorIqnForNode(node_id_);
    } else {
      node_id_source = "--initiator";
    }
    // The initiator name decides what the ACL allows: say whose it is.
    if (options.format() != OutputFormat::kJson) {
      io.out << "initiator: " << initiator_
             << (node_id_.empty() ? " (--initiator)" : " (node id \"" + node_id_ + "\" from " + node_id_source + ")")
             << "\n";
    }
    std::string chap_secret;
    if (!chap_user_.empty()) {
      if (chap_secret_file_.empty()) {
        io.Error("--chap-user needs --chap-secret-file");
        return kExitUsage;
      }
      auto secret = ReadFileToString(chap_secret_file_);
      if (!secret.ok()) {
        io.Error(secret.status().message());
        return kExitUsage;
      }
      chap_secret = *secret;
      while (!chap_secret.empty() && (chap_secret.back() == '\n' || chap_secret.back() == '\r')) chap_secret.pop_back();
    }

    std::string diagnosis = Diagnose(chap_secret);
    Print(options, io);
    io.out << (options.format() == OutputFormat::kJson ? "" : "diagnosis: " + diagnosis + "\n");
    if (options.format() == OutputFormat::kJson) {
      nlohmann::json j;
      j["portal"] = portal_;
      j["iqn"] = iqn_;
      j["lun"] = lun_;
      j["initiator"] = initiator_;
      j["node_id"] = node_id_;
      j["node_id_source"] = node_id_source;
      j["diagnosis"] = diagnosis;
      nlohmann::json steps = nlohmann::json::array();
      for (const auto& s : steps_) {
        steps.push_back({{"step", s.name}, {"ok", s.ok}, {"latency_ms", s.millis}, {"detail", s.detail}});
      }
      j["steps"] = steps;
      io.out << j.dump(2) << "\n";
    }
    return diagnosis == "ok" ? kExitOk : kExitProblems;
  }

 private:
  template <typename F>
  bool Step(const std::string& name, F&& body) {
    auto start = std::chrono::steady_clock::now();
    StepResult r;
    r.name = name;
    r.ok = body(r.detail);
    r.millis = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    steps_.push_back(r);
    return r.ok;
  }

  // The diagnosis, one word: the first step that fails names the cause.
  std::string Diagnose(const std::string& chap_secret) {
    std::vector<std::string> discovered;
    if (!DiscoveryStep(chap_secret, discovered)) return "unreachable";
    if (iqn_.empty()) {
      if (discovered.empty()) return "refused-by-acl";  // tgt and LIO hide targets the ACL denies
      iqn_ = discovered.front();
    }
    IscsiContext ctx(initiator_, false);
    std::string login_error;
    if (!LoginStep(ctx, chap_secret, login_error)) return ClassifyLoginError(login_error);
    if (!InquiryStep(ctx)) return "no-such-lun";
    return CapacityStep(ctx) ? "ok" : "no-such-lun";
  }

  // A discovery session: is the portal reachable, which targets does it show us.
  bool DiscoveryStep(const std::string& chap_secret, std::vector<std::string>& discovered) {
    return Step("discovery", [&](std::string& detail) {
      IscsiContext ctx(initiator_, true);
      if (ctx.get() == nullptr) {
        detail = ctx.error();
        return false;
      }
      if (!chap_user_.empty()) iscsi_set_initiator_username_pwd(ctx.get(), chap_user_.c_str(), chap_secret.c_str());
      if (iscsi_connect_sync(ctx.get(), portal_.c_str()) != 0) {
        detail = "cannot connect to " + portal_ + " (" + ctx.error() + ")";
        return false;
      }
      if (iscsi_login_sync(ctx.get()) != 0) {
        detail = "connected, but discovery login failed: " + ctx.error();
        return true;  // reachable; the normal login below names the cause
      }
      ctx.set_logged_in();
      iscsi_discovery_address* list = iscsi_discovery_sync(ctx.get());
      for (auto* a = list; a != nullptr; a = a->next) discovered.emplace_back(a->target_name);
      if (list != nullptr) iscsi_free_discovery_data(ctx.get(), list);
      detail = std::to_string(discovered.size()) + " target(s) visible to " + initiator_;
      return true;
    });
  }

  // A normal session to the target; `login_error` says why it failed.
  bool LoginStep(IscsiContext& ctx, const std::string& chap_secret, std::string& login_error) {
    return Step("login", [&](std::string& detail) {
      if (ctx.get() == nullptr) {
        detail = ctx.error();
        return false;
      }
      iscsi_set_targetname(ctx.get(), iqn_.c_str());
      if (!chap_user_.empty()) iscsi_set_initiator_username_pwd(ctx.get(), chap_user_.c_str(), chap_secret.c_str());
      if (iscsi_connect_sync(ctx.get(), portal_.c_str()) != 0 || iscsi_login_sync(ctx.get()) != 0) {
        login_error = ctx.error();
        detail = login_error;
        return false;
      }
      ctx.set_logged_in();
      detail = "logged in to " + iqn_ + " as " + initiator_;
      return true;
    });
  }

  // INQUIRY of the LUN: is it there, and connected.
  bool InquiryStep(IscsiContext& ctx) {
    return Step("inquiry", [&](std::string& detail) {
      scsi_task* task = iscsi_inquiry_sync(ctx.get(), lun_, 0, 0, 255);
      if (task == nullptr || task->status != SCSI_STATUS_GOOD) {
        detail = "LUN " + std::to_string(lun_) + ": " + (task != nullptr ? SenseText(task) : ctx.error());
        if (task != nullptr) scsi_free_scsi_task(task);
        return false;
      }
      auto* inq = static_cast<scsi_inquiry_standard*>(scsi_datain_unmarshall(task));
      if (inq == nullptr || inq->qualifier != 0) {
        detail = "LUN " + std::to_string(lun_) + " is not connected on this target";
        scsi_free_scsi_task(task);
        return false;
      }
      detail = std::string(inq->vendor_identification) + " " + inq->product_identification;
      scsi_free_scsi_task(task);
      return true;
    });
  }

  // READ CAPACITY(16) of the LUN.
  bool CapacityStep(IscsiContext& ctx) {
    return Step("capacity", [&](std::string& detail) {
      scsi_task* task = iscsi_readcapacity16_sync(ctx.get(), lun_);
      // The first command after login usually reports a unit attention
      // (power on / bus reset): that is news, not an error; ask again.
      for (int retry = 0; retry < 3 && task != nullptr && task->status == SCSI_STATUS_CHECK_CONDITION &&
                          task->sense.key == SCSI_SENSE_UNIT_ATTENTION;
           ++retry) {
        scsi_free_scsi_task(task);
        task = iscsi_readcapacity16_sync(ctx.get(), lun_);
      }
      if (task == nullptr || task->status != SCSI_STATUS_GOOD) {
        detail = task != nullptr ? SenseText(task) : ctx.error();
        if (task != nullptr) scsi_free_scsi_task(task);
        return false;
      }
      auto* rc16 = static_cast<scsi_readcapacity16*>(scsi_datain_unmarshall(task));
      if (rc16 != nullptr) {
        uint64_t bytes = (rc16->returned_lba + 1) * rc16->block_length;
        detail = std::to_string(bytes) + " bytes, block " + std::to_string(rc16->block_length);
      }
      scsi_free_scsi_task(task);
      return rc16 != nullptr;
    });
  }

  void Print(const GlobalOptions& options, const Io& io) const {
    if (options.format() == OutputFormat::kJson) return;
    Table table({"step", "result", "latency", "detail"});
    for (const auto& s : steps_) {
      char latency[32];
      std::snprintf(latency, sizeof latency, "%.2fms", s.millis);
      table.AddRow({s.name, s.ok ? "ok" : "FAILED", latency, s.detail});
    }
    table.Print(io.out, OutputFormat::kTable);
  }

  std::string portal_;
  std::string iqn_;
  int lun_ = 1;
  std::string initiator_;
  std::string node_id_;
  std::string chap_user_;
  std::string chap_secret_file_;
  std::vector<StepResult> steps_;
};

BLOCKCTL_REGISTER_VERB(CheckTargetVerb);

}  // namespace
}  // namespace blockcsi::cli
