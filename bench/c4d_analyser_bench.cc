// C4D analyser tick time (issue #11: <= 200 ms p99 on one core for a 16,384-rank job).
//
// A healthy synthetic job: `ranks` ranks, 8 per node, `rings` bidirectional rings (strides 1, 3,
// 5, 7): each rank has `rings` x 2 send and as many receive connections. Every iteration advances
// the job one window (counters, in-flight ops, wait/transfer summaries; simulated time, outside
// the measurement), copies the snapshot (the baseline: what merely handing the analyser its
// input costs), then runs one JobAnalyser::tick on it. Counters: p50/p99 of the tick and of the
// copy, their ratio, edges per tick, and memory: the heap the analyser keeps between ticks
// (glibc mallinfo2, after the warm-up ticks) next to the heap of the job's snapshot itself.
//
//   build/bench/c4-c4d-analyser-bench --benchmark_filter=Tick/16384
#include <benchmark/benchmark.h>
#include <malloc.h>

#include <algorithm>
#include <random>
#include <vector>

#include "c4/common/clock.h"
#include "operator/c4d/analyser.h"

namespace {

using c4::c4d::ConnSample;
using c4::c4d::JobSnapshot;
using c4::c4d::ReportSample;

constexpr int kRanksPerNode = 8;

struct Job {
  JobSnapshot snap;
  std::mt19937_64 rng{42};
  c4::WallTime now{std::chrono::seconds{1'700'000'000}};

  Job(int ranks, int rings) {
    snap.ns = "bench";
    snap.name = "job";
    snap.world_size = ranks;
    for (int n = 0; n < ranks / kRanksPerNode; ++n) {
      c4::c4d::NodeSnapshot node;
      node.name = "node-" + std::to_string(n);
      snap.nodes.push_back(node);
    }
    snap.ranks.resize(static_cast<std::size_t>(ranks));
    std::uint64_t id = 1;
    for (int r = 0; r < ranks; ++r) {
      auto& rs = snap.ranks[static_cast<std::size_t>(r)];
      rs.node = r / kRanksPerNode;
      rs.pod = "job-" + std::to_string(r);
      rs.pod_state = c4::c4d::PodState::kRunning;
      ReportSample rep;
      for (int k = 0; k < rings; ++k) {
        const int stride = 2 * k + 1;
        for (int peer : {(r + stride) % ranks, (r - stride + ranks) % ranks}) {
          for (auto dir : {c4::report::Direction::kSend, c4::report::Direction::kRecv}) {
            ConnSample c;
            c.id = id++;
            c.direction = dir;
            c.peer_rank = peer;
            rep.connections.push_back(c);
          }
        }
      }
      rs.reports = {rep, rep};
    }
  }

  // One healthy window: every connection moves ~200 MB (±30%) in 20 ops.
  void advance() {
    now += std::chrono::seconds{1};
    std::uniform_real_distribution<double> jit(0.7, 1.3);
    for (auto& rs : snap.ranks) {
      std::swap(rs.reports[0], rs.reports[1]);
      ReportSample& cur = rs.reports[1];
      const ReportSample& prev = rs.reports[0];
      cur.time = now;
      for (std::size_t i = 0; i < cur.connections.size(); ++i) {
        ConnSample& c = cur.connections[i];
        const double bytes = 200e6 * jit(rng);
        c.bytes = prev.connections[i].bytes + static_cast<std::uint64_t>(bytes);
        c.ops = prev.connections[i].ops + 20;
        c.inflight = static_cast<std::uint32_t>(rng() % 3);
        c.oldest_inflight_us = c.inflight ? rng() % 50'000 : 0;
        c.wait.count = 20;
        c.wait.sum_us = static_cast<std::uint64_t>(100'000 * jit(rng));
        c.transfer.count = 20;
        c.transfer.sum_us = static_cast<std::uint64_t>(bytes / 2e9 * 1e6 * jit(rng));
      }
    }
  }
};

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

void BM_C4dAnalyserTick(benchmark::State& state) {
  const int ranks = static_cast<int>(state.range(0));
  const int rings = static_cast<int>(state.range(1));
  const auto heap = [] { return static_cast<double>(mallinfo2().uordblks); };
  const double h0 = heap();
  Job job(ranks, rings);
  const double h1 = heap();
  c4::c4d::JobAnalyser analyser;
  c4::Clock& clock = c4::realClock();
  std::vector<double> tickMs, copyMs;
  std::size_t edges = 0;
  for (int i = 0; i < 5; ++i) {  // past the warm-up windows
    job.advance();
    (void)analyser.tick(job.snap, job.now);
  }
  const double h2 = heap();  // the analyser's state between ticks
  for (auto _ : state) {
    state.PauseTiming();
    job.advance();
    const auto c0 = clock.monoNow();
    JobSnapshot copy = job.snap;
    const auto c1 = clock.monoNow();
    benchmark::DoNotOptimize(copy);
    state.ResumeTiming();
    const auto t0 = clock.monoNow();
    auto result = analyser.tick(job.snap, job.now);
    const auto t1 = clock.monoNow();
    benchmark::DoNotOptimize(result);
    if (!result || !result->verdicts.empty()) {
      state.SkipWithError("tick failed or found a fault in a healthy job");
      return;
    }
    edges = result->stats.edges;
    tickMs.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    copyMs.push_back(std::chrono::duration<double, std::milli>(c1 - c0).count());
  }
  const double tick50 = percentile(tickMs, 0.5), tick99 = percentile(tickMs, 0.99);
  const double copy50 = percentile(copyMs, 0.5);
  state.counters["tick_p50_ms"] = tick50;
  state.counters["tick_p99_ms"] = tick99;
  state.counters["copy_p50_ms"] = copy50;
  state.counters["copy_p99_ms"] = percentile(copyMs, 0.99);
  state.counters["tick_over_copy"] = tick50 / copy50;
  state.counters["edges"] = static_cast<double>(edges);
  state.counters["snapshot_mib"] = (h1 - h0) / (1 << 20);
  state.counters["analyser_mib"] = (h2 - h1) / (1 << 20);
}

BENCHMARK(BM_C4dAnalyserTick)
    ->ArgNames({"ranks", "rings"})
    ->Args({1024, 1})
    ->Args({4096, 1})
    ->Args({16384, 1})
    ->Args({16384, 4})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(100);

}  // namespace

BENCHMARK_MAIN();
