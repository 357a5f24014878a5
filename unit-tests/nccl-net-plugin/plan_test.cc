// Traffic plan in the plugin (the schema parser is tested in unit-tests/common): subflows bound to
// planned source ports, and a weight change that moves bytes between subflows of a live connection.
#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "c4/common/log.h"
#include "test_util.h"

namespace c4::plugin {
namespace {

using namespace c4::plugin::testing;
namespace fs = std::filesystem;

struct PlanFileTest : ::testing::Test {
  void SetUp() override {
    dir = fs::temp_directory_path() /
          ("c4-plan-test-" + std::to_string(::getpid()) + "-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir);
    file = (dir / "plan.json").string();
  }
  void TearDown() override { fs::remove_all(dir); }
  // node-a reading the plan file, polled only when a test ticks it.
  std::unique_ptr<Context> plannedContext() {
    auto cfg = baseConfig("node-a", 0);
    cfg.plan_file = file;
    cfg.plan_poll_ms = 3600 * 1000;
    return makeContext(cfg);
  }
  // Atomic replace, as a ConfigMap update does (new inode).
  void write(const std::string& text) {
    std::string tmp = file + ".tmp";
    std::ofstream(tmp) << text;
    fs::rename(tmp, file);
  }
  fs::path dir;
  std::string file;
};

TEST_F(PlanFileTest, MissingOrInvalidPlanWarnsOnceAndFallsBack) {
  auto sink = std::make_shared<CaptureLogSink>();
  setLogSink(sink);
  PlanWatcher w(file);
  EXPECT_FALSE(w.poll());
  EXPECT_FALSE(w.poll());
  EXPECT_EQ(w.unusable(), "") << "a missing file is a plan still to come";
  write("{broken");
  EXPECT_FALSE(w.poll());
  EXPECT_EQ(w.current(), nullptr);
  EXPECT_NE(w.unusable(), "") << "garbage is not a plan still to come";
  int warnings = 0;
  for (const auto& r : sink->records()) warnings += r.level == LogLevel::kWarn ? 1 : 0;
  EXPECT_EQ(warnings, 2);  // one for "missing", one for "invalid": not one per poll
  write(R"({"version": 9})");
  EXPECT_TRUE(w.poll());
  ASSERT_NE(w.current(), nullptr);
  EXPECT_EQ(w.current()->version, 9);
  EXPECT_EQ(w.unusable(), "");
  write("{broken again");
  EXPECT_FALSE(w.poll());
  EXPECT_EQ(w.current()->version, 9);  // the last valid plan stays
  EXPECT_EQ(w.unusable(), "") << "a plan is held";
  setLogSink(std::make_shared<StderrLogSink>());
}

// Whether a record's message contains `text`.
bool logged(const CaptureLogSink& sink, std::string_view text) {
  for (const auto& r : sink.records()) {
    if (r.message.find(text) != std::string::npos) return true;
  }
  return false;
}

std::uint16_t freePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// A plan with one pair node-a -> node-b of two subflows: ports p0 and p1, paths 10 and 11.
std::string twoSubflowPlan(int version, std::uint16_t p0, std::uint16_t p1, double w0, double w1) {
  return "{\"version\": " + std::to_string(version) +
         ", \"pairs\": [{\"localNode\": \"node-a\", \"peerNode\": \"node-b\", \"subflows\": ["
         "{\"localPort\": " +
         std::to_string(p0) + ", \"pathId\": 10, \"weight\": " + std::to_string(w0) +
         "}, {\"localPort\": " + std::to_string(p1) +
         ", \"pathId\": 11, \"weight\": " + std::to_string(w1) + "}]}]}";
}

// One message of n bytes over the pair, both ends waited for.
void transfer(const Pair& p, std::size_t n) {
  std::vector<char> src(n), dst(n);
  void* d[1] = {dst.data()};
  std::size_t s[1] = {n};
  int t[1] = {0};
  auto r = irecv(p.recv, 1, d, s, t);
  auto w = isend(p.send, src.data(), n, 0);
  ASSERT_TRUE(r && *r && w && *w);
  ASSERT_EQ(waitAll({{*w, nullptr}, {*r, nullptr}}), "");
}

TEST_F(PlanFileTest, SubflowsBindPlannedPortsAndFollowWeightChanges) {
  const std::uint16_t p0 = freePort(), p1 = freePort();
  write(twoSubflowPlan(1, p0, p1, 1, 0));
  auto a = plannedContext();
  auto b = makeContext(baseConfig("node-b", 1));
  EXPECT_EQ(a->planVersion(), 1);
  Pair p = connectPair(*a, *b);
  ASSERT_NE(p.send, nullptr);
  // Two planned subflows (not C4_SUBFLOWS=4), bound to the planned ports.
  EXPECT_EQ(subflowLocalPorts(p.send), (std::vector<std::uint16_t>{p0, p1}));
  auto tel = telemetryOf(p.send);
  EXPECT_EQ(tel->subflows[0].path_id, 10);
  EXPECT_EQ(tel->subflows[1].path_id, 11);
  transfer(p, 4 << 20);
  EXPECT_EQ(tel->subflows[0].bytes.load(), 4u << 20);
  EXPECT_EQ(tel->subflows[1].bytes.load(), 0u);
  // Path 10 fails: the operator moves all weight to subflow 1. No reconnect.
  write(twoSubflowPlan(2, p0, p1, 0, 1));
  a->tickNow(false);
  EXPECT_EQ(a->planVersion(), 2);
  transfer(p, 4 << 20);
  EXPECT_EQ(tel->subflows[0].bytes.load(), 4u << 20);
  EXPECT_EQ(tel->subflows[1].bytes.load(), 4u << 20);
  // Even split.
  write(twoSubflowPlan(3, p0, p1, 1, 1));
  a->tickNow(false);
  transfer(p, 8 << 20);
  EXPECT_EQ(tel->subflows[0].bytes.load(), 8u << 20);
  EXPECT_EQ(tel->subflows[1].bytes.load(), 8u << 20);
}

// A planned port that is taken (another socket listens on it) cannot be bound: the subflow
// connects from an ephemeral port, whose path the ECMP hash picks, not the plan. It is reported
// without a path (pathId -1), so the link monitor does not judge the planned path by its bytes.
TEST_F(PlanFileTest, ASubflowThatCannotBindItsPlannedPortIsReportedWithoutAPath) {
  const std::uint16_t p0 = freePort(), p1 = freePort();
  const int taken = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(taken, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(p0);
  ASSERT_EQ(::bind(taken, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(taken, 1), 0);
  auto sink = std::make_shared<CaptureLogSink>();
  setLogSink(sink);
  write(twoSubflowPlan(1, p0, p1, 1, 1));
  auto ctx = plannedContext();
  auto b = makeContext(baseConfig("node-b", 1));
  Pair p = connectPair(*ctx, *b);
  ASSERT_NE(p.send, nullptr);
  const auto ports = subflowLocalPorts(p.send);
  ASSERT_EQ(ports.size(), 2u);
  EXPECT_NE(ports[0], p0);
  EXPECT_EQ(ports[1], p1);
  auto tel = telemetryOf(p.send);
  EXPECT_EQ(tel->subflows[0].path_id, -1) << "not on its planned path 10";
  EXPECT_EQ(tel->subflows[1].path_id, 11);
  EXPECT_TRUE(logged(*sink, "cannot bind the planned source port"));
  transfer(p, 4 << 20);  // both subflows carry data all the same
  EXPECT_GT(tel->subflows[0].bytes.load(), 0u);
  setLogSink(std::make_shared<StderrLogSink>());
  ::close(taken);
}

// C4_PLAN_WAIT_MS: a connection to another node waits for a plan that includes its node (an
// Enforce job's pod can start before its placement is planned), then binds the planned ports.
TEST_F(PlanFileTest, AConnectionWaitsForItsPlanThenBindsThePlannedPorts) {
  std::uint16_t p0 = freePort(), p1 = freePort();
  auto cfgA = baseConfig("node-a", 0);
  cfgA.plan_file = file;  // not there yet
  cfgA.plan_poll_ms = 20;
  cfgA.plan_wait_ms = 10000;
  auto a = makeContext(cfgA);
  auto b = makeContext(baseConfig("node-b", 1));
  auto start = std::chrono::steady_clock::now();
  std::thread planner([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    write(R"({"version": 1, "pairs": [{"localNode": "node-a", "peerNode": "node-b", "subflows": [)"
          R"({"localPort": )" +
          std::to_string(p0) + R"(, "pathId": 0, "weight": 1}, {"localPort": )" +
          std::to_string(p1) + R"(, "pathId": 1, "weight": 1}]}]})");
  });
  Pair p = connectPair(*a, *b);
  planner.join();
  ASSERT_NE(p.send, nullptr);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(300));
  EXPECT_EQ(subflowLocalPorts(p.send), (std::vector<std::uint16_t>{p0, p1}));
  // The plan includes node-a now: a pair it leaves out (node-a -> node-c) connects at once,
  // unplanned.
  auto c = makeContext(baseConfig("node-c", 2));
  start = std::chrono::steady_clock::now();
  Pair other = connectPair(*a, *c);
  ASSERT_NE(other.send, nullptr);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(subflowLocalPorts(other.send).size(), static_cast<std::size_t>(cfgA.subflows));
}

// ... and connects unplanned (default spread) once the wait is over; a pair on one node never
// waits.
TEST_F(PlanFileTest, WithoutItsPlanAConnectionGoesUnplannedAfterThePlanWait) {
  auto sink = std::make_shared<CaptureLogSink>();
  setLogSink(sink);
  auto cfgA = baseConfig("node-a", 0);
  cfgA.plan_file = file;  // never written
  cfgA.plan_wait_ms = 200;
  auto a = makeContext(cfgA);
  auto b = makeContext(baseConfig("node-b", 1));
  auto start = std::chrono::steady_clock::now();
  Pair p = connectPair(*a, *b);
  ASSERT_NE(p.send, nullptr);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(200));
  EXPECT_EQ(subflowLocalPorts(p.send).size(), static_cast<std::size_t>(cfgA.subflows));
  EXPECT_TRUE(logged(*sink, "C4_PLAN_WAIT_MS"));
  setLogSink(std::make_shared<StderrLogSink>());

  auto local = makeContext(baseConfig("node-a", 2));
  start = std::chrono::steady_clock::now();
  Pair same = connectPair(*a, *local);
  ASSERT_NE(same.send, nullptr);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(200));
}

// A plan file that exists but will not parse (a ConfigMap replaced with garbage) is no plan
// still to come: connections do not wait C4_PLAN_WAIT_MS for it (an attempt that waited out its
// bootstrap deadline failed and counted against the job's restarts); they connect on the default
// spread at once, and the watcher says why.
TEST_F(PlanFileTest, AnUnreadablePlanFileHoldsNoConnection) {
  auto sink = std::make_shared<CaptureLogSink>();
  setLogSink(sink);
  write("{not a plan");
  auto cfgA = baseConfig("node-a", 0);
  cfgA.plan_file = file;
  cfgA.plan_wait_ms = 20000;
  auto a = makeContext(cfgA);
  auto b = makeContext(baseConfig("node-b", 1));
  const auto start = std::chrono::steady_clock::now();
  Pair p = connectPair(*a, *b);
  ASSERT_NE(p.send, nullptr);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10))
      << "the connection waited for a plan that cannot come";
  EXPECT_EQ(subflowLocalPorts(p.send).size(), static_cast<std::size_t>(cfgA.subflows));
  EXPECT_TRUE(logged(*sink, "using the default spread"));
  EXPECT_EQ(a->planVersion(), -1) << "the reports say no plan is applied";
  setLogSink(std::make_shared<StderrLogSink>());

