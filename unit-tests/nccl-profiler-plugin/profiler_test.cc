// The profiler plugin driven through its C tables the way NCCL 2.30.7 does (research note
// nccl-profiler-abi.md): an application thread emits GroupApi/CollApi/Group/Coll, a proxy thread
// ProxyOp/ProxyStep with net.cc's state sequences; time is simulated.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include "../support/child_process.h"
#include "c4/common/clock.h"
#include "c4/common/report.h"
#include "c4/common/unix_socket.h"
#include "c4/profiler/shells.h"

namespace c4::profiler {
namespace {

using namespace std::chrono_literals;

constexpr int kSendGpu = C4_NCCL_PROF_PROXY_STEP_SEND_GPU_WAIT;
constexpr int kSendPeer = C4_NCCL_PROF_PROXY_STEP_SEND_PEER_WAIT_V4;
constexpr int kSendWait = C4_NCCL_PROF_PROXY_STEP_SEND_WAIT;
constexpr int kRecvWait = C4_NCCL_PROF_PROXY_STEP_RECV_WAIT;
constexpr int kRecvFlush = C4_NCCL_PROF_PROXY_STEP_RECV_FLUSH_WAIT;
constexpr int kRecvGpu = C4_NCCL_PROF_PROXY_STEP_RECV_GPU_WAIT;

class ProfilerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ProfilerOptions o;
    o.clock = &clock_;
    o.start_reporter = false;
    o.config.rank = 0;
    o.config.world_size = 2;
    setProcessOptionsForTest(o);
  }
  void TearDown() override {
    EXPECT_EQ(processProfilerForTest(), nullptr) << "a test left a context open";
    setProcessOptionsForTest(std::nullopt);
  }

  // Options for a process whose reports go to the node-plugin socket `path` (ticks by hand).
  ProfilerOptions reporting(const std::string& path) {
    ProfilerOptions o;
    o.clock = &clock_;
    o.start_reporter = false;
    o.config.rank = 0;
    o.config.world_size = 2;
    o.config.job = "train";
    o.config.ns = "ml";
    o.config.pod = "train-0";
    o.config.node = "node-a";
    o.config.agent_socket = path;
    // These tests read after the finalize; the linger has a test of its own.
    o.last_report_linger = 0ms;
    return o;
  }
  // Every RankReport the server holds now (waits briefly for the first).
  static std::vector<report::RankReport> drain(UnixDatagramServer& server) {
    std::vector<report::RankReport> out;
    for (auto wait = 1000ms;; wait = 100ms) {
      auto got = server.receive(wait);
      if (!got.has_value() || !got->has_value()) return out;
      auto msg = report::decodeMessageCbor((*got)->bytes);
      if (msg && std::holds_alternative<report::RankReport>(*msg)) {
        out.push_back(std::get<report::RankReport>(*msg));
      }
    }
  }
  void* initV6(int nranks = 2, int rank = 0, std::uint64_t commHash = 0xabc) {
    void* ctx = nullptr;
    EXPECT_EQ(tableV6().init(&ctx, commHash, &mask_, "world", 1, nranks, rank, nullptr),
              C4_NCCL_PROF_SUCCESS);
    EXPECT_EQ(mask_, kActivationMask);
    return ctx;
  }

  void* start(void* ctx, C4NcclProfilerEventDescr_v6_t d) {
    void* h = reinterpret_cast<void*>(0xdead);  // NCCL does not clear it (profiler_v5.cc l.17)
    EXPECT_EQ(tableV6().startEvent(ctx, &h, &d), C4_NCCL_PROF_SUCCESS);
    return h;
  }
  void stop(void* h) { EXPECT_EQ(tableV6().stopEvent(h), C4_NCCL_PROF_SUCCESS); }
  void record(void* h, int state, std::size_t transSize = 0) {
    C4NcclProfilerEventStateArgs_v6_t a{};
    a.proxyStep.transSize = transSize;
    EXPECT_EQ(tableV6().recordEventState(h, static_cast<C4NcclProfState>(state), &a),
              C4_NCCL_PROF_SUCCESS);
  }

  // The application thread's events of one collective (profiler.cc l.275-560): returns the
  // Coll handle, already stopped ("enqueued") as NCCL does before the proxy starts its ops.
  void* collective(void* ctx, std::uint64_t seq) {
    C4NcclProfilerEventDescr_v6_t g{};
    g.type = C4_NCCL_PROFILE_GROUP_API;
    g.groupApi.groupDepth = 1;
    void* groupApi = start(ctx, g);
    record(groupApi, C4_NCCL_PROF_GROUP_START_API_STOP);
    C4NcclProfilerEventDescr_v6_t ca{};
    ca.type = C4_NCCL_PROFILE_COLL_API;
    ca.parentObj = groupApi;
    ca.collApi.func = "AllReduce";
    void* collApi = start(ctx, ca);
    stop(collApi);
    record(groupApi, C4_NCCL_PROF_GROUP_END_API_START);
    C4NcclProfilerEventDescr_v6_t gr{};
    gr.type = C4_NCCL_PROFILE_GROUP;
    void* group = start(ctx, gr);
    C4NcclProfilerEventDescr_v6_t c{};
    c.type = C4_NCCL_PROFILE_COLL;
    c.parentObj = collApi;
    c.rank = 0;
    c.coll.seqNumber = seq;
    c.coll.func = "AllReduce";
    c.coll.parentGroup = group;
    void* coll = start(ctx, c);
    EXPECT_NE(coll, nullptr);
    stop(coll);  // enqueued, before any ProxyOp starts
    stop(group);
    stop(groupApi);
    return coll;
  }

