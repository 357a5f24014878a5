// The children of a TrainingJob, built from its spec: pods `<job>-<index>` with the environment
// contract (docs/design.md) and the headless Service `<job>` that gives them stable hostnames.
// Both carry the job's controller ownerReference and the label c4.dev/job-name. The pods mount
// the traffic-plan ConfigMap `<job>-c4-plan` (planConfigMapName) as an optional volume; its only
// writer is the traffic-plan controller (trafficplan/controller.h), so a pod starts without it
// and gets the job's subflow count from C4_SUBFLOWS until a plan is written. No I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "operator/c4p/planner.h"
#include "operator/trainingjob/api.h"

namespace c4::op {

// Node-side paths and ports the operator injects (operator configuration).
struct PodSettings {
  std::string agent_socket_dir = "/var/run/c4";  // hostPath on the node, same path in the pod
  std::string agent_socket_name = "agent.sock";
  std::string plugin_host_dir = "/opt/c4/lib";  // where the DaemonSet installs the plugin
  std::string plugin_mount_dir = "/opt/c4/lib";
  std::string plugin_library = "libnccl-net-c4.so";
  std::string profiler_library = "libnccl-profiler-c4.so";
  std::string plan_mount_dir = "/etc/c4/plan";
  int master_port = 29500;
  // C4_PLAN_WAIT_MS of an Enforce job's pods: how long a connection waits for a plan that
  // includes its node (the plan follows the placement; the kubelet refreshes a ConfigMap volume
  // within about a minute).
  int plan_wait_ms = 60000;
  // The source ports the traffic planner hands out (c4p::PlannerOptions). An Enforce job's pods
  // reserve them (the safe, network-namespaced sysctl net.ipv4.ip_local_reserved_ports) so no
  // other connection of the pod takes a planned port as its ephemeral one.
  std::uint16_t planned_port_first = c4p::PlannerOptions{}.port_first;
  std::uint16_t planned_port_last = c4p::PlannerOptions{}.port_last;
};

// The nodes a pod keeps away from (status.avoidNodes, split by the planner).
struct NodeAvoidance {
  // Never: a required node affinity `metadata.name NotIn` each, added to every node selector
  // term of the template (or as the only term). The nodes C4 (or anyone) cordoned or tainted
  // c4.dev/faulty, which a pod tolerating every taint could otherwise still land on.
  std::vector<std::string> required;
  // Only where the cluster has no room elsewhere: one preferred term (weight 100) that matches
  // every node but these. The culprits nobody cordoned (a link's ends, policy without cordon): a
  // job whose avoided nodes leave too few others runs on them rather than never.
  std::vector<std::string> preferred;
};

// The pod of replica `index` of `attempt`, kept away from `avoid`.
Json buildPod(const Json& job, const TrainingJobSpec& spec, std::int64_t index,
              std::int64_t attempt, const std::optional<std::int64_t>& resume_step,
              const PodSettings& settings, const NodeAvoidance& avoid = {});
Json buildHeadlessService(const Json& job, const PodSettings& settings);
// What of the job's headless Service `existing` differs from `desired` (buildHeadlessService) in
// the fields the operator owns: the label c4.dev/job-name, spec.selector, spec.ports (name, port,
// targetPort, protocol; the API server's default protocol TCP counts as unset) and
// spec.publishNotReadyAddresses. Comma-separated field names; "" when none.
std::string serviceDrift(const Json& existing, const Json& desired);
// `existing` with those fields put back from `desired` (an update keeps its resourceVersion).
Json restoreService(Json existing, const Json& desired);
// `<job>-c4-plan`, the name of the plan ConfigMap (written by the traffic-plan controller).
std::string planConfigMapName(const std::string& job_name);
Json ownerReference(const Json& job);
// True if `child` has a controller ownerReference naming `job`'s uid.
bool isControlledBy(const Json& child, const Json& job);

}  // namespace c4::op
