// Telemetry: reports with correct counts reach the agent socket, a stalled peer raises an anomaly
// notice (simulated time), a missing agent costs nothing and is counted.
#include <dlfcn.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <thread>

#include "../support/child_process.h"
#include "c4/common/unix_socket.h"
#include "c4/plugin/nccl_net_abi.h"
#include "test_util.h"

namespace c4::plugin {
namespace {

using namespace c4::plugin::testing;
namespace fs = std::filesystem;

std::string tempSocket(const char* name) {
  return "@c4-plugin-test-" + std::to_string(::getpid()) + "-" + name;
}

std::vector<report::Message> drain(UnixDatagramServer& server) {
  std::vector<report::Message> out;
  for (;;) {
    auto d = server.receive(std::chrono::milliseconds(200));
    if (!d || !*d) break;
    auto m = report::decodeMessageCbor((*d)->bytes);
    EXPECT_TRUE(m.has_value()) << (m ? "" : m.error().toString());
    if (m) out.push_back(std::move(*m));
  }
  return out;
}

TEST(Telemetry, ReportCarriesCountsPeerAndSubflows) {
  auto path = tempSocket("report");
  auto server = UnixDatagramServer::bind(path);
  ASSERT_TRUE(server.has_value());
  SimulatedClock clock;
  auto cfgA = baseConfig("node-a", 0);
  cfgA.agent_socket = path;
  cfgA.report_interval_ms = 3600 * 1000;  // only explicit ticks
  cfgA.stall_ms = 3600 * 1000;
  auto a = makeContext(cfgA, &clock);
  auto b = makeContext(baseConfig("node-b", 1), &clock);
  Pair p = connectPair(*a, *b);
  ASSERT_NE(p.send, nullptr);
  std::vector<unsigned char> src(1 << 20), dst(1 << 20);
  std::uint64_t sent = 0;
  for (int i = 0; i < 10; ++i) {
    std::size_t n = static_cast<std::size_t>(1000 * (i + 1));
    void* d[1] = {dst.data()};
    std::size_t s[1] = {dst.size()};
    int t[1] = {0};
    auto r = irecv(p.recv, 1, d, s, t);
    auto w = isend(p.send, src.data(), n, 0);
    ASSERT_TRUE(r && *r && w && *w);
    ASSERT_EQ(waitAll({{*w, nullptr}, {*r, nullptr}}), "");
    sent += n;
  }
  a->tickNow(true);
  auto msgs = drain(*server);
  ASSERT_EQ(msgs.size(), 1u);
  auto* rep = std::get_if<report::RankReport>(&msgs[0]);
  ASSERT_NE(rep, nullptr);
  EXPECT_EQ(rep->id.rank, 0);
  EXPECT_EQ(rep->id.node, "node-a");
  EXPECT_EQ(rep->plan_version, -1);
  ASSERT_EQ(rep->connections.size(), 1u);
  const auto& c = rep->connections[0];
  EXPECT_EQ(c.direction, report::Direction::kSend);
  EXPECT_EQ(c.peer_rank, 1);
  EXPECT_EQ(c.peer_node, "node-b");
  EXPECT_EQ(c.peer_pod, "node-b-pod");
  EXPECT_EQ(c.ops, 10u);
  EXPECT_EQ(c.bytes, sent);
  EXPECT_EQ(c.inflight, 0u);
  EXPECT_EQ(c.oldest_inflight_us, 0u);
  EXPECT_EQ(c.wait.count, 10u);
  EXPECT_EQ(c.transfer.count, 10u);
  ASSERT_EQ(c.subflows.size(), 4u);
  std::uint64_t sum = 0;
  for (const auto& sf : c.subflows) sum += sf.bytes;
  EXPECT_EQ(sum, sent);
  // The next report covers a new interval: no new ops, cumulative bytes unchanged.
  a->tickNow(true);
  msgs = drain(*server);
  ASSERT_EQ(msgs.size(), 1u);
  rep = std::get_if<report::RankReport>(&msgs[0]);
  ASSERT_NE(rep, nullptr);
  EXPECT_EQ(rep->connections[0].wait.count, 0u);
  EXPECT_EQ(rep->connections[0].bytes, sent);
  EXPECT_GT(rep->seq, 1u);
}

TEST(Telemetry, StalledPeerRaisesAnomalyNotice) {
  auto path = tempSocket("stall");
  auto server = UnixDatagramServer::bind(path);
  ASSERT_TRUE(server.has_value());
  SimulatedClock clock;
  auto cfgB = baseConfig("node-b", 1);
  cfgB.agent_socket = path;
  cfgB.stall_ms = 2000;
  cfgB.report_interval_ms = 3600 * 1000;
  auto a = makeContext(baseConfig("node-a", 0), &clock);
  auto b = makeContext(cfgB, &clock);
  Pair p = connectPair(*a, *b);
  ASSERT_NE(p.send, nullptr);
  char buf[64];
  void* d[1] = {buf};
  std::size_t s[1] = {sizeof(buf)};
  int t[1] = {0};
  auto r = irecv(p.recv, 1, d, s, t);  // the peer never sends: the op stalls
  ASSERT_TRUE(r && *r);
  clock.advance(std::chrono::milliseconds(1000));
  b->tickNow(false);
  EXPECT_TRUE(drain(*server).empty()) << "no notice before C4_STALL_MS";
  clock.advance(std::chrono::milliseconds(1500));
  b->tickNow(false);
  auto msgs = drain(*server);
  ASSERT_EQ(msgs.size(), 1u);
  auto* n = std::get_if<report::AnomalyNotice>(&msgs[0]);
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->kind, report::AnomalyKind::kStall);
  EXPECT_EQ(n->peer_rank, 0);
  EXPECT_EQ(n->peer_node, "node-a");
  EXPECT_EQ(n->direction, report::Direction::kRecv);
  EXPECT_EQ(n->age_us, 2'500'000u);
  // Once per op.
  clock.advance(std::chrono::milliseconds(5000));
  b->tickNow(false);
  EXPECT_TRUE(drain(*server).empty());
  // The periodic report shows the op in flight with its age.
  b->tickNow(true);
  msgs = drain(*server);
  ASSERT_EQ(msgs.size(), 1u);
  auto* rep = std::get_if<report::RankReport>(&msgs[0]);
  ASSERT_NE(rep, nullptr);
  ASSERT_EQ(rep->connections.size(), 1u);
  EXPECT_EQ(rep->connections[0].inflight, 1u);
  EXPECT_EQ(rep->connections[0].oldest_inflight_us, 7'500'000u);
}

TEST(Telemetry, ReporterThreadUsesInjectedClock) {
  auto path = tempSocket("periodic");
  auto server = UnixDatagramServer::bind(path);
  ASSERT_TRUE(server.has_value());
  SimulatedClock clock;
  auto cfg = baseConfig("node-a", 0);
  cfg.agent_socket = path;
  cfg.report_interval_ms = 1000;
  auto a = makeContext(cfg, &clock);
  ASSERT_TRUE(clock.awaitWaiters(1));
  clock.advance(std::chrono::milliseconds(1000));
  auto d = server->receive(std::chrono::seconds(10));
  ASSERT_TRUE(d && *d);
  auto m = report::decodeMessageCbor((*d)->bytes);
  ASSERT_TRUE(m.has_value());
  EXPECT_NE(std::get_if<report::RankReport>(&*m), nullptr);
}

TEST(Telemetry, MissingAgentNeverBlocksAndCountsDrops) {
  auto cfg = baseConfig("node-a", 0);
  cfg.agent_socket = tempSocket("nobody-listens");
  cfg.report_interval_ms = 3600 * 1000;
  auto a = makeContext(cfg);
  auto b = makeContext(baseConfig("node-b", 1));
  Pair p = connectPair(*a, *b);
  ASSERT_NE(p.send, nullptr);
  constexpr int kReports = 500;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kReports; ++i) a->tickNow(true);
  auto perReport = (std::chrono::steady_clock::now() - start) / kReports;
  EXPECT_EQ(a->droppedMessages(), static_cast<std::uint64_t>(kReports));
  EXPECT_EQ(a->sentMessages(), 0u);
  // A blocked send would take seconds; building and encoding a report takes well under a
  // millisecond in Release but ~10 ms in a Debug+ASan build on loaded shared cores, so the bound
  // separates "never waits" from "waits", not fast from slow (speed lives in bench/).
  EXPECT_LT(perReport, std::chrono::milliseconds(100));
  // The data path keeps working while reports are dropped.
  std::vector<char> src(1 << 16), dst(1 << 16);
  void* d[1] = {dst.data()};
  std::size_t s[1] = {dst.size()};
  int t[1] = {0};
  auto r = irecv(p.recv, 1, d, s, t);
  auto w = isend(p.send, src.data(), src.size(), 0);
  ASSERT_TRUE(r && *r && w && *w);
  EXPECT_EQ(waitAll({{*w, nullptr}, {*r, nullptr}}), "");
}

