// Operator options: flags and YAML file.
#include "operator/manager/options.h"

#include <charconv>
#include <functional>
#include <map>

#include "c4/common/flags.h"
#include "c4/common/log.h"
#include "kube/client/kube_config.h"

namespace c4::op {
using namespace c4::kube;  // the operator is written against the Kubernetes library
namespace {

using Setter = std::function<Status(OperatorOptions&, const std::string&)>;

struct Option {
  const char* name;
  const char* help;
  Setter set;
};

Status parseInt(const std::string& name, const std::string& v, int& out, int min_value) {
  int value = 0;
  auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), value);
  if (ec != std::errc{} || ptr != v.data() + v.size() || value < min_value) {
    return makeError(
        ErrorCode::kInvalidArgument,
        name + ": expected an integer >= " + std::to_string(min_value) + ", got '" + v + "'");
  }
  out = value;
  return okStatus();
}

Status parseDouble(const std::string& name, const std::string& v, double& out, double min_value) {
  try {
    std::size_t used = 0;
    double value = std::stod(v, &used);
    if (used != v.size() || !(value >= min_value)) throw std::invalid_argument(v);
    out = value;
    return okStatus();
  } catch (...) {
    return makeError(
        ErrorCode::kInvalidArgument,
        name + ": expected a number >= " + std::to_string(min_value) + ", got '" + v + "'");
  }
}

Status parseBool(const std::string& name, const std::string& v, bool& out) {
  if (v == "true" || v == "1") {
    out = true;
  } else if (v == "false" || v == "0") {
    out = false;
  } else {
    return makeError(ErrorCode::kInvalidArgument,
                     name + ": expected true or false, got '" + v + "'");
  }
  return okStatus();
}

#define C4_STR(field)                            \
  [](OperatorOptions& o, const std::string& v) { \
    o.field = v;                                 \
    return okStatus();                           \
  }
#define C4_INT(field, name, min) \
  [](OperatorOptions& o, const std::string& v) { return parseInt(name, v, o.field, min); }
#define C4_DBL(field, name, min) \
  [](OperatorOptions& o, const std::string& v) { return parseDouble(name, v, o.field, min); }
#define C4_BOOL(field, name) \
  [](OperatorOptions& o, const std::string& v) { return parseBool(name, v, o.field); }

