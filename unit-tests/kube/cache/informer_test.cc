// Informer state machine (list -> watch -> 410 relist -> error backoff) and the indexed store,
// with the API behind an in-memory KubeClient and time simulated.
#include "kube/cache/informer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "kube/client/curl_kube_client.h"
#include "testing/fake_kube_client.h"
#include "testing/loopback_http_server.h"

namespace c4::kube {
namespace {

Json pod(const std::string& name, const std::string& job, const std::string& rv = "1") {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", name},
            {"namespace", "ns"},
            {"resourceVersion", rv},
            {"labels", {{"c4.dev/job-name", job}}}}}};
}

TEST(StoreTest, IndexesFollowUpdatesAndDeletes) {
  Store store;
  store.addIndex(
      "job", [](const Json& o) { return std::vector<std::string>{labelOf(o, "c4.dev/job-name")}; });
  store.upsert(pod("a", "j1"));
  store.upsert(pod("b", "j1"));
  store.upsert(pod("c", "j2"));
  EXPECT_EQ(store.byIndex("job", "j1").size(), 2u);
  store.upsert(pod("b", "j2"));  // relabelled
  EXPECT_EQ(store.byIndex("job", "j1").size(), 1u);
  EXPECT_EQ(store.byIndex("job", "j2").size(), 2u);
  store.erase("ns/c");
  EXPECT_EQ(store.byIndex("job", "j2").size(), 1u);
  auto removed = store.replace({pod("a", "j1")});
  EXPECT_EQ(removed.size(), 1u);
  EXPECT_EQ(objectName(removed[0]), "b");
  EXPECT_TRUE(store.byIndex("job", "j2").empty());
  EXPECT_EQ(store.size(), 1u);
}

TEST(StoreTest, ReadSeesTheCachedObjectInPlaceAndOnlyWhenItIsThere) {
  Store store;
  store.upsert(pod("a", "j1", "7"));
  std::string seen;
  EXPECT_TRUE(store.read("ns/a", [&](const Json& o) {
    seen =
        labelOf(o, "c4.dev/job-name") + "@" + o["metadata"]["resourceVersion"].get<std::string>();
  }));
  EXPECT_EQ(seen, "j1@7");
  store.upsert(pod("a", "j2", "8"));
  EXPECT_TRUE(store.read("ns/a", [&](const Json& o) { seen = labelOf(o, "c4.dev/job-name"); }));
  EXPECT_EQ(seen, "j2");
  bool called = false;
  EXPECT_FALSE(store.read("ns/b", [&](const Json&) { called = true; }));
  store.erase("ns/a");
  EXPECT_FALSE(store.read("ns/a", [&](const Json&) { called = true; }));
  EXPECT_FALSE(called);
}

TEST(CancelTokenTest, CancelWakesTheRegisteredCallOnlyWhileItIsRegistered) {
  CancelToken token;
  int wakes = 0;
  EXPECT_FALSE(token.cancelled());
  token.setWaker([&] { ++wakes; });
  token.clearWaker();
  token.cancel();
  EXPECT_TRUE(token.cancelled());
  EXPECT_EQ(wakes, 0) << "a cleared waker is never called";
  token.setWaker([&] { ++wakes; });
  token.cancel();
  EXPECT_EQ(wakes, 1);
  token.clearWaker();
}

TEST(InformerTest, ListsWatchesRelistsOnGoneAndResumesFromBookmarks) {
  SimulatedClock clock;
  testing::FakeKubeClient api;
  api.put(resources::pods(), pod("p1", "j"));
  api.scriptWatch({{{"type", "ADDED"}, {"object", pod("p2", "j", "201")}},
                   {{"type", "MODIFIED"}, {"object", pod("p1", "j", "202")}}},
                  Error{ErrorCode::kGone, "too old resource version"});
  api.scriptWatch({{{"type", "BOOKMARK"},
                    {"object", {{"kind", "Pod"}, {"metadata", {{"resourceVersion", "500"}}}}}}},
                  Error{ErrorCode::kUnavailable, "connection reset"});
  Informer informer(api, clock, resources::pods(), "ns");
  informer.setRandomSource([] { return 0.0; });  // backoff waits without jitter
  std::vector<std::string> seen;
  std::mutex seen_mu;
  informer.addHandler([&](InformerEvent e, const Json*, const Json& o) {
    std::lock_guard lock(seen_mu);
    const char* kind = e == InformerEvent::kAdd      ? "add"
                       : e == InformerEvent::kUpdate ? "update"
                                                     : "delete";
    seen.push_back(std::string(kind) + ":" + objectName(o));
  });
  informer.start();
  ASSERT_TRUE(informer.waitForSync(clock.monoNow() + std::chrono::seconds{1}) ||
              informer.hasSynced());
  ASSERT_TRUE(clock.awaitWaiters(1));  // parked in the backoff after the second watch failed
  InformerStats stats = informer.stats();
  EXPECT_EQ(stats.lists, 2u) << "410 forced exactly one relist";
  EXPECT_EQ(stats.gone, 1u);
  EXPECT_EQ(stats.errors, 1u);
  EXPECT_TRUE(informer.store().get("ns/p1"));
  EXPECT_FALSE(informer.store().get("ns/p2")) << "the relist dropped what the API no longer has";
  {
    std::lock_guard lock(seen_mu);
    EXPECT_EQ(seen, (std::vector<std::string>{"add:p1", "add:p2", "update:p1", "update:p1",
                                              "delete:p2"}));
  }
  // After the backoff the watch resumes from the bookmark's resourceVersion, not a relist.
  clock.advance(std::chrono::milliseconds{800});
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds{5};
  while (api.watchResourceVersions().size() < 3 && std::chrono::steady_clock::now() < until) {
    std::this_thread::yield();
  }
  auto rvs = api.watchResourceVersions();
  ASSERT_EQ(rvs.size(), 3u);
  EXPECT_EQ(rvs[2], "500");
  EXPECT_EQ(informer.stats().lists, 2u);
  informer.stop();
}