  void* proxyOp(void* ctx, void* parent, int peer, bool isSend, int channel = 0,
                pid_t pid = ::getpid()) {
    C4NcclProfilerEventDescr_v6_t d{};
    d.type = C4_NCCL_PROFILE_PROXY_OP;
    d.parentObj = parent;
    d.proxyOp.pid = pid;
    d.proxyOp.channelId = static_cast<std::uint8_t>(channel);
    d.proxyOp.peer = peer;
    d.proxyOp.nSteps = 1;
    d.proxyOp.isSend = isSend ? 1 : 0;
    return start(ctx, d);
  }
  void* proxyStep(void* ctx, void* op, int step) {
    C4NcclProfilerEventDescr_v6_t d{};
    d.type = C4_NCCL_PROFILE_PROXY_STEP;
    d.parentObj = op;
    d.proxyStep.step = step;
    return start(ctx, d);
  }
  // net.cc l.1336-1444: start, SendGPUWait (previous size), SendPeerWait on every poll, SendWait
  // (current size), stop. GPU 10 us, peer 20 us, wire 30 us.
  void sendStep(void* ctx, void* op, int step, std::size_t bytes) {
    void* s = proxyStep(ctx, op, step);
    record(s, kSendGpu, 0);
    clock_.advance(10us);
    record(s, kSendPeer, 0);
    clock_.advance(10us);
    record(s, kSendPeer, 0);
    clock_.advance(10us);
    record(s, kSendWait, bytes);
    clock_.advance(30us);
    stop(s);
  }
  // net.cc l.1536-1745: RecvWait 40 us, RecvFlushWait 5 us, RecvGPUWait 15 us.
  void recvStep(void* ctx, void* op, int step, std::size_t bytes) {
    void* s = proxyStep(ctx, op, step);
    record(s, kRecvWait, 0);
    clock_.advance(40us);
    record(s, kRecvFlush, bytes);
    clock_.advance(5us);
    record(s, kRecvGpu, bytes);
    clock_.advance(15us);
    stop(s);
  }

  Context& context(void* ctx) { return *static_cast<Context*>(ctx); }
  CommProgress progressOf(void* ctx) {
    return commProgress(context(ctx), clock_.monoNow().time_since_epoch().count());
  }
  std::vector<LinkStats> linksOf(void* ctx) {
    return linkStats(context(ctx), clock_.monoNow().time_since_epoch().count());
  }

  SimulatedClock clock_;
  int mask_ = 0;
};

TEST_F(ProfilerTest, CollectiveFinishesWithItsLastProxyOp) {
  void* ctx = initV6();
  void* coll = collective(ctx, 7);
  CommProgress p = progressOf(ctx);
  EXPECT_EQ(p.comm_hash, 0xabcu);
  EXPECT_EQ(p.coll_entered, 1u);
  EXPECT_EQ(p.last_coll_seq, 7u);
  // Stopped with no ProxyOp yet: counted finished (enqueued, no proxy work so far)...
  EXPECT_EQ(p.coll_finished, 1u);

  // ...until the proxy thread starts its ops, which reopens it.
  void* send = proxyOp(ctx, coll, 1, true);
  void* recv = proxyOp(ctx, coll, 1, false, 1);
  ASSERT_NE(send, nullptr);
  ASSERT_NE(recv, nullptr);
  record(send, C4_NCCL_PROF_PROXY_OP_IN_PROGRESS_V4);
  p = progressOf(ctx);
  EXPECT_EQ(p.coll_finished, 0u);
  clock_.advance(1ms);
  EXPECT_EQ(progressOf(ctx).oldest_unfinished_us, 1000u);
  auto links = linksOf(ctx);
  ASSERT_EQ(links.size(), 2u);
  EXPECT_EQ(links[0].inflight, 1u);
  EXPECT_EQ(links[0].oldest_inflight_us, 1000u);

  sendStep(ctx, send, 0, 4096);
  sendStep(ctx, send, 1, 4096);
  stop(send);
  EXPECT_EQ(progressOf(ctx).coll_finished, 0u);
  recvStep(ctx, recv, 0, 8192);
  stop(recv);
  p = progressOf(ctx);
  EXPECT_EQ(p.coll_finished, 1u);
  EXPECT_EQ(p.oldest_unfinished_us, 0u);

  links = linksOf(ctx);
  ASSERT_EQ(links.size(), 2u);
  const LinkStats& rx = links[0];  // sorted: (peer 1, recv), (peer 1, send)
  const LinkStats& tx = links[1];
  EXPECT_FALSE(rx.is_send);
  EXPECT_EQ(tx.bytes, 8192u);
  EXPECT_EQ(tx.steps, 2u);
  EXPECT_EQ(tx.ops_done, 1u);
  EXPECT_EQ(tx.inflight, 0u);
  EXPECT_EQ(tx.gpu_wait.sum, 20u);
  EXPECT_EQ(tx.net_wait.sum, 40u);  // SendPeerWait, recorded twice, one phase
  EXPECT_EQ(tx.transfer.sum, 60u);  // SendWait
  EXPECT_EQ(rx.bytes, 8192u);
  EXPECT_EQ(rx.net_wait.sum, 40u);
  EXPECT_EQ(rx.gpu_wait.sum, 20u);  // flush + GPU
  EXPECT_EQ(rx.transfer.count, 0u);

  auto chans = channelStats(context(ctx));
  ASSERT_EQ(chans.size(), 2u);
  EXPECT_EQ(chans[0].channel, 1);
  EXPECT_EQ(chans[0].ops_started, 1u);
  EXPECT_EQ(chans[1].net_wait_us, 40u);
  EXPECT_EQ(chans[1].transfer_us, 60u);
  EXPECT_EQ(tableV6().finalize(ctx), C4_NCCL_PROF_SUCCESS);
}

