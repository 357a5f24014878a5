#include "c4/common/log.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "c4/common/clock.h"

namespace c4 {
namespace {

class LogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    sink_ = std::make_shared<CaptureLogSink>();
    setLogSink(sink_);
    setLogClock(&clock_);
    previous_ = logLevel();
    setLogLevel(LogLevel::kInfo);
  }
  void TearDown() override {
    setLogSink(nullptr);
    setLogClock(nullptr);
    setLogLevel(previous_);
  }
  std::shared_ptr<CaptureLogSink> sink_;
  SimulatedClock clock_{fromUnixNanos(1'764'673'209'000'000'000LL)};
  LogLevel previous_{};
};

TEST_F(LogTest, FormatsKeyValueLine) {
  Logger log("operator");
  log.info("job reconciled", {{"job", "ns/train"}, {"replicas", 4}, {"dryRun", false}});
  auto lines = sink_->lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0],
            "ts=2025-12-02T11:00:09.000000Z level=info component=operator msg=\"job reconciled\" "
            "job=ns/train replicas=4 dryRun=false");
}

TEST_F(LogTest, QuotesAndEscapesValues) {
  Logger log("x");
  log.warn("m",
           {{"a", "has space"}, {"b", "q\"uote"}, {"c", "line\nbreak"}, {"d", ""}, {"e", "k=v"}});
  auto lines = sink_->lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("a=\"has space\""), std::string::npos);
  EXPECT_NE(lines[0].find("b=\"q\\\"uote\""), std::string::npos);
  EXPECT_NE(lines[0].find("c=\"line\\nbreak\""), std::string::npos);
  EXPECT_NE(lines[0].find("d=\"\""), std::string::npos);
  EXPECT_NE(lines[0].find("e=\"k=v\""), std::string::npos);
  EXPECT_EQ(lines[0].find('\n'), std::string::npos);
}

TEST_F(LogTest, LevelFiltering) {
  Logger log("x");
  log.debug("hidden");
  log.info("shown");
  setLogLevel(LogLevel::kError);
  log.warn("hidden too");
  log.error("shown too");
  auto recs = sink_->records();
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[0].message, "shown");
  EXPECT_EQ(recs[1].message, "shown too");
  EXPECT_EQ(recs[1].level, LogLevel::kError);
}

TEST_F(LogTest, ChildLoggerCarriesFields) {
  Logger base("operator");
  Logger child = base.with({{"reconcileID", "abc"}});
  child.info("step", {{"n", 1}});
  base.info("plain");
  auto recs = sink_->records();
  ASSERT_EQ(recs.size(), 2u);
  ASSERT_EQ(recs[0].fields.size(), 2u);
  EXPECT_EQ(recs[0].fields[0].key, "reconcileID");
  EXPECT_EQ(recs[0].fields[1].key, "n");
  EXPECT_TRUE(recs[1].fields.empty());
}

TEST_F(LogTest, ErrorField) {
  Logger log("x");
  log.error("failed", {{"err", Error{ErrorCode::kUnavailable, "connection refused"}}});
  EXPECT_NE(sink_->lines()[0].find("err=\"unavailable: connection refused\""), std::string::npos);
}

TEST(LogLevelTest, Parse) {
  EXPECT_EQ(*parseLogLevel("DEBUG"), LogLevel::kDebug);
  EXPECT_EQ(*parseLogLevel("warning"), LogLevel::kWarn);
  EXPECT_EQ(*parseLogLevel("off"), LogLevel::kOff);
  auto bad = parseLogLevel("loud");
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.error().message.find("loud"), std::string::npos);
}

LogRecord jsonRecord() {
  LogRecord r;
  r.timestamp = "2025-12-02T11:00:09.000000Z";
  r.level = LogLevel::kWarn;
  r.component = "node-plugin";
  r.message = "send failed";
  r.fields = {{"node", "gpu-1"}, {"attempt", 3}, {"ok", false}};
  return r;
}

TEST(LogJsonTest, FixedKeysThenFieldsAllStrings) {
  EXPECT_EQ(formatLogRecordJson(jsonRecord()),
            R"({"ts":"2025-12-02T11:00:09.000000Z","level":"warn","component":"node-plugin",)"
            R"("msg":"send failed","node":"gpu-1","attempt":"3","ok":"false"})");
  EXPECT_EQ(formatLogRecord(jsonRecord(), LogFormat::kJson), formatLogRecordJson(jsonRecord()));
  EXPECT_EQ(formatLogRecord(jsonRecord(), LogFormat::kLogfmt), formatLogRecord(jsonRecord()));
}

