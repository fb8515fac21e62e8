#include <ctime>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "contract/initiator.h"

namespace blockcsi {

using nlohmann::json;

std::string FenceTime(int64_t unix_seconds) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  if (gmtime_r(&t, &tm) == nullptr) return std::to_string(unix_seconds);
  char text[32];
  if (std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0) return std::to_string(unix_seconds);
  return text;
}

std::string FencedMessage(const FenceRecord& fence, const std::string& volume_id) {
  return "node \"" + fence.node_id + "\" is fenced since " + FenceTime(fence.since_unix_seconds) + ": volume \"" +
         volume_id +
         "\" cannot be published to it until its plugin has cleaned up and it is unfenced (blockctl fences; "
         "blockctl unfence)";
}

std::string FenceRecordToJson(const FenceRecord& r) {
  json held = json::array();
  for (const auto& h : r.held) {
    held.push_back({{"volume_id", h.volume_id},
                    {"initiator_iqn", h.grant.initiator_iqn},
                    {"node_id", h.grant.node_id},
                    {"read_only", h.grant.read_only},
                    {"capability", h.grant.capability},
                    {"chap", h.grant.chap}});
  }
  json j = {{"version", 1},
            {"node_id", r.node_id},
            {"initiator_iqn", r.initiator_iqn},
            {"since_unix_seconds", r.since_unix_seconds},
            {"held", held}};
  return j.dump(2) + "\n";
}

StatusOr<FenceRecord> FenceRecordFromJson(std::string_view text) {
  try {
    json j = json::parse(text);
    FenceRecord r;
    r.node_id = j.at("node_id").get<std::string>();
    BLOCKCSI_RETURN_IF_ERROR(ValidateNodeId(r.node_id));
    r.initiator_iqn = j.at("initiator_iqn").get<std::string>();
    r.since_unix_seconds = j.at("since_unix_seconds").get<int64_t>();
    for (const auto& h : j.at("held")) {
      r.held.push_back(
          {h.at("volume_id").get<std::string>(),
           {h.at("initiator_iqn").get<std::string>(), h.at("node_id").get<std::string>(), h.at("read_only").get<bool>(),
            h.at("capability").get<std::string>(), h.at("chap").get<bool>()}});
    }
    return r;
  } catch (const json::exception& e) {
    return InvalidArgument(std::string("fence record: ") + e.what());
  }
}

}  // namespace blockcsi
