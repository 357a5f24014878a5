// Event correlation (client-go's EventCorrelator rules) on simulated time, against the in-memory
// API: counting identical Events, combining similar ones, the spam filter, the LRU bound.
#include "kube/controller/events.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "kube/controller/lru_cache.h"
#include "testing/fake_kube_client.h"

namespace c4::kube {
namespace {

using std::chrono::minutes;
using std::chrono::seconds;

Json job(const std::string& name) {
  return {{"apiVersion", "c4.dev/v1alpha1"},
          {"kind", "TrainingJob"},
          {"metadata", {{"name", name}, {"namespace", "ml"}, {"uid", "uid-" + name}}}};
}

// prefix + i (appended: g++ 12's -Wrestrict misfires on `"literal" + std::to_string(i)`).
std::string numbered(std::string prefix, int i) {
  prefix += std::to_string(i);
  return prefix;
}

struct Fixture {
  SimulatedClock clock;
  testing::FakeKubeClient api;
  metrics::Registry registry;
  EventRecorder events;

  explicit Fixture(EventCorrelatorOptions options = {})
      : events(api, clock, "c4-operator", "op-0", &registry, options) {}

  std::vector<Json> stored() { return api.stored(resources::events()); }
  std::string now() { return formatRfc3339(clock.wallNow()); }
  double counted(const std::string& reason, const std::string& result,
                 const std::string& type = "Normal") {
    return registry.counter("c4_operator_events_total", "", {"type", "reason", "result"})
        .labels({type, reason, result})
        .value();
  }
};

TEST(EventRecorderTest, BuildEventIsOneOccurrence) {
  Fixture f;
  Json e = f.events.buildEvent(job("a"), "Warning", "PodFailed", "rank 3 exited 137");
  EXPECT_EQ(e["kind"], "Event");
  EXPECT_EQ(e["metadata"]["namespace"], "ml");
  EXPECT_EQ(e["metadata"]["name"].get<std::string>().rfind("a.", 0), 0u);
  EXPECT_EQ(e["involvedObject"]["kind"], "TrainingJob");
  EXPECT_EQ(e["involvedObject"]["uid"], "uid-a");
  EXPECT_EQ(e["source"]["component"], "c4-operator");
  EXPECT_EQ(e["reportingInstance"], "op-0");
  EXPECT_EQ(e["count"], 1);
  EXPECT_EQ(e["firstTimestamp"], f.now());
  EXPECT_EQ(e["lastTimestamp"], f.now());
  EXPECT_NE(f.events.buildEvent(job("a"), "Warning", "PodFailed", "x")["metadata"]["name"],
            e["metadata"]["name"])
      << "unique names even at the same instant";

  Json node = {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", "n1"}}}};
  Json ne = f.events.buildEvent(node, "Normal", "NodeCordoned", "x");
  EXPECT_EQ(ne["metadata"]["namespace"], "default");
  EXPECT_FALSE(ne["involvedObject"].contains("namespace"));

  // Messages are cut at 1024 bytes, never inside a UTF-8 character.
  std::string long_message(1023, 'a');
  long_message += "\xc3\xa9";  // é straddles the limit
  EXPECT_EQ(f.events.buildEvent(job("a"), "Normal", "R", long_message)["message"],
            std::string(1023, 'a'));
}

TEST(EventRecorderTest, SecondIdenticalEventPatchesTheCount) {
  Fixture f;
  const std::string first = f.now();
  f.events.record(job("a"), "Warning", "PodFailed", "rank 3 exited 137");
  ASSERT_EQ(f.stored().size(), 1u);
  const std::string name = f.stored()[0]["metadata"]["name"];
  f.clock.advance(seconds{30});
  f.events.record(job("a"), "Warning", "PodFailed", "rank 3 exited 137");

  EXPECT_EQ(f.api.createdOfKind("Event").size(), 1u) << "no second Event object";
  auto patches = f.api.patches();
  ASSERT_EQ(patches.size(), 1u);
  EXPECT_EQ(patches[0].resource, "events");
  EXPECT_EQ(patches[0].ns, "ml");
  EXPECT_EQ(patches[0].name, name);
  EXPECT_EQ(patches[0].type, PatchType::kStrategicMerge);
  EXPECT_EQ(patches[0].body,
            (Json{{"count", 2}, {"lastTimestamp", f.now()}, {"message", "rank 3 exited 137"}}));
  Json stored = f.stored()[0];
  EXPECT_EQ(stored["count"], 2);
  EXPECT_EQ(stored["firstTimestamp"], first);
  EXPECT_EQ(stored["lastTimestamp"], f.now());

  f.clock.advance(seconds{30});
  f.events.record(job("a"), "Warning", "PodFailed", "rank 3 exited 137");
  ASSERT_EQ(f.stored().size(), 1u);
  EXPECT_EQ(f.stored()[0]["count"], 3);
  EXPECT_EQ(f.counted("PodFailed", "ok", "Warning"), 3.0);
}

TEST(EventRecorderTest, EventsDifferingInObjectTypeReasonOrSourceAreNotCounted) {
  Fixture f;
  f.events.record(job("a"), "Normal", "Started", "m");
  f.events.record(job("b"), "Normal", "Started", "m");
  f.events.record(job("a"), "Warning", "Started", "m");
  f.events.record(job("a"), "Normal", "Restarted", "m");
  EventRecorder other(f.api, f.clock, "c4-node-agent", "op-0", nullptr);
  other.record(job("a"), "Normal", "Started", "m");
  EXPECT_EQ(f.stored().size(), 5u);
  EXPECT_TRUE(f.api.patches().empty());
}

TEST(EventRecorderTest, IdenticalEventTenMinutesAfterTheLastIsANewEvent) {
  Fixture f;
  f.events.record(job("a"), "Normal", "Started", "m");
  f.clock.advance(minutes{9});
  f.events.record(job("a"), "Normal", "Started", "m");  // counted
  f.clock.advance(minutes{10});
  f.events.record(job("a"), "Normal", "Started", "m");  // 10 min after the last: still counted
  ASSERT_EQ(f.stored().size(), 1u);
  EXPECT_EQ(f.stored()[0]["count"], 3);

  f.clock.advance(minutes{10} + seconds{1});
  const std::string now = f.now();
  f.events.record(job("a"), "Normal", "Started", "m");
  auto created = f.api.createdOfKind("Event");
  ASSERT_EQ(created.size(), 2u);
  EXPECT_EQ(created[1]["count"], 1);
  EXPECT_EQ(created[1]["firstTimestamp"], now);
  EXPECT_NE(created[1]["metadata"]["name"], created[0]["metadata"]["name"]);
  EXPECT_EQ(f.api.patches().size(), 2u);
}

TEST(EventRecorderTest, ClientGoDedupWithoutWindow) {
  EventCorrelatorOptions options;
  options.dedup_window = Duration::max();
  Fixture f(options);
  f.events.record(job("a"), "Normal", "Started", "m");
  f.clock.advance(std::chrono::hours{5});
  f.events.record(job("a"), "Normal", "Started", "m");
  ASSERT_EQ(f.stored().size(), 1u);
  EXPECT_EQ(f.stored()[0]["count"], 2);
}

TEST(EventRecorderTest, ElevenSimilarEventsAreCombined) {
  Fixture f;
  for (int i = 0; i < 11; ++i) {
    f.events.record(job("a"), "Warning", "BackOff", numbered("rank ", i) + " failed");
    f.clock.advance(seconds{10});
  }
  // client-go: the first 9 different messages are Events of their own; the 10th within the
  // interval starts the combined Event, which the 11th counts (count 2, its message).
  auto created = f.api.createdOfKind("Event");
  ASSERT_EQ(created.size(), 10u);
  for (int i = 0; i < 9; ++i) {
    EXPECT_EQ(created[static_cast<std::size_t>(i)]["message"], numbered("rank ", i) + " failed");
  }
  EXPECT_EQ(created[9]["message"], "(combined from similar events): rank 9 failed");
  auto patches = f.api.patches();
  ASSERT_EQ(patches.size(), 1u);
  EXPECT_EQ(patches[0].name, created[9]["metadata"]["name"]);
  auto combined = f.api.peek(resources::events(), "ml", patches[0].name);
  ASSERT_TRUE(combined);
  EXPECT_EQ((*combined)["count"], 2);
  EXPECT_EQ((*combined)["message"], "(combined from similar events): rank 10 failed");

  // Other reasons are not combined with these.
  f.events.record(job("a"), "Warning", "Unhealthy", "rank 11 failed");
  EXPECT_EQ(f.api.createdOfKind("Event").back()["message"], "rank 11 failed");

  // After 10 quiet minutes the similar set starts over.
  f.clock.advance(minutes{10} + seconds{1});
  f.events.record(job("a"), "Warning", "BackOff", "rank 12 failed");
  EXPECT_EQ(f.api.createdOfKind("Event").back()["message"], "rank 12 failed");
}

TEST(EventRecorderTest, SpamFilterAllowsBurstOf25ThenOneEveryFiveMinutes) {
  Fixture f;
  // Different reasons: neither counted nor combined, so only the spam filter limits them.
  for (int i = 0; i < 30; ++i) f.events.record(job("a"), "Normal", numbered("R", i), "m");
  EXPECT_EQ(f.stored().size(), 25u);
  EXPECT_EQ(f.counted("R24", "ok"), 1.0);
  EXPECT_EQ(f.counted("R25", "dropped"), 1.0) << "dropped and counted by reason";
  EXPECT_EQ(f.counted("R29", "dropped"), 1.0);
  EXPECT_EQ(f.counted("R25", "ok"), 0.0);

  f.events.record(job("b"), "Normal", "R0", "m");  // another object has its own bucket
  EXPECT_EQ(f.stored().size(), 26u);

  f.clock.advance(minutes{4});
  f.events.record(job("a"), "Normal", "Late", "m");
  EXPECT_EQ(f.counted("Late", "dropped"), 1.0);
  f.clock.advance(minutes{1});  // 5 min: one token
  f.events.record(job("a"), "Normal", "Later", "m");
  EXPECT_EQ(f.counted("Later", "ok"), 1.0);
  f.events.record(job("a"), "Normal", "Latest", "m");
  EXPECT_EQ(f.counted("Latest", "dropped"), 1.0);
  EXPECT_EQ(f.stored().size(), 27u);
}

TEST(EventRecorderTest, DroppedOccurrencesStillCount) {
  EventCorrelatorOptions options;
  options.spam_burst = 2;
  Fixture f(options);
  f.events.record(job("a"), "Normal", "Started", "m");  // token 1: created
  f.events.record(job("a"), "Normal", "Started", "m");  // token 2: count 2
  f.events.record(job("a"), "Normal", "Started", "m");  // dropped
  EXPECT_EQ(f.counted("Started", "dropped"), 1.0);
  EXPECT_EQ(f.stored()[0]["count"], 2);
  f.clock.advance(minutes{5});
  f.events.record(job("a"), "Normal", "Started", "m");
  EXPECT_EQ(f.stored()[0]["count"], 4) << "the dropped occurrence is in the count";
}

TEST(EventRecorderTest, ExpiredEventIsCreatedAgainWhenThePatchAnswersNotFound) {
  Fixture f;
  f.events.record(job("a"), "Normal", "Started", "m");
  const Json original = f.stored()[0];
  const std::string name = original["metadata"]["name"];
  ASSERT_TRUE(f.api.remove(resources::events(), "ml", name, {}));  // the API server's TTL
  f.clock.advance(minutes{1});
  f.events.record(job("a"), "Normal", "Started", "m");
  ASSERT_EQ(f.api.patches().size(), 1u);
  auto created = f.api.createdOfKind("Event");
  ASSERT_EQ(created.size(), 2u);
  EXPECT_EQ(created[1]["metadata"]["name"], name);
  EXPECT_EQ(created[1]["count"], 2);
  EXPECT_EQ(created[1]["firstTimestamp"], original["firstTimestamp"]);
  EXPECT_EQ(created[1]["lastTimestamp"], f.now());
  EXPECT_EQ(f.counted("Started", "ok"), 2.0);
  f.events.record(job("a"), "Normal", "Started", "m");
  EXPECT_EQ(f.stored()[0]["count"], 3) << "and counted by patches again";
}

TEST(EventRecorderTest, FailedWriteIsCountedAndHealsOnTheNextOccurrence) {
  Fixture f;
  f.api.failNext(Error{ErrorCode::kUnavailable, "connection refused"});
  f.events.record(job("a"), "Normal", "Started", "m");  // never throws
  EXPECT_EQ(f.counted("Started", "error"), 1.0);
  EXPECT_TRUE(f.stored().empty());
  f.events.record(job("a"), "Normal", "Started", "m");  // patch: NotFound, then create
  ASSERT_EQ(f.stored().size(), 1u);
  EXPECT_EQ(f.stored()[0]["count"], 2);
  EXPECT_EQ(f.counted("Started", "ok"), 1.0);
}

TEST(EventRecorderTest, CachesAreBoundedLruOf4096) {
  Fixture f;
  for (int i = 0; i <= 4096; ++i) f.events.record(job(numbered("j", i)), "Normal", "S", "m");
  EXPECT_EQ(f.stored().size(), 4097u);
  f.events.record(job("j4096"), "Normal", "S", "m");  // still cached: counted
  EXPECT_EQ(f.api.patches().size(), 1u);
  f.events.record(job("j0"), "Normal", "S", "m");  // evicted: a new Event
  EXPECT_EQ(f.api.patches().size(), 1u);
  EXPECT_EQ(f.stored().size(), 4098u);
}

TEST(EventRecorderTest, ConcurrentIdenticalEventsCountInOrder) {
  EventCorrelatorOptions options;
  options.spam_burst = 1000;
  Fixture f(options);
  std::vector<std::thread> workers;
  for (int w = 0; w < 4; ++w) {
    workers.emplace_back([&, w] {
      for (int i = 0; i < 50; ++i) {
        f.events.record(job("a"), "Normal", "Started", "m");
        f.events.record(job(numbered("w", w)), "Normal", "Started", "m");
      }
    });
  }
  for (auto& t : workers) t.join();
  int creates_of_a = 0;
  for (const auto& e : f.api.createdOfKind("Event")) {
    creates_of_a += e["involvedObject"]["name"] == "a" ? 1 : 0;
  }
  EXPECT_EQ(creates_of_a, 1) << "no patch overtook the create";
  EXPECT_EQ(f.stored().size(), 5u);
  for (const auto& e : f.stored()) {
    EXPECT_EQ(e["count"], e["involvedObject"]["name"] == "a" ? 200 : 50);
  }
  EXPECT_EQ(f.counted("Started", "ok"), 400.0);
}

TEST(LruCacheTest, EvictsTheLeastRecentlyUsed) {
  LruCache<int> cache(2);
  cache.put("a", 1);
  cache.put("b", 2);
  ASSERT_NE(cache.get("a"), nullptr);  // a is now the most recent
  cache.put("c", 3);
  EXPECT_EQ(cache.get("b"), nullptr);
  EXPECT_EQ(*cache.get("a"), 1);
  EXPECT_EQ(*cache.get("c"), 3);
  EXPECT_EQ(cache.put("a", 10), 10);  // replaces, no eviction
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(*cache.get("c"), 3);
}

// An Event about an object whose metadata has fields of another type is still built (the
// recorder reports bad objects): the unreadable fields are left empty.
TEST(EventRecorderTest, AnObjectWithWrongTypedMetadataStillGetsAnEvent) {
  Fixture f;
  Json bad = {{"apiVersion", 1},
              {"kind", "Node"},
              {"metadata", {{"name", "n1"}, {"uid", 5}, {"namespace", Json::array()}}}};
  Json e;
  ASSERT_NO_THROW(e = f.events.buildEvent(bad, "Warning", "InvalidObject", "x"));
  EXPECT_EQ(e["involvedObject"]["name"], "n1");
  EXPECT_EQ(e["involvedObject"]["uid"], "");
  EXPECT_EQ(e["involvedObject"]["apiVersion"], "");
  EXPECT_EQ(e["metadata"]["namespace"], "default");
  Json nameless = {{"kind", "Node"}, {"metadata", {{"name", 5}}}};
  ASSERT_NO_THROW(e = f.events.buildEvent(nameless, "Warning", "InvalidObject", "x"));
  EXPECT_EQ(e["metadata"]["name"].get<std::string>().rfind("object.", 0), 0u);
  ASSERT_NO_THROW(f.events.record(Json{{"metadata", "x"}}, "Warning", "InvalidObject", "x"));
}

}  // namespace
}  // namespace c4::kube