const std::vector<Option>& optionTable() {
  static const std::vector<Option> table = {
      {"kubeconfig", "kubeconfig path (default: $KUBECONFIG, in-cluster, ~/.kube/config)",
       C4_STR(kubeconfig)},
      {"context", "kubeconfig context (default: current-context)", C4_STR(context)},
      {"namespace", "watch only this namespace (default: all)", C4_STR(watch_namespace)},
      {"workers", "concurrent reconciles (default 4)", C4_INT(workers, "workers", 1)},
      {"kube-api-qps", "client-side API QPS (default 50)",
       C4_DBL(kube_api_qps, "kube-api-qps", 0.1)},
      {"kube-api-burst", "client-side API burst (default 100)",
       C4_INT(kube_api_burst, "kube-api-burst", 1)},
      {"metrics-address", "listen address of /metrics, /healthz, /readyz (default 0.0.0.0)",
       C4_STR(metrics_address)},
      {"metrics-port", "listen port (default 8080; 0 = any)",
       C4_INT(metrics_port, "metrics-port", 0)},
      {"debug-reports",
       "serve GET /debug/reports (the report store) on the unauthenticated metrics port "
       "(default false)",
       C4_BOOL(debug_reports, "debug-reports")},
      {"leader-elect", "use a Lease for leader election (default true)",
       C4_BOOL(leader_elect, "leader-elect")},
      {"lease-namespace", "namespace of the Lease (default c4-system)", C4_STR(lease_namespace)},
      {"lease-name", "name of the Lease (default c4-operator)", C4_STR(lease_name)},
      {"identity", "leader-election identity (default: <hostname>_<pid>)", C4_STR(identity)},
      {"pod-name", "this pod's name; the leader labels it c4.dev/leader=true (default $POD_NAME)",
       C4_STR(pod_name)},
      {"pod-namespace", "this pod's namespace (default $POD_NAMESPACE)", C4_STR(pod_namespace)},
      {"lease-duration", "seconds (default 15)",
       C4_DBL(lease_duration_seconds, "lease-duration", 1)},
      {"renew-deadline", "seconds (default 10)",
       C4_DBL(renew_deadline_seconds, "renew-deadline", 0.5)},
      {"retry-period", "seconds (default 2)", C4_DBL(retry_period_seconds, "retry-period", 0.1)},
      {"log-level", "trace|debug|info|warn|error (default info)", C4_STR(log_level)},
      {"log-format",
       "logfmt|json: one key=value line or one JSON object per record (default logfmt)",
       [](OperatorOptions& o, const std::string& v) -> Status {
         C4_RETURN_IF_ERROR(parseLogFormat(v));  // the flag parser names the flag
         o.log_format = v;
         return okStatus();
       }},
      {"status-batch-period",
       "seconds a Pending/Running status change may wait to be written with the next one "
       "(default 1; 0 = write at once)",
       [](OperatorOptions& o, const std::string& v) -> Status {
         C4_RETURN_IF_ERROR(parseDouble("status-batch-period", v, o.status_batch_seconds, 0));
         if (o.status_batch_seconds > 60) {
           return makeError(ErrorCode::kInvalidArgument,
                            "status-batch-period: at most 60 seconds, got '" + v + "'");
         }
         return okStatus();
       }},
      {"agent-socket-dir", "node directory of the agent socket (default /var/run/c4)",
       C4_STR(pod.agent_socket_dir)},
      {"plugin-dir", "node directory of libnccl-net-c4.so (default /opt/c4/lib)",
       C4_STR(pod.plugin_host_dir)},
      {"master-port", "MASTER_PORT for trainers (default 29500)",
       C4_INT(pod.master_port, "master-port", 1)},
      {"cordon-max-fraction", "circuit breaker: max fraction of nodes cordoned (default 0.1)",
       C4_DBL(node_actions.max_fraction, "cordon-max-fraction", 0)},
      {"cordon-max-per-hour", "circuit breaker: max cordons per hour (default 3)",
       C4_INT(node_actions.max_cordons_per_window, "cordon-max-per-hour", 0)},
      {"fault-history-max-per-hour",
       "node fault-history entries written per hour, all nodes together (default 20; 0 = none)",
       C4_INT(node_actions.max_fault_records_per_window, "fault-history-max-per-hour", 0)},
      {"restart-max-per-hour",
       "job attempts C4D ends with a restart per hour, all jobs together; beyond it a diagnosis "
       "waits for room (default 20; 0 = none)",
       C4_INT(node_actions.max_restarts_per_window, "restart-max-per-hour", 0)},
      {"dry-run", "decide node actions but do not act (default false)",
       C4_BOOL(node_actions.dry_run, "dry-run")},
      {"traffic-planning",
       "C4P: plan the traffic of TrainingJobs on the cluster's Fabric (needs the Fabric CRD; "
       "default false)",
       C4_BOOL(traffic_planning, "traffic-planning")},
      {"fabric-name", "C4P: the Fabric to plan on (default: the only one)", C4_STR(fabric_name)},
      {"link-hold",
       "C4P: seconds a link state found from telemetry lasts before it is lifted (default 300; "
       "0 = until restart)",
       C4_DBL(link_hold_seconds, "link-hold", 0)},
      {"report-bind-address",
       "listen address of the report endpoint POST /v1/reports, HTTPS (default :8443; 0 = off)",
       [](OperatorOptions& o, const std::string& v) -> Status {
         C4_RETURN_IF_ERROR(parseBindAddress(v));
         o.report_bind_address = v;
         return okStatus();
       }},
      {"tls-cert-file", "PEM certificate (chain) of the report endpoint, re-read on change",
       C4_STR(tls_cert_file)},
      {"tls-key-file", "PEM private key of the report endpoint, re-read on change",
       C4_STR(tls_key_file)},
      {"report-audience", "audience the node plugin's token must carry (default c4-operator)",
       C4_STR(report_audience)},
      {"report-serviceaccount",
       "<namespace>/<name> of the node plugin's ServiceAccount (default "
       "c4-system/c4-node-plugin)",
       [](OperatorOptions& o, const std::string& v) -> Status {
         auto slash = v.find('/');
         if (slash == std::string::npos || slash == 0 || slash + 1 == v.size() ||
             v.find('/', slash + 1) != std::string::npos) {
           return makeError(ErrorCode::kInvalidArgument,
                            "report-serviceaccount: expected <namespace>/<name>, got '" + v + "'");
         }
         o.report_service_account = v;
         return okStatus();
       }},
      {"report-threads", "report server worker threads (default 8)",
       C4_INT(report_threads, "report-threads", 1)},
      {"report-max-queued-connections",
       "report connections that may wait for a worker while all are busy; one more is closed at "
       "once (default 1024)",
       C4_INT(report_max_queued_connections, "report-max-queued-connections", 1)},
      {"report-read-timeout",
       "seconds a report connection may take from its TLS handshake to its last body byte; a "
       "slower client is disconnected (default 10)",
       C4_DBL(report_read_timeout_seconds, "report-read-timeout", 1)},
      {"report-max-inflight", "report requests processed at once; more get 429 (default 64)",
       C4_INT(report_max_inflight, "report-max-inflight", 1)},
      {"report-max-body-mib", "largest report body in MiB, at most 64 (default 64)",
       [](OperatorOptions& o, const std::string& v) -> Status {
         C4_RETURN_IF_ERROR(parseDouble("report-max-body-mib", v, o.report_max_body_mib, 0.001));
         if (o.report_max_body_mib > 64) {
           return makeError(ErrorCode::kInvalidArgument,
                            "report-max-body-mib: at most 64, got '" + v + "'");
         }
         return okStatus();
       }},
      {"report-node-qps", "report requests per second per node (default 5; 0 = unlimited)",
       C4_DBL(report_node_qps, "report-node-qps", 0)},
      {"report-node-burst", "report request burst per node (default 20)",
       C4_INT(report_node_burst, "report-node-burst", 1)},
      {"report-global-qps", "report requests per second, all nodes (default 4000; 0 = unlimited)",
       C4_DBL(report_global_qps, "report-global-qps", 0)},
      {"report-global-burst", "report request burst, all nodes (default 8000)",
       C4_INT(report_global_burst, "report-global-burst", 1)},
      {"report-max-age", "seconds: older batches are refused as replays (default 300)",
       C4_DBL(report_max_age_seconds, "report-max-age", 1)},
      {"report-max-clock-skew",
       "seconds a batch's time may be ahead of the operator's clock (default 60)",
       C4_DBL(report_max_clock_skew_seconds, "report-max-clock-skew", 0)},
      {"report-history", "report intervals kept per rank and connection (default 8)",
       C4_INT(report_history, "report-history", 1)},
      {"token-review-ttl", "seconds a positive TokenReview is cached (default 60)",
       C4_DBL(token_review_ttl_seconds, "token-review-ttl", 0)},
      {"token-review-negative-ttl", "seconds a negative TokenReview is cached (default 10)",
       C4_DBL(token_review_negative_ttl_seconds, "token-review-negative-ttl", 0)},
      {"token-review-cache-size", "positive TokenReview answers cached (default 4096)",
       C4_INT(token_review_cache_size, "token-review-cache-size", 1)},
      {"token-review-negative-cache-size",
       "negative TokenReview answers cached, apart from the positive ones (default 4096)",
       C4_INT(token_review_negative_cache_size, "token-review-negative-cache-size", 1)},
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

Result<std::optional<BindAddress>> parseBindAddress(const std::string& text) {
  if (text == "0") return std::optional<BindAddress>{};
  auto colon = text.rfind(':');
  if (colon == std::string::npos) {
    return makeError(ErrorCode::kInvalidArgument,
                     "report-bind-address: expected host:port, :port or 0, got '" + text + "'");
  }
  BindAddress out;
  out.host = text.substr(0, colon);
  if (out.host.size() >= 2 && out.host.front() == '[' && out.host.back() == ']') {
    out.host = out.host.substr(1, out.host.size() - 2);
  }
  if (out.host.empty()) out.host = "0.0.0.0";
  C4_RETURN_IF_ERROR(parseInt("report-bind-address port", text.substr(colon + 1), out.port, 0));
  if (out.port > 65535) {
    return makeError(ErrorCode::kInvalidArgument,
                     "report-bind-address: port out of range in '" + text + "'");
  }
  return std::optional<BindAddress>(out);
}

std::string operatorUsage() {
  std::string out =
      "usage: c4-operator [--config FILE] [--flag=value ...]\n"
      "The C4 operator: reconciles TrainingJobs (c4.dev/v1alpha1), restarts them on faults.\n"
      "  --config FILE  YAML file with the same keys as the flags\n"
      "  --help, --version\n";
  for (const auto& o : optionTable()) {
    out += "  --" + std::string(o.name) + "  " + o.help + "\n";
  }
  return out;
}

Status applyOptionsYaml(OperatorOptions& options, const std::string& yaml_text) {
  C4_ASSIGN_OR_RETURN(auto entries, flags::parseConfigYaml(yaml_text, knownOption));
  return flags::apply(options, entries, /*from_command_line=*/false, findOption);
}

Result<OperatorOptions> parseOperatorOptions(const std::vector<std::string>& args) {
  OperatorOptions options;
  // Boolean flags may stand alone: --leader-elect, --dry-run, --traffic-planning,
  // --debug-reports.
  auto boolean = [](std::string_view name) {
    return name == "leader-elect" || name == "dry-run" || name == "traffic-planning" ||
           name == "debug-reports";
  };
  C4_ASSIGN_OR_RETURN(flags::CommandLine cl, flags::tokenize(args, knownOption, boolean));
  options.show_help = cl.help;
  options.show_version = cl.version;
  const std::string& config_file = cl.config_file;
  if (!config_file.empty()) {
    C4_ASSIGN_OR_RETURN(std::string text, readFileToString(config_file));
    auto status = applyOptionsYaml(options, text);
    if (!status) return std::unexpected(status.error().withContext(config_file));
  }
  C4_RETURN_IF_ERROR(flags::apply(options, cl.flags, /*from_command_line=*/true, findOption));
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return makeError(ErrorCode::kInvalidArgument,
                     "--tls-cert-file and --tls-key-file go together: set both or neither");
  }
  // client-go's rules: a leader must give up (renew deadline) before others may take over
  // (lease duration), and must try to renew more than once before giving up.
  if (options.leader_elect && options.renew_deadline_seconds >= options.lease_duration_seconds) {
    return makeError(ErrorCode::kInvalidArgument,
                     "renew-deadline must be shorter than lease-duration");
  }
  if (options.leader_elect && options.retry_period_seconds >= options.renew_deadline_seconds) {
    return makeError(ErrorCode::kInvalidArgument,
                     "retry-period must be shorter than renew-deadline");
  }
  return options;
}

}  // namespace c4::op
