// The TrainingJob controller against the real kube-apiserver of the test cluster: children,
// restarts, budget, watch expiry (410), invalid objects, node actions. The crash of the real
// binary mid-restart is in process_test.cc.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <set>

#include "harness.h"
#include "kube/cache/informer.h"
#include "kube/client/forwarding_kube_client.h"
#include "operator/remediation/node_actions.h"
#include "operator/trainingjob/status.h"

namespace c4::op::it {
using namespace c4::kube;  // the operator is written against the Kubernetes library
namespace {

class OperatorIT : public NamespacedTest {
 protected:
  OperatorIT() : NamespacedTest("op-it") {}
  Json job(const std::string& name) { return getJob(*client_, ns_, name); }
  Status create(const Json& tj) {
    auto created = client_->create(resources::trainingJobs(), ns_, tj);
    if (!created) return std::unexpected(created.error());
    return okStatus();
  }
  bool podsAtAttempt(const std::string& name, int replicas, int attempt, const char* phase) {
    return it::podsAtAttempt(*client_, ns_, name, replicas, attempt, phase);
  }
};

TEST_F(OperatorIT, ClientVerbsAndErrorMappingAgainstTheRealServer) {
  const auto& cms = resources::configMaps();
  auto configMap = [&](const std::string& name) {
    return Json{{"apiVersion", "v1"},
                {"kind", "ConfigMap"},
                {"metadata", {{"name", name}, {"labels", {{"bench", "verbs"}}}}},
                {"data", {{"k", "v"}}}};
  };
  auto created = client_->create(cms, ns_, configMap("a"));
  ASSERT_TRUE(created) << created.error().toString();
  ASSERT_TRUE(client_->create(cms, ns_, configMap("b")));
  auto again = client_->create(cms, ns_, configMap("a"));
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, ErrorCode::kAlreadyExists);
  EXPECT_NE(again.error().message.find("already exists"), std::string::npos);
  EXPECT_NE(again.error().message.find("HTTP 409 AlreadyExists"), std::string::npos)
      << again.error().message;

  auto missing = client_->get(cms, ns_, "nope");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  EXPECT_NE(missing.error().message.find("NotFound"), std::string::npos);
  // A PUT of an object that does not exist: 404 NotFound, not a conflict.
  Json ghost = configMap("ghost");
  ghost["metadata"]["resourceVersion"] = "1";
  auto ghost_update = client_->update(cms, ns_, ghost);
  ASSERT_FALSE(ghost_update);
  EXPECT_EQ(ghost_update.error().code, ErrorCode::kNotFound) << ghost_update.error().toString();
  // 422 Invalid keeps the server's explanation.
  auto invalid = client_->create(cms, ns_, configMap("Not_A_DNS_Name"));
  ASSERT_FALSE(invalid);
  EXPECT_EQ(invalid.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(invalid.error().message.find("HTTP 422 Invalid"), std::string::npos)
      << invalid.error().message;
  EXPECT_NE(invalid.error().message.find("Not_A_DNS_Name"), std::string::npos);

  ListOptions paged;
  paged.label_selector = "bench=verbs";
  paged.limit = 1;  // two pages, merged by list()
  auto list = client_->list(cms, ns_, paged);
  ASSERT_TRUE(list) << list.error().toString();
  EXPECT_EQ((*list)["items"].size(), 2u);
  EXPECT_FALSE((*list)["metadata"].value("resourceVersion", std::string{}).empty());

  Json stale = *created;
  Json fresh = *created;
  fresh["data"]["k"] = "v2";
  ASSERT_TRUE(client_->update(cms, ns_, fresh));
  stale["data"]["k"] = "v3";
  auto conflict = client_->update(cms, ns_, stale);
  ASSERT_FALSE(conflict);
  EXPECT_EQ(conflict.error().code, ErrorCode::kConflict);
  EXPECT_NE(conflict.error().message.find("HTTP 409 Conflict"), std::string::npos)
      << conflict.error().message;

  ASSERT_TRUE(client_->patch(cms, ns_, "a", PatchType::kMerge, {{"data", {{"m", "1"}}}}));
  ASSERT_TRUE(client_->patch(cms, ns_, "a", PatchType::kJson,
                             Json::array({{{"op", "add"}, {"path", "/data/j"}, {"value", "2"}}})));
  PatchOptions apply;
  apply.field_manager = "c4-it";
  apply.force = true;
  auto applied = client_->patch(cms, ns_, "a", PatchType::kApply,
                                {{"apiVersion", "v1"},
                                 {"kind", "ConfigMap"},
                                 {"metadata", {{"name", "a"}}},
                                 {"data", {{"s", "3"}}}},
                                apply);
  ASSERT_TRUE(applied) << applied.error().toString();
  EXPECT_EQ((*applied)["data"]["m"], "1");
  EXPECT_EQ((*applied)["data"]["j"], "2");
  EXPECT_EQ((*applied)["data"]["s"], "3");
  auto bad_patch =
      client_->patch(cms, ns_, "a", PatchType::kJson,
                     Json::array({{{"op", "test"}, {"path", "/data/k"}, {"value", "x"}}}));
  ASSERT_FALSE(bad_patch);
  EXPECT_EQ(bad_patch.error().code, ErrorCode::kInvalidArgument) << bad_patch.error().toString();

  DeleteOptions del;
  del.grace_period_seconds = 0;
  del.propagation_policy = "Background";
  ASSERT_TRUE(client_->remove(cms, ns_, "a", del));
  EXPECT_EQ(client_->get(cms, ns_, "a").error().code, ErrorCode::kNotFound);
  EXPECT_EQ(client_->remove(cms, ns_, "a", del).error().code, ErrorCode::kNotFound);

  // No credentials: the API server refuses (anonymous -> 403, or 401 where anonymous is off).
  auto config = loadKubeconfigFile(testenvDir() + "/kubeconfig");
  ASSERT_TRUE(config);
  config->client_cert_pem.clear();
  config->client_key_pem.clear();
  config->token.clear();
  auto anonymous = createCurlKubeClient(*config, realClock(), nullptr);
  ASSERT_TRUE(anonymous);
  auto refused = (*anonymous)->get(cms, ns_, "b");
  ASSERT_FALSE(refused);
  EXPECT_TRUE(refused.error().code == ErrorCode::kPermissionDenied ||
              refused.error().code == ErrorCode::kUnauthenticated)
      << refused.error().toString();

  // Nothing listening: a transport error, retryable.
  config->server = "https://127.0.0.1:1";
  auto nowhere = createCurlKubeClient(*config, realClock(), nullptr);
  ASSERT_TRUE(nowhere);
  EXPECT_EQ((*nowhere)->get(cms, ns_, "b").error().code, ErrorCode::kUnavailable);
}

TEST_F(OperatorIT, ClientSpeaksHttp2ToTheRealServerWatchesIncluded) {
  auto config = loadKubeconfigFile(testenvDir() + "/kubeconfig");
  ASSERT_TRUE(config);
  metrics::Registry registry;
  auto created = createCurlKubeClient(*config, realClock(), &registry);
  ASSERT_TRUE(created) << created.error().toString();
  KubeClient& client = **created;
  const auto& cms = resources::configMaps();
  Json cm = {{"apiVersion", "v1"}, {"kind", "ConfigMap"}, {"metadata", {{"name", "h2"}}}};
  ASSERT_TRUE(client.create(cms, ns_, cm));
  ASSERT_TRUE(client.get(cms, ns_, "h2"));
  auto list = client.list(cms, ns_);
  ASSERT_TRUE(list) << list.error().toString();
  // A watch from the list's resourceVersion sees a change made after it started.
  std::string rv = (*list)["metadata"]["resourceVersion"];
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds{300});
    EXPECT_TRUE(client.patch(cms, ns_, "h2", PatchType::kMerge, {{"data", {{"k", "v"}}}}));
  });
  WatchOptions options;
  options.resource_version = rv;
  options.timeout_seconds = 10;
  bool seen = false;
  auto watched = client.watch(cms, ns_, options, [&](WatchEvent&& e) {
    seen = e.type == WatchEventType::kModified && objectName(e.object) == "h2";
    return !seen;
  });
  writer.join();
  ASSERT_TRUE(watched) << watched.error().toString();
  EXPECT_TRUE(seen);
  std::string text = registry.expose();
  EXPECT_NE(text.find(R"(c4_operator_api_responses_by_protocol_total{protocol="HTTP/2"} 5)"),
            std::string::npos)
      << "create, get, list, patch and the watch over HTTP/2:\n"
      << text;
  EXPECT_EQ(text.find(R"(protocol="HTTP/1.1")"), std::string::npos) << text;
}

