// Structured logging: one line per record, logfmt style (key=value) by default or JSON, with
// level and component.
//
//   ts=2026-12-02T11:00:09.123456Z level=info component=operator msg="job reconciled" job=ns/a
//   {"ts":"2026-12-02T11:00:09.123456Z","level":"info","component":"operator","msg":"job
//   reconciled","job":"ns/a"}
//
// Loggers are cheap value types; `with()` returns a child carrying extra fields (a job, a
// reconcile id). The sink and the minimum level are process-wide and thread-safe to change.
#pragma once

#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "c4/common/error.h"

namespace c4 {

class Clock;

enum class LogLevel { kTrace = 0, kDebug = 1, kInfo = 2, kWarn = 3, kError = 4, kOff = 5 };

std::string_view logLevelName(LogLevel level) noexcept;
// Accepts trace|debug|info|warn|warning|error|off (case-insensitive).
Result<LogLevel> parseLogLevel(std::string_view text);

// How StderrLogSink writes a record: logfmt (the default) or one JSON object per line.
enum class LogFormat { kLogfmt = 0, kJson = 1 };

std::string_view logFormatName(LogFormat format) noexcept;
// Accepts logfmt|json (case-insensitive); anything else is kInvalidArgument naming both.
Result<LogFormat> parseLogFormat(std::string_view text);

struct LogField {
  std::string key;
  std::string value;

  LogField(std::string_view k, std::string_view v) : key(k), value(v) {}
  LogField(std::string_view k, const char* v) : key(k), value(v ? v : "") {}
  LogField(std::string_view k, const std::string& v) : key(k), value(v) {}
  LogField(std::string_view k, bool v) : key(k), value(v ? "true" : "false") {}
  template <std::integral T>
    requires(!std::same_as<T, bool> && !std::same_as<T, char>)
  LogField(std::string_view k, T v) : key(k), value(std::to_string(v)) {}
  LogField(std::string_view k, double v);
  LogField(std::string_view k, const Error& e) : key(k), value(e.toString()) {}
};

struct LogRecord {
  std::string timestamp;  // RFC 3339 with microseconds
  LogLevel level = LogLevel::kInfo;
  std::string component;
  std::string message;
  std::vector<LogField> fields;
};

// Renders a record as one logfmt line without the trailing newline.
std::string formatLogRecord(const LogRecord& record);
// Renders a record as one JSON object without the trailing newline: "ts", "level", "component",
// "msg", then every field in order, all values strings. Strings are escaped by nlohmann::json
// (control characters as \uXXXX, UTF-8 kept as is, invalid UTF-8 replaced by U+FFFD). A field
// named like one of the four fixed keys is written as "field_<key>" so it cannot hide them.
std::string formatLogRecordJson(const LogRecord& record);
std::string formatLogRecord(const LogRecord& record, LogFormat format);

class LogSink {
 public:
  virtual ~LogSink() = default;
  // Called concurrently from any thread; must not throw.
  virtual void write(const LogRecord& record) noexcept = 0;
};

// Writes formatted lines (in the process-wide logFormat()) to stderr, one write(2) per line.
class StderrLogSink final : public LogSink {
 public:
  void write(const LogRecord& record) noexcept override;
};

// Keeps records in memory (tests).
class CaptureLogSink final : public LogSink {
 public:
  void write(const LogRecord& record) noexcept override;
  [[nodiscard]] std::vector<LogRecord> records() const;
  // Formatted lines, for substring assertions.
  [[nodiscard]] std::vector<std::string> lines() const;
  void clear();

 private:
  mutable std::mutex mu_;
  std::vector<LogRecord> records_;
};

// Process-wide configuration. Defaults: StderrLogSink, level from $C4_LOG_LEVEL or info, real
// clock for timestamps.
// nullptr: back to the built-in stderr sink (which owns no heap memory; a library that is unloaded
// resets its sink so nothing of it outlives dlclose).
void setLogSink(std::shared_ptr<LogSink> sink);
void setLogLevel(LogLevel level);
LogLevel logLevel() noexcept;
// Default kLogfmt, or $C4_LOG_FORMAT when it parses.
void setLogFormat(LogFormat format);
LogFormat logFormat() noexcept;
void setLogClock(Clock* clock);  // nullptr = real clock

class Logger {
 public:
  explicit Logger(std::string component) : component_(std::move(component)) {}

  // A child logger that adds `fields` to every record.
  [[nodiscard]] Logger with(std::initializer_list<LogField> fields) const;
  [[nodiscard]] const std::string& component() const { return component_; }

  void log(LogLevel level, std::string_view msg, std::initializer_list<LogField> fields = {}) const;
  void trace(std::string_view msg, std::initializer_list<LogField> f = {}) const {
    log(LogLevel::kTrace, msg, f);
  }
  void debug(std::string_view msg, std::initializer_list<LogField> f = {}) const {
    log(LogLevel::kDebug, msg, f);
  }
  void info(std::string_view msg, std::initializer_list<LogField> f = {}) const {
    log(LogLevel::kInfo, msg, f);
  }
  void warn(std::string_view msg, std::initializer_list<LogField> f = {}) const {
    log(LogLevel::kWarn, msg, f);
  }
  void error(std::string_view msg, std::initializer_list<LogField> f = {}) const {
    log(LogLevel::kError, msg, f);
  }
  [[nodiscard]] bool enabled(LogLevel level) const noexcept { return level >= logLevel(); }

 private:
  std::string component_;
  std::vector<LogField> fields_;
};

}  // namespace c4
