#include "c4/node_plugin/options.h"

#include <charconv>
#include <regex>

#include "c4/common/flags.h"
#include "c4/common/log.h"
#include "c4/common/report.h"
#include "c4/node_plugin/attribution.h"
#include "c4/node_plugin/http_server.h"
#include "kube/client/kube_config.h"

namespace c4::node {
namespace {

using Setter = std::function<Status(NodePluginOptions&, const std::string&)>;

struct Option {
  const char* name;
  const char* help;
  Setter set;
};

Status parseSize(const std::string& name, const std::string& v, std::size_t& out,
                 std::size_t min_value) {
  std::size_t value = 0;
  auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), value);
  if (ec != std::errc{} || ptr != v.data() + v.size() || value < min_value) {
    return makeError(
        ErrorCode::kInvalidArgument,
        name + ": expected an integer >= " + std::to_string(min_value) + ", got '" + v + "'");
  }
  out = value;
  return okStatus();
}

Status parseSeconds(const std::string& name, const std::string& v, double& out, double min_value,
                    double max_value) {
  try {
    std::size_t used = 0;
    const double value = std::stod(v, &used);
    if (used != v.size() || !(value >= min_value) || !(value <= max_value)) {
      throw std::invalid_argument(v);
    }
    out = value;
    return okStatus();
  } catch (...) {
    return makeError(ErrorCode::kInvalidArgument,
                     name + ": expected seconds in [" + std::to_string(min_value) + ", " +
                         std::to_string(max_value) + "], got '" + v + "'");
  }
}

#define C4_STR(field)                              \
  [](NodePluginOptions& o, const std::string& v) { \
    o.field = v;                                   \
    return okStatus();                             \
  }
#define C4_SIZE(field, name, min) \
  [](NodePluginOptions& o, const std::string& v) { return parseSize(name, v, o.field, min); }
#define C4_SECONDS(field, name, min, max)            \
  [](NodePluginOptions& o, const std::string& v) {   \
    return parseSeconds(name, v, o.field, min, max); \
  }

