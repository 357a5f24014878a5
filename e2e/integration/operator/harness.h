// Helpers for operator integration tests against the REAL API server of the test cluster
// ($C4_TESTENV_DIR/kubeconfig, see notes/TESTENV-CONTRACT.md). Nothing here fakes the API.
#pragma once

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>

#include "c4/common/clock.h"
#include "c4/common/metrics.h"
#include "kube/client/curl_kube_client.h"
#include "kube/client/forwarding_kube_client.h"
#include "kube/client/kube_config.h"
#include "operator/trainingjob/reconciler.h"

namespace c4::op::it {
using namespace c4::kube;  // the operator is written against the Kubernetes library

inline std::string testenvDir() {
  const char* dir = std::getenv("C4_TESTENV_DIR");
  return dir != nullptr ? dir : "";
}

// Polls `pred` every 100 ms of real time until true or `timeout`.
inline bool waitFor(const std::function<bool()>& pred,
                    std::chrono::milliseconds timeout = std::chrono::seconds{30}) {
  auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds{100});
  }
  return pred();
}

// YAML -> JSON keeping quoted scalars as strings (yaml-cpp tags them "!").
inline Json yamlToJson(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      Json out = Json::object();
      for (const auto& kv : node) out[kv.first.as<std::string>()] = yamlToJson(kv.second);
      return out;
    }
    case YAML::NodeType::Sequence: {
      Json out = Json::array();
      for (const auto& item : node) out.push_back(yamlToJson(item));
      return out;
    }
    case YAML::NodeType::Scalar: {
      std::string s = node.Scalar();
      if (node.Tag() == "!") return s;
      if (s == "true") return true;
      if (s == "false") return false;
      if (s == "null" || s == "~") return nullptr;
      try {
        std::size_t used = 0;
        long long i = std::stoll(s, &used);
        if (used == s.size()) return i;
        double d = std::stod(s, &used);
        if (used == s.size()) return d;
      } catch (...) {
      }
      return s;
    }
    default:
      return nullptr;
  }
}

inline std::unique_ptr<KubeClient> makeClient(double qps = 200, int burst = 400) {
  auto config = loadKubeconfigFile(testenvDir() + "/kubeconfig");
  if (!config) ADD_FAILURE() << config.error().toString();
  if (!config) return nullptr;
  config->qps = qps;
  config->burst = burst;
  auto client = createCurlKubeClient(*config, realClock(), nullptr);
  if (!client) ADD_FAILURE() << client.error().toString();
  return client ? std::move(*client) : nullptr;
}

// Creates or updates the CRD in `file` (named `name`) and waits until it is Established.
inline void installCrdFile(KubeClient& client, const char* file, const std::string& name) {
  Json crd = yamlToJson(YAML::LoadFile(file));
  const auto& type = resources::customResourceDefinitions();
  auto created = client.create(type, "", crd);
  if (!created && created.error().code == ErrorCode::kAlreadyExists) {
    for (int i = 0; i < 5; ++i) {
      auto current = client.get(type, "", name);
      ASSERT_TRUE(current) << current.error().toString();
      crd["metadata"]["resourceVersion"] = (*current)["metadata"]["resourceVersion"];
      auto updated = client.update(type, "", crd);
      if (updated) break;
      ASSERT_EQ(updated.error().code, ErrorCode::kConflict) << updated.error().toString();
    }
  } else {
    ASSERT_TRUE(created) << created.error().toString();
  }
  ASSERT_TRUE(waitFor([&] {
    auto current = client.get(type, "", name);
    return current && isConditionTrue((*current)["status"], "Established");
  }));
}

// The TrainingJob CRD from crds/trainingjob.yaml.
inline void installCrd(KubeClient& client) {
  installCrdFile(client, C4_CRD_FILE, "trainingjobs.c4.dev");
}

inline std::string uniqueName(const std::string& prefix) {
  static std::mt19937_64 rng{std::random_device{}()};
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%06llx", static_cast<unsigned long long>(rng() & 0xFFFFFF));
  return prefix + "-" + buf;
}