// Rank 1 (context b on `clock`, reporting to `server` with hour-long report and stall
// intervals) with a receive in flight from rank 0, whose context has ended: b's connection `recv`
// has failed. With a SimulatedClock b's reporter never ticks by itself.
struct FailedReceive {
  std::optional<UnixDatagramServer> server;
  std::unique_ptr<Context> b;
  CommBase* recv = nullptr;
};
FailedReceive failedReceive(const char* name, Clock* clock = nullptr) {
  FailedReceive f;
  auto path = tempSocket(name);
  auto server = UnixDatagramServer::bind(path);
  EXPECT_TRUE(server.has_value());
  if (!server) return f;
  f.server.emplace(std::move(*server));
  auto cfgB = baseConfig("node-b", 1);
  cfgB.agent_socket = path;
  cfgB.report_interval_ms = 3600 * 1000;
  cfgB.stall_ms = 3600 * 1000;
  auto a = makeContext(baseConfig("node-a", 0));
  f.b = makeContext(cfgB, clock);
  Pair p = connectPair(*a, *f.b);
  EXPECT_NE(p.send, nullptr);
  if (p.send == nullptr) return f;
  f.recv = p.recv;
  char buf[64];
  void* d[1] = {buf};
  std::size_t s[1] = {sizeof(buf)};
  int t[1] = {0};
  auto r = irecv(p.recv, 1, d, s, t);
  EXPECT_TRUE(r && *r);
  a.reset();
  if (r && *r) {
    EXPECT_NE(waitRequest(*r, nullptr, std::chrono::seconds(5)), "");
  }
  return f;
}

