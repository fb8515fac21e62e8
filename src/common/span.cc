#include "common/span.h"

#include <cerrno>
#include <cstdio>

namespace blockcsi {

Span::Span(std::string_view name, std::string detail) : enabled_(LogEnabled(LogLevel::kDebug)), name_(name) {
  if (!enabled_) return;
  detail_ = std::move(detail);
  started_ = std::chrono::steady_clock::now();
}

Span::~Span() {
  if (!enabled_) return;
  // Spans end where a caller may still read errno (e.g. after fsync).
  int saved_errno = errno;
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started_).count();
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", ms);
  LogDebug("span", {{"name", std::string(name_)}, {"ms", text}, {"detail", detail_}});
  errno = saved_errno;
}

}  // namespace blockcsi
