#include "c4/common/log.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <nlohmann/json.hpp>

#include "c4/common/clock.h"

namespace c4 {
namespace {

LogLevel initialLevel() {
  if (const char* env = std::getenv("C4_LOG_LEVEL")) {
    if (auto lvl = parseLogLevel(env)) return *lvl;
  }
  return LogLevel::kInfo;
}

LogFormat initialFormat() {
  if (const char* env = std::getenv("C4_LOG_FORMAT")) {
    if (auto fmt = parseLogFormat(env)) return *fmt;
  }
  return LogFormat::kLogfmt;
}

struct LogConfig {
  std::mutex mu;
  std::shared_ptr<LogSink> sink;  // empty: the built-in stderr sink
  std::atomic<LogLevel> level{initialLevel()};
  std::atomic<LogFormat> format{initialFormat()};
  std::atomic<Clock*> clock{nullptr};
};

// Both singletons live in static storage, are built on first use and never destroyed: logging
// works in static destructors, and nothing stays on the heap when a library holding this code
// (the NCCL plugin) is unloaded with dlclose — as long as it resets a sink it installed.
LogConfig& config() {
  alignas(LogConfig) static unsigned char storage[sizeof(LogConfig)];
  static LogConfig* cfg = ::new (storage) LogConfig();
  return *cfg;
}

LogSink& stderrSink() {
  alignas(StderrLogSink) static unsigned char storage[sizeof(StderrLogSink)];
  static StderrLogSink* sink = ::new (storage) StderrLogSink();
  return *sink;
}

bool needsQuoting(std::string_view v) {
  if (v.empty()) return true;
  return std::any_of(v.begin(), v.end(), [](char c) {
    return c == ' ' || c == '=' || c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20;
  });
}

void appendValue(std::string& out, std::string_view v) {
  if (!needsQuoting(v)) {
    out += v;
    return;
  }
  out += '"';
  for (char c : v) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

std::string lowered(std::string_view text) {
  std::string t(text);
  std::transform(t.begin(), t.end(), t.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return t;
}

// One JSON string literal, quotes included.
void appendJsonString(std::string& out, std::string_view v) {
  out +=
      nlohmann::json(std::string(v)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

LogField::LogField(std::string_view k, double v) : key(k) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  value = buf;
}

std::string_view logLevelName(LogLevel level) noexcept {
  switch (level) {
    case LogLevel::kTrace:
      return "trace";
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kError:
      return "error";
    case LogLevel::kOff:
      return "off";
  }
  return "unknown";
}

Result<LogLevel> parseLogLevel(std::string_view text) {
  std::string t = lowered(text);
  if (t == "trace") return LogLevel::kTrace;
  if (t == "debug") return LogLevel::kDebug;
  if (t == "info") return LogLevel::kInfo;
  if (t == "warn" || t == "warning") return LogLevel::kWarn;
  if (t == "error") return LogLevel::kError;
  if (t == "off") return LogLevel::kOff;
  return makeError(ErrorCode::kInvalidArgument,
                   "unknown log level \"" + std::string(text) +
                       "\" (want trace, debug, info, warn, error or off)");
}

std::string_view logFormatName(LogFormat format) noexcept {
  return format == LogFormat::kJson ? "json" : "logfmt";
}

Result<LogFormat> parseLogFormat(std::string_view text) {
  std::string t = lowered(text);
  if (t == "logfmt") return LogFormat::kLogfmt;
  if (t == "json") return LogFormat::kJson;
  return makeError(ErrorCode::kInvalidArgument,
                   "unknown log format \"" + std::string(text) + "\" (want logfmt or json)");
}

std::string formatLogRecordJson(const LogRecord& r) {
  std::string out;
  out.reserve(160);
  out += "{\"ts\":";
  appendJsonString(out, r.timestamp);
  out += ",\"level\":";
  appendJsonString(out, logLevelName(r.level));
  out += ",\"component\":";
  appendJsonString(out, r.component);
  out += ",\"msg\":";
  appendJsonString(out, r.message);
  for (const auto& f : r.fields) {
    out += ',';
    if (f.key == "ts" || f.key == "level" || f.key == "component" || f.key == "msg") {
      appendJsonString(out, "field_" + f.key);
    } else {
      appendJsonString(out, f.key);
    }
    out += ':';
    appendJsonString(out, f.value);
  }
  out += '}';
  return out;
}

std::string formatLogRecord(const LogRecord& r, LogFormat format) {
  return format == LogFormat::kJson ? formatLogRecordJson(r) : formatLogRecord(r);
}

std::string formatLogRecord(const LogRecord& r) {
  std::string out;
  out.reserve(128);
  out += "ts=";
  out += r.timestamp;
  out += " level=";
  out += logLevelName(r.level);
  out += " component=";
  appendValue(out, r.component);
  out += " msg=";
  appendValue(out, r.message);
  for (const auto& f : r.fields) {
    out += ' ';
    out += f.key;
    out += '=';
    appendValue(out, f.value);
  }
  return out;
}

void StderrLogSink::write(const LogRecord& record) noexcept {
  try {
    std::string line = formatLogRecord(record, logFormat());
    line += '\n';
    const char* p = line.data();
    std::size_t left = line.size();
    while (left > 0) {
      ssize_t n = ::write(STDERR_FILENO, p, left);
      if (n <= 0) return;
      p += n;
      left -= static_cast<std::size_t>(n);
    }
  } catch (...) {
    // Logging must never take the process down.
  }
}

void CaptureLogSink::write(const LogRecord& record) noexcept {
  try {
    std::lock_guard lock(mu_);
    records_.push_back(record);
  } catch (...) {
  }
}

std::vector<LogRecord> CaptureLogSink::records() const {
  std::lock_guard lock(mu_);
  return records_;
}

std::vector<std::string> CaptureLogSink::lines() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  out.reserve(records_.size());
  for (const auto& r : records_) out.push_back(formatLogRecord(r));
  return out;
}

void CaptureLogSink::clear() {
  std::lock_guard lock(mu_);
  records_.clear();
}

void setLogSink(std::shared_ptr<LogSink> sink) {
  auto& cfg = config();
  std::lock_guard lock(cfg.mu);
  cfg.sink = std::move(sink);
}

void setLogLevel(LogLevel level) {
  config().level.store(level);
}
LogLevel logLevel() noexcept {
  return config().level.load(std::memory_order_relaxed);
}
void setLogFormat(LogFormat format) {
  config().format.store(format);
}
LogFormat logFormat() noexcept {
  return config().format.load(std::memory_order_relaxed);
}
void setLogClock(Clock* clock) {
  config().clock.store(clock);
}

Logger Logger::with(std::initializer_list<LogField> fields) const {
  Logger child = *this;
  child.fields_.insert(child.fields_.end(), fields.begin(), fields.end());
  return child;
}

void Logger::log(LogLevel level, std::string_view msg,
                 std::initializer_list<LogField> fields) const {
  if (!enabled(level) || level == LogLevel::kOff) return;
  auto& cfg = config();
  Clock* clock = cfg.clock.load();
  LogRecord rec;
  rec.timestamp = formatRfc3339Micro((clock ? *clock : realClock()).wallNow());
  rec.level = level;
  rec.component = component_;
  rec.message = std::string(msg);
  rec.fields.reserve(fields_.size() + fields.size());
  rec.fields.insert(rec.fields.end(), fields_.begin(), fields_.end());
  rec.fields.insert(rec.fields.end(), fields.begin(), fields.end());
  std::shared_ptr<LogSink> sink;
  {
    std::lock_guard lock(cfg.mu);
    sink = cfg.sink;
  }
  (sink ? *sink : stderrSink()).write(rec);
}

}  // namespace c4