TEST(Telemetry, ConnectionFailureIsReported) {
  auto f = failedReceive("failure");
  ASSERT_TRUE(f.server && f.b);
  f.b->tickNow(false);
  auto msgs = drain(*f.server);
  ASSERT_EQ(msgs.size(), 1u);
  auto* n = std::get_if<report::AnomalyNotice>(&msgs[0]);
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->kind, report::AnomalyKind::kPeerClosed);
}

// A rank that exits right after a connection error (usually before its reporter's next tick)
// still reports the failure on its way out: when it closes the connection, or when its context
// ends with the connection open. Once, stamped with the time of the failure.
TEST(Telemetry, AFailureIsReportedWhenItsConnectionOrContextEndsBeforeTheNextTick) {
  auto peerClosed = [](const std::vector<report::Message>& msgs) {
    std::vector<report::AnomalyNotice> out;
    for (const auto& m : msgs) {
      auto* n = std::get_if<report::AnomalyNotice>(&m);
      if (n != nullptr && n->kind == report::AnomalyKind::kPeerClosed) out.push_back(*n);
    }
    return out;
  };
  SimulatedClock clock;
  {
    auto f = failedReceive("words-at-end", &clock);
    ASSERT_TRUE(f.server && f.b);
    ASSERT_TRUE(drain(*f.server).empty()) << "the reporter has not ticked";
    std::int64_t failed = toUnixNanos(clock.wallNow());
    clock.advance(std::chrono::seconds(3));
    f.b.reset();
    auto notices = peerClosed(drain(*f.server));
    ASSERT_EQ(notices.size(), 1u);
    EXPECT_EQ(notices[0].time_unix_ns, failed) << "the failure's time, not the flush's";
  }
  {
    auto f = failedReceive("words-at-close", &clock);
    ASSERT_TRUE(f.server && f.b && f.recv);
    ASSERT_TRUE(drain(*f.server).empty()) << "the reporter has not ticked";
    ASSERT_TRUE(closeComm(f.recv, CommKind::kRecv).has_value());
    EXPECT_EQ(peerClosed(drain(*f.server)).size(), 1u) << "sent as the connection closed";
    f.b->tickNow(true);
    f.b.reset();
    EXPECT_TRUE(peerClosed(drain(*f.server)).empty()) << "and only then";
  }
}

