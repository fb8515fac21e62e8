// Status and StatusOr: errors as values, carrying a code and a message that
// names the object. Plain value types; safe to copy between threads.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace blockcsi {

// Mirrors the gRPC canonical codes so that the single conversion in
// grpc_status.cc is a table, not a judgement call.
enum class StatusCode : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "CODE: message", for logs and tests.
  std::string ToString() const;

  // Returns a copy whose message is "<context>: <message>", keeping the code.
  Status WithContext(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }
inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
inline Status FailedPrecondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status Aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
inline Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status ResourceExhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status DeadlineExceeded(std::string m) { return {StatusCode::kDeadlineExceeded, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status PermissionDenied(std::string m) { return {StatusCode::kPermissionDenied, std::move(m)}; }

// Whether a failed CSI call leaves its outcome open: kubelet and the
// sidecars treat DEADLINE_EXCEEDED, ABORTED, UNAVAILABLE, RESOURCE_EXHAUSTED
// and CANCELLED as "may still be in progress" and retry (or unstage) later,
// so state may stay for that retry. Any other failure is final: the caller
// will not come back to clean up, so the call must leave nothing behind.
inline bool IsFinalFailure(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk:
    case StatusCode::kDeadlineExceeded:
    case StatusCode::kAborted:
    case StatusCode::kUnavailable:
    case StatusCode::kResourceExhausted:
    case StatusCode::kCancelled:
      return false;
    default:
      return true;
  }
}

// The one place errno becomes a status. `what` names the object and the
// action ("open /var/lib/blockcsi/x.json"); the code follows the errno.
Status ErrnoToStatus(int err, std::string_view what);

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!status_.ok() && "StatusOr built from an OK status carries no value");
    if (status_.ok()) status_ = Internal("StatusOr constructed from OK status without a value");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace blockcsi

// Early return of a non-OK status.
#define BLOCKCSI_RETURN_IF_ERROR(expr)           \
  do {                                           \
    ::blockcsi::Status _blockcsi_st = (expr);    \
    if (!_blockcsi_st.ok()) return _blockcsi_st; \
  } while (0)

#define BLOCKCSI_CONCAT_INNER(a, b) a##b
#define BLOCKCSI_CONCAT(a, b) BLOCKCSI_CONCAT_INNER(a, b)
// NOLINTBEGIN(bugprone-macro-parentheses): `lhs` is a declaration and `tmp`
// a name; neither may be parenthesised.
#define BLOCKCSI_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) return tmp.status();                  \
  lhs = std::move(tmp).value()
// `BLOCKCSI_ASSIGN_OR_RETURN(auto x, Foo());`
#define BLOCKCSI_ASSIGN_OR_RETURN(lhs, expr) \
  BLOCKCSI_ASSIGN_OR_RETURN_IMPL(BLOCKCSI_CONCAT(_blockcsi_so_, __LINE__), lhs, expr)
// NOLINTEND(bugprone-macro-parentheses)
