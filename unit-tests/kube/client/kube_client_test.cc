// The API error edge mapping: metav1.Status.reason first, the HTTP status (and verb) second.
#include "kube/client/kube_client.h"

#include <gtest/gtest.h>

namespace c4::kube {
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

// Checked access: a field of another type reads as absent, never as an exception (nlohmann's
// value()/at()/get<T>() throw type_error.302 there).
TEST(CheckedAccessTest, FieldsOfAnotherTypeReadAsAbsent) {
  const Json o = {{"s", "text"}, {"i", 5},      {"u", 18446744073709551615u},
                  {"d", 0.5},    {"b", true},   {"o", {{"k", "v"}}},
                  {"a", {1, 2}}, {"n", nullptr}};
  EXPECT_EQ(stringAt(o, "s"), "text");
  EXPECT_EQ(intAt(o, "i"), 5);
  EXPECT_EQ(numberAt(o, "i"), 5.0);
  EXPECT_EQ(numberAt(o, "d"), 0.5);
  EXPECT_EQ(boolAt(o, "b"), true);
  ASSERT_NE(objectAt(o, "o"), nullptr);
  EXPECT_EQ(stringAt(fieldsOf(o, "o"), "k"), "v");
  ASSERT_NE(arrayAt(o, "a"), nullptr);
  EXPECT_EQ(arrayAt(o, "a")->size(), 2u);
  for (const char* key : {"s", "i", "u", "d", "b", "o", "a", "n", "missing"}) {
    const std::string k = key;
    if (k != "s") {
      EXPECT_FALSE(stringAt(o, key)) << key;
    }
    if (k != "i") {
      EXPECT_FALSE(intAt(o, key)) << key << " (beyond int64 included)";
    }
    if (k != "i" && k != "u" && k != "d") {
      EXPECT_FALSE(numberAt(o, key)) << key;
    }
    if (k != "b") {
      EXPECT_FALSE(boolAt(o, key)) << key;
    }
    if (k != "o") {
      EXPECT_EQ(objectAt(o, key), nullptr) << key;
    }
    if (k != "a") {
      EXPECT_EQ(arrayAt(o, key), nullptr) << key;
    }
    if (k != "o") {
      EXPECT_TRUE(fieldsOf(o, key).empty()) << key;
    }
  }
  // Not an object at all.
  for (const Json& v : {Json(5), Json("x"), Json::array({1}), Json(nullptr)}) {
    EXPECT_FALSE(stringAt(v, "s"));
    EXPECT_FALSE(intAt(v, "i"));
    EXPECT_EQ(objectAt(v, "o"), nullptr);
    EXPECT_TRUE(fieldsOf(v, "o").is_object());
    EXPECT_FALSE(hasWrongType(v, "s", Json::value_t::string));
  }
  EXPECT_FALSE(hasWrongType(o, "s", Json::value_t::string));
  EXPECT_TRUE(hasWrongType(o, "i", Json::value_t::string));
  EXPECT_FALSE(hasWrongType(o, "n", Json::value_t::string)) << "null is absent";
  EXPECT_FALSE(hasWrongType(o, "missing", Json::value_t::string));
  EXPECT_FALSE(hasWrongType(o, "i", Json::value_t::number_float)) << "an integer is a number";
  EXPECT_TRUE(hasWrongType(o, "d", Json::value_t::number_integer));
  EXPECT_FALSE(hasWrongType(o, "u", Json::value_t::number_integer));

  // The object accessors: metadata, labels and annotations of another type read as absent.
  const Json bad = {{"metadata",
                     {{"name", 5},
                      {"namespace", Json::array()},
                      {"labels", "x"},
                      {"annotations", {{"a", 7}}},
                      {"resourceVersion", 12}}}};
  EXPECT_EQ(objectName(bad), "");
  EXPECT_EQ(objectNamespace(bad), "");
  EXPECT_EQ(labelOf(bad, "a"), "");
  EXPECT_EQ(annotationOf(bad, "a"), "");
  EXPECT_FALSE(resourceVersionNumber(bad));
  EXPECT_EQ(objectName(Json{{"metadata", "x"}}), "");
}

}  // namespace
}  // namespace c4::kube