TEST_F(ProfilerTest, NullHandlesUnknownEventsAndDroppedOps) {
  void* ctx = initV6();
  EXPECT_EQ(tableV6().stopEvent(nullptr), C4_NCCL_PROF_SUCCESS);  // net callback, l.797
  EXPECT_EQ(tableV6().recordEventState(nullptr, C4_NCCL_PROF_NET_PLUGIN_UPDATE, nullptr),
            C4_NCCL_PROF_SUCCESS);
  C4NcclProfilerEventDescr_v6_t u{};
  u.type = 1ull << 40;  // a type from a future NCCL
  EXPECT_EQ(start(ctx, u), nullptr);
  C4NcclProfilerEventDescr_v6_t pc{};
  pc.type = C4_NCCL_PROFILE_PROXY_CTRL;
  EXPECT_EQ(start(reinterpret_cast<void*>(0x10), pc), nullptr);  // finalized comm's context
  C4NcclProfilerEventDescr_v6_t ce{};
  ce.type = C4_NCCL_PROFILE_CE_COLL;
  EXPECT_EQ(start(ctx, ce), nullptr);
  void* np = nullptr;
  EXPECT_EQ(tableV6().startEvent(ctx, &np, nullptr), C4_NCCL_PROF_SUCCESS);
  EXPECT_EQ(np, nullptr);

  // A ProxyOp with a NULL parent (the Coll was dropped) is still measured.
  void* op = proxyOp(ctx, nullptr, 3, true);
  ASSERT_NE(op, nullptr);
  sendStep(ctx, op, 0, 100);
  stop(op);
  // Steps of a dropped op: started and stopped with a NULL parent, no state recorded.
  std::uint64_t orphans = orphanSteps();
  void* s = proxyStep(ctx, nullptr, 0);
  EXPECT_EQ(s, nullptr);
  stop(s);
  EXPECT_EQ(orphanSteps(), orphans + 1);
  auto links = linksOf(ctx);
  ASSERT_EQ(links.size(), 1u);
  EXPECT_EQ(links[0].bytes, 100u);
  EXPECT_EQ(progressOf(ctx).coll_entered, 0u);
  EXPECT_EQ(tableV6().finalize(ctx), C4_NCCL_PROF_SUCCESS);
  EXPECT_EQ(tableV6().finalize(nullptr), C4_NCCL_PROF_SUCCESS);
}

TEST_F(ProfilerTest, ZeroByteOperations) {
  void* ctx = initV6();
  C4NcclProfilerEventDescr_v6_t d{};
  d.type = C4_NCCL_PROFILE_P2P;
  d.p2p.peer = 1;
  d.p2p.count = 0;
  void* p2p = start(ctx, d);
  ASSERT_NE(p2p, nullptr);
  stop(p2p);
  void* op = proxyOp(ctx, p2p, 1, true);
  sendStep(ctx, op, 0, 0);  // one empty step
  stop(op);
  // A zero-byte collective: no proxy work at all, finished when enqueued.
  collective(ctx, 1);
  CommProgress p = progressOf(ctx);
  EXPECT_EQ(p.p2p_entered, 1u);
  EXPECT_EQ(p.p2p_finished, 1u);
  EXPECT_EQ(p.coll_entered, 1u);
  EXPECT_EQ(p.coll_finished, 1u);
  auto links = linksOf(ctx);
  ASSERT_EQ(links.size(), 1u);
  EXPECT_EQ(links[0].bytes, 0u);
  EXPECT_EQ(links[0].steps, 1u);
  EXPECT_EQ(links[0].ops_done, 1u);
  EXPECT_EQ(tableV6().finalize(ctx), C4_NCCL_PROF_SUCCESS);
}

TEST_F(ProfilerTest, PxnOpsFromAnotherProcessAreNotDereferenced) {
  void* ctx = initV6();
  std::uint64_t foreign = foreignProxyOps();
  // Context and parent belong to another address space: any dereference would crash.
  void* op = proxyOp(reinterpret_cast<void*>(0x8), reinterpret_cast<void*>(0x18), 1, true, 0,
                     ::getpid() + 1);
  EXPECT_EQ(op, nullptr);
  EXPECT_EQ(foreignProxyOps(), foreign + 1);
  EXPECT_EQ(proxyStep(reinterpret_cast<void*>(0x8), op, 0), nullptr);
  EXPECT_TRUE(linksOf(ctx).empty());
  EXPECT_EQ(tableV6().finalize(ctx), C4_NCCL_PROF_SUCCESS);
}

TEST_F(ProfilerTest, FullPoolsDropAndCount) {
  void* ctx = initV6(4096, 0);
  std::vector<void*> ops;
  for (std::size_t i = 0; i < kProxyOpPool + 5; ++i) {
    ops.push_back(proxyOp(ctx, nullptr, static_cast<int>(i % 64), true));
  }
  EXPECT_EQ(std::count(ops.begin(), ops.end(), nullptr), 5);
  EXPECT_EQ(counters(context(ctx)).ops_dropped, 5u);
  for (void* op : ops) stop(op);

  C4NcclProfilerEventDescr_v6_t c{};
  c.type = C4_NCCL_PROFILE_COLL;
  std::vector<void*> colls;
  for (std::size_t i = 0; i < kTaskPool + 3; ++i) colls.push_back(start(ctx, c));
  EXPECT_EQ(std::count(colls.begin(), colls.end(), nullptr), 3);
  CommProgress p = progressOf(ctx);
  EXPECT_EQ(p.coll_entered, kTaskPool + 3);
  EXPECT_EQ(p.coll_finished, 3u);  // dropped ones count as finished: entered - finished exact
  EXPECT_EQ(counters(context(ctx)).tasks_dropped, 3u);
  for (void* h : colls) stop(h);
  EXPECT_EQ(progressOf(ctx).coll_finished, kTaskPool + 3);
  // Finished slots are reused after the grace period.
  clock_.advance(std::chrono::nanoseconds{kTaskReuseGraceNs} + 1ms);
  EXPECT_NE(start(ctx, c), nullptr);
  EXPECT_EQ(tableV6().finalize(ctx), C4_NCCL_PROF_SUCCESS);
}

TEST_F(ProfilerTest, LateProxyOpOfAReusedTaskSlotIsNotAttributed) {
  void* ctx = initV6();
  C4NcclProfilerEventDescr_v6_t c{};
  c.type = C4_NCCL_PROFILE_COLL;
  void* first = start(ctx, c);
  stop(first);
  clock_.advance(std::chrono::nanoseconds{kTaskReuseGraceNs} + 1ms);
  // Cycle through the pool so the first slot is reused.
  for (std::size_t i = 0; i < kTaskPool; ++i) stop(start(ctx, c));
  void* op = proxyOp(ctx, first, 1, true);
  ASSERT_NE(op, nullptr);
  EXPECT_EQ(counters(context(ctx)).stale_parents, 1u);
  stop(op);
  CommProgress p = progressOf(ctx);
  EXPECT_EQ(p.coll_entered, p.coll_finished);
  EXPECT_EQ(tableV6().finalize(ctx), C4_NCCL_PROF_SUCCESS);
}

