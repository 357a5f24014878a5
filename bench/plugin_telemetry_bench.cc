// Per-request telemetry cost of the NCCL net plugin (DESIGN.md §7: <= 50 ns), measured against the
// same request path with telemetry compiled out (the hooks' `On=false` instantiation, which is what
// -DC4_TELEMETRY=0 builds).
//
// One iteration = the telemetry work of one request: the NCCL thread stamps the post time (one
// clock read) and marks the slot in flight; the progress thread counts subflow bytes, records wait
// and transfer latencies in the histograms and clears the slot (its timestamps come from the
// progress loop's one clock read per pass, shared by every request of the pass, so they are not
// charged here).
#include <benchmark/benchmark.h>

#include "c4/common/clock.h"
#include "c4/plugin/telemetry.h"

namespace c4::plugin {
namespace {

template <bool On>
void requestPath(benchmark::State& state) {
  ConnTelemetry tel(1, report::Direction::kSend, 4, 256);
  Clock& clock = realClock();
  std::size_t slot = 0;
  std::uint64_t bytes = static_cast<std::uint64_t>(state.range(0));
  std::int64_t progressNow = clock.monoNow().time_since_epoch().count();
  for (auto _ : state) {
    // NCCL thread (isend/irecv).
    std::int64_t posted = On ? clock.monoNow().time_since_epoch().count() : 0;
    tel.markPosted<On>(slot, posted);
    tel.onPosted<On>();
    // Progress thread.
    progressNow += 1500;
    tel.onSubflowBytes<On>(slot & 3, bytes);
    tel.onCompleted<On>(bytes, posted, posted + 700, progressNow);
    tel.markDone<On>(slot);
    slot = (slot + 1) & 255;
    benchmark::ClobberMemory();
  }
  benchmark::DoNotOptimize(tel.bytes.load());
  state.SetItemsProcessed(state.iterations());
}

void BM_RequestTelemetryOn(benchmark::State& s) {
  requestPath<true>(s);
}
void BM_RequestTelemetryCompiledOut(benchmark::State& s) {
  requestPath<false>(s);
}
BENCHMARK(BM_RequestTelemetryOn)->Arg(4096)->Arg(1 << 20);
BENCHMARK(BM_RequestTelemetryCompiledOut)->Arg(4096)->Arg(1 << 20);

// The reporter's side, for scale: summarising one connection's histograms.
void BM_HistogramSummary(benchmark::State& state) {
  LatencyHistogram h;
  for (std::uint64_t i = 0; i < 100000; ++i) h.record(i % 5000);
  auto before = h.snapshot();
  for (auto _ : state) {
    auto now = h.snapshot();
    benchmark::DoNotOptimize(LatencyHistogram::summarize(before, now, 5000));
  }
}
BENCHMARK(BM_HistogramSummary);

// For scale: the one clock read of the request path (injected c4::Clock, virtual call).
void BM_ClockRead(benchmark::State& state) {
  Clock& clock = realClock();
  for (auto _ : state) benchmark::DoNotOptimize(clock.monoNow());
}
BENCHMARK(BM_ClockRead);

}  // namespace
}  // namespace c4::plugin

BENCHMARK_MAIN();