const std::vector<Option>& optionTable() {
  static const std::vector<Option> table = {
      {"node-name", "this node's name (default: $NODE_NAME; required)", C4_STR(node_name)},
      {"kubeconfig", "kubeconfig path (default: in-cluster, $KUBECONFIG, ~/.kube/config)",
       C4_STR(kubeconfig)},
      {"context", "kubeconfig context (default: current-context)", C4_STR(context)},
      {"namespace", "watch and attribute only the pods of this namespace (default: every one)",
       [](NodePluginOptions& o, const std::string& v) -> Status {
         if (!v.empty() &&
             (v.size() > 63 || v.find('.') != std::string::npos || !report::isDnsSubdomain(v))) {
           return makeError(ErrorCode::kInvalidArgument,
                            "namespace: '" + v + "' is not a valid namespace name");
         }
         o.pod_namespace = v;
         return okStatus();
       }},
      {"socket", "Unix datagram socket the pods send to (default /var/run/c4/agent.sock)",
       C4_STR(socket)},
      {"socket-receive-buffer", "SO_RCVBUF bytes of the socket (default 4194304)",
       C4_SIZE(socket_receive_buffer, "socket-receive-buffer", 65536)},
      {"attribution", "cgroup | identity | auto (default auto: cgroup when it names a pod)",
       [](NodePluginOptions& o, const std::string& v) -> Status {
         C4_RETURN_IF_ERROR(parseAttributionMode(v));
         o.attribution = v;
         return okStatus();
       }},
      {"proc-root", "procfs of the host pid namespace (default /proc)", C4_STR(proc_root)},
      {"sysfs-root", "sysfs root for NIC and RDMA health (default /sys)", C4_STR(sysfs_root)},
      {"interfaces",
       "regex of the network interfaces to watch (default: every interface with a device, the "
       "NICs)",
       [](NodePluginOptions& o, const std::string& v) -> Status {
         try {
           std::regex re(v, std::regex::ECMAScript);
         } catch (const std::regex_error& e) {
           return makeError(ErrorCode::kInvalidArgument,
                            "interfaces: bad regular expression '" + v + "': " + e.what());
         }
         o.interfaces = v;
         return okStatus();
       }},
      {"nvml-library", "NVML library to load (default libnvidia-ml.so.1; \"\" = no GPUs)",
       C4_STR(nvml_library)},
      {"interval", "seconds between batches to the operator (default 1)",
       C4_SECONDS(interval_seconds, "interval", 0.01, 3600)},
      {"health-interval", "seconds between health readings (default 1)",
       C4_SECONDS(health_interval_seconds, "health-interval", 0.01, 3600)},
      {"reassembly-timeout", "seconds a split report may wait for its parts (default 2 intervals)",
       C4_SECONDS(reassembly_timeout_seconds, "reassembly-timeout", 0, 3600)},
      {"operator-url", "the operator's report endpoint, https://host:port/v1/reports (required)",
       C4_STR(operator_url)},
      {"allow-insecure-operator-url",
       "accept an http:// operator-url (plain text: tokens and reports readable on the wire); "
       "for tests only (default false)",
       [](NodePluginOptions& o, const std::string& v) -> Status {
         if (v == "true" || v == "1") {
           o.allow_insecure_operator_url = true;
         } else if (v == "false" || v == "0") {
           o.allow_insecure_operator_url = false;
         } else {
           return makeError(ErrorCode::kInvalidArgument,
                            "allow-insecure-operator-url: expected true or false, got '" + v + "'");
         }
         return okStatus();
       }},
      {"ca-file", "CA bundle that signs the operator's certificate (default: system store)",
       C4_STR(ca_file)},
      {"token-file", "projected ServiceAccount token (default /var/run/secrets/c4/token)",
       C4_STR(token_file)},
      {"request-timeout", "seconds one POST may take (default 10)",
       C4_SECONDS(request_timeout_seconds, "request-timeout", 0.1, 600)},
      {"max-buffer-bytes", "bound of the send buffer (default 33554432)",
       C4_SIZE(max_buffer_bytes, "max-buffer-bytes", 65536)},
      {"max-notices", "notices kept while the operator is away (default 8192)",
       C4_SIZE(max_notices, "max-notices", 1)},
      {"backoff-base", "seconds of the first retry wait (default 0.5)",
       C4_SECONDS(backoff_base_seconds, "backoff-base", 0.001, 60)},
      {"backoff-cap", "longest retry wait in seconds (default 30)",
       C4_SECONDS(backoff_cap_seconds, "backoff-cap", 0.001, 3600)},
      {"shutdown-timeout", "seconds to flush on SIGTERM (default 5)",
       C4_SECONDS(shutdown_timeout_seconds, "shutdown-timeout", 0, 300)},
      {"last-words-seconds",
       "seconds an exited rank's last report, progress and exit are kept, to be resent when "
       "another operator process takes the reports (default 600; 0 = none kept)",
       C4_SECONDS(last_words_seconds, "last-words-seconds", 0, 86400)},
      {"plugin-source",
       "plugin library to install (default /usr/lib/c4/libnccl-net-c4.so; \"\" = do not install)",
       C4_STR(plugin_source)},
      {"profiler-plugin-source",
       "profiler plugin library to install (default /usr/lib/c4/libnccl-profiler-c4.so; \"\" = "
       "do not install)",
       C4_STR(profiler_plugin_source)},
      {"plugin-install-dir", "host directory the pods mount (default /opt/c4/lib)",
       C4_STR(plugin_install_dir)},
      {"metrics-bind-address",
       "[host]:port of /metrics, /healthz, /readyz (default :9400; 0 = off)",
       [](NodePluginOptions& o, const std::string& v) -> Status {
         if (v != "0") C4_RETURN_IF_ERROR(parseBindAddress(v));
         o.metrics_bind_address = v;
         return okStatus();
       }},
      {"ready-failure-seconds", "not ready once POSTs have failed for this long (default 30)",
       C4_SECONDS(ready_failure_seconds, "ready-failure-seconds", 1, 86400)},
      {"log-level", "trace|debug|info|warn|error (default info)",
       [](NodePluginOptions& o, const std::string& v) -> Status {
         C4_RETURN_IF_ERROR(parseLogLevel(v));
         o.log_level = v;
         return okStatus();
       }},
      {"log-format",
       "logfmt|json: one key=value line or one JSON object per record (default logfmt)",
       [](NodePluginOptions& o, const std::string& v) -> Status {
         C4_RETURN_IF_ERROR(parseLogFormat(v));  // the flag parser names the flag
         o.log_format = v;
         return okStatus();
       }},
  };
  return table;
}

