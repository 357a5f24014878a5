#include "c4/common/log.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace c4