TEST(InformerTest, ListFailureBacksOffAndRetries) {
  SimulatedClock clock;
  testing::FakeKubeClient api;
  api.failNext(Error{ErrorCode::kUnavailable, "connection refused"});
  Informer informer(api, clock, resources::pods(), "ns");
  informer.setRandomSource([] { return 0.0; });
  informer.start();
  ASSERT_TRUE(clock.awaitWaiters(1));
  EXPECT_FALSE(informer.hasSynced());
  clock.advance(std::chrono::milliseconds{800});
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds{5};
  while (!informer.hasSynced() && std::chrono::steady_clock::now() < until) {
    std::this_thread::yield();
  }
  EXPECT_TRUE(informer.hasSynced());
  informer.stop();
}

// Real-time wait for what the informer thread does next.
bool eventually(const std::function<bool()>& pred) {
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds{5};
  while (std::chrono::steady_clock::now() < until) {
    if (pred()) return true;
    std::this_thread::yield();
  }
  return pred();
}

Json bookmark(const std::string& rv) {
  return {{"type", "BOOKMARK"},
          {"object", {{"kind", "Pod"}, {"metadata", {{"resourceVersion", rv}}}}}};
}

TEST(InformerTest, ListsFromTheWatchCacheAndFromEtcdOnlyAfterGone) {
  SimulatedClock clock;
  testing::FakeKubeClient api;
  api.put(resources::pods(), pod("p1", "j"));
  // Watch 1: a bookmark, then an error that is neither 410 nor the server being away: relist
  // from the watch cache, at least as fresh as the bookmark. Watch 2: 410: relist from etcd.
  api.scriptWatch({bookmark("300")}, Error{ErrorCode::kInternal, "watch: malformed event line"});
  api.scriptWatch({}, Error{ErrorCode::kGone, "too old resource version"});
  Informer informer(api, clock, resources::pods(), "ns");
  informer.setRandomSource([] { return 0.0; });
  informer.start();
  ASSERT_TRUE(clock.awaitWaiters(1));  // backing off after watch 1
  clock.advance(std::chrono::milliseconds{800});
  ASSERT_TRUE(eventually([&] { return api.watchResourceVersions().size() == 2; }));
  // Watch 2 was refused with 410 at once: a backoff before the quorum list (no 410 loop).
  ASSERT_TRUE(clock.awaitWaiters(1));
  EXPECT_EQ(api.listOptions().size(), 2u);
  clock.advance(std::chrono::milliseconds{1600});
  ASSERT_TRUE(eventually([&] { return api.listOptions().size() == 3; }));
  ASSERT_TRUE(clock.awaitWaiters(1));  // watch 3 found no script: backing off
  auto lists = api.listOptions();
  ASSERT_EQ(lists.size(), 3u);
  EXPECT_EQ(lists[0].resource_version, "0") << "the first list is served by the watch cache";
  EXPECT_EQ(lists[0].resource_version_match, "");
  EXPECT_EQ(lists[1].resource_version, "300") << "a relist asks for what was last synced";
  EXPECT_EQ(lists[1].resource_version_match, "NotOlderThan");
  EXPECT_EQ(lists[1].limit, 0) << "unpaginated, so the watch cache can serve it";
  EXPECT_EQ(lists[2].resource_version, "") << "after 410 Gone: a quorum read";
  EXPECT_EQ(lists[2].resource_version_match, "");
  EXPECT_GT(lists[2].limit, 0) << "quorum lists are paginated";
  for (const auto& l : lists) EXPECT_NE(l.cancel, nullptr) << "stop() can cancel every list";
  InformerStats stats = informer.stats();
  EXPECT_EQ(stats.lists, 3u);
  EXPECT_EQ(stats.gone, 1u);
  informer.stop();
}

