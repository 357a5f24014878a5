#include "c4/common/error.h"

#include <cerrno>
#include <cstring>

namespace c4 {

std::string_view errorCodeName(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return "invalid_argument";
    case ErrorCode::kNotFound:
      return "not_found";
    case ErrorCode::kAlreadyExists:
      return "already_exists";
    case ErrorCode::kConflict:
      return "conflict";
    case ErrorCode::kGone:
      return "gone";
    case ErrorCode::kPermissionDenied:
      return "permission_denied";
    case ErrorCode::kUnauthenticated:
      return "unauthenticated";
    case ErrorCode::kFailedPrecondition:
      return "failed_precondition";
    case ErrorCode::kResourceExhausted:
      return "resource_exhausted";
    case ErrorCode::kDeadlineExceeded:
      return "deadline_exceeded";
    case ErrorCode::kUnavailable:
      return "unavailable";
    case ErrorCode::kCancelled:
      return "cancelled";
    case ErrorCode::kIo:
      return "io";
    case ErrorCode::kInternal:
      return "internal";
  }
  return "unknown";
}

bool isRetryable(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::kUnavailable:
    case ErrorCode::kDeadlineExceeded:
    case ErrorCode::kResourceExhausted:
    case ErrorCode::kConflict:
      return true;
    default:
      return false;
  }
}

Error Error::withContext(std::string_view context) const {
  Error e = *this;
  e.message = std::string(context) + ": " + message;
  return e;
}

std::string Error::toString() const {
  return std::string(errorCodeName(code)) + ": " + message;
}

Error errnoError(std::string_view what, int err) {
  ErrorCode code = ErrorCode::kIo;
  switch (err) {
    case ENOENT:
      code = ErrorCode::kNotFound;
      break;
    case EACCES:
    case EPERM:
      code = ErrorCode::kPermissionDenied;
      break;
    case EAGAIN:
      code = ErrorCode::kResourceExhausted;
      break;
    case ECANCELED:
    case EINTR:
      code = ErrorCode::kCancelled;
      break;
    case ETIMEDOUT:
      code = ErrorCode::kDeadlineExceeded;
      break;
    case ECONNREFUSED:
    case ECONNRESET:
    case EPIPE:
      code = ErrorCode::kUnavailable;
      break;
    default:
      break;
  }
  char buf[256];
  const char* msg = strerror_r(err, buf, sizeof buf);  // GNU variant returns the message
  return Error{code, std::string(what) + ": " + msg + " (errno " + std::to_string(err) + ")"};
}

}  // namespace c4
