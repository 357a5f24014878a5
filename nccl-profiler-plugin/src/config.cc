// The profiler's settings: the telemetry core's RankEnv, nothing of its own.
#include "c4/profiler/profiler.h"

namespace c4::profiler {

ProfilerConfig loadConfig(const telemetry::EnvLoader::Getenv& getenv) {
  ProfilerConfig cfg;
  telemetry::EnvLoader l(getenv, cfg.sources, cfg.warnings);
  telemetry::loadRankEnv(l, cfg);
  return cfg;
}

ProfilerConfig loadConfigFromEnvironment() {
  return loadConfig(telemetry::EnvLoader::processEnvironment());
}

}  // namespace c4::profiler
