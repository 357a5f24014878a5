// Per-request telemetry cost of the NCCL net plugin (docs/design.md §7: <= 50 ns), measured against
// the same request path with telemetry compiled out (the hooks' `On=false` instantiation, which is
// what -DC4_TELEMETRY=0 builds).
//
// One iteration = the telemetry work of one request: isend/irecv stamps the post time (one clock
// read) and marks the slot in flight; the progress pass that moves its bytes counts subflow bytes,
// records wait and transfer latencies in the histograms and clears the slot. A progress pass reads
// the clock at most once, shared by every request it touches: a small send that completes inside
// its isend needs no second read (BM_RequestTelemetryOn); a request completed by a later pass that
// completes nothing else pays a second read (BM_RequestTelemetryOnTwoClockReads, the worst case).
#include <benchmark/benchmark.h>

#include "c4/common/clock.h"
#include "c4/plugin/telemetry.h"

namespace c4::plugin {
namespace {

template <bool On, bool SecondRead = false>
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
    // The progress pass that completes it.
    if constexpr (SecondRead) {
      progressNow = clock.monoNow().time_since_epoch().count();
    } else {
      progressNow += 1500;
    }
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
void BM_RequestTelemetryOnTwoClockReads(benchmark::State& s) {
  requestPath<true, true>(s);
}
void BM_RequestTelemetryCompiledOut(benchmark::State& s) {
  requestPath<false>(s);
}
BENCHMARK(BM_RequestTelemetryOn)->Arg(4096)->Arg(1 << 20);
BENCHMARK(BM_RequestTelemetryOnTwoClockReads)->Arg(4096);
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

// For scale: one clock read (injected c4::Clock, virtual call).
void BM_ClockRead(benchmark::State& state) {
  Clock& clock = realClock();
  for (auto _ : state) benchmark::DoNotOptimize(clock.monoNow());
}
BENCHMARK(BM_ClockRead);

}  // namespace
}  // namespace c4::plugin

BENCHMARK_MAIN();
