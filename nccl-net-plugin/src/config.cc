// The net plugin's settings (config.h): the shared RankEnv, then the transport's own.
#include "c4/plugin/config.h"

namespace c4::plugin {

PluginConfig loadConfig(const std::function<std::optional<std::string>(const char*)>& getenv) {
  PluginConfig cfg;
  telemetry::EnvLoader l(getenv, cfg.sources, cfg.warnings);
  telemetry::loadRankEnv(l, cfg);
  l.integer<int>("C4_SUBFLOWS", cfg.subflows, 1, 64);
  l.text("C4_SOCKET_IFNAME", cfg.socket_ifname);
  l.integer<std::uint32_t>("C4_STALL_MS", cfg.stall_ms, 1, 3600 * 1000);
  l.text("C4_PLAN_FILE", cfg.plan_file);
  l.integer<std::uint32_t>("C4_PLAN_POLL_MS", cfg.plan_poll_ms, 10, 600 * 1000);
  l.integer<std::uint32_t>("C4_PLAN_WAIT_MS", cfg.plan_wait_ms, 0, 600 * 1000);
  l.integer<std::uint64_t>("C4_MIN_CHUNK_BYTES", cfg.min_chunk_bytes, 1, 1ull << 30);
  l.integer<std::uint32_t>("C4_TCP_USER_TIMEOUT_MS", cfg.tcp_user_timeout_ms, 0, 3600 * 1000);
  l.integer<std::uint64_t>("C4_MAX_STAGED_BYTES", cfg.max_staged_bytes, 0, 1ull << 40);
  return cfg;
}

PluginConfig loadConfigFromEnvironment() {
  return loadConfig(telemetry::EnvLoader::processEnvironment());
}

std::vector<std::string> PluginConfig::describe() const {
  return sources;
}

}  // namespace c4::plugin
