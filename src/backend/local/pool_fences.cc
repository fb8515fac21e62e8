#include "backend/local/pool.h"
#include "common/logging.h"
#include "contract/initiator.h"

// The pool's fence records: fences/<node-id>.json, one per fenced node. A
// node id is a DNS-1123 subdomain (contract/initiator.h), so it is a safe
// file name: no '/', and it cannot be "." or "..".
namespace blockcsi {

std::string Pool::FenceRecordPath(std::string_view node_id) const {
  return dir_ + "/fences/" + std::string(node_id) + ".json";
}

Status Pool::LoadFences() {
  std::map<std::string, FenceRecord> fences;
  BLOCKCSI_ASSIGN_OR_RETURN(auto names, files_.List(dir_ + "/fences"));
  for (const auto& name : names) {
    const std::string path = dir_ + "/fences/" + name;
    if (!name.ends_with(".json") || !ValidateNodeId(name.substr(0, name.size() - 5)).ok()) {
      // WriteFileAtomically's temp files, from a crash mid-write.
      LogWarn("pool recovery: removing stray file", {{"file", path}});
      BLOCKCSI_RETURN_IF_ERROR(files_.RemoveDurably(path));
      continue;
    }
    BLOCKCSI_ASSIGN_OR_RETURN(std::string text, files_.ReadRecord(path));
    auto record = FenceRecordFromJson(text);
    // An unreadable fence is not dropped: the pool would let the node back in.
    if (!record.ok()) return Internal("pool record " + path + " is unreadable: " + record.status().message());
    std::string node_id = record->node_id;  // read before the record moves into the map
    fences[node_id] = *std::move(record);
  }
  MutexLock lock(mu_);
  fences_ = std::move(fences);
  return OkStatus();
}

std::optional<FenceRecord> Pool::GetFence(const std::string& node_id) const {
  MutexLock lock(mu_);
  auto it = fences_.find(node_id);
  if (it == fences_.end()) return std::nullopt;
  return it->second;
}

std::optional<FenceRecord> Pool::FenceOf(std::string_view node_id, std::string_view initiator_iqn) const {
  MutexLock lock(mu_);
  if (fences_.empty()) return std::nullopt;
  if (!node_id.empty()) {
    if (auto it = fences_.find(std::string(node_id)); it != fences_.end()) return it->second;
  }
  for (const auto& [node, record] : fences_) {
    if (record.initiator_iqn == initiator_iqn) return record;
  }
  return std::nullopt;
}

std::vector<FenceRecord> Pool::ListFences() const {
  MutexLock lock(mu_);
  std::vector<FenceRecord> out;
  out.reserve(fences_.size());
  for (const auto& [node, record] : fences_) out.push_back(record);
  return out;
}

Status Pool::PutFence(const FenceRecord& record) {
  BLOCKCSI_RETURN_IF_ERROR(ValidateNodeId(record.node_id));
  BLOCKCSI_RETURN_IF_ERROR(files_.WriteRecord(FenceRecordPath(record.node_id), FenceRecordToJson(record)));
  MutexLock lock(mu_);
  fences_[record.node_id] = record;
  return OkStatus();
}

Status Pool::RemoveFence(const std::string& node_id) {
  if (!ValidateNodeId(node_id).ok()) return OkStatus();  // never recorded
  BLOCKCSI_RETURN_IF_ERROR(files_.RemoveDurably(FenceRecordPath(node_id)));
  MutexLock lock(mu_);
  fences_.erase(node_id);
  return OkStatus();
}

}  // namespace blockcsi
