// The API error edge mapping: metav1.Status.reason first, the HTTP status (and verb) second.
#include "operator/client/kube_client.h"

#include <gtest/gtest.h>

namespace c4::op {
namespace {

std::string statusBody(long code, const std::string& reason, const std::string& message) {
  return Json{{"kind", "Status"},   {"apiVersion", "v1"}, {"status", "Failure"},
              {"message", message}, {"reason", reason},   {"code", code}}
      .dump();
}

TEST(ApiErrorTest, TheStatusReasonDecidesTheCode) {
  struct Case {
    long http;
    const char* reason;
    const char* verb;
    ErrorCode want;
  };
  const Case cases[] = {
      // 409: the reason, not the verb, tells a name clash from a lost race.
      {409, "AlreadyExists", "POST", ErrorCode::kAlreadyExists},
      {409, "AlreadyExists", "PUT", ErrorCode::kAlreadyExists},
      {409, "Conflict", "POST", ErrorCode::kConflict},  // e.g. a create racing a delete
      {409, "Conflict", "PUT", ErrorCode::kConflict},
      {404, "NotFound", "GET", ErrorCode::kNotFound},
      {410, "Gone", "GET", ErrorCode::kGone},
      {410, "Expired", "GET", ErrorCode::kGone},
      {422, "Invalid", "POST", ErrorCode::kInvalidArgument},
      {400, "BadRequest", "PATCH", ErrorCode::kInvalidArgument},
      {405, "MethodNotAllowed", "DELETE", ErrorCode::kInvalidArgument},
      {403, "Forbidden", "GET", ErrorCode::kPermissionDenied},
      {401, "Unauthorized", "GET", ErrorCode::kUnauthenticated},
      {429, "TooManyRequests", "GET", ErrorCode::kResourceExhausted},
      {504, "Timeout", "GET", ErrorCode::kDeadlineExceeded},
      {500, "ServerTimeout", "GET", ErrorCode::kUnavailable},
      {500, "InternalError", "GET", ErrorCode::kUnavailable},
      {503, "ServiceUnavailable", "GET", ErrorCode::kUnavailable},
      // The reason wins where a proxy or an aggregated server answers with an odd status.
      {500, "NotFound", "GET", ErrorCode::kNotFound},
      {400, "Conflict", "PUT", ErrorCode::kConflict},
      // Unknown or missing reasons leave the decision to the HTTP status.
      {409, "Unknown", "POST", ErrorCode::kAlreadyExists},
      {409, "", "PUT", ErrorCode::kConflict},
      {503, "SomethingNew", "GET", ErrorCode::kUnavailable},
  };
  for (const auto& c : cases) {
    Error e = mapApiError(c.http, c.verb, statusBody(c.http, c.reason, "the server's words"));
    EXPECT_EQ(e.code, c.want) << c.http << " " << c.reason << " " << c.verb << ": " << e.toString();
    EXPECT_NE(e.message.find("the server's words"), std::string::npos) << e.message;
    EXPECT_NE(e.message.find("HTTP " + std::to_string(c.http)), std::string::npos) << e.message;
  }
}

TEST(ApiErrorTest, MessageKeepsTheServerMessageAndNamesTheReason) {
  Error e =
      mapApiError(409, "POST", statusBody(409, "AlreadyExists", "configmaps \"a\" already exists"));
  EXPECT_EQ(e.message, "HTTP 409 AlreadyExists: configmaps \"a\" already exists");
  Error bare = mapApiError(502, "GET", "<html>bad gateway</html>");
  EXPECT_EQ(bare.code, ErrorCode::kUnavailable);
  EXPECT_EQ(bare.message, "HTTP 502: <html>bad gateway</html>");
  EXPECT_EQ(mapApiError(404, "GET", "").message, "HTTP 404");
}

TEST(ApiErrorTest, WatchErrorEventsUseTheReasonToo) {
  Json expired = {{"kind", "Status"},
                  {"code", 410},
                  {"reason", "Expired"},
                  {"message", "too old resource version: 1 (2)"}};
  Error gone = statusObjectToError(expired, "WATCH");
  EXPECT_EQ(gone.code, ErrorCode::kGone);
  EXPECT_NE(gone.message.find("too old resource version"), std::string::npos);
  // A reason without a code: the reason still decides.
  EXPECT_EQ(statusObjectToError({{"kind", "Status"}, {"reason", "Forbidden"}}, "WATCH").code,
            ErrorCode::kPermissionDenied);
  // Neither: an unavailable server, with a message that says so.
  Error unknown = statusObjectToError(Json::object(), "WATCH");
  EXPECT_EQ(unknown.code, ErrorCode::kUnavailable);
  EXPECT_NE(unknown.message.find("unknown error"), std::string::npos);
  EXPECT_EQ(statusObjectToError(Json("not a status"), "WATCH").code, ErrorCode::kUnavailable);
}

}  // namespace
}  // namespace c4::op
