// The report codecs (issue #10): decoding one node batch (8 ranks × 8 connections × 4 subflows,
// bench/ingest_batch.h) and one plugin RankReport datagram with the streaming decoder the
// endpoint uses against the DOM-based decoder it replaced (kept as the reference), in the same
// binary; encoding for comparison.
#include <benchmark/benchmark.h>

#include "bench/ingest_batch.h"
#include "report_internal.h"

namespace {

using namespace c4;

const std::vector<std::uint8_t>& batchBytes() {
  static const std::vector<std::uint8_t> bytes = [] {
    bench::BatchShape shape;
    return *report::encodeCbor(bench::makeNodeBatch(shape, 17, 1, 1'764'673'210'000'000'000, 600));
  }();
  return bytes;
}

const std::vector<std::uint8_t>& messageBytes() {
  static const std::vector<std::uint8_t> bytes = [] {
    bench::BatchShape shape;
    auto batch = bench::makeNodeBatch(shape, 17, 1, 1'764'673'210'000'000'000, 600);
    return *report::encodeCbor(report::Message{batch.reports[0]});
  }();
  return bytes;
}

template <typename F>
void decodeLoop(benchmark::State& state, const std::vector<std::uint8_t>& bytes, F decode) {
  for (auto _ : state) {
    auto r = decode(bytes);
    if (!r) state.SkipWithError("decode failed");
    benchmark::DoNotOptimize(r);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(bytes.size()));
  state.counters["bytes"] = static_cast<double>(bytes.size());
}

void BM_NodeBatchDecodeDom(benchmark::State& state) {
  decodeLoop(state, batchBytes(),
             [](const auto& b) { return report::internal::decodeNodeReportCborDom(b); });
}
BENCHMARK(BM_NodeBatchDecodeDom);

void BM_NodeBatchDecodeStreaming(benchmark::State& state) {
  decodeLoop(state, batchBytes(), [](const auto& b) { return report::decodeNodeReportCbor(b); });
}
BENCHMARK(BM_NodeBatchDecodeStreaming);

void BM_NodeBatchEncode(benchmark::State& state) {
  bench::BatchShape shape;
  const auto batch = bench::makeNodeBatch(shape, 17, 1, 1'764'673'210'000'000'000, 600);
  for (auto _ : state) {
    auto bytes = report::encodeCbor(batch);
    benchmark::DoNotOptimize(bytes);
  }
}
BENCHMARK(BM_NodeBatchEncode);

void BM_RankReportDecodeDom(benchmark::State& state) {
  decodeLoop(state, messageBytes(),
             [](const auto& b) { return report::internal::decodeMessageCborDom(b); });
}
BENCHMARK(BM_RankReportDecodeDom);

void BM_RankReportDecodeStreaming(benchmark::State& state) {
  decodeLoop(state, messageBytes(), [](const auto& b) { return report::decodeMessageCbor(b); });
}
BENCHMARK(BM_RankReportDecodeStreaming);

}  // namespace

BENCHMARK_MAIN();
