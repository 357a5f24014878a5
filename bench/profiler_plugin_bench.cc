// Cost of the NCCL profiler plugin per proxy-step event on the proxy thread (docs/design.md §7:
// <= 100 ns), against a baseline in the same binary: the same calls into a table whose functions
// do nothing.
//
// One iteration = one ProxyStep as NCCL 2.30 emits it for a send (src/transport/net.cc
// l.1336-1444): startEvent, recordEventState SendGPUWait, SendPeerWait, SendWait, stopEvent —
// five calls through the v6 table's function pointers, with the real clock. The plugin reads the
// clock once per phase change and once at stop (four reads). ProxyOp start/stop happen once per
// up to nSteps steps and are measured separately (BM_ProxyOpEvent).
#include <benchmark/benchmark.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include "c4/profiler/shells.h"

namespace c4::profiler {
namespace {

C4NcclProfResult emptyStart(void*, void** h, C4NcclProfilerEventDescr_v6_t*) {
  *h = nullptr;
  return C4_NCCL_PROF_SUCCESS;
}
C4NcclProfResult emptyStop(void*) {
  return C4_NCCL_PROF_SUCCESS;
}
C4NcclProfResult emptyRecord(void*, C4NcclProfState, C4NcclProfilerEventStateArgs_v6_t*) {
  return C4_NCCL_PROF_SUCCESS;
}
const C4NcclProfiler_v6_t kEmpty = {"empty", nullptr, emptyStart, emptyStop, emptyRecord, nullptr};

struct Fixture {
  void* ctx = nullptr;
  void* op = nullptr;
  Fixture() {
    ProfilerOptions o;
    o.start_reporter = false;  // the reporter's cost is not on NCCL's threads
    setProcessOptionsForTest(o);
    int mask = 0;
    tableV6().init(&ctx, 1, &mask, nullptr, 1, 2, 0, nullptr);
    C4NcclProfilerEventDescr_v6_t d{};
    d.type = C4_NCCL_PROFILE_PROXY_OP;
    d.proxyOp.pid = ::getpid();
    d.proxyOp.peer = 1;
    d.proxyOp.isSend = 1;
    tableV6().startEvent(ctx, &op, &d);
  }
  ~Fixture() {
    tableV6().stopEvent(op);
    tableV6().finalize(ctx);
  }
};

void stepEvents(benchmark::State& state, const C4NcclProfiler_v6_t& t, void* ctx, void* op) {
  C4NcclProfilerEventDescr_v6_t d{};
  d.type = C4_NCCL_PROFILE_PROXY_STEP;
  d.parentObj = op;
  C4NcclProfilerEventStateArgs_v6_t a{};
  int step = 0;
  for (auto _ : state) {
    void* h = nullptr;
    d.proxyStep.step = step++;
    t.startEvent(ctx, &h, &d);
    a.proxyStep.transSize = 524288;
    t.recordEventState(h, C4_NCCL_PROF_PROXY_STEP_SEND_GPU_WAIT, &a);
    t.recordEventState(h, C4_NCCL_PROF_PROXY_STEP_SEND_PEER_WAIT_V4, &a);
    t.recordEventState(h, C4_NCCL_PROF_PROXY_STEP_SEND_WAIT, &a);
    t.stopEvent(h);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_ProxyStepEventC4(benchmark::State& state) {
  Fixture f;
  // Through a volatile pointer: the compiler may not inline the table's functions.
  const C4NcclProfiler_v6_t* volatile t = &tableV6();
  stepEvents(state, *t, f.ctx, f.op);
}
void BM_ProxyStepEventEmptyTable(benchmark::State& state) {
  Fixture f;
  const C4NcclProfiler_v6_t* volatile t = &kEmpty;
  stepEvents(state, *t, f.ctx, f.op);
}
BENCHMARK(BM_ProxyStepEventC4);
BENCHMARK(BM_ProxyStepEventEmptyTable);

// ProxyOp start + stop (link/channel lookup, pool slot, one clock read, parent reference).
void BM_ProxyOpEvent(benchmark::State& state) {
  Fixture f;
  const C4NcclProfiler_v6_t* volatile t = &tableV6();
  C4NcclProfilerEventDescr_v6_t d{};
  d.type = C4_NCCL_PROFILE_PROXY_OP;
  d.proxyOp.pid = ::getpid();
  d.proxyOp.isSend = 1;
  int peer = 0;
  for (auto _ : state) {
    void* h = nullptr;
    d.proxyOp.peer = peer++ & 1;
    t->startEvent(f.ctx, &h, &d);
    t->stopEvent(h);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ProxyOpEvent);

// The two step clocks' reads alone (the plugin's StepClock): clock_gettime(CLOCK_MONOTONIC)
// through the vDSO, and the TSC where the plugin uses it.
void BM_ClockGettimeRead(benchmark::State& state) {
  timespec t{};
  for (auto _ : state) {
    ::clock_gettime(CLOCK_MONOTONIC, &t);
    benchmark::DoNotOptimize(t);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ClockGettimeRead);

#if defined(__x86_64__)
void BM_TscRead(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(__rdtsc());
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_TscRead);
#endif

}  // namespace
}  // namespace c4::profiler

BENCHMARK_MAIN();
