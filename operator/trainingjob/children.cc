// TrainingJob children.
#include "operator/trainingjob/children.h"

namespace c4::op {
namespace {

void setEnv(Json& container, const std::string& name, const Json& value_or_source) {
  Json& env = container["env"];
  if (!env.is_array()) env = Json::array();
  Json entry = {{"name", name}};
  if (value_or_source.is_string()) {
    entry["value"] = value_or_source;
  } else {
    entry["valueFrom"] = value_or_source;
  }
  for (auto& e : env) {
    if (stringAt(e, "name") == name) {
      e = entry;
      return;
    }
  }
  env.push_back(entry);
}

void addVolumeMount(Json& container, const std::string& name, const std::string& path,
                    bool read_only) {
  Json& mounts = container["volumeMounts"];
  if (!mounts.is_array()) mounts = Json::array();
  for (const auto& m : mounts) {
    if (stringAt(m, "name") == name) return;
  }
  mounts.push_back({{"name", name}, {"mountPath", path}, {"readOnly", read_only}});
}

void addVolume(Json& spec, const Json& volume) {
  Json& volumes = spec["volumes"];
  if (!volumes.is_array()) volumes = Json::array();
  for (const auto& v : volumes) {
    if (stringAt(v, "name") == stringAt(volume, "name")) {
      return;
    }
  }
  volumes.push_back(volume);
}

}  // namespace

std::string planConfigMapName(const std::string& job_name) {
  return job_name + "-c4-plan";
}

Json ownerReference(const Json& job) {
  return {{"apiVersion", resources::trainingJobs().apiVersion()},
          {"kind", "TrainingJob"},
          {"name", objectName(job)},
          {"uid", stringAt(fieldsOf(job, "metadata"), "uid").value_or("")},
          {"controller", true},
          {"blockOwnerDeletion", true}};
}

bool isControlledBy(const Json& child, const Json& job) {
  const Json* refs = arrayAt(fieldsOf(child, "metadata"), "ownerReferences");
  if (refs == nullptr) return false;
  std::string uid = stringAt(fieldsOf(job, "metadata"), "uid").value_or("");
  for (const auto& ref : *refs) {
    if (boolAt(ref, "controller").value_or(false) && stringAt(ref, "uid") == uid) return true;
  }
  return false;
}

Json buildHeadlessService(const Json& job, const PodSettings& settings) {
  std::string name = objectName(job);
  return {{"apiVersion", "v1"},
          {"kind", "Service"},
          {"metadata",
           {{"name", name},
            {"namespace", objectNamespace(job)},
            {"labels", {{labels::kJobName, name}}},
            {"ownerReferences", Json::array({ownerReference(job)})}}},
          {"spec",
           {{"clusterIP", "None"},
            {"publishNotReadyAddresses", true},
            {"selector", {{labels::kJobName, name}}},
            {"ports", Json::array({{{"name", "master"},
                                    {"port", settings.master_port},
                                    {"targetPort", settings.master_port}}})}}}};
}

namespace {

// A Service port as the operator sets it: the API server's defaults (protocol TCP) as unset.
Json portKey(const Json& port) {
  const std::string protocol = stringAt(port, "protocol").value_or("TCP");
  const Json* target =
      port.is_object() && port.contains("targetPort") ? &port["targetPort"] : nullptr;
  return Json{{"name", stringAt(port, "name").value_or("")},
              {"port", intAt(port, "port").value_or(0)},
              {"targetPort", target != nullptr ? *target : Json(nullptr)},
              {"protocol", protocol}};
}

Json portKeys(const Json& spec) {
  Json out = Json::array();
  if (const Json* ports = arrayAt(spec, "ports")) {
    for (const auto& p : *ports) out.push_back(portKey(p));
  }
  return out;
}

}  // namespace

std::string serviceDrift(const Json& existing, const Json& desired) {
  std::vector<std::string> out;
  if (labelOf(existing, labels::kJobName) != labelOf(desired, labels::kJobName)) {
    out.push_back(std::string("label ") + labels::kJobName);
  }
  const Json& have = fieldsOf(existing, "spec");
  const Json& want = fieldsOf(desired, "spec");
  if (fieldsOf(have, "selector") != fieldsOf(want, "selector")) out.push_back("spec.selector");
  if (portKeys(have) != portKeys(want)) out.push_back("spec.ports");
  if (boolAt(have, "publishNotReadyAddresses").value_or(false) !=
      boolAt(want, "publishNotReadyAddresses").value_or(false)) {
    out.push_back("spec.publishNotReadyAddresses");
  }
  std::string text;
  for (const auto& f : out) text += (text.empty() ? "" : ", ") + f;
  return text;
}

Json restoreService(Json existing, const Json& desired) {
  if (!existing["metadata"]["labels"].is_object()) existing["metadata"]["labels"] = Json::object();
  existing["metadata"]["labels"][labels::kJobName] = labelOf(desired, labels::kJobName);
  if (!existing["spec"].is_object()) existing["spec"] = Json::object();
  const Json& want = fieldsOf(desired, "spec");
  for (const char* field : {"selector", "ports", "publishNotReadyAddresses"}) {
    if (want.contains(field)) existing["spec"][field] = want[field];
  }
  return existing;
}

namespace {

// `metadata.name NotIn [node]` for each node. One expression per node: the API server takes a
// single value for a field selector.
Json notOnNodes(const std::vector<std::string>& nodes) {
  Json exprs = Json::array();
  for (const auto& n : nodes) {
    exprs.push_back(
        {{"key", "metadata.name"}, {"operator", "NotIn"}, {"values", Json::array({n})}});
  }
  return exprs;
}

// Adds the required nodes' expressions to every required node selector term of `pod_spec` (a
// term is an AND of its expressions; the terms are ORed), or makes them the only term; and one
// preferred term, weight 100 (the most a term may weigh), that every node but the preferred ones
// matches, after the template's own.
void avoidNodes(Json& pod_spec, const NodeAvoidance& avoid) {
  if (avoid.required.empty() && avoid.preferred.empty()) return;
  Json affinity = fieldsOf(pod_spec, "affinity");
  Json node_affinity = fieldsOf(affinity, "nodeAffinity");
  if (!avoid.required.empty()) {
    const Json exprs = notOnNodes(avoid.required);
    Json required = fieldsOf(node_affinity, "requiredDuringSchedulingIgnoredDuringExecution");
    const Json* listed = arrayAt(required, "nodeSelectorTerms");
    Json terms = listed != nullptr ? *listed : Json::array();
    if (terms.empty()) terms = Json::array({Json::object()});
    Json out_terms = Json::array();
    for (const auto& term : terms) {
      Json t = term.is_object() ? term : Json::object();
      const Json* matched = arrayAt(t, "matchFields");
      Json fields = matched != nullptr ? *matched : Json::array();
      for (const auto& e : exprs) fields.push_back(e);
      t["matchFields"] = std::move(fields);
      out_terms.push_back(std::move(t));
    }
    required["nodeSelectorTerms"] = std::move(out_terms);
    node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = std::move(required);
  }
  if (!avoid.preferred.empty()) {
    const Json* listed = arrayAt(node_affinity, "preferredDuringSchedulingIgnoredDuringExecution");
    Json preferred = listed != nullptr ? *listed : Json::array();
    preferred.push_back(
        {{"weight", 100}, {"preference", {{"matchFields", notOnNodes(avoid.preferred)}}}});
    node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = std::move(preferred);
  }
  affinity["nodeAffinity"] = std::move(node_affinity);
  pod_spec["affinity"] = std::move(affinity);
}

}  // namespace

// Enforce: the planned source ports leave the pod's ephemeral range (ip_local_reserved_ports, a
// safe sysctl since Kubernetes 1.27, so no privilege), or a connection the pod opens for anything
// else could take a planned port and the planned subflow would bind another, unplanned one. Not
// for hostNetwork pods (the kubelet refuses namespaced sysctls there; docs/c4p.md says what to
// do on such nodes) nor when the template sets the sysctl itself (the user's value stands).
namespace {

constexpr const char* kReservedPortsSysctl = "net.ipv4.ip_local_reserved_ports";

void reservePlannedPorts(Json& pod_spec, const PodSettings& settings) {
  auto host_network = pod_spec.find("hostNetwork");
  if (host_network != pod_spec.end() && host_network->is_boolean() && host_network->get<bool>()) {
    return;
  }
  // A template field of the wrong type is the API server's to refuse, unchanged.
  if (!pod_spec.contains("securityContext")) pod_spec["securityContext"] = Json::object();
  Json& context = pod_spec["securityContext"];
  if (!context.is_object()) return;
  if (!context.contains("sysctls")) context["sysctls"] = Json::array();
  Json& sysctls = context["sysctls"];
  if (!sysctls.is_array()) return;
  for (const auto& sc : sysctls) {
    if (sc.is_object() && sc.value("name", Json()) == Json(kReservedPortsSysctl)) return;
  }
  sysctls.push_back({{"name", kReservedPortsSysctl},
                     {"value", std::to_string(settings.planned_port_first) + "-" +
                                   std::to_string(settings.planned_port_last)}});
}

}  // namespace

Json buildPod(const Json& job, const TrainingJobSpec& spec, std::int64_t index,
              std::int64_t attempt, const std::optional<std::int64_t>& resume_step,
              const PodSettings& settings, const NodeAvoidance& avoid) {
  std::string job_name = objectName(job);
  std::string ns = objectNamespace(job);
  Json tmpl = spec.pod_template;
  Json meta =
      tmpl.contains("metadata") && tmpl["metadata"].is_object() ? tmpl["metadata"] : Json::object();
  meta.erase("name");
  meta.erase("generateName");
  meta["name"] = job_name + "-" + std::to_string(index);
  meta["namespace"] = ns;
  if (!meta.contains("labels") || !meta["labels"].is_object()) meta["labels"] = Json::object();
  meta["labels"][labels::kJobName] = job_name;
  meta["labels"][labels::kReplicaIndex] = std::to_string(index);
  meta["labels"][labels::kRestartAttempt] = std::to_string(attempt);
  meta["ownerReferences"] = Json::array({ownerReference(job)});

  Json pod_spec = tmpl["spec"];
  pod_spec["hostname"] = meta["name"];
  pod_spec["subdomain"] = job_name;
  pod_spec["restartPolicy"] = "Never";  // a failed rank restarts the whole job, not itself

  // The rendezvous contract (docs/design.md, "Environment"): the pod is node `index` of
  // `replicas`, running `nproc` ranks; WORLD_SIZE counts ranks. With one rank per pod RANK and
  // C4_RANK are that rank; with several, the launcher (torchrun reads PET_*) sets each
  // process's RANK and the plugin reads it.
  const std::int64_t nproc = procsPerPod(spec);
  const std::string master = job_name + "-0." + job_name;
  const std::string port = std::to_string(settings.master_port);
  const std::string nodes = std::to_string(spec.replicas);
  const std::string world = std::to_string(spec.replicas * nproc);
  const std::string node_rank = std::to_string(index);
  auto fieldRef = [](const char* path) { return Json{{"fieldRef", {{"fieldPath", path}}}}; };
  for (auto& container : pod_spec["containers"]) {
    if (!container.is_object()) continue;
    setEnv(container, "MASTER_ADDR", master);
    setEnv(container, "MASTER_PORT", port);
    setEnv(container, "WORLD_SIZE", world);
    setEnv(container, "RANK", node_rank);
    setEnv(container, "PET_MASTER_ADDR", master);
    setEnv(container, "PET_MASTER_PORT", port);
    setEnv(container, "PET_NNODES", nodes);
    setEnv(container, "PET_NPROC_PER_NODE", std::to_string(nproc));
    setEnv(container, "PET_NODE_RANK", node_rank);
    // C4's NCCL plugins, both installed by the node plugin in the mounted directory: the
    // profiler plugin is the telemetry source by default; the net plugin replaces NCCL's
    // transports only when the job asks for it (telemetry.source NetPlugin, or Enforce, whose
    // path steering only C4's transport can do). Otherwise NCCL_NET_PLUGIN is the user's.
    if (usesC4Profiler(spec)) {
      setEnv(container, "NCCL_PROFILER_PLUGIN",
             settings.plugin_mount_dir + "/" + settings.profiler_library);
    }
    if (usesC4NetPlugin(spec)) {
      setEnv(container, "NCCL_NET_PLUGIN",
             settings.plugin_mount_dir + "/" + settings.plugin_library);
    }
    setEnv(container, "C4_AGENT_SOCKET",
           settings.agent_socket_dir + "/" + settings.agent_socket_name);
    setEnv(container, "C4_PLAN_FILE", settings.plan_mount_dir + "/plan.json");
    // The subflow count of pairs no plan names (a plan's default.subflows, when one is written,
    // says the same).
    setEnv(container, "C4_SUBFLOWS", std::to_string(spec.subflows_per_connection));
    if (spec.traffic_mode == c4p::Mode::kEnforce) {
      setEnv(container, "C4_PLAN_WAIT_MS", std::to_string(settings.plan_wait_ms));
    }
    setEnv(container, "C4_JOB", job_name);
    setEnv(container, "C4_NAMESPACE", ns);
    setEnv(container, "C4_POD_NAME", fieldRef("metadata.name"));
    setEnv(container, "C4_NODE_NAME", fieldRef("spec.nodeName"));
    setEnv(container, "C4_NODE_RANK", node_rank);
    setEnv(container, "C4_NPROC_PER_NODE", std::to_string(nproc));
    if (nproc == 1) setEnv(container, "C4_RANK", node_rank);
    setEnv(container, "C4_RESTART_ATTEMPT", std::to_string(attempt));
    if (!spec.checkpoint_dir.empty()) setEnv(container, "C4_CHECKPOINT_DIR", spec.checkpoint_dir);
    if (resume_step) setEnv(container, "C4_RESUME_STEP", std::to_string(*resume_step));
    // Read-only: sending to the node plugin's socket needs no write access to its directory
    // (a socket on a read-only mount still takes datagrams), and the pod must not be able to
    // unlink or replace the socket, or bind one of its own there for other pods to reach.
    addVolumeMount(container, "c4-agent", settings.agent_socket_dir, true);
    addVolumeMount(container, "c4-plugin", settings.plugin_mount_dir, true);
    addVolumeMount(container, "c4-plan", settings.plan_mount_dir, true);
  }
  addVolume(pod_spec,
            {{"name", "c4-agent"},
             {"hostPath", {{"path", settings.agent_socket_dir}, {"type", "DirectoryOrCreate"}}}});
  addVolume(pod_spec,
            {{"name", "c4-plugin"},
             {"hostPath", {{"path", settings.plugin_host_dir}, {"type", "DirectoryOrCreate"}}}});
  addVolume(pod_spec, {{"name", "c4-plan"},
                       {"configMap", {{"name", planConfigMapName(job_name)}, {"optional", true}}}});
  if (spec.traffic_mode == c4p::Mode::kEnforce && usesC4NetPlugin(spec)) {
    reservePlannedPorts(pod_spec, settings);
  }
  avoidNodes(pod_spec, avoid);
  return {{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", meta}, {"spec", pod_spec}};
}

}  // namespace c4::op