const Option* findOption(const std::string& name) {
  for (const auto& o : optionTable()) {
    if (name == o.name) return &o;
  }
  return nullptr;
}

bool knownOption(std::string_view name) {
  return findOption(std::string(name)) != nullptr;
}

}  // namespace

Status checkOperatorUrl(const std::string& url, bool allow_insecure) {
  if (url.starts_with("https://")) return okStatus();
  if (url.starts_with("http://")) {
    if (allow_insecure) return okStatus();
    return makeError(ErrorCode::kInvalidArgument,
                     "operator-url: '" + url +
                         "' is plain http://, which would send the bearer token and the reports "
                         "unencrypted; use https:// (--allow-insecure-operator-url permits "
                         "http:// for tests)");
  }
  return makeError(ErrorCode::kInvalidArgument,
                   "operator-url: expected an https:// URL, got '" + url + "'");
}

std::string nodePluginUsage() {
  std::string out =
      "usage: c4-node-plugin [--config FILE] [--flag=value ...]\n"
      "The C4 node plugin: attributes rank reports from the pods on this node, watches node\n"
      "health and ships both to the operator; installs the NCCL net and profiler plugins at\n"
      "start.\n"
      "  --config FILE  YAML file with the same keys as the flags\n"
      "  --help, --version\n";
  for (const auto& o : optionTable()) {
    out += "  --" + std::string(o.name) + "  " + o.help + "\n";
  }
  return out;
}

Status applyNodePluginYaml(NodePluginOptions& options, const std::string& yaml_text) {
  C4_ASSIGN_OR_RETURN(auto entries, flags::parseConfigYaml(yaml_text, knownOption));
  return flags::apply(options, entries, /*from_command_line=*/false, findOption);
}

Result<NodePluginOptions> parseNodePluginOptions(const std::vector<std::string>& args,
                                                 const GetEnv& getenv_fn) {
  NodePluginOptions options;
  auto boolean = [](std::string_view name) { return name == "allow-insecure-operator-url"; };
  C4_ASSIGN_OR_RETURN(flags::CommandLine cl, flags::tokenize(args, knownOption, boolean));
  options.show_help = cl.help;
  options.show_version = cl.version;
  const std::string& config_file = cl.config_file;
  if (options.show_help || options.show_version) return options;
  if (!config_file.empty()) {
    C4_ASSIGN_OR_RETURN(std::string text, kube::readFileToString(config_file));
    auto status = applyNodePluginYaml(options, text);
    if (!status) return std::unexpected(status.error().withContext(config_file));
  }
  C4_RETURN_IF_ERROR(flags::apply(options, cl.flags, /*from_command_line=*/true, findOption));
  if (options.node_name.empty() && getenv_fn) {
    if (auto env = getenv_fn("NODE_NAME")) options.node_name = *env;
  }
  if (options.node_name.empty()) {
    return makeError(ErrorCode::kInvalidArgument, "node-name: required (flag or $NODE_NAME)");
  }
  if (!report::isDnsSubdomain(options.node_name)) {
    return makeError(ErrorCode::kInvalidArgument,
                     "node-name: '" + options.node_name + "' is not a valid node name");
  }
  if (options.operator_url.empty()) {
    return makeError(ErrorCode::kInvalidArgument, "operator-url: required");
  }
  C4_RETURN_IF_ERROR(checkOperatorUrl(options.operator_url, options.allow_insecure_operator_url));
  if (options.backoff_cap_seconds < options.backoff_base_seconds) {
    return makeError(ErrorCode::kInvalidArgument, "backoff-cap must be >= backoff-base");
  }
  if (options.socket.empty()) return makeError(ErrorCode::kInvalidArgument, "socket: empty");
  if ((!options.plugin_source.empty() || !options.profiler_plugin_source.empty()) &&
      options.plugin_install_dir.empty()) {
    return makeError(ErrorCode::kInvalidArgument,
                     "plugin-install-dir: required when plugin-source or profiler-plugin-source "
                     "is set");
  }
  return options;
}

}  // namespace c4::node
