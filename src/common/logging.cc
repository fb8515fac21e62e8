#include "common/logging.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <nlohmann/json.hpp>

#include "common/mutex.h"

namespace blockcsi {
namespace {

struct LoggingState {
  Mutex mu;
  std::string program GUARDED_BY(mu) = "blockcsi";
  LogFormat format GUARDED_BY(mu) = LogFormat::kText;
  std::atomic<int> level{static_cast<int>(LogLevel::kInfo)};
  std::string* capture GUARDED_BY(mu) = nullptr;
  int level_before_capture GUARDED_BY(mu) = static_cast<int>(LogLevel::kInfo);
};

LoggingState& State() {
  static LoggingState* state = new LoggingState();  // never destroyed: logs may run at exit
  return *state;
}

thread_local std::string tls_request_id;

std::string_view LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kError:
      return "error";
  }
  return "info";
}

std::string Timestamp() {
  auto now = std::chrono::system_clock::now();
  auto secs = std::chrono::time_point_cast<std::chrono::seconds>(now);
  auto micros = std::chrono::duration_cast<std::chrono::microseconds>(now - secs).count();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<long>(micros));
  return buf;
}

// No field value is printed whole past this: a request field that slipped
// past validation must not turn into megabytes of log.
constexpr size_t kMaxFieldBytes = 4096;

std::string Bounded(std::string_view value) {
  if (value.size() <= kMaxFieldBytes) return std::string(value);
  return std::string(value.substr(0, kMaxFieldBytes)) + "...(" + std::to_string(value.size()) + " bytes)";
}

// Control bytes (NUL, CR, LF, ESC...), DEL and non-ASCII never reach the log
// raw: a value holding one is printed as an escaped JSON string, so no value
// can forge a line, move the cursor or hide text.
bool NeedsEscaping(std::string_view value) {
  for (char c : value) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f) return true;
  }
  return false;
}

// Text values containing spaces, quotes or anything unprintable are quoted
// and escaped so lines stay parseable.
void AppendTextValue(std::string& out, std::string_view value) {
  bool needs_quotes = value.empty() || value.find_first_of(" \"=") != std::string_view::npos || NeedsEscaping(value);
  if (!needs_quotes) {
    out += value;
    return;
  }
  out += nlohmann::json(std::string(value)).dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
}

std::string Format(const LoggingState& state, LogLevel level, std::string_view message, LogFields fields)
    REQUIRES(state.mu) {
  if (state.format == LogFormat::kJson) {
    nlohmann::json line;
    line["ts"] = Timestamp();
    line["level"] = LevelName(level);
    line["program"] = state.program;
    if (!tls_request_id.empty()) line["request_id"] = tls_request_id;
    line["msg"] = std::string(message);
    for (const auto& [key, value] : fields) {
      if (!value.empty()) line[std::string(key)] = Bounded(value);
    }
    return line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  std::string out = Timestamp();
  out += ' ';
  out += LevelName(level);
  out += ' ';
  out += state.program;
  if (!tls_request_id.empty()) {
    out += " [";
    out += tls_request_id;
    out += ']';
  }
  out += ' ';
  // Messages are constants in our code, but escape them too: one rule.
  if (NeedsEscaping(message)) {
    AppendTextValue(out, Bounded(message));
  } else {
    out += message;
  }
  for (const auto& [key, value] : fields) {
    if (value.empty()) continue;  // absent, not "": keeps lines short at 3 a.m.
    out += ' ';
    out += key;
    out += '=';
    AppendTextValue(out, Bounded(value));
  }
  return out;
}

}  // namespace

StatusOr<LogFormat> ParseLogFormat(std::string_view text) {
  if (text == "text") return LogFormat::kText;
  if (text == "json") return LogFormat::kJson;
  return InvalidArgument("log format must be text or json, not \"" + std::string(text) + "\"");
}

StatusOr<LogLevel> ParseLogLevel(std::string_view text) {
  if (text == "debug") return LogLevel::kDebug;
  if (text == "info") return LogLevel::kInfo;
  if (text == "warn" || text == "warning") return LogLevel::kWarn;
  if (text == "error") return LogLevel::kError;
  return InvalidArgument("log level must be debug, info, warn or error, not \"" + std::string(text) + "\"");
}

void InitLogging(std::string_view program, LogFormat format, LogLevel level) {
  LoggingState& state = State();
  MutexLock lock(state.mu);
  state.program = std::string(program);
  state.format = format;
  state.level = static_cast<int>(level);
}

bool LogEnabled(LogLevel level) { return static_cast<int>(level) >= State().level.load(); }

void Log(LogLevel level, std::string_view message, LogFields fields) {
  LoggingState& state = State();
  if (!LogEnabled(level)) return;
  // Formatted under the mutex too: InitLogging may change the program name
  // and format while other threads log.
  MutexLock lock(state.mu);
  std::string line = Format(state, level, message, fields);
  if (state.capture != nullptr) {
    *state.capture += line;
    *state.capture += '\n';
    return;
  }
  // One write(2) per line, unbuffered, under the mutex: lines of different
  // threads never interleave and a crash loses none. (No spdlog: the
  // per-volume bridge links this file, and a logging library's code and
  // its libfmt would cost every bridge more than the line formatting here.)
  line += '\n';
  size_t off = 0;
  while (off < line.size()) {
    ssize_t n = ::write(STDERR_FILENO, line.data() + off, line.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // stderr closed: nothing else to tell
    off += static_cast<size_t>(n);
  }
}

std::string_view CurrentRequestId() { return tls_request_id; }

ScopedRequestId::ScopedRequestId(std::string id) : previous_(std::move(tls_request_id)) {
  tls_request_id = std::move(id);
}
ScopedRequestId::~ScopedRequestId() { tls_request_id = std::move(previous_); }

void SetLogCaptureForTest(std::string* sink) {
  LoggingState& state = State();
  MutexLock lock(state.mu);
  if (sink != nullptr && state.capture == nullptr) {
    state.level_before_capture = state.level.load();
    state.level = static_cast<int>(LogLevel::kDebug);
  } else if (sink == nullptr && state.capture != nullptr) {
    state.level = state.level_before_capture;
  }
  state.capture = sink;
}

}  // namespace blockcsi