TEST_F(ProfilerTest, FailingInitLeavesNothing) {
  void* ctx = reinterpret_cast<void*>(0x1);
  mask_ = 12345;
  EXPECT_EQ(tableV6().init(&ctx, 1, &mask_, nullptr, 1, 2, 5, nullptr),
            C4_NCCL_PROF_INVALID_ARGUMENT);
  EXPECT_EQ(ctx, nullptr);
  EXPECT_EQ(mask_, 0);  // no other communicator of ours: NCCL generates nothing
  EXPECT_EQ(processProfilerForTest(), nullptr);
  EXPECT_EQ(tableV6().finalize(ctx), C4_NCCL_PROF_SUCCESS);
  EXPECT_EQ(tableV6().init(nullptr, 1, &mask_, nullptr, 1, 2, 0, nullptr),
            C4_NCCL_PROF_INVALID_ARGUMENT);

  // With another communicator open, a failing init leaves the shared mask alone.
  void* ok = initV6();
  void* bad = nullptr;
  EXPECT_NE(tableV6().init(&bad, 2, &mask_, nullptr, 1, 2, -1, nullptr), C4_NCCL_PROF_SUCCESS);
  EXPECT_EQ(mask_, kActivationMask);
  EXPECT_NE(processProfilerForTest(), nullptr);
  EXPECT_EQ(tableV6().finalize(ok), C4_NCCL_PROF_SUCCESS);
}

TEST_F(ProfilerTest, ConcurrentInitOnSeveralThreadsAndTraffic) {
  constexpr int kComms = 8;
  std::vector<void*> ctxs(kComms);
  std::vector<std::thread> threads;
  for (int i = 0; i < kComms; ++i) {
    threads.emplace_back([&, i] {
      int mask = 0;
      tableV6().init(&ctxs[static_cast<std::size_t>(i)], 100u + static_cast<unsigned>(i), &mask,
                     nullptr, 1, 2, 0, nullptr);
    });
  }
  for (auto& t : threads) t.join();
  threads.clear();
  ASSERT_NE(processProfilerForTest(), nullptr);
  EXPECT_EQ(processProfilerForTest()->contexts(), static_cast<std::size_t>(kComms));
  // Per communicator: an application thread and a proxy thread at once.
  for (int i = 0; i < kComms; ++i) {
    void* ctx = ctxs[static_cast<std::size_t>(i)];
    threads.emplace_back([&, ctx] {
      C4NcclProfilerEventDescr_v6_t c{};
      c.type = C4_NCCL_PROFILE_COLL;
      for (int k = 0; k < 200; ++k) {
        void* h = nullptr;
        tableV6().startEvent(ctx, &h, &c);
        tableV6().stopEvent(h);
      }
    });
    threads.emplace_back([&, ctx] {
      for (int k = 0; k < 200; ++k) {
        C4NcclProfilerEventDescr_v6_t d{};
        d.type = C4_NCCL_PROFILE_PROXY_OP;
        d.proxyOp.pid = ::getpid();
        d.proxyOp.peer = 1;
        void* op = nullptr;
        tableV6().startEvent(ctx, &op, &d);
        C4NcclProfilerEventDescr_v6_t s{};
        s.type = C4_NCCL_PROFILE_PROXY_STEP;
        s.parentObj = op;
        void* st = nullptr;
        tableV6().startEvent(ctx, &st, &s);
        C4NcclProfilerEventStateArgs_v6_t a{};
        a.proxyStep.transSize = 10;
        tableV6().recordEventState(st, static_cast<C4NcclProfState>(kSendWait), &a);
        tableV6().stopEvent(st);
        tableV6().stopEvent(op);
      }
    });
  }
  std::atomic<bool> done{false};
  std::thread reporter([&] {
    while (!done) processProfilerForTest()->buildReport();
  });
  for (auto& t : threads) t.join();
  done = true;
  reporter.join();
  for (void* ctx : ctxs) {
    CommProgress p = progressOf(ctx);
    EXPECT_EQ(p.coll_entered, 200u);
    EXPECT_EQ(p.coll_finished, 200u);
    EXPECT_EQ(linksOf(ctx).at(0).bytes, 2000u);
  }
  threads.clear();
  for (void* ctx : ctxs) threads.emplace_back([ctx] { tableV6().finalize(ctx); });
  for (auto& t : threads) t.join();
  EXPECT_EQ(processProfilerForTest(), nullptr);
}

TEST_F(ProfilerTest, FinalizeOfTheLastContextJoinsTheReporter) {
  ProfilerOptions o;
  o.config.report_interval_ms = 10;
  o.start_reporter = true;  // real clock, real thread
  setProcessOptionsForTest(o);
  void* a = initV6();
  void* b = initV6(2, 1, 0xdef);
  ASSERT_NE(processProfilerForTest(), nullptr);
  EXPECT_EQ(tableV6().finalize(a), C4_NCCL_PROF_SUCCESS);
  EXPECT_NE(processProfilerForTest(), nullptr);
  EXPECT_EQ(tableV6().finalize(b), C4_NCCL_PROF_SUCCESS);
  EXPECT_EQ(processProfilerForTest(), nullptr);
  // A later communicator loads everything again (NCCL reloads the plugin, profiler.cc l.46-56).
  void* c = initV6();
  EXPECT_NE(processProfilerForTest(), nullptr);
  EXPECT_EQ(tableV6().finalize(c), C4_NCCL_PROF_SUCCESS);
}

// ---- Older tables, each through its own descriptor layout --------------------------------------

