#include "node/staged_facts.h"

#include "node/volume_crypt.h"

namespace blockcsi {

std::string StagedFacts::Encode() const { return access_type + "," + fs_type + "," + staging_path; }

StagedFacts StagedFacts::Of(const AttachRecord& record) {
  StagedFacts facts;
  if (auto crypt = record.annotations.find(kCryptAnnotation); crypt != record.annotations.end()) {
    facts.crypt_mapping = crypt->second;
  }
  auto it = record.annotations.find(kStagedAnnotation);
  if (it == record.annotations.end()) return facts;
  // The path comes last: it is the only part that may contain a comma.
  const std::string& v = it->second;
  size_t first = v.find(',');
  size_t second = first == std::string::npos ? std::string::npos : v.find(',', first + 1);
  if (second == std::string::npos) return facts;
  facts.access_type = v.substr(0, first);
  facts.fs_type = v.substr(first + 1, second - first - 1);
  facts.staging_path = v.substr(second + 1);
  return facts;
}

std::string DataDevice(const AttachRecord& record) {
  std::string mapping = StagedFacts::Of(record).crypt_mapping;
  // No device yet (an attach that never finished): no mapping either.
  return mapping.empty() || record.device_path.empty() ? record.device_path : CryptMappingPath(mapping);
}

}  // namespace blockcsi
