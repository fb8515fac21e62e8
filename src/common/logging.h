// The logging boundary: every line the programs write goes through here, as
// text or as one JSON object per line, tagged with the current request id.
// Thread-safe after InitLogging(); call InitLogging once, early in main.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

#include "common/status.h"

namespace blockcsi {

enum class LogFormat { kText, kJson };
enum class LogLevel { kDebug, kInfo, kWarn, kError };

StatusOr<LogFormat> ParseLogFormat(std::string_view text);
StatusOr<LogLevel> ParseLogLevel(std::string_view text);

// `program` names the process in every line ("blockcsi", "blockctl").
// Lines go to stderr unless a test installs a capture with SetLogCaptureForTest.
void InitLogging(std::string_view program, LogFormat format, LogLevel level);

using LogField = std::pair<std::string_view, std::string_view>;
using LogFields = std::initializer_list<LogField>;

void Log(LogLevel level, std::string_view message, LogFields fields = {});
inline void LogDebug(std::string_view m, LogFields f = {}) { Log(LogLevel::kDebug, m, f); }
inline void LogInfo(std::string_view m, LogFields f = {}) { Log(LogLevel::kInfo, m, f); }
inline void LogWarn(std::string_view m, LogFields f = {}) { Log(LogLevel::kWarn, m, f); }
inline void LogError(std::string_view m, LogFields f = {}) { Log(LogLevel::kError, m, f); }
bool LogEnabled(LogLevel level);

// The request id of the RPC running on this thread ("" outside one). Set by
// the server interceptor so that handlers' lines carry it without plumbing.
std::string_view CurrentRequestId();
class ScopedRequestId {
 public:
  explicit ScopedRequestId(std::string id);
  ~ScopedRequestId();
  ScopedRequestId(const ScopedRequestId&) = delete;
  ScopedRequestId& operator=(const ScopedRequestId&) = delete;

 private:
  std::string previous_;
};

// Tests: route every line into `sink` (appended, one line per entry, with a
// trailing newline) instead of stderr, at debug level, so that a check of
// what was logged (a secret must appear in no line) sees every line any
// level could write. Pass nullptr to restore stderr and the level before.
void SetLogCaptureForTest(std::string* sink);

}  // namespace blockcsi