template <typename Table, typename Descr, typename Args>
void driveOld(const Table& t, void* ctx, SimulatedClock& clock, bool opStates) {
  Descr g{};
  g.type = C4_NCCL_PROFILE_GROUP;
  void* group = nullptr;
  t.startEvent(ctx, &group, &g);
  Descr c{};
  c.type = C4_NCCL_PROFILE_COLL;
  c.parentObj = group;  // v1..v4: the Group handle (profiler_v4.cc shim)
  c.rank = 0;
  c.coll.seqNumber = 3;
  void* coll = nullptr;
  t.startEvent(ctx, &coll, &c);
  ASSERT_NE(coll, nullptr);
  t.stopEvent(coll);
  t.stopEvent(group);
  Descr o{};
  o.type = C4_NCCL_PROFILE_PROXY_OP;
  o.parentObj = coll;
  o.proxyOp.pid = ::getpid();
  o.proxyOp.peer = 1;
  o.proxyOp.channelId = 2;
  o.proxyOp.isSend = 1;
  void* op = nullptr;
  t.startEvent(ctx, &op, &o);
  ASSERT_NE(op, nullptr);
  Descr s{};
  s.type = C4_NCCL_PROFILE_PROXY_STEP;
  s.parentObj = op;
  s.proxyStep.step = 0;
  void* step = nullptr;
  t.startEvent(ctx, &step, &s);
  ASSERT_NE(step, nullptr);
  Args a{};
  t.recordEventState(step, C4_NCCL_PROF_PROXY_STEP_SEND_GPU_WAIT, &a);
  clock.advance(std::chrono::microseconds{10});
  if constexpr (sizeof(Args) == sizeof(C4NcclProfilerEventStateArgs_v4_t)) {
    a.proxyStep.transSize = 512;
  }
  t.recordEventState(step, C4_NCCL_PROF_PROXY_STEP_SEND_WAIT, &a);
  if constexpr (sizeof(Args) == sizeof(C4NcclProfilerEventStateArgs_v1_t)) {
    if (opStates) {  // before NCCL 2.27: the op's cumulative size comes with its states
      Args oa{};
      oa.proxyOp.transSize = 512;
      oa.proxyOp.steps = 1;
      t.recordEventState(op, C4_NCCL_PROF_PROXY_OP_SEND_DONE, &oa);
    }
    t.recordEventState(step, C4_NCCL_PROF_PROXY_STEP_SEND_WAIT, nullptr);  // 2.26: NULL args
  }
  clock.advance(std::chrono::microseconds{30});
  t.stopEvent(step);
  t.stopEvent(op);
}

template <typename Table, typename Descr, typename Args>
void checkOld(ProfilerTest& test, const Table& t, void* ctx, SimulatedClock& clock,
              bool opStates = true) {
  driveOld<Table, Descr, Args>(t, ctx, clock, opStates);
  auto* c = static_cast<Context*>(ctx);
  std::int64_t now = clock.monoNow().time_since_epoch().count();
  CommProgress p = commProgress(*c, now);
  EXPECT_EQ(p.coll_entered, 1u);
  EXPECT_EQ(p.coll_finished, 1u);
  EXPECT_EQ(p.last_coll_seq, 3u);
  auto links = linkStats(*c, now);
  ASSERT_EQ(links.size(), 1u);
  EXPECT_EQ(links[0].peer, 1);
  EXPECT_TRUE(links[0].is_send);
  EXPECT_EQ(links[0].bytes, 512u);
  EXPECT_EQ(links[0].gpu_wait.sum, 10u);
  EXPECT_EQ(links[0].transfer.sum, 30u);
  EXPECT_EQ(channelStats(*c).at(0).channel, 2);
  (void)test;
}

TEST_F(ProfilerTest, V1TableWithIntegerDescriptors) {
  void* ctx = nullptr;
  ASSERT_EQ(tableV1().init(&ctx, &mask_), C4_NCCL_PROF_SUCCESS);
  EXPECT_EQ(mask_, kActivationMask);
  EXPECT_EQ(commInfo(*static_cast<Context*>(ctx)).nranks, 0);
  checkOld<C4NcclProfiler_v1_t, C4NcclProfilerEventDescr_v1_t, C4NcclProfilerEventStateArgs_v1_t>(
      *this, tableV1(), ctx, clock_);
  EXPECT_EQ(tableV1().finalize(ctx), C4_NCCL_PROF_SUCCESS);
}

TEST_F(ProfilerTest, V2Table) {
  void* ctx = nullptr;
  ASSERT_EQ(tableV2().init(&ctx, &mask_), C4_NCCL_PROF_SUCCESS);
  checkOld<C4NcclProfiler_v2_t, C4NcclProfilerEventDescr_v2_t, C4NcclProfilerEventStateArgs_v2_t>(
      *this, tableV2(), ctx, clock_);
  EXPECT_EQ(tableV2().finalize(ctx), C4_NCCL_PROF_SUCCESS);
}

TEST_F(ProfilerTest, V3Table) {
  void* ctx = nullptr;
  ASSERT_EQ(tableV3().init(&ctx, &mask_), C4_NCCL_PROF_SUCCESS);
  checkOld<C4NcclProfiler_v3_t, C4NcclProfilerEventDescr_v3_t, C4NcclProfilerEventStateArgs_v3_t>(
      *this, tableV3(), ctx, clock_);
  EXPECT_EQ(tableV3().finalize(ctx), C4_NCCL_PROF_SUCCESS);
}

TEST_F(ProfilerTest, V4TableCommHashFourthInInit) {
  void* ctx = nullptr;
  ASSERT_EQ(tableV4().init(&ctx, &mask_, "tp", 0x44, 2, 8, 3, nullptr), C4_NCCL_PROF_SUCCESS);
  const CommInfo& info = commInfo(*static_cast<Context*>(ctx));
  EXPECT_EQ(info.comm_hash, 0x44u);
  EXPECT_EQ(info.comm_name, "tp");
  EXPECT_EQ(info.nranks, 8);
  EXPECT_EQ(info.rank, 3);
  checkOld<C4NcclProfiler_v4_t, C4NcclProfilerEventDescr_v4_t, C4NcclProfilerEventStateArgs_v4_t>(
      *this, tableV4(), ctx, clock_);
  EXPECT_EQ(tableV4().finalize(ctx), C4_NCCL_PROF_SUCCESS);
}

