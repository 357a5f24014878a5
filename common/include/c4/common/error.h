// Error type and std::expected-based results shared by every C4 component.
//
// Inside the code base a fallible function returns `Result<T>` (or `Status` for no value). Errors
// are mapped exactly once at each edge: HTTP status -> ErrorCode in the Kubernetes client,
// ErrorCode -> ncclResult_t in the plugin's C ABI shell, ErrorCode -> HTTP status in servers.
// No exception crosses a C boundary or a thread boundary.
#pragma once

#include <expected>
#include <string>
#include <string_view>
#include <utility>

namespace c4 {

// Canonical codes, chosen by the retry rule: a caller may retry kUnavailable, kDeadlineExceeded,
// kResourceExhausted and kConflict; the others are final for the same input.
enum class ErrorCode {
  kInvalidArgument,     // bad input: malformed bytes, wrong field type, out-of-range value
  kNotFound,            // the object or file does not exist
  kAlreadyExists,       // create of something that exists
  kConflict,            // optimistic-concurrency conflict (HTTP 409 on update)
  kGone,                // resource version too old (HTTP 410): relist
  kPermissionDenied,    // authenticated but not allowed (HTTP 403)
  kUnauthenticated,     // no or bad credentials (HTTP 401)
  kFailedPrecondition,  // the system is not in a state that allows the operation
  kResourceExhausted,   // limits, quotas, throttling (HTTP 429)
  kDeadlineExceeded,    // a timeout expired
  kUnavailable,         // transient failure: connection refused/reset, HTTP 5xx
  kCancelled,           // the operation was stopped by its caller (shutdown)
  kIo,                  // operating-system I/O error (errno is in the message)
  kInternal,            // a bug: an invariant did not hold
};

// Stable lower-case name, e.g. "invalid_argument"; used in logs and metrics labels.
std::string_view errorCodeName(ErrorCode code) noexcept;

// True for codes a caller may retry with the same input.
bool isRetryable(ErrorCode code) noexcept;

struct Error {
  ErrorCode code = ErrorCode::kInternal;
  std::string message;

  Error() = default;
  Error(ErrorCode c, std::string msg) : code(c), message(std::move(msg)) {}

  // Returns a copy whose message is "<context>: <message>".
  [[nodiscard]] Error withContext(std::string_view context) const;
  // "<code name>: <message>".
  [[nodiscard]] std::string toString() const;

  friend bool operator==(const Error&, const Error&) = default;
};

template <typename T>
using Result = std::expected<T, Error>;
using Status = std::expected<void, Error>;

inline std::unexpected<Error> makeError(ErrorCode code, std::string message) {
  return std::unexpected<Error>(Error{code, std::move(message)});
}

// Builds an Error from errno: "<what>: <strerror(err)>" with code kIo (or kNotFound, kCancelled,
// kPermissionDenied, kResourceExhausted where errno says so).
Error errnoError(std::string_view what, int err);

inline Status okStatus() {
  return {};
}

}  // namespace c4

// Propagates the error of an expression that yields Status / Result<T>.
#define C4_RETURN_IF_ERROR(expr)                                 \
  do {                                                           \
    auto c4_status_ = (expr);                                    \
    if (!c4_status_) return std::unexpected(c4_status_.error()); \
  } while (false)

#define C4_CONCAT_INNER_(a, b) a##b
#define C4_CONCAT_(a, b) C4_CONCAT_INNER_(a, b)
// C4_ASSIGN_OR_RETURN(auto x, fallible()); declares/assigns x or returns the error.
#define C4_ASSIGN_OR_RETURN(lhs, expr) \
  C4_ASSIGN_OR_RETURN_IMPL_(C4_CONCAT_(c4_result_, __LINE__), lhs, expr)
#define C4_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr)           \
  auto tmp = (expr);                                        \
  if (!tmp) return std::unexpected(std::move(tmp).error()); \
  lhs = std::move(tmp).value()
