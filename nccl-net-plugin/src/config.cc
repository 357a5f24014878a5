#include "c4/plugin/config.h"

#include <unistd.h>

#include <cctype>
#include <charconv>
#include <cstdlib>
#include <string_view>

#include "c4/common/report.h"

namespace c4::plugin {
namespace {

template <typename T>
std::optional<T> parseInt(std::string_view s) {
  T v{};
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size()) return std::nullopt;
  return v;
}

struct Loader {
  const std::function<std::optional<std::string>(const char*)>& getenv;
  PluginConfig& cfg;
  std::vector<std::pair<std::string, std::string>> lines;  // name=value, source

  template <typename T>
  void integer(const char* name, T& field, T lo, T hi) {
    auto v = getenv(name);
    if (!v) {
      lines.emplace_back(std::string(name) + "=" + std::to_string(field), "default");
      return;
    }
    auto parsed = parseInt<T>(*v);
    if (!parsed || *parsed < lo || *parsed > hi) {
      cfg.warnings.push_back(std::string(name) + "=\"" + *v + "\" is not an integer in [" +
                             std::to_string(lo) + ", " + std::to_string(hi) + "]; using " +
                             std::to_string(field));
      lines.emplace_back(std::string(name) + "=" + std::to_string(field), "default(invalid env)");
      return;
    }
    field = *parsed;
    lines.emplace_back(std::string(name) + "=" + std::to_string(field), "env");
  }
  void text(const char* name, std::string& field) {
    auto v = getenv(name);
    if (v) field = *v;
    lines.emplace_back(std::string(name) + "=" + field, v ? "env" : "default");
  }
  void name(const char* env, std::string& field) {
    auto v = getenv(env);
    if (!v) {
      lines.emplace_back(std::string(env) + "=" + field, "default");
      return;
    }
    std::string clean = sanitizeName(*v);
    if (clean != *v) {
      cfg.warnings.push_back(std::string(env) + "=\"" + *v + "\" is not a DNS-1123 name; using \"" +
                             clean + "\"");
    }
    field = clean;
    lines.emplace_back(std::string(env) + "=" + field, "env");
  }
};

}  // namespace

std::string sanitizeName(std::string_view name) {
  std::string out;
  for (char c : name.substr(0, report::kMaxNameBytes)) {
    auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u)) {
      out.push_back(static_cast<char>(std::tolower(u)));
    } else if (c == '-' || c == '.') {
      out.push_back(c);
    } else {
      out.push_back('-');
    }
  }
  std::size_t b = 0;
  while (b < out.size() && !std::isalnum(static_cast<unsigned char>(out[b]))) ++b;
  std::size_t e = out.size();
  while (e > b && !std::isalnum(static_cast<unsigned char>(out[e - 1]))) --e;
  out = out.substr(b, e - b);
  if (!out.empty() && !report::isDnsSubdomain(out)) return "";
  return out;
}

PluginConfig loadConfig(const std::function<std::optional<std::string>(const char*)>& getenv) {
  PluginConfig cfg;
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) == 0) cfg.node = sanitizeName(host);
  Loader l{getenv, cfg, {}};
  l.integer<int>("C4_SUBFLOWS", cfg.subflows, 1, 64);
  l.text("C4_SOCKET_IFNAME", cfg.socket_ifname);
  if (!getenv("C4_RANK") && getenv("RANK")) {
    l.integer<std::int32_t>("RANK", cfg.rank, -1, report::kMaxRank);
  } else {
    l.integer<std::int32_t>("C4_RANK", cfg.rank, -1, report::kMaxRank);
  }
  l.name("C4_POD_NAME", cfg.pod);
  l.name("C4_NODE_NAME", cfg.node);
  l.name("C4_JOB", cfg.job);
  l.name("C4_NAMESPACE", cfg.ns);
  l.integer<std::int32_t>("WORLD_SIZE", cfg.world_size, 0, report::kMaxRank);
  l.integer<std::uint32_t>("C4_RESTART_ATTEMPT", cfg.restart_attempt, 0, 1u << 30);
  l.text("C4_AGENT_SOCKET", cfg.agent_socket);
  l.integer<std::uint32_t>("C4_REPORT_INTERVAL_MS", cfg.report_interval_ms, 10, 3600 * 1000);
  l.integer<std::uint32_t>("C4_STALL_MS", cfg.stall_ms, 1, 3600 * 1000);
  l.text("C4_PLAN_FILE", cfg.plan_file);
  l.integer<std::uint32_t>("C4_PLAN_POLL_MS", cfg.plan_poll_ms, 10, 600 * 1000);
  l.integer<std::uint32_t>("C4_PLAN_WAIT_MS", cfg.plan_wait_ms, 0, 600 * 1000);
  l.integer<std::uint64_t>("C4_MIN_CHUNK_BYTES", cfg.min_chunk_bytes, 1, 1ull << 30);
  l.integer<std::uint32_t>("C4_TCP_USER_TIMEOUT_MS", cfg.tcp_user_timeout_ms, 0, 3600 * 1000);
  l.integer<std::uint64_t>("C4_MAX_STAGED_BYTES", cfg.max_staged_bytes, 0, 1ull << 40);
  for (auto& [line, source] : l.lines) cfg.sources.push_back(line + " (" + source + ")");
  return cfg;
}

PluginConfig loadConfigFromEnvironment() {
  return loadConfig([](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  });
}

std::vector<std::string> PluginConfig::describe() const {
  return sources;
}

}  // namespace c4::plugin
