// Writes the seed corpora of the fuzzers that read report encodings (corpus/report_cbor,
// report_json, reassembly, report_handler) from the builders the unit tests use. The text
// formats' seeds (plan, fabric, kubeconfig, trainingjob, handshake) come from make_seeds.py.
//
//   build-fuzz/fuzz/c4-fuzz-seeds fuzz/corpus
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "c4/plugin/transport.h"
#include "unit-tests/operator/ingest/ingest_testing.h"

namespace {

using namespace c4;
using namespace c4::op::ingest::testing;
namespace fs = std::filesystem;

fs::path gRoot;

void write(const std::string& target, const std::string& name, const std::string& bytes) {
  fs::create_directories(gRoot / target);
  std::ofstream(gRoot / target / name, std::ios::binary) << bytes;
}

std::string str(const std::vector<std::uint8_t>& v) {
  return std::string(v.begin(), v.end());
}

template <typename T>
std::string cbor(const T& v) {
  auto b = report::encodeCbor(v);
  if (!b) {
    std::fprintf(stderr, "encode: %s\n", b.error().toString().c_str());
    std::exit(1);
  }
  return str(*b);
}
template <typename T>
std::string json(const T& v) {
  auto t = report::encodeJson(v);
  if (!t) {
    std::fprintf(stderr, "encode: %s\n", t.error().toString().c_str());
    std::exit(1);
  }
  return *t;
}

// A reassembly record: [pid][ms to advance][length LE][datagram].
std::string record(int pid, int ms, const std::string& datagram) {
  std::string r;
  r += static_cast<char>(pid);
  r += static_cast<char>(ms);
  r += static_cast<char>(datagram.size() & 0xff);
  r += static_cast<char>((datagram.size() >> 8) & 0xff);
  return r + datagram;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: c4-fuzz-seeds <corpus dir>\n");
    return 2;
  }
  gRoot = argv[1];
  // SimulatedClock's start: the report_handler fuzzer's clock.
  const std::int64_t now = std::int64_t{1'700'000'000} * 1'000'000'000;

  auto id0 = identity("ns1", "job", 0, "node-a", 0, 2);
  auto id1 = identity("ns1", "job", 1, "node-a", 0, 2);
  report::RankReport rank = rankReport(id0, 7, now, 3);
  rank.connections[0].subflows.resize(2);
  rank.connections[0].subflows[1].index = 1;
  rank.connections[0].subflows[1].path_id = 1;
  rank.communicators = {{0x5eed, 2, 0, 12, 11, 3, 3, 12, 1'500'000},
                        {0xabc, 8, 5, 4, 4, 0, 0, 4, 0}};
  report::ProgressNotice progress{id1, now, 42, report::ProgressState::kCheckpointing};
  report::CheckpointNotice checkpoint = checkpointNotice(id0, 40, now);
  report::AnomalyNotice anomaly;
  anomaly.id = id1;
  anomaly.time_unix_ns = now;
  anomaly.connection_id = 3;
  anomaly.peer_rank = 2;
  anomaly.peer_node = "node-b";
  anomaly.age_us = 5'000'000;
  anomaly.detail = "no progress";

  report::NodeReport batch = nodeReport("node-a", 10, now);
  batch.reports.push_back(rank);
  batch.reports.push_back(rankReport(id1, 7, now, 1));
  batch.notices.push_back(checkpoint);
  batch.notices.push_back(progress);
  batch.notices.push_back(anomaly);

  const std::vector<std::pair<std::string, report::Message>> messages{
      {"rank", rank}, {"progress", progress}, {"checkpoint", checkpoint}, {"anomaly", anomaly}};
  for (const auto& [name, m] : messages) {
    write("report_cbor", name, cbor(m));
    write("report_json", name, json(m));
  }
  write("report_cbor", "batch", cbor(batch));
  write("report_json", "batch", json(batch));
  write("report_cbor", "batch-empty", cbor(nodeReport("node-a", 1, now)));
  report::NodeReport replay = batch;  // last words resent to a new operator instance
  replay.replay = true;
  write("report_cbor", "batch-replay", cbor(replay));
  write("report_json", "batch-replay", json(replay));

  // Reassembly: a report cut into parts, sent in order, reordered and with a duplicate; two
  // senders interleaved; a single-part report.
  report::RankReport big = rankReport(id0, 9, now, 12);
  big.communicators = rank.communicators;
  auto parts = telemetry::encodeReportParts(big, 700);
  if (!parts || parts->size() < 3) {
    std::fprintf(stderr, "expected a report in several parts\n");
    return 1;
  }
  std::string in_order, shuffled, interleaved;
  for (const auto& p : *parts) in_order += record(1, 1, str(p));
  for (std::size_t i = parts->size(); i-- > 0;) shuffled += record(1, 0, str((*parts)[i]));
  shuffled += record(1, 0, str((*parts)[0]));
  report::RankReport other = rankReport(id1, 9, now, 12);
  auto other_parts = telemetry::encodeReportParts(other, 700);
  for (std::size_t i = 0; i < parts->size(); ++i) {
    interleaved += record(1, 100, str((*parts)[i]));
    if (other_parts && i < other_parts->size())
      interleaved += record(2, 100, str((*other_parts)[i]));
  }
  write("reassembly", "in-order", in_order);
  write("reassembly", "shuffled-duplicate", shuffled);
  write("reassembly", "interleaved-slow", interleaved);
  write("reassembly", "single",
        record(0, 0, cbor(report::Message{rank})) + record(0, 0, cbor(report::Message{progress})));

  // The endpoint: [mode][body]; mode 0 CBOR, 1 JSON.
  write("report_handler", "cbor", std::string(1, '\0') + cbor(batch));
  write("report_handler", "json", std::string(1, '\1') + json(batch));
  write("report_handler", "cbor-other-node",
        std::string(1, '\0') + cbor(nodeReport("node-b", 3, now)));
  // Tiled bodies, [mode][prefix length][prefix][unit]: an indefinite CBOR array of empty arrays,
  // a JSON array of empty arrays, one-character strings, a CBOR map of
  // empty keys and null values.
  write("report_handler_tiled", "cbor-arrays", std::string("\x00\x01\x00\x9f\x80", 5));
  write("report_handler_tiled", "json-arrays", std::string("\x01\x01\x00[[],", 7));
  write("report_handler_tiled", "cbor-strings", std::string("\x00\x01\x00\x9f\x61z", 6));
  write("report_handler_tiled", "cbor-map", std::string("\x00\x01\x00\xbf\x60\xf6", 6));
  return 0;
}
