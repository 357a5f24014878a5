// Node plugin configuration: one table of options, settable from a YAML file (--config, same keys
// as the flags without "--") and from flags, which win. Unknown keys and flags are errors; every
// value is validated with a message naming the option.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "c4/common/error.h"

namespace c4::node {

struct NodePluginOptions {
  std::string node_name;   // --node-name, else $NODE_NAME (required)
  std::string kubeconfig;  // "" = in-cluster (then $KUBECONFIG, ~/.kube/config)
  std::string context;
  std::string pod_namespace;  // --namespace: only this namespace's pods report ("" = every one)
  std::string socket = "/var/run/c4/agent.sock";
  std::size_t socket_receive_buffer = 4u << 20;
  std::string attribution = "auto";  // cgroup | identity | auto
  std::string proc_root = "/proc";
  std::string sysfs_root = "/sys";
  std::string interfaces;                          // regex; "" = every interface with a device
  std::string nvml_library = "libnvidia-ml.so.1";  // "" = no GPU monitoring
  double interval_seconds = 1;
  double health_interval_seconds = 1;
  double reassembly_timeout_seconds = 0;     // 0 = two intervals
  std::string operator_url;                  // required, https://
  bool allow_insecure_operator_url = false;  // http:// accepted too (tests only)
  std::string ca_file;
  std::string token_file = "/var/run/secrets/c4/token";
  double request_timeout_seconds = 10;
  std::size_t max_buffer_bytes = 32u << 20;
  std::size_t max_notices = 8192;
  double backoff_base_seconds = 0.5;
  double backoff_cap_seconds = 30;
  double shutdown_timeout_seconds = 5;
  // How long an exited rank process's last words are kept for a resend to a new operator
  // instance (Shipper, "Last words"); 0 = none kept.
  double last_words_seconds = 600;
  std::string plugin_source = "/usr/lib/c4/libnccl-net-c4.so";  // "" = do not install
  // The NCCL profiler plugin, C4's default telemetry source; installed beside the net plugin.
  std::string profiler_plugin_source = "/usr/lib/c4/libnccl-profiler-c4.so";  // "" = do not
  std::string plugin_install_dir = "/opt/c4/lib";
  std::string metrics_bind_address = ":9400";  // "0" = no HTTP server
  double ready_failure_seconds = 30;
  std::string log_level = "info";
  std::string log_format = "logfmt";  // logfmt | json
  bool show_help = false;
  bool show_version = false;
};

using GetEnv = std::function<std::optional<std::string>(const char*)>;

// Parses argv without the program name. `getenv_fn` supplies NODE_NAME.
Result<NodePluginOptions> parseNodePluginOptions(const std::vector<std::string>& args,
                                                 const GetEnv& getenv_fn);
Status applyNodePluginYaml(NodePluginOptions& options, const std::string& yaml_text);
std::string nodePluginUsage();
// An operator URL must be https://; http:// only when `allow_insecure` (tests). The error names
// --allow-insecure-operator-url.
Status checkOperatorUrl(const std::string& url, bool allow_insecure);

}  // namespace c4::node