TEST_F(OperatorIT, ARequestRefusedByTheGateNeverReachesTheServer) {
  auto config = loadKubeconfigFile(testenvDir() + "/kubeconfig");
  ASSERT_TRUE(config);
  std::atomic<int> asked{0};
  config->before_send = [&](std::string_view method, std::string_view) -> Status {
    ++asked;
    if (method != "GET") return makeError(ErrorCode::kFailedPrecondition, "lease lost: no writes");
    return okStatus();
  };
  auto gated = createCurlKubeClient(*config, realClock(), nullptr);
  ASSERT_TRUE(gated);
  const auto& cms = resources::configMaps();
  Json cm = {{"apiVersion", "v1"}, {"kind", "ConfigMap"}, {"metadata", {{"name", "fenced"}}}};
  auto refused = (*gated)->create(cms, ns_, cm);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_EQ(refused.error().message, "lease lost: no writes");
  // Reads still go through, and show that nothing was created.
  auto absent = (*gated)->get(cms, ns_, "fenced");
  ASSERT_FALSE(absent);
  EXPECT_EQ(absent.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(asked.load(), 2);
  EXPECT_EQ(client_->get(cms, ns_, "fenced").error().code, ErrorCode::kNotFound);
}

TEST_F(OperatorIT, TlsServerNameIsWhatTheCertificateIsVerifiedAgainst) {
  auto config = loadKubeconfigFile(testenvDir() + "/kubeconfig");
  ASSERT_TRUE(config);
  ASSERT_EQ(config->server.rfind("https://127.0.0.1:", 0), 0u) << config->server;
  // A DNS name in the API server certificate's SANs (e2e/testenv/testenv.sh): requests to
  // 127.0.0.1 verify against it and succeed.
  config->tls_server_name = "kubernetes.default.svc";
  auto named = createCurlKubeClient(*config, realClock(), nullptr);
  ASSERT_TRUE(named) << named.error().toString();
  auto ns = (*named)->get(resources::namespaces(), "", ns_);
  ASSERT_TRUE(ns) << ns.error().toString();
  EXPECT_EQ(objectName(*ns), ns_);
  // A name the certificate does not carry: the TLS handshake fails, nothing is sent.
  config->tls_server_name = "not-in-the-certificate.example";
  auto wrong = createCurlKubeClient(*config, realClock(), nullptr);
  ASSERT_TRUE(wrong);
  auto refused = (*wrong)->get(resources::namespaces(), "", ns_);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(refused.error().message.find("not-in-the-certificate.example"), std::string::npos)
      << refused.error().message;
  EXPECT_NE(refused.error().message.find("SSL"), std::string::npos) << refused.error().message;
}

TEST_F(OperatorIT, InformerFieldSelectorCachesOnlyMatchingObjects) {
  const auto& cms = resources::configMaps();
  for (const char* name : {"wanted", "unwanted"}) {
    Json cm = {{"apiVersion", "v1"}, {"kind", "ConfigMap"}, {"metadata", {{"name", name}}}};
    ASSERT_TRUE(client_->create(cms, ns_, cm));
  }
  Informer informer(*client_, realClock(), cms, ns_, "", "metadata.name=wanted");
  informer.setWatchTimeoutSeconds(5);
  std::atomic<int> updates{0};
  informer.addHandler([&](InformerEvent e, const Json*, const Json& o) {
    if (e == InformerEvent::kUpdate) {
      EXPECT_EQ(objectName(o), "wanted");
      ++updates;
    }
  });
  informer.start();
  ASSERT_TRUE(informer.waitForSync(realClock().monoNow() + std::chrono::seconds{30}));
  EXPECT_EQ(informer.store().size(), 1u);
  EXPECT_TRUE(informer.store().get(ns_ + "/wanted").has_value());
  // Only changes of matching objects arrive through the watch.
  ASSERT_TRUE(client_->patch(cms, ns_, "unwanted", PatchType::kMerge, {{"data", {{"k", "1"}}}}));
  ASSERT_TRUE(client_->patch(cms, ns_, "wanted", PatchType::kMerge, {{"data", {{"k", "1"}}}}));
  EXPECT_TRUE(waitFor([&] { return updates.load() == 1; }));
  auto cached = informer.store().get(ns_ + "/wanted");
  ASSERT_TRUE(cached);
  EXPECT_EQ((*cached)["data"]["k"], "1");
  EXPECT_FALSE((*cached)["metadata"].contains("managedFields")) << "stripped from the cache";
  EXPECT_EQ(informer.store().size(), 1u);
  informer.stop();
}

TEST_F(OperatorIT, JobGetsChildrenWithEnvironmentAndOwners) {
  OperatorInstance op(*client_, ns_);
  ASSERT_TRUE(op.start());
  ASSERT_TRUE(create(trainingJob(ns_, "llm", 3)));
  ASSERT_TRUE(waitFor([&] { return podsAtAttempt("llm", 3, 0, "Running"); }));
  Json tj = job("llm");
  std::string uid = tj["metadata"]["uid"];
  std::set<std::string> names;
  for (const auto& pod : listPods(*client_, ns_, "llm")) {
    names.insert(objectName(pod));
    EXPECT_EQ(pod["metadata"]["ownerReferences"][0]["uid"], uid);
    EXPECT_EQ(pod["metadata"]["ownerReferences"][0]["controller"], true);
    std::string rank = labelOf(pod, labels::kReplicaIndex);
    EXPECT_EQ(envValue(pod, "RANK"), rank);
    EXPECT_EQ(envValue(pod, "PET_NODE_RANK"), rank);
    EXPECT_EQ(envValue(pod, "WORLD_SIZE"), "3");
    EXPECT_EQ(envValue(pod, "MASTER_ADDR"), "llm-0.llm");
    EXPECT_EQ(envValue(pod, "C4_RESTART_ATTEMPT"), "0");
    EXPECT_EQ(envValue(pod, "C4_NAMESPACE"), ns_);
    EXPECT_EQ(envValue(pod, "C4_NODE_NAME"), "<ref>");
    EXPECT_EQ(envValue(pod, "C4_PLAN_FILE"), "/etc/c4/plan/plan.json");
    EXPECT_EQ(envValue(pod, "C4_SUBFLOWS"), "4") << "the job's subflow count without a plan";
    // telemetry.source Profiler (the API server's default), Advisory: C4's profiler plugin,
    // NCCL's own transports.
    EXPECT_EQ(envValue(pod, "NCCL_PROFILER_PLUGIN"), "/opt/c4/lib/libnccl-profiler-c4.so");
    EXPECT_EQ(envValue(pod, "NCCL_NET_PLUGIN"), "<unset>");
    EXPECT_EQ(pod["spec"]["subdomain"], "llm");
    // The plan reaches the pod through its optional volume of ConfigMap llm-c4-plan, which the
    // traffic-plan controller alone writes (not running here).
    bool plan_volume = false;
    for (const auto& v : pod["spec"]["volumes"]) {
      if (v.value("name", "") != "c4-plan") continue;
      plan_volume = true;
      EXPECT_EQ(v["configMap"]["name"], "llm-c4-plan");
      EXPECT_EQ(v["configMap"]["optional"], true);
    }
    EXPECT_TRUE(plan_volume);
  }
  EXPECT_EQ(names, (std::set<std::string>{"llm-0", "llm-1", "llm-2"}));
  auto svc = client_->get(resources::services(), ns_, "llm");
  ASSERT_TRUE(svc) << svc.error().toString();
  EXPECT_EQ((*svc)["spec"]["clusterIP"], "None");
  EXPECT_EQ((*svc)["metadata"]["ownerReferences"][0]["uid"], uid);
  auto cm = client_->get(resources::configMaps(), ns_, "llm-c4-plan");
  ASSERT_FALSE(cm) << "the TrainingJob controller does not write the plan ConfigMap";
  EXPECT_EQ(cm.error().code, ErrorCode::kNotFound);

  ASSERT_TRUE(waitFor([&] { return job("llm")["status"].value("phase", "") == "Running"; }));
  tj = job("llm");
  const Json* running = findCondition(tj["status"], "Running");
  ASSERT_NE(running, nullptr);
  EXPECT_EQ((*running)["status"], "True");
  EXPECT_EQ((*running)["observedGeneration"], tj["metadata"]["generation"]);
  EXPECT_EQ(tj["status"]["observedGeneration"], tj["metadata"]["generation"]);
  ASSERT_TRUE(waitFor([&] {
    auto reasons = eventReasons(*client_, ns_, "llm");
    return std::find(reasons.begin(), reasons.end(), "Running") != reasons.end();
  }));
  op.stop();
}

// The headless Service is the job's child: someone else's edit of its selector and ports is put
// back by the next reconcile, with a Warning Event ServiceRepaired; deleted, it is recreated.
TEST_F(OperatorIT, AHeadlessServiceChangedBySomeoneElseIsPutBack) {
  OperatorInstance op(*client_, ns_);
  ASSERT_TRUE(op.start());
  ASSERT_TRUE(create(trainingJob(ns_, "svc", 2)));
  ASSERT_TRUE(waitFor([&] { return bool(client_->get(resources::services(), ns_, "svc")); }));
  Json svc = *client_->get(resources::services(), ns_, "svc");
  const Json selector = svc["spec"]["selector"];
  const Json ports = svc["spec"]["ports"];
  ASSERT_EQ(selector, (Json{{labels::kJobName, "svc"}}));

  svc["spec"]["selector"] = {{"app", "someone-else"}};
  svc["spec"]["ports"] =
      Json::array({{{"name", "web"}, {"port", 8080}, {"targetPort", 8080}, {"protocol", "TCP"}}});
  auto edited = client_->update(resources::services(), ns_, svc);
  ASSERT_TRUE(edited) << edited.error().toString();
  EXPECT_TRUE(waitFor(
      [&] {
        auto now = client_->get(resources::services(), ns_, "svc");
        return now && (*now)["spec"]["selector"] == selector && (*now)["spec"]["ports"] == ports;
      },
      std::chrono::seconds{10}))
      << "the edit stayed: " << client_->get(resources::services(), ns_, "svc")->dump();
  EXPECT_TRUE(waitFor([&] {
    auto reasons = eventReasons(*client_, ns_, "svc");
    return std::count(reasons.begin(), reasons.end(), "ServiceRepaired") == 1;
  }));

  const std::string uid = svc["metadata"]["uid"];
  ASSERT_TRUE(client_->remove(resources::services(), ns_, "svc", DeleteOptions{}));
  EXPECT_TRUE(waitFor(
      [&] {
        auto now = client_->get(resources::services(), ns_, "svc");
        return now && (*now)["metadata"]["uid"] != uid && isControlledBy(*now, job("svc")) &&
               (*now)["spec"]["selector"] == selector;
      },
      std::chrono::seconds{10}))
      << "not recreated";
  op.stop();
}

TEST_F(OperatorIT, PodFailureRestartsTheJobAsNextAttemptFromTheCheckpoint) {
  OperatorInstance op(*client_, ns_);
  ASSERT_TRUE(op.start());
  ASSERT_TRUE(create(trainingJob(ns_, "ft", 2)));
  ASSERT_TRUE(waitFor([&] { return podsAtAttempt("ft", 2, 0, "Running"); }));
  ASSERT_TRUE(waitFor([&] { return job("ft")["status"].value("phase", "") == "Running"; }));
  // The analyser would record the checkpoint; here the test writes it through /status.
  ASSERT_TRUE(
      client_->patch(resources::trainingJobs(), ns_, "ft", PatchType::kMerge,
                     {{"status", {{"lastCheckpoint", {{"step", 1234}, {"path", "/ckpt/1234"}}}}}},
                     statusSubresource()));
  ASSERT_TRUE(setPodPhase(*client_, ns_, "ft-1", "Failed", 137));
  ASSERT_TRUE(waitFor([&] { return podsAtAttempt("ft", 2, 1, "Running"); }));
  for (const auto& pod : listPods(*client_, ns_, "ft")) {
    EXPECT_EQ(envValue(pod, "C4_RESTART_ATTEMPT"), "1");
    EXPECT_EQ(envValue(pod, "C4_RESUME_STEP"), "1234");
  }
  ASSERT_TRUE(waitFor([&] { return job("ft")["status"].value("phase", "") == "Running"; }));
  Json status = job("ft")["status"];
  EXPECT_EQ(status["restarts"], 1);
  EXPECT_EQ(status["faults"].size(), 1u);
  EXPECT_EQ(status["faults"][0]["pod"], "ft-1");
  EXPECT_EQ(status["faults"][0]["exitCode"], 137) << "the CRD's status schema keeps it";
  auto reasons = eventReasons(*client_, ns_, "ft");
  EXPECT_NE(std::find(reasons.begin(), reasons.end(), "RestartingFromCheckpoint"), reasons.end());
  EXPECT_NE(std::find(reasons.begin(), reasons.end(), "PodFailed"), reasons.end());
  op.stop();
}

TEST_F(OperatorIT, StatusChangesWithinTheBatchPeriodCostOneWriteButARestartIsWrittenAtOnce) {
  // Period 0: Pending (before the pods exist) and Running are two writes.
  {
    StatusWriteCounter counting(*client_);
    OperatorInstance op(counting, ns_, nullptr,
                        [](ControllerConfig& c) { c.status_batch_period = Duration::zero(); });
    ASSERT_TRUE(op.start());
    ASSERT_TRUE(create(trainingJob(ns_, "eager", 2)));
    ASSERT_TRUE(waitFor([&] { return job("eager")["status"].value("phase", "") == "Running"; }));
    // The API server shows the write a moment before the operator's client has counted it.
    ASSERT_TRUE(waitFor([&] { return counting.statusWrites("eager") >= 2; }));
    op.stop();
    // Pending, the pods' start (started indexes, active count) and Running: each a write.
    EXPECT_GE(counting.statusWrites("eager"), 2);
  }
  // A 5 s period: KWOK starts the pods well within it, so the first write already says Running.
  StatusWriteCounter counting(*client_);
  OperatorInstance op(counting, ns_, nullptr,
                      [](ControllerConfig& c) { c.status_batch_period = std::chrono::seconds{5}; });
  ASSERT_TRUE(op.start());
  auto created_at = std::chrono::steady_clock::now();
  ASSERT_TRUE(create(trainingJob(ns_, "batched", 2)));
  ASSERT_TRUE(waitFor([&] { return podsAtAttempt("batched", 2, 0, "Running"); }));
  ASSERT_TRUE(waitFor([&] { return job("batched")["status"].value("phase", "") == "Running"; }));
  EXPECT_GE(std::chrono::steady_clock::now() - created_at, std::chrono::milliseconds{4500})
      << "the first status write waits for the batch period";
  // Counted once the write returns (a moment after the API server shows it); a second write
  // would make this wait fail, as the count never goes back to 1.
  EXPECT_TRUE(waitFor([&] { return counting.statusWrites("batched") == 1; }))
      << counting.statusWrites("batched") << " status writes";
  // The Running Event is recorded after the status write that says Running (a CI run read the
  // Events 10 ms before it landed): wait for it, then there must be exactly one.
  auto runningEvents = [&] {
    auto reasons = eventReasons(*client_, ns_, "batched");
    return std::count(reasons.begin(), reasons.end(), "Running");
  };
  EXPECT_TRUE(waitFor([&] { return runningEvents() >= 1; }));
  EXPECT_EQ(runningEvents(), 1);

  // A restart gates pod deletion: its status is written at once, not after 5 s.
  auto failed_at = std::chrono::steady_clock::now();
  ASSERT_TRUE(setPodPhase(*client_, ns_, "batched-0", "Failed", 137));
  ASSERT_TRUE(waitFor([&] { return job("batched")["status"].value("restarts", 0) == 1; }));
  EXPECT_LT(std::chrono::steady_clock::now() - failed_at, std::chrono::seconds{4});
  op.stop();
}

TEST_F(OperatorIT, SpentBudgetFailsTheJobWithAnEvent) {
  OperatorInstance op(*client_, ns_);
  ASSERT_TRUE(op.start());
  ASSERT_TRUE(create(trainingJob(ns_, "once", 2, {{"maxRestarts", 0}})));
  ASSERT_TRUE(waitFor([&] { return podsAtAttempt("once", 2, 0, "Running"); }));
  ASSERT_TRUE(setPodPhase(*client_, ns_, "once-0", "Failed"));
  ASSERT_TRUE(waitFor([&] { return job("once")["status"].value("phase", "") == "Failed"; }));
  Json status = job("once")["status"];
  const Json* failed = findCondition(status, "Failed");
  ASSERT_NE(failed, nullptr);
  EXPECT_EQ((*failed)["reason"], "ReachedMaxRestarts");
  EXPECT_EQ(status["restarts"], 0);
  ASSERT_TRUE(waitFor([&] {
    auto reasons = eventReasons(*client_, ns_, "once");
    return std::find(reasons.begin(), reasons.end(), "ReachedMaxRestarts") != reasons.end();
  }));
  op.stop();
}

// The test cluster's kube-apiserver runs with --watch-cache-sizes=podtemplates#0: watches of
// PodTemplates go straight to etcd, so compacting etcd's history past an informer's
// resourceVersion makes its next watch answer 410 Gone, exactly as a watch that fell out of the
// watch-cache window does in a big cluster. The informer must relist and lose nothing.
TEST_F(OperatorIT, WatchExpiredByCompactionRelistsAndLosesNothing) {
  std::ifstream ports(testenvDir() + "/ports.env");
  std::string line, etcd_port;
  while (std::getline(ports, line)) {
    if (line.rfind("ETCD_PORT=", 0) == 0) etcd_port = line.substr(10);
  }
  ASSERT_FALSE(etcd_port.empty()) << "no ETCD_PORT in " << testenvDir() << "/ports.env";
  static const ResourceType kPodTemplates{"", "v1", "podtemplates", "PodTemplate", true};
  auto podTemplate = [](const std::string& name) {
    return Json{{"apiVersion", "v1"},
                {"kind", "PodTemplate"},
                {"metadata", {{"name", name}}},
                {"template",
                 {{"spec", {{"containers", Json::array({{{"name", "c"}, {"image", "img:1"}}})}}}}}};
  };
  auto compactAt = [&](const std::string& rv) {
    std::string cmd = "curl -sf --max-time 10 -X POST http://127.0.0.1:" + etcd_port +
                      "/v3/kv/compaction -d '{\"revision\": \"" + rv + "\"}' >/dev/null";
    return std::system(cmd.c_str()) == 0;
  };
  auto bumpRevision = [&](const std::string& name) {
    Json cm = {{"apiVersion", "v1"}, {"kind", "ConfigMap"}, {"metadata", {{"name", name}}}};
    auto created = client_->create(resources::configMaps(), ns_, cm);
    EXPECT_TRUE(created) << created.error().toString();
    return created ? (*created)["metadata"]["resourceVersion"].get<std::string>() : "";
  };

  ASSERT_TRUE(client_->create(kPodTemplates, ns_, podTemplate("before")));
  Informer informer(*client_, realClock(), kPodTemplates, ns_);
  informer.setWatchTimeoutSeconds(2);  // watches end often, each resuming from the last rv
  std::atomic<int> deletes{0};
  informer.addHandler([&](InformerEvent e, const Json*, const Json&) {
    if (e == InformerEvent::kDelete) ++deletes;
  });
  informer.start();
  ASSERT_TRUE(informer.waitForSync(realClock().monoNow() + std::chrono::seconds{30}));
  ASSERT_EQ(informer.store().size(), 1u);
  ASSERT_EQ(informer.stats().lists, 1u);

  // Other writes move etcd's revision past the informer's; compact there. The informer's next
  // watch (its current one ends within 2 s) resumes from a compacted revision: 410 Gone.
  ASSERT_TRUE(waitFor(
      [&] {
        // Compact at a revision newer than the informer's rv, then wait for its next watch to fail.
        std::string rv = bumpRevision(uniqueName("bump"));
        if (rv.empty() || !compactAt(rv)) return false;
        return waitFor([&] { return informer.stats().gone >= 1; }, std::chrono::seconds{5});
      },
      std::chrono::seconds{40}))
      << "no 410 seen; informer stats: lists " << informer.stats().lists << ", watches "
      << informer.stats().watches << ", errors " << informer.stats().errors;
  EXPECT_TRUE(waitFor([&] { return informer.stats().lists >= 2; })) << "410 must cause a relist";

  // After the relist the informer follows changes again, and a compaction that happens between
  // two of them still loses nothing.
  ASSERT_TRUE(client_->remove(kPodTemplates, ns_, "before", DeleteOptions{}));
  ASSERT_TRUE(client_->create(kPodTemplates, ns_, podTemplate("after")));
  ASSERT_TRUE(compactAt(bumpRevision(uniqueName("bump"))));
  EXPECT_TRUE(waitFor([&] {
    return informer.store().size() == 1 && informer.store().get(ns_ + "/after").has_value();
  })) << "store size "
      << informer.store().size();
  EXPECT_TRUE(waitFor([&] { return deletes.load() == 1; })) << "the deletion was delivered once";
  informer.stop();
}

TEST_F(OperatorIT, CancellingAnIdleWatchEndsItAtOnce) {
  // A watch on an empty namespace's ConfigMaps idles; cancel() must end it without waiting for
  // libcurl's next progress tick or the server timeout.
  CancelToken token;
  WatchOptions options;
  options.timeout_seconds = 300;
  options.cancel = &token;
  std::optional<Status> result;
  std::chrono::steady_clock::time_point returned;
  std::thread watcher([&] {
    result =
        client_->watch(resources::configMaps(), ns_, options, [](WatchEvent&&) { return true; });
    returned = std::chrono::steady_clock::now();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds{700});  // connected and idle
  auto cancelled_at = std::chrono::steady_clock::now();
  token.cancel();
  watcher.join();
  ASSERT_TRUE(result.has_value());
  ASSERT_FALSE(*result);
  EXPECT_EQ(result->error().code, ErrorCode::kCancelled) << result->error().toString();
  EXPECT_LT(returned - cancelled_at, std::chrono::milliseconds{300})
      << std::chrono::duration_cast<std::chrono::milliseconds>(returned - cancelled_at).count()
      << " ms";
}

TEST_F(OperatorIT, InvalidTrainingJobsAreRejectedWithAClearMessage) {
  Json bad = trainingJob(ns_, "bad", 0);
  auto created = client_->create(resources::trainingJobs(), ns_, bad);
  ASSERT_FALSE(created);
  EXPECT_EQ(created.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(created.error().message.find("spec.replicas"), std::string::npos)
      << created.error().message;

  bad = trainingJob(ns_, "bad", 1, {{"maxRestarts", -1}});
  created = client_->create(resources::trainingJobs(), ns_, bad);
  ASSERT_FALSE(created);
  EXPECT_NE(created.error().message.find("maxRestarts"), std::string::npos);

  for (int limit : {1, 17}) {
    bad = trainingJob(ns_, "bad", 1, {{"maxIdenticalCrashes", limit}});
    created = client_->create(resources::trainingJobs(), ns_, bad);
    ASSERT_FALSE(created) << limit;
    EXPECT_NE(created.error().message.find("maxIdenticalCrashes"), std::string::npos)
        << created.error().message;
  }

  bad = trainingJob(ns_, "bad", 1);
  bad["spec"]["trafficPlanning"] = {{"mode", "Sometimes"}};
  created = client_->create(resources::trainingJobs(), ns_, bad);
  ASSERT_FALSE(created);
  EXPECT_NE(created.error().message.find("Enforce"), std::string::npos);

  bad = trainingJob(ns_, "bad", 1);
  bad["spec"]["template"]["spec"]["containers"] = Json::array();
  EXPECT_FALSE(client_->create(resources::trainingJobs(), ns_, bad));

  // Names that would make invalid pod hostnames or Service names.
  bad = trainingJob(ns_, "Bad-Name", 1);
  created = client_->create(resources::trainingJobs(), ns_, bad);
  ASSERT_FALSE(created);
  EXPECT_NE(created.error().message.find("metadata.name"), std::string::npos);
  bad = trainingJob(ns_, std::string(61, 'a'), 11);  // aaa...-10 would be 64 characters
  created = client_->create(resources::trainingJobs(), ns_, bad);
  ASSERT_FALSE(created);
  EXPECT_NE(created.error().message.find("too long"), std::string::npos) << created.error().message;
  EXPECT_TRUE(create(trainingJob(ns_, std::string(61, 'b'), 10))) << "aaa...-9 fits 63";

  // A managedBy typo would leave the job unreconciled forever: refused.
  bad = trainingJob(ns_, "bad", 1);
  bad["spec"]["managedBy"] = "c4.dev/trainingjob-controler";
  created = client_->create(resources::trainingJobs(), ns_, bad);
  ASSERT_FALSE(created);
  EXPECT_NE(created.error().message.find("spec.managedBy"), std::string::npos);

  // Variables the operator sets may not be set by the user (they would be overwritten).
  for (const char* name :
       {"RANK", "WORLD_SIZE", "MASTER_ADDR", "C4_JOB", "C4_RESUME_STEP", "PET_NNODES"}) {
    bad = trainingJob(ns_, "bad", 1);
    bad["spec"]["template"]["spec"]["containers"][0]["env"] =
        Json::array({{{"name", "OK"}, {"value", "1"}}, {{"name", name}, {"value", "1"}}});
    created = client_->create(resources::trainingJobs(), ns_, bad);
    ASSERT_FALSE(created) << name;
    EXPECT_NE(created.error().message.find("the operator sets them"), std::string::npos)
        << created.error().message;
  }

  // The plugins' tuning variables (C4_* names the operator does not set) are the user's.
  for (const char* name : {"C4_SOCKET_IFNAME", "C4_TCP_USER_TIMEOUT_MS"}) {
    Json j = trainingJob(ns_, "tuned", 1);
    j["spec"]["template"]["spec"]["containers"][0]["env"] =
        Json::array({{{"name", name}, {"value", "1"}}});
    created = client_->create(resources::trainingJobs(), ns_, j);
    ASSERT_TRUE(created) << name << ": " << created.error().message;
    ASSERT_TRUE(client_->remove(resources::trainingJobs(), ns_, "tuned"));
  }

  // C4's NCCL plugin variables are refused where the job runs that plugin, and only there.
  struct PluginEnv {
    const char* name;
    Json spec_patch;
    bool refused;
  };
  for (const auto& c :
       {PluginEnv{"NCCL_PROFILER_PLUGIN", Json::object(), true},
        PluginEnv{"NCCL_NET_PLUGIN", Json::object(), false},
        PluginEnv{"NCCL_NET_PLUGIN", {{"telemetry", {{"source", "NetPlugin"}}}}, true},
        PluginEnv{"NCCL_NET_PLUGIN", {{"trafficPlanning", {{"mode", "Enforce"}}}}, true},
        PluginEnv{"NCCL_PROFILER_PLUGIN", {{"telemetry", {{"source", "NetPlugin"}}}}, false},
        PluginEnv{"NCCL_PROFILER_PLUGIN", {{"trafficPlanning", {{"mode", "Enforce"}}}}, false}}) {
    Json j = trainingJob(ns_, "plugin-env", 1);
    j["spec"].merge_patch(c.spec_patch);
    j["spec"]["template"]["spec"]["containers"][0]["env"] =
        Json::array({{{"name", c.name}, {"value", "x"}}});
    created = client_->create(resources::trainingJobs(), ns_, j);
    EXPECT_EQ(created.has_value(), !c.refused) << c.name << " " << c.spec_patch.dump();
    if (created) {
      ASSERT_TRUE(client_->remove(resources::trainingJobs(), ns_, "plugin-env"));
    } else {
      EXPECT_NE(created.error().message.find(std::string(c.name) + " with telemetry.source"),
                std::string::npos)
          << created.error().message;
    }
  }
  bad = trainingJob(ns_, "bad", 1);
  bad["spec"]["telemetry"] = {{"source", "Inspector"}};
  created = client_->create(resources::trainingJobs(), ns_, bad);
  ASSERT_FALSE(created);
  EXPECT_NE(created.error().message.find("NetPlugin"), std::string::npos);

  // Numbers are numbers; numProcPerNode is a number or "auto".
  bad = trainingJob(ns_, "bad", 1, {{"slowFactor", "fast"}});
  created = client_->create(resources::trainingJobs(), ns_, bad);
  ASSERT_FALSE(created);
  EXPECT_NE(created.error().message.find("slowFactor"), std::string::npos);
  bad = trainingJob(ns_, "bad", 1, {{"slowNoiseSigmas", -1}});
  created = client_->create(resources::trainingJobs(), ns_, bad);
  ASSERT_FALSE(created);
  EXPECT_NE(created.error().message.find("slowNoiseSigmas"), std::string::npos);
  for (Json value : {Json("fast"), Json(0)}) {
    bad = trainingJob(ns_, "bad", 1);
    bad["spec"]["numProcPerNode"] = value;
    created = client_->create(resources::trainingJobs(), ns_, bad);
    ASSERT_FALSE(created) << value;
    EXPECT_NE(created.error().message.find("numProcPerNode"), std::string::npos);
  }
  bad = trainingJob(ns_, "bad", 1,
                    {{"podFailurePolicy", {{"rules", Json::array({{{"action", "Ignore"}}})}}}});
  created = client_->create(resources::trainingJobs(), ns_, bad);
  ASSERT_FALSE(created);
  EXPECT_NE(created.error().message.find("onExitCodes or onPodConditions"), std::string::npos);

  ASSERT_TRUE(create(trainingJob(ns_, "fixed", 2)));
  auto patched = client_->patch(resources::trainingJobs(), ns_, "fixed", PatchType::kMerge,
                                {{"spec", {{"replicas", 3}}}});
  ASSERT_FALSE(patched);
  EXPECT_NE(patched.error().message.find("immutable"), std::string::npos);

  // Defaults are applied by the API server.
  Json fixed = job("fixed");
  EXPECT_EQ(fixed["spec"]["faultTolerance"]["maxRestarts"], 3);
  EXPECT_EQ(fixed["spec"]["trafficPlanning"]["mode"], "Advisory");
  EXPECT_EQ(fixed["spec"]["telemetry"]["source"], "Profiler");
  EXPECT_EQ(fixed["spec"]["numProcPerNode"], 1);
  EXPECT_EQ(fixed["spec"]["faultTolerance"]["maxInfrastructureRestarts"], 10);
  EXPECT_EQ(fixed["spec"]["faultTolerance"]["maxIdenticalCrashes"], 3);
}

TEST_F(OperatorIT, SuspendDeletesPodsAndResumeRecreatesThem) {
  OperatorInstance op(*client_, ns_);
  ASSERT_TRUE(op.start());
  ASSERT_TRUE(create(trainingJob(ns_, "sus", 2)));
  ASSERT_TRUE(waitFor([&] { return podsAtAttempt("sus", 2, 0, "Running"); }));
  ASSERT_TRUE(client_->patch(resources::trainingJobs(), ns_, "sus", PatchType::kMerge,
                             {{"spec", {{"suspend", true}}}}));
  ASSERT_TRUE(waitFor([&] { return listPods(*client_, ns_, "sus").empty(); }));
  ASSERT_TRUE(waitFor([&] { return job("sus")["status"].value("phase", "") == "Suspended"; }));
  ASSERT_TRUE(client_->patch(resources::trainingJobs(), ns_, "sus", PatchType::kMerge,
                             {{"spec", {{"suspend", false}}}}));
  ASSERT_TRUE(waitFor([&] { return podsAtAttempt("sus", 2, 1, "Running"); }))
      << "a resume starts a new attempt";
  // The status write of the resumed attempt may be batched a moment after the pods start.
  EXPECT_TRUE(waitFor([&] { return job("sus")["status"].value("attempt", 0) == 1; }));
  EXPECT_EQ(job("sus")["status"]["restarts"], 0) << "suspend is not a restart";
  op.stop();
}

TEST_F(OperatorIT, CompletionMarksTheJobSucceeded) {
  OperatorInstance op(*client_, ns_);
  ASSERT_TRUE(op.start());
  ASSERT_TRUE(create(trainingJob(ns_, "done", 2)));
  ASSERT_TRUE(waitFor([&] { return podsAtAttempt("done", 2, 0, "Running"); }));
  ASSERT_TRUE(setPodPhase(*client_, ns_, "done-0", "Succeeded", 0));
  ASSERT_TRUE(setPodPhase(*client_, ns_, "done-1", "Succeeded", 0));
  ASSERT_TRUE(waitFor([&] { return job("done")["status"].value("phase", "") == "Succeeded"; }));
  op.stop();
}

TEST_F(OperatorIT, DeletingTheJobGarbageCollectsItsChildren) {
  OperatorInstance op(*client_, ns_);
  ASSERT_TRUE(op.start());
  ASSERT_TRUE(create(trainingJob(ns_, "gone", 2)));
  ASSERT_TRUE(waitFor([&] { return podsAtAttempt("gone", 2, 0, nullptr); }));
  ASSERT_TRUE(waitFor([&] { return bool(client_->get(resources::services(), ns_, "gone")); }));
  DeleteOptions background;
  background.propagation_policy = "Background";
  ASSERT_TRUE(client_->remove(resources::trainingJobs(), ns_, "gone", background));
  // kube-controller-manager's garbage collector follows the ownerReferences.
  ASSERT_TRUE(waitFor(
      [&] {
        return listPods(*client_, ns_, "gone").empty() &&
               !client_->get(resources::services(), ns_, "gone") &&
               !client_->get(resources::configMaps(), ns_, "gone-c4-plan");
      },
      std::chrono::seconds{60}));
  op.stop();
}

TEST_F(OperatorIT, NodeCordonAndUncordonWithBookkeepingAndEvents) {
  const std::string node_name = "node-3";
  auto node = client_->get(resources::nodes(), "", node_name);
  if (!node) GTEST_SKIP() << "test cluster has no " << node_name;
  EventRecorder events(*client_, realClock(), "c4-operator", "it", nullptr);
  NodeActionConfig config;
  config.max_fraction = 1.0;
  config.max_cordons_per_window = 10;
  config.state_namespace = ns_;
  NodeRemediator remediator(
      *client_, realClock(), events, config, nullptr,
      [&] {
        auto list = client_->list(resources::nodes(), "");
        return list ? (*list)["items"].get<std::vector<Json>>() : std::vector<Json>{};
      },
      nullptr);
  auto outcome = remediator.cordon(node_name, "integration test: NIC fault on rank 3");
  ASSERT_TRUE(outcome) << outcome.error().toString();
  EXPECT_EQ(*outcome, CordonOutcome::kCordoned);
  Json n = *client_->get(resources::nodes(), "", node_name);
  EXPECT_EQ(n["spec"]["unschedulable"], true);
  bool tainted = false;
  for (const auto& t : n["spec"]["taints"]) tainted |= t["key"] == "c4.dev/faulty";
  EXPECT_TRUE(tainted);
  EXPECT_EQ(annotationOf(n, "c4.dev/cordoned-by"), "c4-operator");
  auto un = remediator.uncordon(node_name);
  ASSERT_TRUE(un) << un.error().toString();
  n = *client_->get(resources::nodes(), "", node_name);
  EXPECT_FALSE(n["spec"].value("unschedulable", false));
  EXPECT_EQ(annotationOf(n, "c4.dev/cordoned-by"), "");
  auto reasons = eventReasons(*client_, "default", node_name);
  EXPECT_NE(std::find(reasons.begin(), reasons.end(), "NodeCordoned"), reasons.end());
  EXPECT_NE(std::find(reasons.begin(), reasons.end(), "NodeUncordoned"), reasons.end());
}

// Fault-history entries are bounded per window like cordons (issue #27), on the real API server:
// with a budget of 2, a third entry is not written and gets a FaultHistorySkipped Event, and a
// successor process (a new remediator on the same breaker ConfigMap) is bound by the same window.
TEST_F(OperatorIT, FaultHistoryEntriesAreBoundedPerWindowAcrossARestart) {
  const std::vector<std::string> names = {"node-0", "node-1", "node-2"};
  for (const auto& n : names) {
    if (!client_->get(resources::nodes(), "", n)) GTEST_SKIP() << "test cluster has no " << n;
  }
  auto clearHistory = [&] {
    for (const auto& n : names) {
      Json patch = {{"metadata", {{"annotations", {{kFaultHistoryAnnotation, nullptr}}}}}};
      (void)client_->patch(resources::nodes(), "", n, PatchType::kMerge, patch);
    }
  };
  clearHistory();
  EventRecorder events(*client_, realClock(), "c4-operator", "it", nullptr);
  NodeActionConfig config;
  config.state_namespace = ns_;
  config.max_fault_records_per_window = 2;
  auto remediator = [&] {
    return std::make_unique<NodeRemediator>(*client_, realClock(), events, config, nullptr, nullptr,
                                            nullptr);
  };
  const WallTime now = realClock().wallNow();
  const std::string job = ns_ + "/llm";
  {
    auto first = remediator();
    ASSERT_TRUE(first->recordFault("node-0", {now, "commHang", job}));
    ASSERT_TRUE(first->recordFault("node-1", {now, "crash", job}));
    auto over = first->recordFault("node-2", {now, "nicDown", job});
    ASSERT_FALSE(over);
    EXPECT_EQ(over.error().code, ErrorCode::kResourceExhausted) << over.error().toString();
  }
  auto successor = remediator();
  auto again = successor->recordFault("node-2", {now + std::chrono::seconds{1}, "crash", job});
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, ErrorCode::kResourceExhausted) << again.error().toString();
  auto historyOf = [&](const std::string& n) {
    return faultHistoryOf(*client_->get(resources::nodes(), "", n));
  };
  EXPECT_EQ(historyOf("node-0").size(), 1u);
  EXPECT_EQ(historyOf("node-1").size(), 1u);
  EXPECT_TRUE(historyOf("node-2").empty()) << "an entry beyond the budget was written";
  auto reasons = eventReasons(*client_, "default", "node-2");
  EXPECT_GE(std::count(reasons.begin(), reasons.end(), "FaultHistorySkipped"), 2);
  clearHistory();
}

// A pod of a started attempt that disappears (grace period 0, PodGC) is a crash of that rank:
// the job restarts as a whole; the rank is never re-created into a running rendezvous.
TEST_F(OperatorIT, AVanishedPodRestartsTheWholeJobWithoutSpendingTheBudget) {
  OperatorInstance op(*client_, ns_);
  ASSERT_TRUE(op.start());
  ASSERT_TRUE(create(trainingJob(ns_, "van", 2, {{"maxRestarts", 0}})));
  ASSERT_TRUE(waitFor([&] { return podsAtAttempt("van", 2, 0, "Running"); }));
  DeleteOptions now;
  now.grace_period_seconds = 0;
  ASSERT_TRUE(client_->remove(resources::pods(), ns_, "van-1", now));
  ASSERT_TRUE(waitFor([&] { return podsAtAttempt("van", 2, 1, "Running"); }));
  Json status = job("van")["status"];
  EXPECT_EQ(status["restarts"], 1);
  EXPECT_EQ(status["restartsCountTowardsMax"], 0) << "maxRestarts 0 and still restarted";
  EXPECT_EQ(status["infrastructureRestarts"], 1);
  ASSERT_EQ(status["faults"].size(), 1u);
  EXPECT_EQ(status["faults"][0]["class"], "disruption");
  EXPECT_EQ(status["faults"][0]["rank"], 1);
  // Events are recorded after the status write they follow: wait for it.
  EXPECT_TRUE(waitFor([&] {
    auto reasons = eventReasons(*client_, ns_, "van");
    return std::find(reasons.begin(), reasons.end(), "PodDisrupted") != reasons.end();
  }));
  op.stop();
}

// Someone else's Service has the job's name: never adopted, no pod starts against it, the job
// says why (condition + Event) and recovers once the name is free.
TEST_F(OperatorIT, AForeignObjectWithTheChildsNameIsNeverAdopted) {
  Json foreign = {{"apiVersion", "v1"},
                  {"kind", "Service"},
                  {"metadata", {{"name", "taken"}, {"namespace", ns_}}},
                  {"spec", {{"clusterIP", "None"}, {"ports", Json::array({{{"port", 80}}})}}}};
  ASSERT_TRUE(client_->create(resources::services(), ns_, foreign));
  OperatorInstance op(*client_, ns_);
  ASSERT_TRUE(op.start());
  ASSERT_TRUE(create(trainingJob(ns_, "taken", 2)));
  ASSERT_TRUE(waitFor([&] { return isConditionTrue(job("taken")["status"], "Degraded"); }));
  Json status = job("taken")["status"];
  EXPECT_EQ(status["phase"], "Pending") << "the job has a status";
  const Json* degraded = findCondition(status, "Degraded");
  EXPECT_EQ((*degraded)["reason"], "NameConflict");
  EXPECT_NE((*degraded)["message"].get<std::string>().find("Service taken"), std::string::npos);
  EXPECT_TRUE(listPods(*client_, ns_, "taken").empty());
  auto svc = client_->get(resources::services(), ns_, "taken");
  ASSERT_TRUE(svc);
  EXPECT_FALSE((*svc)["metadata"].contains("ownerReferences")) << "not adopted";
  // Events are recorded after the status write they follow: wait for it.
  EXPECT_TRUE(waitFor([&] {
    auto reasons = eventReasons(*client_, ns_, "taken");
    return std::find(reasons.begin(), reasons.end(), "NameConflict") != reasons.end();
  }));

  ASSERT_TRUE(client_->remove(resources::services(), ns_, "taken", DeleteOptions{}));
  ASSERT_TRUE(
      waitFor([&] { return podsAtAttempt("taken", 2, 0, "Running"); }, std::chrono::seconds{60}));
  ASSERT_TRUE(waitFor([&] { return !isConditionTrue(job("taken")["status"], "Degraded"); }));
  op.stop();
}

// The API server refuses the pods (422: an invalid container name the CRD cannot see): the
// job gets a Degraded condition and an Event with the server's message, not silence.
TEST_F(OperatorIT, ATerminalApiErrorCreatingPodsIsACondition) {
  OperatorInstance op(*client_, ns_);
  ASSERT_TRUE(op.start());
  Json tj = trainingJob(ns_, "invalid-pod", 2);
  tj["spec"]["template"]["spec"]["containers"][0]["name"] = "Not_A_DNS_Label";
  ASSERT_TRUE(create(tj));
  ASSERT_TRUE(waitFor([&] { return isConditionTrue(job("invalid-pod")["status"], "Degraded"); }));
  Json status = job("invalid-pod")["status"];
  EXPECT_EQ(status["phase"], "Pending");
  const Json* degraded = findCondition(status, "Degraded");
  EXPECT_EQ((*degraded)["reason"], "FailedCreate");
  EXPECT_NE((*degraded)["message"].get<std::string>().find("create Pod invalid-pod-"),
            std::string::npos)
      << (*degraded)["message"];
  EXPECT_NE((*degraded)["message"].get<std::string>().find("Not_A_DNS_Label"), std::string::npos)
      << "the server's own message";
  ASSERT_TRUE(waitFor([&] {
    auto reasons = eventReasons(*client_, ns_, "invalid-pod");
    return std::find(reasons.begin(), reasons.end(), "FailedCreatePod") != reasons.end();
  }));
  EXPECT_TRUE(listPods(*client_, ns_, "invalid-pod").empty());
  op.stop();
}

// Forwards to the real client. The first Service create returns only after the operator's
// informer has shown the new object AND its deletion by someone else: the order a fast watch
// and a quick user produce under load.
class InformerFirstClient final : public ForwardingKubeClient {
 public:
  explicit InformerFirstClient(KubeClient& real) : ForwardingKubeClient(real) {}
  std::function<bool(const std::string& key)> cached;  // set once the controller exists
  Result<Json> create(const ResourceType& t, std::string_view ns, const Json& obj,
                      const WriteOptions& o) override {
    auto result = target().create(t, ns, obj, o);
    if (result && t.resource == "services" && !raced_.exchange(true)) {
      const std::string key = objectKey(*result);
      EXPECT_TRUE(waitFor([&] { return cached(key); }, std::chrono::seconds{10}));
      EXPECT_TRUE(target().remove(t, ns, objectName(*result), DeleteOptions{}));
      EXPECT_TRUE(waitFor([&] { return !cached(key); }, std::chrono::seconds{10}));
    }
    return result;
  }

 private:
  std::atomic<bool> raced_{false};
};

// Expectations are raised before the create (client-go): when the informer reports a child
// (and here its deletion) before create() returns, nothing stale is left behind, so the child
// is re-created at once rather than after the expectation's 15 s TTL.
TEST_F(OperatorIT, AChildSeenBeforeItsCreateReturnedLeavesNoStaleExpectation) {
  InformerFirstClient client(*client_);
  OperatorInstance op(client, ns_);
  client.cached = [&](const std::string& key) {
    return op.controller().serviceInformer().store().get(key).has_value();
  };
  ASSERT_TRUE(op.start());
  ASSERT_TRUE(create(trainingJob(ns_, "exp", 1)));
  auto created_at = std::chrono::steady_clock::now();
  ASSERT_TRUE(waitFor([&] { return podsAtAttempt("exp", 1, 0, "Running"); }));
  ASSERT_TRUE(waitFor([&] { return bool(client_->get(resources::services(), ns_, "exp")); },
                      std::chrono::seconds{30}));
  EXPECT_LT(std::chrono::steady_clock::now() - created_at, std::chrono::seconds{8})
      << "a stale expectation would hold the re-create for 15 s";
  op.stop();
}

// A node that goes NotReady under a job is node-level evidence: the node is cordoned and
// tainted through the circuit breaker (Events on the job and the node), and the job restarts
// without spending the user's budget.
TEST_F(OperatorIT, ANodeThatWentNotReadyUnderTheJobIsCordonedAndTheJobRestarts) {
  NotReadyNode sick(*client_, "sick");
  const std::string& node_name = sick.name();
  EventRecorder events(*client_, realClock(), "c4-operator", "it", nullptr);
  NodeActionConfig actions;
  actions.max_fraction = 1.0;
  actions.max_cordons_per_window = 10;
  actions.state_namespace = ns_;
  TrainingJobController* controller = nullptr;
  NodeRemediator remediator(
      *client_, realClock(), events, actions,
      [&](const std::string& n) { return controller->nodeInformer().store().get(n); },
      [&] { return controller->nodeInformer().store().list(); }, nullptr);
  OperatorInstance op(*client_, ns_, nullptr,
                      [&](ControllerConfig& c) { c.remediator = &remediator; });
  controller = &op.controller();
  ASSERT_TRUE(op.start());
  Json tj = trainingJob(ns_, "on-sick", 1, {{"maxRestarts", 0}});
  tj["spec"]["template"]["spec"]["nodeName"] = node_name;  // no kubelet: the test plays it
  ASSERT_TRUE(create(tj));
  ASSERT_TRUE(waitFor([&] { return podsAtAttempt("on-sick", 1, 0, nullptr); }));
  ASSERT_TRUE(setPodPhase(*client_, ns_, "on-sick-0", "Failed", 137));
  ASSERT_TRUE(waitFor([&] {
    auto n = client_->get(resources::nodes(), "", node_name);
    return n && annotationOf(*n, "c4.dev/cordoned-by") != "";
  }));
  Json cordoned = *client_->get(resources::nodes(), "", node_name);
  EXPECT_EQ(cordoned["spec"]["unschedulable"], true);
  bool tainted = false;
  for (const auto& t : cordoned["spec"]["taints"]) tainted |= t["key"] == "c4.dev/faulty";
  EXPECT_TRUE(tainted);
  EXPECT_NE(annotationOf(cordoned, "c4.dev/cordon-reason").find("NotReady"), std::string::npos);
  ASSERT_TRUE(waitFor([&] { return job("on-sick")["status"].value("restarts", 0) == 1; }));
  Json status = job("on-sick")["status"];
  EXPECT_EQ(status["restartsCountTowardsMax"], 0);
  EXPECT_EQ(status["faults"][0]["class"], "disruption");
  ASSERT_TRUE(waitFor([&] {
    auto reasons = eventReasons(*client_, ns_, "on-sick");
    return std::find(reasons.begin(), reasons.end(), "NodeCordoned") != reasons.end();
  }));
  auto node_reasons = eventReasons(*client_, "default", node_name);
  EXPECT_NE(std::find(node_reasons.begin(), node_reasons.end(), "NodeCordoned"),
            node_reasons.end());
  op.stop();
}

// Event correlation against the real API server: what `kubectl describe` shows is one Event per
// repeated occurrence, with its count and first/last timestamps. The recorder runs on simulated
// time that starts at the real wall time, so the timestamps are exact.
TEST_F(OperatorIT, IdenticalEventsAreOneEventWithCountAndTimestamps) {
  auto object = client_->create(resources::configMaps(), ns_,
                                {{"apiVersion", "v1"},
                                 {"kind", "ConfigMap"},
                                 {"metadata", {{"name", "evt"}}},
                                 {"data", {{"k", "v"}}}});
  ASSERT_TRUE(object) << object.error().toString();
  SimulatedClock clock(std::chrono::floor<std::chrono::seconds>(std::chrono::system_clock::now()));
  metrics::Registry registry;
  EventRecorder events(*client_, clock, "c4-operator", "it", &registry);
  auto eventsOfObject = [&] {
    ListOptions by_object;
    by_object.field_selector = "involvedObject.name=evt";
    auto list = client_->list(resources::events(), ns_, by_object);
    EXPECT_TRUE(list) << list.error().toString();
    std::vector<Json> out;
    if (list) {
      for (const auto& e : (*list)["items"]) out.push_back(e);
    }
    return out;
  };

  const std::string first = formatRfc3339(clock.wallNow());
  for (int i = 0; i < 3; ++i) {
    if (i > 0) clock.advance(std::chrono::seconds{30});
    events.record(*object, "Warning", "RankFailed", "rank 3 exited with 137");
  }
  auto listed = eventsOfObject();
  ASSERT_EQ(listed.size(), 1u);
  Json e = listed[0];
  EXPECT_EQ(e["count"], 3);
  EXPECT_EQ(e["firstTimestamp"], first);
  EXPECT_EQ(e["lastTimestamp"], formatRfc3339(clock.wallNow()));  // 60 s after the first
  EXPECT_EQ(e["type"], "Warning");
  EXPECT_EQ(e["reason"], "RankFailed");
  EXPECT_EQ(e["message"], "rank 3 exited with 137");
  EXPECT_EQ(e["source"]["component"], "c4-operator");
  EXPECT_EQ(e["involvedObject"]["kind"], "ConfigMap");
  EXPECT_EQ(e["involvedObject"]["namespace"], ns_);
  EXPECT_EQ(e["involvedObject"]["uid"], (*object)["metadata"]["uid"]);
  EXPECT_EQ(registry.counter("c4_operator_events_total", "", {"type", "reason", "result"})
                .labels({"Warning", "RankFailed", "ok"})
                .value(),
            3.0);

  // The Event expires (the API server's event TTL): the next occurrence creates it again, with
  // its name, count and first timestamp.
  const std::string name = e["metadata"]["name"];
  ASSERT_TRUE(client_->remove(resources::events(), ns_, name, DeleteOptions{}));
  clock.advance(std::chrono::seconds{30});
  events.record(*object, "Warning", "RankFailed", "rank 3 exited with 137");
  listed = eventsOfObject();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0]["metadata"]["name"], name);
  EXPECT_EQ(listed[0]["count"], 4);
  EXPECT_EQ(listed[0]["firstTimestamp"], first);
  EXPECT_EQ(listed[0]["lastTimestamp"], formatRfc3339(clock.wallNow()));

  // Eleven similar Events (one reason, different messages): nine of their own, then one combined
  // Event counted twice, carrying the latest message.
  for (int i = 0; i < 11; ++i) {
    clock.advance(std::chrono::seconds{1});
    events.record(*object, "Normal", "CheckpointSaved", "step " + std::to_string(i * 100));
  }
  std::vector<Json> saved;
  for (const auto& item : eventsOfObject()) {
    if (item["reason"] == "CheckpointSaved") saved.push_back(item);
  }
  ASSERT_EQ(saved.size(), 10u);
  int combined = 0;
  for (const auto& item : saved) {
    if (item["message"] == "(combined from similar events): step 1000") {
      ++combined;
      EXPECT_EQ(item["count"], 2);
    } else {
      EXPECT_EQ(item["count"], 1);
    }
  }
  EXPECT_EQ(combined, 1);
}