TEST_F(ProfilerTest, V5TableCommIdSecondInInit) {
  void* ctx = nullptr;
  ASSERT_EQ(tableV5().init(&ctx, 0x55, &mask_, nullptr, 2, 4, 1, nullptr), C4_NCCL_PROF_SUCCESS);
  const CommInfo& info = commInfo(*static_cast<Context*>(ctx));
  EXPECT_EQ(info.comm_hash, 0x55u);
  EXPECT_EQ(info.comm_name, "");
  EXPECT_EQ(info.nranks, 4);
  checkOld<C4NcclProfiler_v5_t, C4NcclProfilerEventDescr_v5_t, C4NcclProfilerEventStateArgs_v5_t>(
      *this, tableV5(), ctx, clock_);
  // The v5 shim records GroupApi states with uninitialised args (profiler_v5.cc l.140).
  C4NcclProfilerEventStateArgs_v5_t junk;
  std::memset(&junk, 0xa5, sizeof(junk));
  EXPECT_EQ(tableV5().recordEventState(nullptr, C4_NCCL_PROF_GROUP_END_API_START, &junk),
            C4_NCCL_PROF_SUCCESS);
  EXPECT_EQ(tableV5().finalize(ctx), C4_NCCL_PROF_SUCCESS);
}

TEST(ProfilerTables, NamesAndInitSignatures) {
  EXPECT_STREQ(tableV1().name, "c4");
  EXPECT_STREQ(tableV2().name, "c4");
  EXPECT_STREQ(tableV3().name, "c4");
  EXPECT_STREQ(tableV4().name, "c4");
  EXPECT_STREQ(tableV5().name, "c4");
  EXPECT_STREQ(tableV6().name, "c4");
}

// ---- Reporter: a real node-plugin socket receives the RankReport --------------------------------

TEST_F(ProfilerTest, ReporterSendsARankReportTheNodePluginDecodes) {
  std::string path = "@c4-profiler-test-" + std::to_string(::getpid());
  auto server = UnixDatagramServer::bind(path);
  ASSERT_TRUE(server.has_value()) << server.error().toString();
  setProcessOptionsForTest(reporting(path));
  void* world = initV6(2, 0);
  void* sub = initV6(4, 0, 0x5b);  // not the whole job: peers unknown
  void* coll = collective(world, 1);
  void* send = proxyOp(world, coll, 1, true);
  sendStep(world, send, 0, 1000);
  sendStep(world, send, 1, 3000);
  stop(send);
  void* recv = proxyOp(world, nullptr, 1, false);  // still in flight at report time
  clock_.advance(2ms);
  void* subOp = proxyOp(sub, nullptr, 2, true);
  stop(subOp);

  processProfilerForTest()->tickNow();
  auto got = server->receive(2000ms);
  ASSERT_TRUE(got.has_value()) << got.error().toString();
  ASSERT_TRUE(got->has_value());
  auto msg = report::decodeMessageCbor((*got)->bytes);
  ASSERT_TRUE(msg.has_value()) << msg.error().toString();
  ASSERT_TRUE(std::holds_alternative<report::RankReport>(*msg));
  const report::RankReport r = std::get<report::RankReport>(*msg);  // msg is reused below
  EXPECT_EQ(r.id.job, "train");
  EXPECT_EQ(r.id.node, "node-a");
  EXPECT_EQ(r.id.rank, 0);
  EXPECT_EQ(r.id.pid, static_cast<std::uint32_t>(::getpid()));
  EXPECT_EQ(r.interval_ms, 1000u);
  ASSERT_EQ(r.connections.size(), 3u);
  const report::ConnectionStats* tx = nullptr;
  const report::ConnectionStats* rx = nullptr;
  const report::ConnectionStats* other = nullptr;
  for (const auto& c : r.connections) {
    if (c.peer_rank == -1) {
      other = &c;
    } else if (c.direction == report::Direction::kSend) {
      tx = &c;
    } else {
      rx = &c;
    }
  }
  ASSERT_TRUE(tx && rx && other);
  EXPECT_EQ(tx->peer_rank, 1);
  EXPECT_EQ(tx->peer_node, "");
  EXPECT_EQ(tx->bytes, 4000u);
  EXPECT_EQ(tx->ops, 1u);
  EXPECT_EQ(tx->inflight, 0u);
  EXPECT_EQ(tx->wait.count, 2u);  // SendPeerWait, 20 us each
  EXPECT_EQ(tx->wait.sum_us, 40u);
  EXPECT_EQ(tx->wait.max_us, 20u);
  EXPECT_EQ(tx->transfer.count, 2u);  // SendWait, 30 us each
  EXPECT_EQ(tx->transfer.sum_us, 60u);
  EXPECT_EQ(tx->transfer.p50_us, 30u);
  EXPECT_EQ(rx->inflight, 1u);
  EXPECT_EQ(rx->oldest_inflight_us, 2000u);
  EXPECT_EQ(rx->ops, 0u);
  EXPECT_EQ(other->ops, 1u);
  EXPECT_NE(other->id, tx->id);
  // Both communicators' collective progress, as the context counts it.
  ASSERT_EQ(r.communicators.size(), 2u);
  const report::CommunicatorProgress& w = r.communicators[0];
  EXPECT_EQ(w.comm_hash, 0xabcu);
  EXPECT_EQ(w.nranks, 2);
  EXPECT_EQ(w.rank, 0);
  EXPECT_EQ(w.coll_entered, 1u);
  EXPECT_EQ(w.coll_finished, 1u);  // its one ProxyOp stopped
  EXPECT_EQ(w.last_coll_seq, 1u);
  EXPECT_EQ(w, progressOf(world));
  EXPECT_EQ(r.communicators[1].comm_hash, 0x5bu);
  EXPECT_EQ(r.communicators[1].nranks, 4);
  EXPECT_EQ(r.communicators[1].coll_entered, 0u);

  // The next report's latency summaries cover only its own interval.
  processProfilerForTest()->tickNow();
  got = server->receive(2000ms);
  ASSERT_TRUE(got.has_value() && got->has_value());
  msg = report::decodeMessageCbor((*got)->bytes);
  ASSERT_TRUE(msg.has_value());
  const auto& r2 = std::get<report::RankReport>(*msg);
  EXPECT_EQ(r2.seq, r.seq + 1);
  for (const auto& c : r2.connections) {
    EXPECT_EQ(c.wait.count, 0u);
    if (c.direction == report::Direction::kSend && c.peer_rank == 1) {
      EXPECT_EQ(c.bytes, 4000u);
    }
  }
  EXPECT_EQ(processProfilerForTest()->sent(), 2u);
  stop(recv);
  EXPECT_EQ(tableV6().finalize(world), C4_NCCL_PROF_SUCCESS);
  EXPECT_EQ(tableV6().finalize(sub), C4_NCCL_PROF_SUCCESS);
}

