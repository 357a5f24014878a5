// The TrainingJob controller against the real kube-apiserver of the test cluster: children,
// restarts, budget, watch expiry (410), invalid objects, node actions. The crash of the real
// binary mid-restart is in process_test.cc.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <set>

#include "harness.h"
#include "operator/cache/informer.h"
#include "operator/remediation/node_actions.h"

namespace c4::op::it {
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
    EXPECT_EQ(pod["spec"]["subdomain"], "llm");
  }
  EXPECT_EQ(names, (std::set<std::string>{"llm-0", "llm-1", "llm-2"}));
  auto svc = client_->get(resources::services(), ns_, "llm");
  ASSERT_TRUE(svc) << svc.error().toString();
  EXPECT_EQ((*svc)["spec"]["clusterIP"], "None");
  EXPECT_EQ((*svc)["metadata"]["ownerReferences"][0]["uid"], uid);
  auto cm = client_->get(resources::configMaps(), ns_, "llm-c4-plan");
  ASSERT_TRUE(cm) << cm.error().toString();
  EXPECT_TRUE((*cm)["data"].contains("plan.json"));

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
    EXPECT_EQ(counting.statusWrites("eager"), 2);
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
  auto reasons = eventReasons(*client_, ns_, "batched");
  EXPECT_EQ(std::count(reasons.begin(), reasons.end(), "Running"), 1);

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

  bad = trainingJob(ns_, "bad", 1);
  bad["spec"]["trafficPlanning"] = {{"mode", "Sometimes"}};
  created = client_->create(resources::trainingJobs(), ns_, bad);
  ASSERT_FALSE(created);
  EXPECT_NE(created.error().message.find("Enforce"), std::string::npos);

  bad = trainingJob(ns_, "bad", 1);
  bad["spec"]["template"]["spec"]["containers"] = Json::array();
  EXPECT_FALSE(client_->create(resources::trainingJobs(), ns_, bad));

  ASSERT_TRUE(create(trainingJob(ns_, "fixed", 2)));
  auto patched = client_->patch(resources::trainingJobs(), ns_, "fixed", PatchType::kMerge,
                                {{"spec", {{"replicas", 3}}}});
  ASSERT_FALSE(patched);
  EXPECT_NE(patched.error().message.find("immutable"), std::string::npos);

  // Defaults are applied by the API server.
  Json fixed = job("fixed");
  EXPECT_EQ(fixed["spec"]["faultTolerance"]["maxRestarts"], 3);
  EXPECT_EQ(fixed["spec"]["trafficPlanning"]["mode"], "Advisory");
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
  ASSERT_TRUE(waitFor([&] { return podsAtAttempt("sus", 2, 0, "Running"); }));
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
  NodeRemediator remediator(*client_, realClock(), events, config, nullptr);
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

}  // namespace
}  // namespace c4::op::it