// The TrainingJob status codec against the CRD's schema in the real API server: a status with
// every field the operator writes survives PUT /status unpruned and decodes to what was written,
// and a merge patch of status.plan alone (the traffic-plan controller's write) leaves the rest.
TEST_F(OperatorIT, EveryStatusFieldSurvivesTheApiServerSchema) {
  ASSERT_TRUE(create(trainingJob(ns_, "codec", 2)));
  const std::string now = formatRfc3339(realClock().wallNow());
  TrainingJobStatus status;
  status.phase = "Restarting";
  status.phase_since = now;
  status.observed_generation = 1;
  status.restarts = 3;
  status.attempt = 3;
  status.restarts_count_towards_max = 1;
  status.infrastructure_restarts = 2;
  status.consecutive_failures = 1;
  status.next_attempt_time = now;
  status.started_indexes = "";
  status.active = 0;
  status.ready = 0;
  status.succeeded = 0;
  status.failed = 0;
  status.last_restart_time = now;
  status.last_fault = "hang on rank 1";
  status.last_checkpoint = CheckpointStatus{.step = 1200, .path = "/ckpt/1200", .time = now};
  status.plan.emplace();
  status.plan->version = 4;
  status.plan->mode = c4p::Mode::kEnforce;
  status.plan->max_link_load = "0.750";
  status.plan->reason = "link failed";
  status.plan->time = now;
  status.avoid_nodes = {"node-a"};
  FaultRecord fault;
  fault.time = now;
  fault.fault_class = "commHang";
  fault.attempt = 2;
  fault.pod = "codec-1";
  fault.node = "node-a";
  fault.rank = 1;
  fault.link = "node-a<->node-b";
  fault.summary = "hang on rank 1";
  fault.action = "restart";
  fault.counted = false;
  fault.detection_seconds = 2.5;
  fault.recompute_seconds = 60;
  fault.restart_seconds = 7;
  status.faults = {fault};
  status.goodput.emplace();
  status.goodput->productive_seconds = 3600;
  status.goodput->lost_seconds = 120;
  status.goodput->last_update_time = now;
  ASSERT_TRUE(setCondition(status, conditions::kRestarting, "True", "FaultDiagnosed",
                           "restarting as attempt 3", 1, realClock().wallNow()));

  Json updated = job("codec");
  updated["status"] = trainingJobStatusJson(status);
  auto written = client_->update(resources::trainingJobs(), ns_, updated,
                                 WriteOptions{.subresource = "status", .field_manager = ""});
  ASSERT_TRUE(written) << written.error().toString();
  auto read = parseTrainingJobStatus(job("codec"));
  ASSERT_TRUE(read) << read.error().toString();
  EXPECT_EQ(trainingJobStatusJson(*read), trainingJobStatusJson(status))
      << "nothing pruned or changed by the schema";

  TrainingJobStatus plan_only;
  plan_only.plan = status.plan;
  plan_only.plan->version = 5;
  plan_only.plan->mode = c4p::Mode::kAdvisory;
  ASSERT_TRUE(
      client_->patch(resources::trainingJobs(), ns_, "codec", PatchType::kMerge,
                     Json{{"status", trainingJobStatusJson(plan_only)}},
                     PatchOptions{.subresource = "status", .field_manager = "", .force = false}));
  auto patched = parseTrainingJobStatus(job("codec"));
  ASSERT_TRUE(patched) << patched.error().toString();
  TrainingJobStatus expected = status;
  expected.plan = plan_only.plan;
  EXPECT_EQ(trainingJobStatusJson(*patched), trainingJobStatusJson(expected));
}

}  // namespace
}  // namespace c4::op::it
