#include "attach/attach_record_store.h"

#include <cctype>
#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/fault_points.h"
#include "common/host.h"
#include "common/logging.h"
#include "common/span.h"

namespace blockcsi {

using nlohmann::json;

std::string AttachRecordToJson(const AttachRecord& r) {
  json j;
  j["version"] = 1;
  j["volume_id"] = r.volume_id;
  j["connector"] = r.connector;
  j["transport"] = r.transport;
  j["portals"] = r.portals;
  j["target_iqn"] = r.target_iqn;
  j["lun"] = r.lun;
  j["expected_serial"] = r.expected_serial;
  j["expected_wwn"] = r.expected_wwn;
  j["initiator_iqn"] = r.initiator_iqn;
  if (r.transport == "rbd") {
    j["rbd_pool"] = r.rbd_pool;
    j["rbd_image"] = r.rbd_image;
    j["rbd_monitors"] = r.rbd_monitors;
    j["rbd_user"] = r.rbd_user;
  }
  j["read_only"] = r.read_only;
  if (r.static_volume) j["static"] = true;
  j["state"] = r.state;
  j["device_path"] = r.device_path;
  j["size_bytes"] = r.size_bytes;
  j["connector_state"] = r.connector_state;
  j["annotations"] = r.annotations;
  return j.dump(2) + "\n";
}

StatusOr<AttachRecord> AttachRecordFromJson(const std::string& text, const std::string& what) {
  try {
    json j = json::parse(text);
    AttachRecord r;
    r.volume_id = j.at("volume_id").get<std::string>();
    r.connector = j.value("connector", "");
    r.transport = j.value("transport", "iscsi");
    r.portals = j.value("portals", std::vector<std::string>{});
    r.target_iqn = j.value("target_iqn", "");
    r.lun = j.value("lun", 0);
    r.expected_serial = j.value("expected_serial", "");
    r.expected_wwn = j.value("expected_wwn", "");
    r.initiator_iqn = j.value("initiator_iqn", "");
    r.rbd_pool = j.value("rbd_pool", "");
    r.rbd_image = j.value("rbd_image", "");
    r.rbd_monitors = j.value("rbd_monitors", "");
    r.rbd_user = j.value("rbd_user", "");
    r.read_only = j.value("read_only", false);
    r.static_volume = j.value("static", false);
    r.state = j.value("state", "");
    r.device_path = j.value("device_path", "");
    r.size_bytes = j.value("size_bytes", uint64_t{0});
    r.connector_state = j.value("connector_state", std::map<std::string, std::string>{});
    r.annotations = j.value("annotations", std::map<std::string, std::string>{});
    return r;
  } catch (const json::exception& e) {
    return Status(StatusCode::kDataLoss, "attach record " + what + " is malformed: " + e.what());
  }
}

AttachRecordStore::AttachRecordStore(std::string state_dir, std::shared_ptr<const Host> files, FaultHook fault_hook)
    : dir_(std::move(state_dir) + "/attachments"), files_(std::move(files)), fault_hook_(std::move(fault_hook)) {}

Status AttachRecordStore::Init() {
  BLOCKCSI_RETURN_IF_ERROR(MakeDirectories(dir_, 0700));
  // A plugin killed inside Put between writing its temp file and renaming it
  // left "<record>.tmp-<n>": never a record (List skips it), and no one else
  // would ever remove it. Init runs at the start of the one plugin that owns
  // this directory, before any Put, so every temp file here is such a leftover.
  auto names = files_->ListDir(dir_);
  for (const std::string& name : names.ok() ? *names : std::vector<std::string>{}) {
    if (name.find(".json.tmp-") == std::string::npos) continue;
    if (Status st = RemoveFileDurably(dir_ + "/" + name); !st.ok()) {
      LogWarn("cannot remove an interrupted attach record write", {{"file", name}, {"error", st.ToString()}});
    } else {
      LogInfo("removed an interrupted attach record write", {{"file", name}});
    }
  }
  return OkStatus();
}

namespace {
std::string RecordFileName(const std::string& volume_id) { return EscapeVolumeIdForFile(volume_id) + ".json"; }
}  // namespace

std::string AttachRecordPath(const std::string& state_dir, const std::string& volume_id) {
  return state_dir + "/attachments/" + RecordFileName(volume_id);
}

std::string AttachRecordStore::PathFor(const std::string& volume_id) const {
  return dir_ + "/" + RecordFileName(volume_id);
}

Status AttachRecordStore::Put(const AttachRecord& record, bool sync_directory) {
  AtomicWriteOptions options;
  options.mode = 0600;
  options.sync_directory = sync_directory;
  options.fault_hook = fault_hook_;
  // Fault points inside the write: the kill -9 tests die between the steps
  // and find the old record or the new one, never a torn file.
  options.fault_points = AtomicWritePoints{"node.record.temp-written", "node.record.temp-synced", "node.record.renamed",
                                           "node.record.dir-synced"};
  return WriteFileAtomically(PathFor(record.volume_id), AttachRecordToJson(record), options);
}

StatusOr<AttachRecord> AttachRecordStore::Get(const std::string& volume_id) const {
  Span span("record_read");
  std::string path = PathFor(volume_id);
  auto text = files_->ReadFile(path);
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound) {
      return NotFound("no attach record for volume \"" + volume_id + "\"");
    }
    return text.status();
  }
  return AttachRecordFromJson(*text, path);
}

StatusOr<std::vector<AttachRecord>> AttachRecordStore::List() const {
  std::vector<AttachRecord> out;
  auto listed = files_->ListDir(dir_);  // sorted
  if (!listed.ok() && listed.status().code() != StatusCode::kNotFound) return listed.status();
  std::vector<std::string> paths;
  for (const std::string& name : listed.ok() ? *listed : std::vector<std::string>{}) {
    // Temp files of an interrupted atomic write are not records.
    if (name.size() > 5 && name.ends_with(".json") && name[0] != '.') paths.push_back(dir_ + "/" + name);
  }
  for (const auto& path : paths) {
    auto text = files_->ReadFile(path);
    if (!text.ok()) {
      LogWarn("cannot read attach record", {{"path", path}, {"error", text.status().ToString()}});
      continue;
    }
    auto record = AttachRecordFromJson(*text, path);
    if (!record.ok()) {
      LogError("skipping malformed attach record", {{"path", path}, {"error", record.status().ToString()}});
      continue;
    }
    out.push_back(std::move(*record));
  }
  return out;
}

Status AttachRecordStore::Remove(const std::string& volume_id) { return RemoveFileDurably(PathFor(volume_id)); }

}  // namespace blockcsi
