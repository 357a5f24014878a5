// Every tunable of the plugin, declared once (aesthetics "What to absorb" 13): name, default, doc.
// The values come from the environment; each remembers whether it was set or defaulted, and the
// whole table is logged once at the first init.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "c4/common/rank_telemetry.h"

namespace c4::plugin {

// The rank's identity, agent socket and report interval (RankEnv: the names both plugins read),
// plus the transport's own settings.
struct PluginConfig : telemetry::RankEnv {
  // C4_SUBFLOWS: TCP sockets per connection when the plan does not say (1..64).
  int subflows = 4;
  // C4_SOCKET_IFNAME: interface selection, NCCL_SOCKET_IFNAME syntax ("eth", "^docker", "=eth0",
  // comma lists). Empty: the first non-loopback interface that is up, loopback if none.
  std::string socket_ifname;
  // C4_STALL_MS: an op in flight longer than this raises an AnomalyNotice (>= 1).
  std::uint32_t stall_ms = 10000;
  // C4_PLAN_FILE: traffic plan (README.md "Plan file"); empty = default spread.
  std::string plan_file;
  // C4_PLAN_POLL_MS: how often the plan file's mtime is checked.
  std::uint32_t plan_poll_ms = 500;
  // C4_PLAN_WAIT_MS: with a plan file, how long a connection to another node waits (connect
  // answers "not yet") for a plan that includes this node before it connects unplanned; 0 = no
  // wait. The operator sets it for Enforce jobs, whose pods may start before their plan exists.
  std::uint32_t plan_wait_ms = 0;
  // C4_MIN_CHUNK_BYTES: messages smaller than 2x this go on one subflow.
  std::uint64_t min_chunk_bytes = 64 * 1024;
  // C4_TCP_USER_TIMEOUT_MS: unacknowledged data older than this kills a connection (dead host).
  std::uint32_t tcp_user_timeout_ms = 10000;
  // C4_MAX_STAGED_BYTES: per receiving connection shared by several tags, how many bytes of
  // messages that arrive before their receive is posted are kept in memory; past it the subflow
  // is not read until a receive is posted (TCP backpressure).
  std::uint64_t max_staged_bytes = 64ull << 20;

  // One line per setting: "NAME=value (env|default)" (RankEnv::sources).
  std::vector<std::string> describe() const;
};

// Reads the configuration through `getenv` (injected for tests). Invalid values keep the default
// and add a warning; never fails.
PluginConfig loadConfig(const std::function<std::optional<std::string>(const char*)>& getenv);
PluginConfig loadConfigFromEnvironment();

using telemetry::sanitizeName;

}  // namespace c4::plugin