// The last words are read while the process that sent them still exists (the node plugin
// attributes a datagram by its sender's live pid): a context ending with a failure notice unread
// waits for the node plugin to read it, and no longer. Here the linger is 60 s: the child lives
// while the notice is unread and exits once it is read.
TEST(Telemetry, AnEndingContextWaitsUntilItsLastWordsAreRead) {
  const std::string path = tempSocket("linger");
  auto server = UnixDatagramServer::bind(path);
  ASSERT_TRUE(server.has_value());
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto cfgB = baseConfig("node-b", 1);
    cfgB.agent_socket = path;
    cfgB.report_interval_ms = 3600 * 1000;
    cfgB.stall_ms = 3600 * 1000;
    auto a = makeContext(baseConfig("node-a", 0));
    ContextOptions o;
    o.config = cfgB;
    o.devices = loopback();
    o.last_words_linger = std::chrono::seconds{60};
    auto b = Context::create(std::move(o));
    if (!b || a == nullptr) std::_Exit(2);
    Pair p = connectPair(*a, **b);
    if (p.send == nullptr) std::_Exit(3);
    char buf[64];
    void* d[1] = {buf};
    std::size_t s[1] = {sizeof(buf)};
    int t[1] = {0};
    auto r = irecv(p.recv, 1, d, s, t);
    if (!r || !*r) std::_Exit(4);
    a.reset();
    if (waitRequest(*r, nullptr, std::chrono::seconds(5)).empty()) std::_Exit(5);
    b->reset();  // its failure notice goes now, then it waits
    std::_Exit(0);
  }
  // The child connects, fails and ends its context within a second.
  std::this_thread::sleep_for(std::chrono::seconds{1});
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, WNOHANG), 0)
      << "exited (status " << status << ") with its last words unread";
  // Its last words: the failure notice, then its last report.
  auto d = server->receive(std::chrono::seconds(10));
  ASSERT_TRUE(d.has_value() && d->has_value());
  auto m = report::decodeMessageCbor((*d)->bytes);
  ASSERT_TRUE(m.has_value());
  auto* n = std::get_if<report::AnomalyNotice>(&*m);
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->kind, report::AnomalyKind::kPeerClosed);
  std::this_thread::sleep_for(std::chrono::seconds{1});
  ASSERT_EQ(::waitpid(child, &status, WNOHANG), 0)
      << "exited (status " << status << ") with its last report unread";
  d = server->receive(std::chrono::seconds(10));
  ASSERT_TRUE(d.has_value() && d->has_value());
  m = report::decodeMessageCbor((*d)->bytes);
  ASSERT_TRUE(m.has_value());
  auto* last = std::get_if<report::RankReport>(&*m);
  ASSERT_NE(last, nullptr);
  EXPECT_TRUE(last->last);
  // Read: it exits now, not at the end of the linger.
  EXPECT_TRUE(c4::testing::exitsWithin(child, std::chrono::seconds{10}, status))
      << "still lingering 10 s after its last words were read";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