// The last finalize sends one more report, marked last: the process ended its telemetry in order.
// It still carries the last communicator and its connections (C4D orders exits by them).
TEST_F(ProfilerTest, TheLastFinalizeSendsALastReportWithItsConnections) {
  std::string path = "@c4-profiler-last-" + std::to_string(::getpid());
  auto server = UnixDatagramServer::bind(path);
  ASSERT_TRUE(server.has_value()) << server.error().toString();
  setProcessOptionsForTest(reporting(path));
  void* a = initV6(2, 0, 0xa);
  void* b = initV6(2, 0, 0xb);
  processProfilerForTest()->tickNow();
  void* send = proxyOp(b, collective(b, 1), 1, true);
  sendStep(b, send, 0, 4096);
  stop(send);
  EXPECT_EQ(tableV6().finalize(a), C4_NCCL_PROF_SUCCESS);  // b is still open: not the last
  EXPECT_EQ(tableV6().finalize(a), C4_NCCL_PROF_SUCCESS);  // a again: changes nothing
  EXPECT_NE(processProfilerForTest(), nullptr);
  EXPECT_EQ(tableV6().finalize(b), C4_NCCL_PROF_SUCCESS);
  const auto reports = drain(*server);
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_FALSE(reports[0].last);
  const report::RankReport& last = reports[1];
  EXPECT_TRUE(last.last);
  EXPECT_EQ(last.seq, reports[0].seq + 1);
  ASSERT_EQ(last.communicators.size(), 1u);
  EXPECT_EQ(last.communicators[0].comm_hash, 0xbu);
  ASSERT_EQ(last.connections.size(), 1u);
  EXPECT_EQ(last.connections[0].peer_rank, 1);
  EXPECT_EQ(last.connections[0].bytes, 4096u);
}

// A process that leaves through exit() with a communicator open sends its last report from the
// static destructors; a killed one sends none. Each runs in a child process.
TEST_F(ProfilerTest, AProcessThatExitsSendsALastReportAKilledOneNone) {
  std::string path = "@c4-profiler-exit-" + std::to_string(::getpid());
  auto server = UnixDatagramServer::bind(path);
  ASSERT_TRUE(server.has_value()) << server.error().toString();
  for (const bool killed : {false, true}) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      setProcessOptionsForTest(reporting(path));
      initV6();
      processProfilerForTest()->tickNow();
      if (killed) ::raise(SIGKILL);
      std::exit(0);  // the communicator is still open
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    const auto reports = drain(*server);
    ASSERT_FALSE(reports.empty()) << (killed ? "killed" : "exited");
    EXPECT_FALSE(reports.front().last);
    if (killed) {
      EXPECT_TRUE(WIFSIGNALED(status));
      EXPECT_EQ(reports.size(), 1u);
    } else {
      EXPECT_TRUE(WIFEXITED(status));
      ASSERT_EQ(reports.size(), 2u);
      EXPECT_TRUE(reports.back().last);
      EXPECT_EQ(reports.back().id.pid, static_cast<std::uint32_t>(child));
    }
  }
}

// An exiting process stays until the node plugin has read its last report (the node plugin
// attributes it by the live pid), and no longer: here the linger is 60 s, the child lives while
// its last report is unread and exits once it is read.
TEST_F(ProfilerTest, AnExitingProcessStaysUntilItsLastReportIsRead) {
  std::string path = "@c4-profiler-linger-" + std::to_string(::getpid());
  auto server = UnixDatagramServer::bind(path);
  ASSERT_TRUE(server.has_value()) << server.error().toString();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ProfilerOptions o = reporting(path);
    o.last_report_linger = std::chrono::seconds{60};
    setProcessOptionsForTest(o);
    initV6();
    processProfilerForTest()->tickNow();
    std::exit(0);
  }
  auto tick = server->receive(std::chrono::seconds{10});
  ASSERT_TRUE(tick.has_value() && tick->has_value());
  // The last report is sent right after; the child must still be there while it is unread.
  std::this_thread::sleep_for(std::chrono::milliseconds{200});
  int status = 0;
  EXPECT_EQ(::waitpid(child, &status, WNOHANG), 0) << "exited with its last report unread";
  const auto reports = drain(*server);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_TRUE(reports[0].last);
  // Read: it exits now, not at the end of the linger.
  EXPECT_TRUE(c4::testing::exitsWithin(child, std::chrono::seconds{10}, status))
      << "still lingering 10 s after its last report was read";
  EXPECT_TRUE(WIFEXITED(status));
}

// More communicators than a report holds: the report keeps those with an unfinished operation
// (where a hang shows) and fills the rest in creation order.
TEST_F(ProfilerTest, AReportHoldsAtMost256CommunicatorsTheBusyOnesFirst) {
  ProfilerOptions o;
  o.clock = &clock_;
  o.start_reporter = false;
  setProcessOptionsForTest(o);
  std::vector<void*> contexts;
  for (std::uint64_t i = 0; i < report::kMaxCommunicatorsPerReport + 10; ++i) {
    contexts.push_back(initV6(2, 0, 0x1000 + i));
  }
  void* last = contexts.back();
  void* send = proxyOp(last, collective(last, 5), 1, true);  // in flight: unfinished
  clock_.advance(3ms);
  const report::RankReport r = processProfilerForTest()->buildReport();
  ASSERT_EQ(r.communicators.size(), report::kMaxCommunicatorsPerReport);
  EXPECT_EQ(r.communicators[0].comm_hash, 0x1000u + report::kMaxCommunicatorsPerReport + 9);
  EXPECT_EQ(r.communicators[0].oldest_unfinished_us, 3000u);
  EXPECT_EQ(r.communicators[1].comm_hash, 0x1000u);
  EXPECT_EQ(r.communicators.back().comm_hash, 0x1000u + report::kMaxCommunicatorsPerReport - 2);
  stop(send);
  for (void* c : contexts) EXPECT_EQ(tableV6().finalize(c), C4_NCCL_PROF_SUCCESS);
}