TEST(InformerTest, AListThatFindsItsResourceVersionGoneListsFromEtcdAtOnce) {
  SimulatedClock clock;
  testing::FakeKubeClient api;
  api.scriptWatch({bookmark("300")}, Error{ErrorCode::kPermissionDenied, "forbidden"});
  Informer informer(api, clock, resources::pods(), "ns");
  informer.setRandomSource([] { return 0.0; });
  informer.start();
  ASSERT_TRUE(clock.awaitWaiters(1));
  // The relist at rv 300 answers "Too large resource version" (the cache is behind): the
  // informer asks etcd straight away, without another backoff.
  api.failNext(Error{ErrorCode::kDeadlineExceeded,
                     "HTTP 504 Timeout: Too large resource version: 300, current: 200"});
  clock.advance(std::chrono::milliseconds{800});
  ASSERT_TRUE(eventually([&] { return api.listOptions().size() == 3; }));
  auto lists = api.listOptions();
  EXPECT_EQ(lists[1].resource_version, "300");
  EXPECT_EQ(lists[2].resource_version, "");
  EXPECT_EQ(informer.stats().lists, 2u);
  informer.stop();
}

TEST(InformerTest, AWatchThatEndsAtOnceWithoutEventsBacksOffExponentiallyWithJitter) {
  SimulatedClock clock;
  testing::FakeKubeClient api;
  for (int i = 0; i < 3; ++i) api.scriptWatch({}, std::nullopt);  // clean, empty, instant ends
  Informer informer(api, clock, resources::pods(), "ns");
  informer.setRandomSource([] { return 0.5; });  // each wait is 1.5x the base
  informer.start();
  auto watches = [&] { return api.watchResourceVersions().size(); };
  for (auto [wait_ms, n] : {std::pair{1200, 1u}, std::pair{2400, 2u}}) {
    ASSERT_TRUE(clock.awaitWaiters(1)) << "backing off, not spinning";
    EXPECT_EQ(watches(), n);
    clock.advance(std::chrono::milliseconds{wait_ms - 1});
    std::this_thread::sleep_for(std::chrono::milliseconds{20});
    EXPECT_EQ(watches(), n) << "still waiting " << wait_ms << " ms";
    clock.advance(std::chrono::milliseconds{1});
    ASSERT_TRUE(eventually([&] { return watches() == n + 1; }));
  }
  ASSERT_TRUE(clock.awaitWaiters(1));  // the third ended at once too
  EXPECT_EQ(informer.stats().short_watches, 3u);
  EXPECT_EQ(informer.stats().lists, 3u) << "a short watch is an error: relist after the backoff";
  informer.stop();
}

TEST(InformerTest, NormalWatchEndsResumeAtOnce) {
  SimulatedClock clock;
  testing::FakeKubeClient api;
  // Ends after a bookmark, then after an empty watch that lasted its full second: both normal.
  api.scriptWatch({bookmark("300")}, std::nullopt);
  api.scriptWatch({}, std::nullopt);
  std::atomic<int> watch_calls{0};
  api.setWatchHook([&] {
    if (++watch_calls == 2) clock.advance(std::chrono::seconds{1});
  });
  Informer informer(api, clock, resources::pods(), "ns");
  informer.setRandomSource([] { return 0.0; });
  informer.start();
  // The third watch has no script and fails: only then does the informer wait on the clock.
  ASSERT_TRUE(clock.awaitWaiters(1));
  auto rvs = api.watchResourceVersions();
  ASSERT_EQ(rvs.size(), 3u);
  EXPECT_EQ(rvs[1], "300");
  EXPECT_EQ(rvs[2], "300");
  EXPECT_EQ(informer.stats().short_watches, 0u);
  EXPECT_EQ(informer.stats().lists, 1u);
  informer.stop();
}

TEST(InformerTest, CachedObjectsCarryNoManagedFields) {
  SimulatedClock clock;
  testing::FakeKubeClient api;
  Json listed = pod("p1", "j");
  listed["metadata"]["managedFields"] = Json::array({{{"manager", "kubectl"}}});
  api.put(resources::pods(), listed);
  Json watched = pod("p2", "j", "201");
  watched["metadata"]["managedFields"] = Json::array({{{"manager", "kubelet"}}});
  api.scriptWatch({{{"type", "ADDED"}, {"object", watched}}}, std::nullopt);
  Informer informer(api, clock, resources::pods(), "ns");
  std::atomic<int> with_managed_fields{0};
  informer.addHandler([&](InformerEvent, const Json*, const Json& o) {
    if (o["metadata"].contains("managedFields")) ++with_managed_fields;
  });
  informer.setRandomSource([] { return 0.0; });
  informer.start();
  ASSERT_TRUE(eventually([&] { return informer.store().size() == 2; }));
  for (const auto& o : informer.store().list()) {
    EXPECT_FALSE(o["metadata"].contains("managedFields")) << o.dump();
    EXPECT_EQ(o["metadata"]["labels"]["c4.dev/job-name"], "j") << "the rest is kept";
  }
  EXPECT_EQ(with_managed_fields.load(), 0);
  informer.stop();
}