inline std::string createNamespace(KubeClient& client, const std::string& prefix) {
  std::string name = uniqueName(prefix);
  Json ns = {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", name}}}};
  auto created = client.create(resources::namespaces(), "", ns);
  EXPECT_TRUE(created) << created.error().toString();
  return name;
}

// A test that talks to the shared cluster in a namespace of its own, deleted afterwards.
// `prefix` names the namespace (a random suffix is added).
class NamespacedTest : public ::testing::Test {
 protected:
  explicit NamespacedTest(std::string prefix) : prefix_(std::move(prefix)) {}
  void SetUp() override {
    if (testenvDir().empty()) GTEST_SKIP() << "C4_TESTENV_DIR is not set (no test cluster)";
    client_ = makeClient();
    ASSERT_TRUE(client_);
    installCrd(*client_);
    ns_ = createNamespace(*client_, prefix_);
  }
  void TearDown() override {
    if (client_ && !ns_.empty()) {
      (void)client_->remove(resources::namespaces(), "", ns_, DeleteOptions{});
    }
  }
  std::string prefix_;
  std::unique_ptr<KubeClient> client_;
  std::string ns_;
};

inline Json trainingJob(const std::string& ns, const std::string& name, int replicas,
                        Json fault_tolerance = Json::object()) {
  if (!fault_tolerance.contains("restartBackoffSeconds")) {
    fault_tolerance["restartBackoffSeconds"] = 1;
  }
  return {{"apiVersion", "c4.dev/v1alpha1"},
          {"kind", "TrainingJob"},
          {"metadata", {{"name", name}, {"namespace", ns}}},
          {"spec",
           {{"replicas", replicas},
            {"checkpoint", {{"dir", "/ckpt"}}},
            {"faultTolerance", fault_tolerance},
            {"template",
             {{"spec",
               {{"containers", Json::array({{{"name", "trainer"}, {"image", "trainer:it"}}})},
                {"tolerations", Json::array({{{"operator", "Exists"}}})}}}}}}}};
}

// One operator (the controller on shared informers, as the manager wires it; leader election
// is tested separately) on the real clock.
class OperatorInstance {
 public:
  OperatorInstance(KubeClient& client, const std::string& ns,
                   std::function<bool(std::string_view, const std::string&)> hook = nullptr,
                   std::function<void(ControllerConfig&)> configure = nullptr)
      : informers_(client, realClock()) {
    ControllerConfig config;
    config.watch_namespace = ns;
    config.workers = 4;
    config.identity = uniqueName("it-operator");
    config.fault_hook = std::move(hook);
    if (configure) configure(config);
    controller_ =
        std::make_unique<TrainingJobController>(client, realClock(), informers_, config, registry_);
  }
  ~OperatorInstance() { stop(); }
  Status start() {
    informers_.start();
    if (!informers_.waitForSync(realClock().monoNow() + std::chrono::seconds{30})) {
      return makeError(ErrorCode::kDeadlineExceeded, "caches did not sync");
    }
    return controller_->start();
  }
  void stop() {
    informers_.requestStop();
    controller_->stop();
    informers_.stop();
  }
  TrainingJobController& controller() { return *controller_; }
  SharedInformers& informers() { return informers_; }
  metrics::Registry& registry() { return registry_; }

 private:
  metrics::Registry registry_;
  SharedInformers informers_;
  std::unique_ptr<TrainingJobController> controller_;
};

// Forwards every call to the real client and counts TrainingJob status writes (a decorator,
// not a fake: the API server still answers everything).
class StatusWriteCounter final : public ForwardingKubeClient {
 public:
  explicit StatusWriteCounter(KubeClient& real) : ForwardingKubeClient(real) {}
  int statusWrites(const std::string& job) {
    std::lock_guard lock(mu_);
    return writes_[job];
  }
  Result<Json> update(const ResourceType& t, std::string_view ns, const Json& obj,
                      const WriteOptions& o) override {
    auto result = target().update(t, ns, obj, o);
    if (result && t.resource == "trainingjobs" && o.subresource == "status") {
      std::lock_guard lock(mu_);
      ++writes_[objectName(obj)];
    }
    return result;
  }

 private:
  std::mutex mu_;
  std::map<std::string, int> writes_;
};

// The TrainingJob with `status` always an object (a new job has none until its first, possibly
// batched, status write); an empty object if it cannot be read.
inline Json getJob(KubeClient& client, const std::string& ns, const std::string& name) {
  auto j = client.get(resources::trainingJobs(), ns, name);
  Json out = j ? *j : Json::object();
  if (!out.contains("status") || !out["status"].is_object()) out["status"] = Json::object();
  return out;
}

inline std::vector<Json> listPods(KubeClient& client, const std::string& ns,
                                  const std::string& job) {
  ListOptions options;
  options.label_selector = std::string(labels::kJobName) + "=" + job;
  auto list = client.list(resources::pods(), ns, options);
  std::vector<Json> out;
  if (!list) return out;
  for (auto& p : (*list)["items"]) out.push_back(p);
  return out;
}

// True when exactly `replicas` pods of the job exist, all of restart attempt `attempt`, none
// being deleted, and (unless `phase` is null) all in that phase.
// One line per pod of the job: name, attempt, phase, and whether it is being deleted (for
// failure messages).
inline std::string describePods(KubeClient& client, const std::string& ns, const std::string& job) {
  std::string out = "pods of " + job + ":\n";
  for (const auto& p : listPods(client, ns, job)) {
    out += "  " + p["metadata"].value("name", std::string{}) + " attempt " +
           labelOf(p, labels::kRestartAttempt) + " " + p["status"].value("phase", std::string{}) +
           (p["metadata"].contains("deletionTimestamp") ? " (deleting)" : "") + "\n";
  }
  return out;
}

inline bool podsAtAttempt(KubeClient& client, const std::string& ns, const std::string& name,
                          int replicas, int attempt, const char* phase) {
  auto pods = listPods(client, ns, name);
  if (static_cast<int>(pods.size()) != replicas) return false;
  for (const auto& p : pods) {
    if (labelOf(p, labels::kRestartAttempt) != std::to_string(attempt)) return false;
    if (p["metadata"].contains("deletionTimestamp")) return false;
    if (phase != nullptr && p["status"].value("phase", std::string{}) != phase) return false;
  }
  return true;
}

inline std::string envValue(const Json& pod, const std::string& name) {
  for (const auto& e : pod["spec"]["containers"][0]["env"]) {
    if (e["name"] == name) return e.contains("value") ? e["value"].get<std::string>() : "<ref>";
  }
  return "<unset>";
}

inline std::vector<std::string> eventReasons(KubeClient& client, const std::string& ns,
                                             const std::string& object) {
  ListOptions options;
  options.field_selector = "involvedObject.name=" + object;
  auto list = client.list(resources::events(), ns, options);
  std::vector<std::string> out;
  if (!list) return out;
  for (const auto& e : (*list)["items"]) out.push_back(e.value("reason", std::string{}));
  return out;
}

inline PatchOptions statusSubresource() {
  PatchOptions options;
  options.subresource = "status";
  return options;
}

// Plays the kubelet: sets a pod's phase through the status subresource.
inline Status setPodPhase(KubeClient& client, const std::string& ns, const std::string& pod,
                          const std::string& phase, int exit_code = 1) {
  Json patch = {
      {"status",
       {{"phase", phase},
        {"reason", phase == "Failed" ? "Error" : "Completed"},
        {"containerStatuses",
         Json::array({{{"name", "trainer"},
                       {"image", "trainer:it"},
                       {"imageID", ""},
                       {"ready", false},
                       {"restartCount", 0},
                       {"state",
                        {{"terminated",
                          {{"exitCode", exit_code},
                           {"reason", phase == "Failed" ? "Error" : "Completed"}}}}}}})}}}};
  auto patched = client.patch(resources::pods(), ns, pod, PatchType::kStrategicMerge, patch,
                              statusSubresource());
  if (!patched) return std::unexpected(patched.error());
  return okStatus();
}

// A Node that KWOK does not manage, NotReady (KWOK heals its own nodes at once), deleted when
// this object goes. Pods reach it through spec.nodeName; the test plays their kubelet.
class NotReadyNode {
 public:
  NotReadyNode(KubeClient& client, const std::string& prefix)
      : client_(client), name_(uniqueName(prefix)) {
    Json node = {{"apiVersion", "v1"},
                 {"kind", "Node"},
                 {"metadata", {{"name", name_}, {"labels", {{"c4.dev/it", prefix}}}}}};
    auto created = client_.create(resources::nodes(), "", node);
    EXPECT_TRUE(created) << created.error().toString();
    PatchOptions status;
    status.subresource = "status";
    auto patched =
        client_.patch(resources::nodes(), "", name_, PatchType::kMerge,
                      {{"status",
                        {{"conditions", Json::array({{{"type", "Ready"},
                                                      {"status", "False"},
                                                      {"reason", "KubeletNotReady"},
                                                      {"message", "integration test"}}})}}}},
                      status);
    EXPECT_TRUE(patched) << patched.error().toString();
  }
  ~NotReadyNode() { (void)client_.remove(resources::nodes(), "", name_, DeleteOptions{}); }
  NotReadyNode(const NotReadyNode&) = delete;
  NotReadyNode& operator=(const NotReadyNode&) = delete;
  [[nodiscard]] const std::string& name() const { return name_; }
  [[nodiscard]] bool cordonedByC4() const {
    auto n = client_.get(resources::nodes(), "", name_);
    return n && !annotationOf(*n, "c4.dev/cordoned-by").empty();
  }

 private:
  KubeClient& client_;
  std::string name_;
};

}  // namespace c4::op::it