  // The watcher keeps watching: the operator puts the plan back, the next poll applies it and
  // the next connection binds the planned ports.
  const std::uint16_t p0 = freePort(), p1 = freePort();
  write(twoSubflowPlan(5, p0, p1, 1, 1));
  a->tickNow(false);
  EXPECT_EQ(a->planVersion(), 5);
  Pair next = connectPair(*a, *b);
  ASSERT_NE(next.send, nullptr);
  EXPECT_EQ(subflowLocalPorts(next.send), (std::vector<std::uint16_t>{p0, p1}));
}

TEST_F(PlanFileTest, UnplannedPairUsesDefaultSpread) {
  write(R"({"version": 4, "default": {"subflows": 3}})");
  auto cfgA = baseConfig("node-a", 0);
  cfgA.plan_file = file;
  auto a = makeContext(cfgA);
  auto b = makeContext(baseConfig("node-b", 1));
  Pair p = connectPair(*a, *b);
  ASSERT_NE(p.send, nullptr);
  EXPECT_EQ(subflowLocalPorts(p.send).size(), 3u);
  EXPECT_EQ(subflowLocalPorts(p.recv).size(), 3u);
}

// The sender schedules by bytes owed: each subflow's cumulative bytes stay within one whole
// message (or 4 KiB per subflow of split ones) of its weight share, whatever the mix of sizes
// and weights. The operator's link monitor relies on it: a larger lag is a dead path.
TEST_F(PlanFileTest, SubflowsCarryTheirWeightShareOfBytes) {
  const std::uint16_t p0 = freePort(), p1 = freePort();
  write(twoSubflowPlan(1, p0, p1, 1, 1));
  auto a = plannedContext();
  auto b = makeContext(baseConfig("node-b", 1));
  Pair p = connectPair(*a, *b);
  ASSERT_NE(p.send, nullptr);
  auto tel = telemetryOf(p.send);
  auto bytes = [&](std::size_t i) { return static_cast<double>(tel->subflows[i].bytes.load()); };
  // Whole messages (below 2 x C4_MIN_CHUNK_BYTES) of alternating sizes, equal weights: a round
  // robin by count would put every large one on the same subflow.
  for (int i = 0; i < 40; ++i) transfer(p, i % 2 == 0 ? 100 << 10 : 4 << 10);
  EXPECT_LE(std::abs(bytes(0) - bytes(1)), 100 << 10) << bytes(0) << " vs " << bytes(1);
  EXPECT_GT(bytes(0), 0);
  EXPECT_GT(bytes(1), 0);
  // Split messages whose 3:1 shares are not 4 KiB multiples: the remainders must not pile up
  // on one subflow (300 x 3 KiB would be 900 KiB).
  write(twoSubflowPlan(2, p0, p1, 3, 1));
  a->tickNow(false);
  ASSERT_EQ(a->planVersion(), 2);
  const double b0 = bytes(0), b1 = bytes(1);
  const std::size_t size = (1 << 20) + (12 << 10);
  for (int i = 0; i < 300; ++i) transfer(p, size);
  const double moved = (bytes(0) - b0) + (bytes(1) - b1);
  EXPECT_EQ(moved, 300.0 * static_cast<double>(size));
  EXPECT_LE(std::abs((bytes(0) - b0) - 0.75 * moved), 16 << 10)
      << "subflow 0 carried " << bytes(0) - b0 << " of " << moved;
  // All weight on subflow 1: subflow 0 carries nothing more.
  write(twoSubflowPlan(3, p0, p1, 0, 1));
  a->tickNow(false);
  const double z0 = bytes(0);
  for (int i = 0; i < 10; ++i) transfer(p, i % 2 == 0 ? size : 4 << 10);
  EXPECT_EQ(bytes(0), z0);
}

}  // namespace
}  // namespace c4::plugin