TEST(InformerTest, FieldAndLabelSelectorsNarrowTheListAndTheWatch) {
  SimulatedClock clock;
  testing::FakeKubeClient api;
  Informer informer(api, clock, resources::pods(), "", "app=trainer", "spec.nodeName=node-1");
  informer.setRandomSource([] { return 0.0; });
  EXPECT_EQ(informer.fieldSelector(), "spec.nodeName=node-1");
  informer.start();
  ASSERT_TRUE(clock.awaitWaiters(1));  // listed, watched (unscripted: failed), backing off
  auto lists = api.listOptions();
  auto watches = api.watchOptions();
  ASSERT_EQ(lists.size(), 1u);
  ASSERT_EQ(watches.size(), 1u);
  EXPECT_EQ(lists[0].field_selector, "spec.nodeName=node-1");
  EXPECT_EQ(lists[0].label_selector, "app=trainer");
  EXPECT_EQ(watches[0].field_selector, "spec.nodeName=node-1");
  EXPECT_EQ(watches[0].label_selector, "app=trainer");
  informer.stop();
}

TEST(InformerTest, StopInterruptsAListTheServerNeverAnswers) {
  // The API server accepts connections and never answers (a wedged server or a black-holed
  // network): the informer's list blocks in the client until stop() cancels it.
  testing::LoopbackHttpServer blackhole(testing::LoopbackHttpServer::Mode::kBlackhole);
  KubeConfig config;
  config.server = blackhole.url();
  SimulatedClock clock;
  auto client = createCurlKubeClient(config, clock, nullptr);
  ASSERT_TRUE(client) << client.error().toString();
  Informer informer(**client, clock, resources::pods(), "ns");
  informer.start();
  std::this_thread::sleep_for(std::chrono::milliseconds{300});  // the list is in flight
  EXPECT_FALSE(informer.hasSynced());
  EXPECT_EQ(clock.waiters(), 0) << "blocked in the list, not in a backoff";
  auto stopping = std::chrono::steady_clock::now();
  informer.stop();
  auto took = std::chrono::steady_clock::now() - stopping;
  EXPECT_LT(took, std::chrono::seconds{1})
      << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms";
}

// No exception leaves the informer's thread: a handler that throws on one object (a field of
// another type read with nlohmann's throwing accessors) is logged and counted, and the other
// handlers and objects go on; objects with wrong-typed metadata are cached and delivered.
TEST(InformerTest, AHandlerThatThrowsSkipsTheObjectAndTheInformerGoesOn) {
  SimulatedClock clock;
  testing::FakeKubeClient api;
  Json bad = pod("bad", "j");
  bad["metadata"]["resourceVersion"] = 5;  // another type
  bad["spec"] = {{"nodeName", 7}};
  api.put(resources::pods(), bad);
  api.put(resources::pods(), pod("good", "j"));
  Json watched_bad = pod("bad2", "j", "201");
  watched_bad["spec"] = {{"nodeName", 8}};
  api.scriptWatch({{{"type", "ADDED"}, {"object", watched_bad}},
                   {{"type", "ADDED"}, {"object", pod("good2", "j", "202")}}},
                  std::nullopt);
  Informer informer(api, clock, resources::pods(), "ns");
  informer.setRandomSource([] { return 0.0; });
  std::mutex mu;
  std::vector<std::string> seen;
  informer.addHandler([](InformerEvent, const Json*, const Json& o) {
    // What the controllers did before checked access: throws type_error.302 on the bad pods.
    (void)o.value("spec", Json::object()).value("nodeName", std::string{});
  });
  informer.addHandler([&](InformerEvent, const Json*, const Json& o) {
    std::lock_guard lock(mu);
    seen.push_back(objectName(o));
  });
  informer.start();
  ASSERT_TRUE(eventually([&] { return informer.store().size() == 4; }));
  ASSERT_TRUE(eventually([&] {
    std::lock_guard lock(mu);
    return seen.size() == 4;
  }));
  {
    std::lock_guard lock(mu);
    EXPECT_EQ(seen, (std::vector<std::string>{"bad", "good", "bad2", "good2"}))
        << "the second handler saw every object, the bad ones included";
  }
  EXPECT_EQ(informer.stats().handler_errors, 2u);
  EXPECT_TRUE(informer.store().get("ns/bad"));
  informer.stop();
}

}  // namespace
}  // namespace c4::kube