// A context that ends reports what its connections moved since the last report, those NCCL
// closed before it included (NCCL closes its connections right before the finalize), and the
// process's last context says that its telemetry ended in order (RankReport::last); an earlier
// context of the same process does not.
TEST(Telemetry, AnEndingContextReportsItsClosedConnectionsFinalBytesAndTheLastOneSaysSo) {
  auto path = tempSocket("final");
  auto server = UnixDatagramServer::bind(path);
  ASSERT_TRUE(server.has_value());
  SimulatedClock clock;
  auto send_n = [](Pair& p, std::size_t n) {
    std::vector<unsigned char> src(n), dst(n);
    void* d[1] = {dst.data()};
    std::size_t s[1] = {dst.size()};
    int t[1] = {0};
    auto r = irecv(p.recv, 1, d, s, t);
    auto w = isend(p.send, src.data(), n, 0);
    ASSERT_TRUE(r && *r && w && *w);
    ASSERT_EQ(waitAll({{*w, nullptr}, {*r, nullptr}}), "");
  };
  auto cfgA = baseConfig("node-a", 0);
  cfgA.agent_socket = path;
  cfgA.report_interval_ms = 3600 * 1000;  // only explicit ticks and the end
  cfgA.stall_ms = 3600 * 1000;
  auto a = makeContext(cfgA, &clock);
  auto b = makeContext(baseConfig("node-b", 1), &clock);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  Pair p = connectPair(*a, *b);
  ASSERT_NE(p.send, nullptr);
  ASSERT_NO_FATAL_FAILURE(send_n(p, 3000));
  a->tickNow(true);
  auto msgs = drain(*server);
  ASSERT_EQ(msgs.size(), 1u);
  ASSERT_NE(std::get_if<report::RankReport>(&msgs[0]), nullptr);
  // After the last periodic report: more bytes, then NCCL closes the connection and ends.
  ASSERT_NO_FATAL_FAILURE(send_n(p, 5000));
  ASSERT_TRUE(closeComm(p.send, CommKind::kSend));
  ASSERT_TRUE(closeComm(p.recv, CommKind::kRecv));
  ASSERT_TRUE(closeComm(p.listen, CommKind::kListen));
  // `b` still lives: `a` is not the process's last context.
  a.reset();
  msgs = drain(*server);
  ASSERT_EQ(msgs.size(), 1u);
  auto* rep = std::get_if<report::RankReport>(&msgs[0]);
  ASSERT_NE(rep, nullptr);
  EXPECT_FALSE(rep->last) << "another context of the process still runs";
  ASSERT_EQ(rep->connections.size(), 1u) << "the closed connection's final counters";
  EXPECT_EQ(rep->connections[0].bytes, 8000u);
  EXPECT_EQ(rep->connections[0].ops, 2u);
  EXPECT_EQ(rep->connections[0].inflight, 0u);
  std::uint64_t sum = 0;
  for (const auto& sf : rep->connections[0].subflows) sum += sf.bytes;
  EXPECT_EQ(sum, 8000u);

  // The process's last context: its last report says so.
  auto cfgC = baseConfig("node-a", 0);
  cfgC.agent_socket = path;
  cfgC.report_interval_ms = 3600 * 1000;
  cfgC.stall_ms = 3600 * 1000;
  auto c = makeContext(cfgC, &clock);
  ASSERT_NE(c, nullptr);
  b.reset();
  c.reset();
  msgs = drain(*server);
  ASSERT_EQ(msgs.size(), 1u);
  rep = std::get_if<report::RankReport>(&msgs[0]);
  ASSERT_NE(rep, nullptr);
  EXPECT_TRUE(rep->last);
  EXPECT_TRUE(rep->connections.empty());
}