// --- Report ingest (ingest_integration_test.cc) ---
namespace c4::op::it {

inline const ResourceType& serviceAccounts() {
  static const ResourceType type{"", "v1", "serviceaccounts", "ServiceAccount", true};
  return type;
}

// A CA and a serving certificate for 127.0.0.1 signed by it, made with the openssl CLI in
// `dir`: ca.crt, tls.crt, tls.key. False when openssl failed.
inline bool makeServingCertificate(const std::string& dir) {
  std::string cmd =
      "set -e; cd '" + dir +
      "'; "
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 "
      "-subj /CN=c4-it-ca -keyout ca.key -out ca.crt; "
      "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
      "-subj /CN=c4-operator -keyout tls.key -out tls.csr; "
      "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > san.ext; "
      "openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 "
      "-extfile san.ext -out tls.crt";
  cmd = "sh -c \"" + cmd + "\" >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

// TokenRequest (POST .../serviceaccounts/<sa>/token): a token for `sa`, bound to the pod
// `bound_pod` when set, for `audiences`. Empty on failure (reported).
inline std::string requestToken(KubeClient& client, const std::string& ns, const std::string& sa,
                                const std::string& bound_pod, std::vector<std::string> audiences,
                                std::int64_t expiration_seconds = 3600) {
  Json spec = {{"audiences", audiences}, {"expirationSeconds", expiration_seconds}};
  if (!bound_pod.empty()) {
    auto pod = client.get(resources::pods(), ns, bound_pod);
    if (!pod) {
      ADD_FAILURE() << "pod " << bound_pod << ": " << pod.error().toString();
      return "";
    }
    spec["boundObjectRef"] = {{"apiVersion", "v1"},
                              {"kind", "Pod"},
                              {"name", bound_pod},
                              {"uid", (*pod)["metadata"]["uid"]}};
  }
  Json request = {{"apiVersion", "authentication.k8s.io/v1"},
                  {"kind", "TokenRequest"},
                  {"metadata", {{"name", sa}, {"namespace", ns}}},
                  {"spec", spec}};
  auto answer = client.create(serviceAccounts(), ns, request,
                              WriteOptions{.subresource = "token", .field_manager = ""});
  if (!answer) {
    ADD_FAILURE() << "TokenRequest for " << sa << ": " << answer.error().toString();
    return "";
  }
  return (*answer)["status"].value("token", std::string{});
}

}  // namespace c4::op::it
