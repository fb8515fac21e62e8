// Fuzz targets for the parsers and validators in src/common and the node id
// rule: anything that reads text from outside (mountinfo, flags, requests).
// Each target is compiled once per FUZZ_TARGET_* define (see CMakeLists.txt).
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <google/protobuf/stubs/logging.h>
#include <nlohmann/json.hpp>
#include "common/duration.h"
#include "common/endpoint.h"
#include "common/mounter.h"
#include "common/redaction.h"
#include "contract/initiator.h"
#include "csi.pb.h"

// Properties, not just "does not crash": a violated one aborts.
#define FUZZ_CHECK(cond)       \
  do {                         \
    if (!(cond)) std::abort(); \
  } while (0)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
#if defined(FUZZ_TARGET_MOUNTINFO)
  for (const auto& e : blockcsi::ParseMountInfo(input)) {
    FUZZ_CHECK(!e.target.empty());
    FUZZ_CHECK(!e.fs_type.empty());
  }
#elif defined(FUZZ_TARGET_DURATION)
  auto d = blockcsi::ParseDuration(input);
  if (d.ok()) {
    FUZZ_CHECK(d->count() >= 0);
    auto again = blockcsi::ParseDuration(blockcsi::FormatDuration(*d));
    FUZZ_CHECK(again.ok() && *again == *d);
  }
#elif defined(FUZZ_TARGET_ENDPOINT)
  auto path = blockcsi::ParseUnixEndpoint(input);
  if (path.ok()) FUZZ_CHECK(!path->empty() && path->front() == '/');
#elif defined(FUZZ_TARGET_NODE_ID)
  std::string id(input);
  if (blockcsi::ValidateNodeId(id).ok()) {
    auto back = blockcsi::NodeIdFromInitiatorIqn(blockcsi::InitiatorIqnForNode(id));
    FUZZ_CHECK(back.has_value() && *back == id);
  }
  (void)blockcsi::NodeIdFromInitiatorIqn(input);
#elif defined(FUZZ_TARGET_REDACTION)
  // Invalid UTF-8 is rejected with a log line per input: too loud to fuzz with.
  static const bool quiet = [] {
    google::protobuf::SetLogHandler(nullptr);
    return true;
  }();
  (void)quiet;
  // Any request bytes: what redaction prints must not depend on the secret
  // values at all — the same request with other secret values renders the
  // same. (A plain "secret text absent" check has false positives: a secret
  // may happen to equal text that redaction itself prints.)
  csi::v1::NodeStageVolumeRequest request;
  if (request.ParseFromArray(data, static_cast<int>(size))) {
    csi::v1::NodeStageVolumeRequest replaced = request;
    for (auto& [key, value] : *replaced.mutable_secrets()) value = "other-secret-value";
    // Compared as JSON objects: a copied protobuf map may iterate in another order.
    auto a = nlohmann::json::parse(blockcsi::RedactedJson(request), nullptr, false);
    auto b = nlohmann::json::parse(blockcsi::RedactedJson(replaced), nullptr, false);
    FUZZ_CHECK(a == b);
  }
#else
#error "define one FUZZ_TARGET_*"
#endif
  return 0;
}