// The process leaves through exit() with contexts NCCL never finalized (v11/v12 finalize a
// context only when its communicator is destroyed): each live context sends its last report then,
// the one created last marked RankReport::last, and their destructors send no second one.
TEST(Telemetry, AtExitEveryLiveContextSendsItsLastReportOnceTheLastOneMarked) {
  auto path = tempSocket("exit");
  auto server = UnixDatagramServer::bind(path);
  ASSERT_TRUE(server.has_value());
  SimulatedClock clock;
  auto withSocket = [&](const char* node, int rank) {
    auto cfg = baseConfig(node, rank);
    cfg.agent_socket = path;
    cfg.report_interval_ms = 3600 * 1000;
    cfg.stall_ms = 3600 * 1000;
    return makeContext(cfg, &clock);
  };
  auto first = withSocket("node-a", 0);
  auto b = makeContext(baseConfig("node-b", 1), &clock);
  auto a = withSocket("node-a", 0);
  ASSERT_TRUE(first && a && b);
  Pair p = connectPair(*a, *b);
  ASSERT_NE(p.send, nullptr);
  std::vector<unsigned char> src(6000), dst(6000);
  void* d[1] = {dst.data()};
  std::size_t sz[1] = {dst.size()};
  int t[1] = {0};
  auto r = irecv(p.recv, 1, d, sz, t);
  auto w = isend(p.send, src.data(), src.size(), 0);
  ASSERT_TRUE(r && *r && w && *w);
  ASSERT_EQ(waitAll({{*w, nullptr}, {*r, nullptr}}), "");

  Context::endOfProcess();
  std::vector<report::RankReport> reps;
  for (const auto& m : drain(*server)) {
    if (const auto* rep = std::get_if<report::RankReport>(&m)) reps.push_back(*rep);
  }
  ASSERT_EQ(reps.size(), 2u);
  EXPECT_FALSE(reps.front().last) << "another context was created after it";
  EXPECT_TRUE(reps.front().connections.empty());
  EXPECT_TRUE(reps.back().last);
  ASSERT_EQ(reps.back().connections.size(), 1u);
  EXPECT_EQ(reps.back().connections.front().bytes, 6000u);

  a.reset();
  b.reset();
  first.reset();
  EXPECT_TRUE(drain(*server).empty()) << "a second last report from a destructor";
}

// The same through the built module as NCCL loads it: a process that initialised a v12 context
// and leaves through exit() without finalizing it sends its last report.
TEST(Telemetry, TheModuleSendsTheLastReportWhenTheProcessExitsWithoutFinalize) {
  const std::string path = tempSocket("module-exit");
  auto server = UnixDatagramServer::bind(path);
  ASSERT_TRUE(server.has_value());
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::setenv("C4_AGENT_SOCKET", path.c_str(), 1);
    ::setenv("C4_SOCKET_IFNAME", "lo", 1);
    ::setenv("C4_NODE_NAME", "node-x", 1);
    ::setenv("C4_RANK", "3", 1);
    ::setenv("C4_REPORT_INTERVAL_MS", "3600000", 1);
    void* lib = ::dlopen(C4_NET_PLUGIN_SO, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) std::_Exit(2);
    auto* v12 = static_cast<const C4NcclNetV12*>(::dlsym(lib, "ncclNetPlugin_v12"));
    if (v12 == nullptr) std::_Exit(3);
    void* ctx = nullptr;
    C4NcclCommConfig cfg = {C4_NCCL_NET_TRAFFIC_CLASS_UNDEF};
    if (v12->init(&ctx, 0x1234, &cfg, nullptr, nullptr) != C4_NCCL_SUCCESS) std::_Exit(4);
    std::exit(0);  // no finalize: the library's destructor runs
  }
  int status = 0;
  ASSERT_TRUE(c4::testing::exitsWithin(child, std::chrono::seconds{20}, status));
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  std::optional<report::RankReport> last;
  std::size_t messages = 0;
  for (const auto& m : drain(*server)) {
    ++messages;
    if (const auto* rep = std::get_if<report::RankReport>(&m); rep != nullptr && rep->last) {
      last = *rep;
    }
  }
  ASSERT_TRUE(last.has_value()) << messages << " messages, none the last report";
  EXPECT_EQ(last->id.rank, 3);
  EXPECT_EQ(last->id.node, "node-x");
}

TEST(Telemetry, HistogramSummaryIsBucketed) {
  LatencyHistogram h;
  auto before = h.snapshot();
  for (std::uint64_t v : {0u, 1u, 3u, 100u, 100u, 100u, 5000u}) h.record(v);
  auto s = LatencyHistogram::summarize(before, h.snapshot(), h.takeIntervalMax());
  EXPECT_EQ(s.count, 7u);
  EXPECT_EQ(s.sum_us, 5304u);
  EXPECT_EQ(s.max_us, 5000u);
  EXPECT_EQ(s.p50_us, 127u);  // 100 lies in [64, 127]
  EXPECT_EQ(s.p99_us, 5000u);
  EXPECT_EQ(h.takeIntervalMax(), 0u);
}

}  // namespace
}  // namespace c4::plugin