TEST(LogJsonTest, EscapesQuotesBackslashesAndControlCharacters) {
  LogRecord r = jsonRecord();
  r.message = std::string(
      "a \"q\" \\ b\nc\td\x01"
      "e\x1f",
      16);
  r.fields = {{"k", std::string("\0x", 2)}};
  EXPECT_EQ(formatLogRecordJson(r),
            R"({"ts":"2025-12-02T11:00:09.000000Z","level":"warn","component":"node-plugin",)"
            R"("msg":"a \"q\" \\ b\nc\td\u0001e\u001f","k":"\u0000x"})");
  // And a JSON parser reads back exactly what was logged.
  auto parsed = nlohmann::json::parse(formatLogRecordJson(r));
  EXPECT_EQ(parsed["msg"].get<std::string>(), r.message);
  EXPECT_EQ(parsed["k"].get<std::string>(), std::string("\0x", 2));
}

TEST(LogJsonTest, KeepsUtf8AndReplacesInvalidBytes) {
  LogRecord r = jsonRecord();
  r.message = "r\xc3\xa9sum\xc3\xa9 \xe2\x9c\x93";  // "résumé ✓"
  r.fields = {{"bad", "x\xff\xc3y"}};               // not UTF-8
  std::string line = formatLogRecordJson(r);
  EXPECT_NE(line.find("\"msg\":\"r\xc3\xa9sum\xc3\xa9 \xe2\x9c\x93\""), std::string::npos) << line;
  auto parsed = nlohmann::json::parse(line);  // throws on invalid UTF-8
  EXPECT_EQ(parsed["bad"].get<std::string>(), "x\xef\xbf\xbd\xef\xbf\xbdy");
}

TEST(LogJsonTest, FieldsCannotHideTheFixedKeys) {
  LogRecord r = jsonRecord();
  r.fields = {{"msg", "mine"}, {"level", "x"}, {"job", "a"}};
  auto parsed = nlohmann::json::parse(formatLogRecordJson(r));
  EXPECT_EQ(parsed["msg"], "send failed");
  EXPECT_EQ(parsed["level"], "warn");
  EXPECT_EQ(parsed["field_msg"], "mine");
  EXPECT_EQ(parsed["field_level"], "x");
  EXPECT_EQ(parsed["job"], "a");
}

TEST(LogFormatTest, Parse) {
  EXPECT_EQ(*parseLogFormat("json"), LogFormat::kJson);
  EXPECT_EQ(*parseLogFormat("JSON"), LogFormat::kJson);
  EXPECT_EQ(*parseLogFormat("logfmt"), LogFormat::kLogfmt);
  EXPECT_EQ(logFormatName(LogFormat::kJson), "json");
  EXPECT_EQ(logFormatName(LogFormat::kLogfmt), "logfmt");
  auto bad = parseLogFormat("yaml");
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.error().message.find("\"yaml\""), std::string::npos);
  EXPECT_NE(bad.error().message.find("logfmt or json"), std::string::npos);
}

// The built-in stderr sink writes in the process-wide format.
TEST(LogFormatTest, StderrSinkFollowsTheProcessWideFormat) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  int saved = ::dup(STDERR_FILENO);
  ASSERT_GE(saved, 0);
  ASSERT_GE(::dup2(fds[1], STDERR_FILENO), 0);
  const LogFormat previous = logFormat();
  const LogLevel previous_level = logLevel();
  setLogSink(nullptr);
  setLogLevel(LogLevel::kInfo);
  setLogFormat(LogFormat::kJson);
  Logger("c").info("hello", {{"k", "v w"}});
  setLogFormat(LogFormat::kLogfmt);
  Logger("c").info("hello", {{"k", "v w"}});
  setLogFormat(previous);
  setLogLevel(previous_level);
  ::dup2(saved, STDERR_FILENO);
  ::close(saved);
  ::close(fds[1]);
  std::string out;
  char buf[512];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  auto nl = out.find('\n');
  ASSERT_NE(nl, std::string::npos) << out;
  auto first = nlohmann::json::parse(out.substr(0, nl));
  EXPECT_EQ(first["component"], "c");
  EXPECT_EQ(first["msg"], "hello");
  EXPECT_EQ(first["k"], "v w");
  EXPECT_TRUE(first.contains("ts"));
  EXPECT_NE(out.find("level=info component=c msg=hello k=\"v w\"\n", nl), std::string::npos) << out;
}

}  // namespace
}  // namespace c4
