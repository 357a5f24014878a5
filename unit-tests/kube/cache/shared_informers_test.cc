// SharedInformers: one informer (one list, one watch) per resource and selectors, however many
// controllers ask; start, sync and stop all of them together.
#include "kube/cache/shared_informers.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "testing/fake_kube_client.h"

namespace c4::kube {
namespace {

Json configMap(const std::string& ns, const std::string& name) {
  return {{"apiVersion", "v1"},
          {"kind", "ConfigMap"},
          {"metadata", {{"name", name}, {"namespace", ns}}}};
}

TEST(SharedInformersTest, SameArgumentsSameInformer) {
  SimulatedClock clock;
  testing::FakeKubeClient api;
  SharedInformers informers(api, clock);
  Informer& pods = informers.informerFor(resources::pods(), "ns", "c4.dev/job-name");
  EXPECT_EQ(&informers.informerFor(resources::pods(), "ns", "c4.dev/job-name"), &pods);
  EXPECT_NE(&informers.informerFor(resources::pods(), "ns"), &pods) << "another label selector";
  EXPECT_NE(&informers.informerFor(resources::pods(), "other", "c4.dev/job-name"), &pods);
  Informer& on_node = informers.informerFor(resources::pods(), "", "", "spec.nodeName=node-1");
  EXPECT_EQ(on_node.fieldSelector(), "spec.nodeName=node-1");
  EXPECT_NE(&informers.informerFor(resources::pods(), "", "", "spec.nodeName=node-2"), &on_node);
  // A cluster-scoped resource has one informer whatever namespace is named.
  Informer& nodes = informers.informerFor(resources::nodes());
  EXPECT_EQ(&informers.informerFor(resources::nodes(), "ns"), &nodes);
  EXPECT_EQ(nodes.ns(), "");
  EXPECT_EQ(informers.size(), 6u);
}

TEST(SharedInformersTest, OneListAndOneWatchServeEveryController) {
  SimulatedClock clock;
  testing::FakeKubeClient api;
  api.put(resources::configMaps(), configMap("ns", "a"));
  api.scriptWatch({{{"type", "ADDED"}, {"object", configMap("ns", "b")}}}, std::nullopt);
  SharedInformers informers(api, clock);
  informers.setRandomSource([] { return 0.0; });
  informers.setWatchTimeoutSeconds(7);
  // Two controllers ask for the same cache and each adds its handler.
  std::atomic<int> first{0};
  std::atomic<int> second{0};
  informers.informerFor(resources::configMaps(), "ns")
      .addHandler([&](InformerEvent, const Json*, const Json&) { ++first; });
  informers.informerFor(resources::configMaps(), "ns")
      .addHandler([&](InformerEvent, const Json*, const Json&) { ++second; });
  EXPECT_EQ(informers.size(), 1u);
  informers.start();
  informers.start();  // idempotent
  ASSERT_TRUE(informers.waitForSync(clock.monoNow() + std::chrono::seconds{10}));
  ASSERT_TRUE(clock.awaitWaiters(1));  // the second watch has no script: backing off
  EXPECT_EQ(first.load(), 2) << "a (listed) and b (watched)";
  EXPECT_EQ(second.load(), 2);
  EXPECT_EQ(api.listOptions().size(), 1u) << "one list for both controllers";
  auto watches = api.watchOptions();
  ASSERT_EQ(watches.size(), 2u) << "one watch, resumed once";
  EXPECT_EQ(watches[0].timeout_seconds, 7);
  EXPECT_EQ(informers.informerFor(resources::configMaps(), "ns").store().size(), 2u);
  informers.stop();
  informers.stop();  // idempotent
  EXPECT_FALSE(informers.waitForSync(clock.monoNow() + std::chrono::seconds{10}))
      << "stopped caches never report synced";
}

TEST(SharedInformersTest, WaitForSyncFailsAtTheDeadlineWhileACacheCannotSync) {
  SimulatedClock clock;
  testing::FakeKubeClient api;
  api.failAlways(Error{ErrorCode::kPermissionDenied, "forbidden"});
  SharedInformers informers(api, clock);
  informers.setRandomSource([] { return 0.0; });
  informers.informerFor(resources::pods(), "ns");
  informers.start();
  std::atomic<int> result{-1};
  std::thread waiter(
      [&] { result = informers.waitForSync(clock.monoNow() + std::chrono::seconds{5}) ? 1 : 0; });
  ASSERT_TRUE(clock.awaitWaiters(2));  // the waiter and the informer's backoff
  clock.advance(std::chrono::seconds{5});
  waiter.join();
  EXPECT_EQ(result.load(), 0);
  // requestStop() ends every informer's wait at once; stop() then joins them.
  informers.requestStop();
  informers.stop();
}

}  // namespace
}  // namespace c4::kube
