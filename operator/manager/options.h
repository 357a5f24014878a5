// Operator configuration: one table of options, settable from a YAML file (--config) and from
// flags (which win). Every option has a default; unknown keys and flags are errors.
#pragma once

#include <string>
#include <vector>

#include "c4/common/error.h"
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
  bool leader_elect = true;
  std::string lease_namespace = "c4-system";
  std::string lease_name = "c4-operator";
  std::string identity;  // default: <hostname>_<pid>
  double lease_duration_seconds = 15;
  double renew_deadline_seconds = 10;
  double retry_period_seconds = 2;
  std::string log_level = "info";
  double status_batch_seconds = 1;
  PodSettings pod;
  NodeActionConfig node_actions;
  bool show_help = false;
  bool show_version = false;
};

// Parses argv (flags override the --config file). kInvalidArgument with a clear message on a
// bad flag, value or file.
Result<OperatorOptions> parseOperatorOptions(const std::vector<std::string>& args);
// Applies a YAML document (same keys as the flags, without "--").
Status applyOptionsYaml(OperatorOptions& options, const std::string& yaml_text);
std::string operatorUsage();

}  // namespace c4::op
