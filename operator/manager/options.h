// Operator configuration: one table of options, settable from a YAML file (--config) and from
// flags (which win). Every option has a default; unknown keys and flags are errors.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "c4/common/error.h"
#include "operator/ingest/report_handler.h"
#include "operator/manager/leader_election.h"
#include "operator/remediation/node_actions.h"
#include "operator/trainingjob/reconciler.h"

namespace c4::op {

struct OperatorOptions {
  std::string kubeconfig;
  std::string context;
  std::string watch_namespace;
  int workers = 4;
  double kube_api_qps = 50;
  int kube_api_burst = 100;
  std::string metrics_address = "0.0.0.0";
  int metrics_port = 8080;
  // GET /debug/reports on the metrics port: the report store's contents (which jobs run where,
  // their ranks' traffic). The metrics port has no authentication, so it is off unless asked for.
  bool debug_reports = false;
  bool leader_elect = true;
  std::string lease_namespace = "c4-system";
  std::string lease_name = "c4-operator";
  std::string identity;  // default: <hostname>_<pid>
  // This process's pod (downward API: $POD_NAME, $POD_NAMESPACE). When set, the leader labels
  // its pod c4.dev/leader=true so a Service can route the node plugins' reports to it.
  std::string pod_name;
  std::string pod_namespace;
  double lease_duration_seconds = 15;
  double renew_deadline_seconds = 10;
  double retry_period_seconds = 2;
  std::string log_level = "info";
  std::string log_format = "logfmt";  // logfmt | json (checked when parsed)
  double status_batch_seconds = 1;
  PodSettings pod;
  NodeActionConfig node_actions;
  // C4P (operator/trafficplan): off unless asked for, since it watches the Fabric CRD.
  bool traffic_planning = false;
  std::string fabric_name;
  double link_hold_seconds = 300;
  // The report endpoint (POST /v1/reports over HTTPS). "0" disables it; so does leaving both
  // TLS files unset (with a warning at start-up).
  std::string report_bind_address = ":8443";
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string report_audience = "c4-operator";
  std::string report_service_account = "c4-system/c4-node-plugin";
  int report_threads = 8;
  int report_max_queued_connections = 1024;
  double report_read_timeout_seconds = 10;
  int report_max_inflight = 64;
  double report_max_body_mib = 64;
  double report_node_qps = 5;
  int report_node_burst = 20;
  double report_global_qps = 4000;
  int report_global_burst = 8000;
  double report_max_age_seconds = 300;
  double report_max_clock_skew_seconds = 60;
  int report_history = 8;
  double token_review_ttl_seconds = 60;
  double token_review_negative_ttl_seconds = 10;
  int token_review_cache_size = 4096;
  int token_review_negative_cache_size = 4096;
  bool show_help = false;
  bool show_version = false;
};

// The report server's listen address from --report-bind-address ("host:port", ":port",
// "[v6]:port"); nullopt when disabled ("0"). kInvalidArgument when malformed.
struct BindAddress {
  std::string host;
  int port = 0;
};
Result<std::optional<BindAddress>> parseBindAddress(const std::string& text);

// Parses argv (flags override the --config file). kInvalidArgument with a clear message on a
// bad flag, value or file.
Result<OperatorOptions> parseOperatorOptions(const std::vector<std::string>& args);
// Applies a YAML document (same keys as the flags, without "--").
Status applyOptionsYaml(OperatorOptions& options, const std::string& yaml_text);
std::string operatorUsage();

}  // namespace c4::op
