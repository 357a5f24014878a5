// The profiler's settings from the environment, with the net plugin's names where they mean the
// same (nccl-net-plugin/src/config.cc): the operator injects one set for both plugins.
#include <unistd.h>

#include <cctype>
#include <charconv>
#include <cstdlib>

#include "c4/profiler/profiler.h"

namespace c4::profiler {
namespace {

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

struct Loader {
  const std::function<std::optional<std::string>(const char*)>& getenv;
  ProfilerConfig& cfg;

  template <typename T>
  void integer(const char* name, T& field, T lo, T hi) {
    auto v = getenv(name);
    if (!v) {
      cfg.sources.push_back(std::string(name) + "=" + std::to_string(field) + " (default)");
      return;
    }
    T parsed{};
    auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), parsed);
    if (ec != std::errc{} || p != v->data() + v->size() || parsed < lo || parsed > hi) {
      cfg.warnings.push_back(std::string(name) + "=\"" + *v + "\" is not an integer in [" +
                             std::to_string(lo) + ", " + std::to_string(hi) + "]; using " +
                             std::to_string(field));
      cfg.sources.push_back(std::string(name) + "=" + std::to_string(field) +
                            " (default(invalid env))");
      return;
    }
    field = parsed;
    cfg.sources.push_back(std::string(name) + "=" + std::to_string(field) + " (env)");
  }
  void text(const char* name, std::string& field) {
    auto v = getenv(name);
    if (v) field = *v;
    cfg.sources.push_back(std::string(name) + "=" + field + (v ? " (env)" : " (default)"));
  }
  void name(const char* env, std::string& field) {
    auto v = getenv(env);
    if (v) {
      std::string clean = sanitizeName(*v);
      if (clean != *v) {
        cfg.warnings.push_back(std::string(env) + "=\"" + *v +
                               "\" is not a DNS-1123 name; using \"" + clean + "\"");
      }
      field = clean;
    }
    cfg.sources.push_back(std::string(env) + "=" + field + (v ? " (env)" : " (default)"));
  }
};

}  // namespace

ProfilerConfig loadConfig(const std::function<std::optional<std::string>(const char*)>& getenv) {
  ProfilerConfig cfg;
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) == 0) cfg.node = sanitizeName(host);
  Loader l{getenv, cfg};
  if (!getenv("C4_RANK") && getenv("RANK")) {
    l.integer<std::int32_t>("RANK", cfg.rank, -1, report::kMaxRank - 1);
  } else {
    l.integer<std::int32_t>("C4_RANK", cfg.rank, -1, report::kMaxRank - 1);
  }
  l.name("C4_POD_NAME", cfg.pod);
  l.name("C4_NODE_NAME", cfg.node);
  l.name("C4_JOB", cfg.job);
  l.name("C4_NAMESPACE", cfg.ns);
  l.integer<std::int32_t>("WORLD_SIZE", cfg.world_size, 0, report::kMaxRank);
  if (cfg.world_size > 0 && cfg.rank >= cfg.world_size) {
    cfg.warnings.push_back("rank " + std::to_string(cfg.rank) + " >= WORLD_SIZE " +
                           std::to_string(cfg.world_size) + "; WORLD_SIZE ignored");
    cfg.world_size = 0;
  }
  l.integer<std::uint32_t>("C4_RESTART_ATTEMPT", cfg.restart_attempt, 0, 1u << 30);
  l.text("C4_AGENT_SOCKET", cfg.agent_socket);
  l.integer<std::uint32_t>("C4_REPORT_INTERVAL_MS", cfg.report_interval_ms, 10, 3600 * 1000);
  return cfg;
}

ProfilerConfig loadConfigFromEnvironment() {
  return loadConfig([](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  });
}

}  // namespace c4::profiler