TEST_F(ProfilerTest, AMissingNodePluginCostsNothing) {
  ProfilerOptions o;
  o.clock = &clock_;
  o.start_reporter = false;
  o.config.agent_socket = "@c4-profiler-nobody-listens-" + std::to_string(::getpid());
  setProcessOptionsForTest(o);
  void* ctx = initV6();
  processProfilerForTest()->tickNow();
  EXPECT_EQ(processProfilerForTest()->sent(), 0u);
  EXPECT_EQ(processProfilerForTest()->dropped(), 1u);
  EXPECT_EQ(tableV6().finalize(ctx), C4_NCCL_PROF_SUCCESS);
}

TEST(ProfilerConfig, ReadsTheNetPluginsVariables) {
  std::map<std::string, std::string> env = {{"C4_RANK", "3"},
                                            {"WORLD_SIZE", "8"},
                                            {"C4_JOB", "Train_1"},
                                            {"C4_AGENT_SOCKET", "/run/c4/agent.sock"},
                                            {"C4_REPORT_INTERVAL_MS", "5"}};
  auto cfg = loadConfig([&](const char* n) -> std::optional<std::string> {
    auto it = env.find(n);
    if (it == env.end()) return std::nullopt;
    return it->second;
  });
  EXPECT_EQ(cfg.rank, 3);
  EXPECT_EQ(cfg.world_size, 8);
  EXPECT_EQ(cfg.job, "train-1");
  EXPECT_EQ(cfg.agent_socket, "/run/c4/agent.sock");
  EXPECT_EQ(cfg.report_interval_ms, 1000u);  // 5 is below the minimum of 10
  EXPECT_EQ(cfg.warnings.size(), 2u);
}

// The step clock: the TSC only where the kernel keeps time with it (clocksource tsc, constant
// and nonstop TSC, whole flag words), not when C4_PROFILER_TSC=0; its factor measured against
// CLOCK_MONOTONIC.
TEST(StepClockTest, TheTscIsUsedOnlyWhereTheKernelTrustsIt) {
  char dir[] = "/tmp/c4-stepclock-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string source = std::string(dir) + "/clocksource";
  const std::string cpu = std::string(dir) + "/cpuinfo";
  auto write = [](const std::string& path, const std::string& text) {
    std::FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(text.c_str(), f);
    std::fclose(f);
  };
  const std::string head = "processor\t: 0\nvendor_id\t: GenuineIntel\n";
  write(cpu, head + "flags\t\t: fpu tsc constant_tsc rep_good nonstop_tsc cpuid\nbugs\t\t:\n");
  write(source, "hpet\n");
  EXPECT_FALSE(calibrateStepClock(source.c_str(), cpu.c_str(), nullptr).tsc) << "hpet";
  write(source, "tsc\n");
#if defined(__x86_64__)
  const StepClock on = calibrateStepClock(source.c_str(), cpu.c_str(), nullptr);
  EXPECT_TRUE(on.tsc);
  EXPECT_GT(on.ns_per_tick, 0.01);
  EXPECT_LT(on.ns_per_tick, 10.0);
  EXPECT_TRUE(calibrateStepClock(source.c_str(), cpu.c_str(), "1").tsc);
#endif
  EXPECT_FALSE(calibrateStepClock(source.c_str(), cpu.c_str(), "0").tsc) << "turned off";
  write(cpu, head + "flags\t\t: fpu tsc constant_tsc rep_good nonstop_tsc_x cpuid\n");
  EXPECT_FALSE(calibrateStepClock(source.c_str(), cpu.c_str(), nullptr).tsc) << "a longer word";
  write(cpu, head + "flags\t\t: fpu tsc constant_tsc\n");
  EXPECT_FALSE(calibrateStepClock(source.c_str(), cpu.c_str(), nullptr).tsc) << "not nonstop";
  EXPECT_FALSE(calibrateStepClock((source + ".missing").c_str(), cpu.c_str(), nullptr).tsc);
  std::remove(source.c_str());
  std::remove(cpu.c_str());
  ::rmdir(dir);
}

// With the real clock the steps are timed by the step clock (the TSC here when the kernel uses
// it): a SendWait of 3 ms reads as 3 ms, not as ticks.
TEST_F(ProfilerTest, RealStepsAreTimedInMicroseconds) {
  ProfilerOptions o;  // the real clock
  o.start_reporter = false;
  o.config.rank = 0;
  o.config.world_size = 2;
  setProcessOptionsForTest(o);
  void* ctx = initV6();
  EXPECT_EQ(stepsUseTsc(context(ctx)), processStepClock().tsc);
  void* op = proxyOp(ctx, nullptr, 1, true);
  void* step = proxyStep(ctx, op, 0);
  record(step, kSendWait, 4096);
  const auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(3ms);
  stop(step);
  const auto slept =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  stop(op);
  auto links = linkStats(context(ctx), realClock().monoNow().time_since_epoch().count());
  ASSERT_EQ(links.size(), 1u);
  EXPECT_EQ(links[0].transfer.count, 1u);
  EXPECT_GE(links[0].transfer.sum, 2900u) << "3 ms asleep";
  EXPECT_LE(links[0].transfer.sum, static_cast<std::uint64_t>(slept) + 100) << "at most the sleep";
  EXPECT_EQ(tableV6().finalize(ctx), C4_NCCL_PROF_SUCCESS);
}

}  // namespace
}  // namespace c4::profiler
