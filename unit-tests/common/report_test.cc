#include "c4/common/report.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

namespace c4::report {
namespace {

using json = nlohmann::json;

RankIdentity identity(int rank = 3) {
  return RankIdentity{"team-a", "llama-70b", "llama-70b-3", "node-7", rank, 8, 2, 4242};
}

RankReport sampleReport() {
  RankReport r;
  r.id = identity();
  r.seq = 17;
  r.time_unix_ns = 1'764'673'209'000'000'000LL;
  r.interval_ms = 1000;
  r.plan_version = 5;
  r.dropped_messages = 1;
  ConnectionStats c;
  c.id = 99;
  c.direction = Direction::kRecv;
  c.peer_rank = 2;
  c.peer_node = "node-6";
  c.peer_pod = "llama-70b-2";
  c.bytes = 1ULL << 40;
  c.ops = 123456;
  c.inflight = 3;
  c.oldest_inflight_us = 2500;
  c.wait = {10, 5000, 900, 400, 850};
  c.transfer = {10, 20000, 3000, 1900, 2900};
  c.subflows = {{0, 40001, 0, 0.5, 1000}, {1, 40002, 1, 0.5, 1001}};
  r.connections.push_back(c);
  c.id = 100;
  c.direction = Direction::kSend;
  c.inflight = 0;
  c.oldest_inflight_us = 0;
  c.subflows.clear();
  r.connections.push_back(c);
  r.communicators.push_back({0x5eedf00d5eedf00dULL, 8, 3, 1200, 1199, 40, 40, 1200, 350'000});
  return r;
}

std::vector<Message> sampleMessages() {
  return {
      sampleReport(),
      ProgressNotice{identity(), 1'764'673'209'000'000'001LL, 1200, ProgressState::kCheckpointing},
      CheckpointNotice{identity(), 1'764'673'209'000'000'002LL, 1200, "/ckpt/step-1200"},
      AnomalyNotice{identity(), 1'764'673'209'000'000'003LL, AnomalyKind::kStall, 99,
                    Direction::kRecv, 2, "node-6", 31'000'000, "recv posted 31 s ago, 0 bytes"},
  };
}

NodeReport sampleNodeReport() {
  NodeReport n;
  n.node = "node-7";
  n.seq = 9;
  n.time_unix_ns = 1'764'673'210'000'000'000LL;
  n.health.nics.resize(2);
  n.health.nics[0].name = "eth0";
  n.health.nics[0].up = true;
  n.health.nics[0].speed_mbps = 100000;
  n.health.nics[1].name = "mlx5_0";
  n.health.nics[1].rdma = true;
  n.health.nics[1].speed_mbps = 400000;
  n.health.nics[1].errors = 17;
  n.health.gpus.resize(2);
  n.health.gpus[0].uuid = "GPU-1234";
  n.health.gpus[1].index = 1;
  n.health.gpus[1].uuid = "GPU-5678";
  n.health.gpus[1].healthy = false;
  n.health.gpus[1].detail = "Xid 79";
  n.health.nics[0].operstate = "up";
  n.health.nics[0].carrier = true;
  n.health.nics[0].carrier_changes = 4;
  n.health.nics[1].operstate = "down";
  n.health.nics[1].rx_errors = 10;
  n.health.nics[1].tx_errors = 7;
  n.health.nics[1].rx_dropped = 3;
  n.health.nics[1].tx_dropped = 2;
  n.health.nics_available = true;
  RdmaPortHealth port;
  port.device = "mlx5_0";
  port.port = 1;
  port.netdev = "ib0";
  port.state = "ACTIVE";
  port.phys_state = "LinkUp";
  port.rate_mbps = 400000;
  port.active = true;
  port.symbol_errors = 1;
  port.link_downed = 2;
  port.link_error_recovery = 3;
  port.rcv_errors = 4;
  port.xmit_discards = 5;
  n.health.rdma_ports = {port};
  n.health.rdma_available = true;
  n.health.gpus[1].ecc_volatile_uncorrected = 2;
  n.health.gpus[1].retired_pages_pending = true;
  n.health.gpus[1].last_xid = 79;
  n.health.gpus[1].throttle_reasons = 0x40;
  n.health.gpus_available = true;
  n.health.gpus_reason = "";
  n.reports = {sampleReport()};
  n.notices = {ProgressNotice{identity(), 1'764'673'209'000'000'001LL, 7, ProgressState::kTraining},
               AnomalyNotice{identity(1), 1'764'673'209'000'000'003LL, AnomalyKind::kPeerClosed, 5,
                             Direction::kSend, 0, "", 0, "reset"}};
  n.dropped_messages = 3;
  n.rejected_messages = 4;
  return n;
}

TEST(ReportTest, MessagesRoundTripThroughCbor) {
  for (const auto& m : sampleMessages()) {
    auto bytes = encodeCbor(m);
    ASSERT_TRUE(bytes.has_value()) << bytes.error().toString();
    auto back = decodeMessageCbor(*bytes);
    ASSERT_TRUE(back.has_value()) << back.error().toString();
    EXPECT_EQ(*back, m) << messageKind(m);
  }
}

TEST(ReportTest, MessagesRoundTripThroughJson) {
  for (const auto& m : sampleMessages()) {
    auto text = encodeJson(m);
    ASSERT_TRUE(text.has_value()) << text.error().toString();
    auto back = decodeMessageJson(*text);
    ASSERT_TRUE(back.has_value()) << back.error().toString();
    EXPECT_EQ(*back, m) << *text;
  }
}

TEST(ReportTest, NodeReportRoundTrips) {
  const NodeReport n = sampleNodeReport();
  auto bytes = encodeCbor(n);
  ASSERT_TRUE(bytes.has_value()) << bytes.error().toString();
  auto back = decodeNodeReportCbor(*bytes);
  ASSERT_TRUE(back.has_value()) << back.error().toString();
  EXPECT_EQ(*back, n);
  auto text = encodeJson(n);
  ASSERT_TRUE(text.has_value());
  auto back2 = decodeNodeReportJson(*text);
  ASSERT_TRUE(back2.has_value()) << back2.error().toString();
  EXPECT_EQ(*back2, n);
}

TEST(ReportTest, WireCarriesVersionAndKind) {
  auto text = encodeJson(Message{sampleReport()});
  ASSERT_TRUE(text.has_value());
  auto j = json::parse(*text);
  EXPECT_EQ(j["v"], kSchemaVersion);
  EXPECT_EQ(j["kind"], "RankReport");
  EXPECT_EQ(j["connections"][0]["direction"], "recv");
}

// Mutates the JSON form of a valid message and expects decoding to fail with a message that
// names `expect_in_error`.
void expectRejected(const std::function<void(json&)>& mutate, const std::string& expect_in_error,
                    const Message& base = sampleReport()) {
  json j = json::parse(*encodeJson(base));
  mutate(j);
  auto viaJson = decodeMessageJson(j.dump());
  ASSERT_FALSE(viaJson.has_value()) << "accepted: " << j.dump();
  EXPECT_EQ(viaJson.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(viaJson.error().message.find(expect_in_error), std::string::npos)
      << viaJson.error().message;
  auto cbor = json::to_cbor(j);
  auto viaCbor = decodeMessageCbor(cbor);
  ASSERT_FALSE(viaCbor.has_value());
  if (cbor.size() <= kMaxDatagramBytes) {
    EXPECT_EQ(viaCbor.error().message, viaJson.error().message);
  } else {
    EXPECT_NE(viaCbor.error().message.find("exceeds the limit"), std::string::npos);
  }
}

TEST(ReportTest, RejectsWrongVersion) {
  expectRejected([](json& j) { j["v"] = 2; }, "schema version 2 is not supported");
  expectRejected([](json& j) { j["v"] = "1"; }, "Message.v: must be an integer");
  expectRejected([](json& j) { j.erase("v"); }, "Message.v: missing");
}

TEST(ReportTest, RejectsUnknownKind) {
  expectRejected([](json& j) { j["kind"] = "Bogus"; }, "unknown message kind \"Bogus\"");
}

TEST(ReportTest, RejectsMissingAndUnknownFields) {
  expectRejected([](json& j) { j.erase("seq"); }, "Message.seq: missing");
  expectRejected([](json& j) { j["connections"][0].erase("bytes"); },
                 "connections[0].bytes: missing");
  expectRejected([](json& j) { j["extra"] = 1; }, "Message.extra: unknown field");
  expectRejected([](json& j) { j["id"]["color"] = "red"; }, "Message.id.color: unknown field");
}

TEST(ReportTest, RejectsWrongTypes) {
  expectRejected([](json& j) { j["seq"] = -1; }, "Message.seq: must be a non-negative integer");
  expectRejected([](json& j) { j["seq"] = 1.5; }, "Message.seq: must be a non-negative integer");
  expectRejected([](json& j) { j["connections"] = json::object(); },
                 "connections: must be an array");
  expectRejected([](json& j) { j["id"]["pod"] = 7; }, "Message.id.pod: must be a string");
  expectRejected([](json& j) { j["connections"][0]["subflows"][0]["weight"] = "x"; },
                 "weight: must be a number");
  expectRejected([](json& j) { j["connections"][0]["direction"] = "sideways"; },
                 "\"sideways\" is not one of: send, recv");
}

TEST(ReportTest, RejectsAbsurdValues) {
  expectRejected([](json& j) { j["id"]["rank"] = 1 << 25; }, "Message.id.rank");
  expectRejected([](json& j) { j["id"]["rank"] = 9; }, "rank: must be below worldSize");
  expectRejected([](json& j) { j["intervalMs"] = 0; }, "intervalMs");
  expectRejected([](json& j) { j["timeUnixNs"] = 0; }, "timeUnixNs");
  expectRejected(
      [](json& j) {
        j["part"] = 3;
        j["parts"] = 2;
      },
      "part");
  expectRejected([](json& j) { j["connections"][0]["subflows"][0]["localPort"] = 70000; },
                 "localPort: 70000 exceeds the maximum 65535");
  expectRejected([](json& j) { j["connections"][0]["subflows"][0]["weight"] = -1; }, "weight");
  expectRejected([](json& j) { j["connections"][0]["wait"]["p50Us"] = 999999; }, "percentiles");
  expectRejected([](json& j) { j["connections"][1]["oldestInflightUs"] = 5; },
                 "non-zero with no op in flight");
  expectRejected([](json& j) { j["id"]["pod"] = "Bad_Name"; }, "not a valid Kubernetes name");
  expectRejected([](json& j) { j["id"]["node"] = std::string(300, 'a'); }, "longer than 253 bytes");
  expectRejected([](json& j) { j["communicators"][0]["rank"] = 8; },
                 "communicators[0].rank: must be -1 or below nranks");
  expectRejected([](json& j) { j["communicators"][0]["collFinished"] = 1201; },
                 "collFinished: must not exceed collEntered");
  expectRejected([](json& j) { j["communicators"][0]["p2pFinished"] = 41; },
                 "p2pFinished: must not exceed p2pEntered");
  expectRejected([](json& j) { j["communicators"][0]["nranks"] = -1; }, "nranks");
}

TEST(ReportTest, RejectsTooManyItems) {
  expectRejected(
      [](json& j) {
        json conn = j["connections"][1];
        j["connections"] = json::array();
        for (std::size_t i = 0; i <= kMaxConnectionsPerReport; ++i)
          j["connections"].push_back(conn);
      },
      "items exceeds the limit of 1024");
  expectRejected(
      [](json& j) {
        json sf = j["connections"][0]["subflows"][0];
        for (std::size_t i = 0; i < kMaxSubflowsPerConnection; ++i) {
          j["connections"][0]["subflows"].push_back(sf);
        }
      },
      "subflows: 66 items exceeds the limit of 64");
  expectRejected(
      [](json& j) {
        json comm = j["communicators"][0];
        for (std::size_t i = 0; i < kMaxCommunicatorsPerReport; ++i) {
          j["communicators"].push_back(comm);
        }
      },
      "communicators: 257 items exceeds the limit of 256");
}

TEST(ReportTest, RejectsInvalidUtf8) {
  json j = json::parse(*encodeJson(Message{sampleMessages()[2]}));
  auto cbor = json::to_cbor(j);
  // Replace the path text "/ckpt/step-1200" with invalid UTF-8 of equal length in the CBOR bytes.
  const std::string needle = "/ckpt/step-1200";
  auto it = std::search(cbor.begin(), cbor.end(), needle.begin(), needle.end());
  ASSERT_NE(it, cbor.end());
  *it = 0xC3;
  *(it + 1) = 0x28;  // 0xC3 0x28: invalid two-byte sequence
  auto r = decodeMessageCbor(cbor);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("not valid UTF-8"), std::string::npos) << r.error().message;
}

TEST(ReportTest, EncoderRejectsInvalidValues) {
  RankReport r = sampleReport();
  r.id.pod = "UPPER";
  auto e = encodeCbor(Message{r});
  ASSERT_FALSE(e.has_value());
  EXPECT_NE(e.error().message.find("RankReport.id.pod"), std::string::npos);
  NodeReport n = sampleNodeReport();
  n.node.clear();
  ASSERT_FALSE(encodeCbor(n).has_value());
}

TEST(ReportTest, RejectsOversizedDatagram) {
  std::vector<std::uint8_t> big(kMaxDatagramBytes + 1, 0xA0);
  auto r = decodeMessageCbor(big);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("exceeds the limit"), std::string::npos);
  ASSERT_FALSE(decodeMessageCbor({}).has_value());
}

TEST(ReportTest, EveryTruncationIsRejected) {
  for (const auto& m : sampleMessages()) {
    auto bytes = *encodeCbor(m);
    for (std::size_t n = 0; n < bytes.size(); ++n) {
      auto r = decodeMessageCbor(std::span(bytes.data(), n));
      ASSERT_FALSE(r.has_value()) << messageKind(m) << " prefix " << n;
      EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    }
  }
  auto node = *encodeCbor(sampleNodeReport());
  for (std::size_t n = 0; n < node.size(); n += 7) {
    ASSERT_FALSE(decodeNodeReportCbor(std::span(node.data(), n)).has_value());
  }
}

TEST(ReportTest, RandomBytesNeverCrashOrPass) {
  std::mt19937_64 rng(12345);
  int accepted = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::vector<std::uint8_t> buf(1 + rng() % 256);
    for (auto& b : buf) b = static_cast<std::uint8_t>(rng());
    if (decodeMessageCbor(buf).has_value()) ++accepted;
    (void)decodeNodeReportCbor(buf);
  }
  EXPECT_EQ(accepted, 0);
  // Bit flips of a valid message: decode must either fail cleanly or yield a valid message.
  auto bytes = *encodeCbor(Message{sampleReport()});
  for (int iter = 0; iter < 20000; ++iter) {
    auto copy = bytes;
    copy[rng() % copy.size()] ^= static_cast<std::uint8_t>(1u << (rng() % 8));
    auto r = decodeMessageCbor(copy);
    if (r.has_value()) {
      EXPECT_TRUE(validate(*r).has_value());
    }
  }
}

TEST(ReportTest, DeepNestingIsRejectedWithoutRecursion) {
  // 100000 nested one-element arrays: a recursive parser would overflow the stack.
  std::vector<std::uint8_t> deep(100000, 0x81);
  deep.push_back(0x00);
  auto r = decodeMessageCbor(deep);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("nesting deeper"), std::string::npos) << r.error().message;
  std::string text(100000, '[');
  auto r2 = decodeMessageJson(text);
  ASSERT_FALSE(r2.has_value());
}

// Found by fuzz/report_handler_fuzzer.cc: nlohmann's CBOR reader reads an indefinite-length
// string's chunks by recursion and takes indefinite chunks, which RFC 8949 forbids; a datagram or
// body of 0x7f (or 0x5f) bytes overflowed the stack of the node plugin's receiver or the
// operator's report handler.
TEST(ReportTest, NestedIndefiniteStringsAreRejectedWithoutRecursion) {
  for (std::uint8_t head : {std::uint8_t{0x7f}, std::uint8_t{0x5f}}) {
    std::vector<std::uint8_t> datagram(kMaxDatagramBytes, head);
    auto m = decodeMessageCbor(datagram);
    ASSERT_FALSE(m.has_value());
    EXPECT_NE(m.error().message.find("byte 1: a chunk of an indefinite-length string"),
              std::string::npos)
        << m.error().message;
    std::vector<std::uint8_t> body = {0xA1, 0x64, 'n', 'o', 'd', 'e'};
    body.insert(body.end(), std::size_t{4} << 20, head);
    auto b = decodeNodeReportCbor(body);
    ASSERT_FALSE(b.has_value());
    EXPECT_NE(b.error().message.find("byte 7: a chunk of an indefinite-length string"),
              std::string::npos)
        << b.error().message;
  }
  // Definite chunks are CBOR: the DOM decoder reads them (and names the field it then refuses).
  std::vector<std::uint8_t> chunks = {0xA1, 0x64, 'n', 'o',  'd', 'e', 0x7f,
                                      0x62, 'a',  'b', 0x61, 'c', 0xff};
  auto c = decodeNodeReportCbor(chunks);
  ASSERT_FALSE(c.has_value());
  EXPECT_EQ(c.error().message.find("indefinite-length"), std::string::npos) << c.error().message;
  // A chunk of the other string type is refused too.
  std::vector<std::uint8_t> mixed = {0xA1, 0x64, 'n', 'o', 'd', 'e', 0x7f, 0x41, 'a', 0xff};
  auto x = decodeNodeReportCbor(mixed);
  ASSERT_FALSE(x.has_value());
  EXPECT_NE(x.error().message.find("byte 7: a chunk"), std::string::npos) << x.error().message;
}

TEST(ReportTest, ABodyOfTinyItemsIsRefusedBeforeItBuildsAHugeDom) {
  // {"reports": [null, null, ...]}: 3 Mi one-byte items in 3 MiB, far under the 64 MiB body
  // limit. Not the schema, so the streaming decoder refuses it and the DOM decoder diagnoses it;
  // that decoder stops at its item bound instead of building every value (16+ bytes each).
  std::vector<std::uint8_t> body = {0xA1, 0x67, 'r', 'e', 'p', 'o', 'r', 't', 's', 0x9F};
  body.insert(body.end(), std::size_t{3} << 20, 0xF6);
  body.push_back(0xFF);
  auto r = decodeNodeReportCbor(body);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("more than 2097152 values and keys"), std::string::npos)
      << r.error().message;
  // The same bound for JSON, which always builds a DOM.
  std::string text = "{\"reports\":[";
  for (std::size_t i = 0; i < (std::size_t{3} << 20); ++i) text += "0,";
  text += "0]}";
  auto j = decodeNodeReportJson(text);
  ASSERT_FALSE(j.has_value());
  EXPECT_NE(j.error().message.find("more than 2097152 values and keys"), std::string::npos)
      << j.error().message;
  // Under the bound, the diagnostic still names the field.
  std::vector<std::uint8_t> small = {0xA1, 0x67, 'r', 'e',  'p',  'o',
                                     'r',  't',  's', 0x9F, 0xF6, 0xFF};
  auto s = decodeNodeReportCbor(small);
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().message.find("values and keys"), std::string::npos) << s.error().message;
}

TEST(ReportTest, NodeReportRejectsNestedRankReportOfOtherKind) {
  json j = json::parse(*encodeJson(sampleNodeReport()));
  j["reports"][0]["kind"] = "ProgressNotice";
  auto r = decodeNodeReportJson(j.dump());
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("NodeReport.reports[0].kind"), std::string::npos)
      << r.error().message;
  json k = json::parse(*encodeJson(sampleNodeReport()));
  k["notices"][0] = k["reports"][0];
  auto r3 = decodeNodeReportJson(k.dump());
  ASSERT_FALSE(r3.has_value());
  EXPECT_NE(r3.error().message.find("not a notice"), std::string::npos);
}

TEST(ReportTest, NodeHealthIsStrict) {
  const auto bytes = encodeJson(sampleNodeReport());
  ASSERT_TRUE(bytes.has_value());
  auto mutateAndDecode = [&](const std::function<void(json&)>& mutate) {
    json j = json::parse(*bytes);
    mutate(j);
    return decodeNodeReportJson(j.dump());
  };
  // Every new field is required.
  for (const char* key : {"nicsAvailable", "nicsReason", "rdmaAvailable", "rdmaReason",
                          "gpusAvailable", "gpusReason", "rdmaPorts"}) {
    auto r = mutateAndDecode([&](json& j) { j["health"].erase(key); });
    ASSERT_FALSE(r.has_value()) << key;
    EXPECT_NE(r.error().message.find(key), std::string::npos) << r.error().message;
  }
  for (const char* key : {"operstate", "carrier", "carrierChanges", "rxErrors", "txDropped"}) {
    auto r = mutateAndDecode([&](json& j) { j["health"]["nics"][0].erase(key); });
    ASSERT_FALSE(r.has_value()) << key;
    EXPECT_NE(r.error().message.find(key), std::string::npos) << r.error().message;
  }
  for (const char* key :
       {"eccVolatileUncorrected", "retiredPagesPending", "lastXid", "throttleReasons"}) {
    auto r = mutateAndDecode([&](json& j) { j["health"]["gpus"][0].erase(key); });
    ASSERT_FALSE(r.has_value()) << key;
  }
  for (const char* key : {"device", "port", "state", "physState", "active", "xmitDiscards"}) {
    auto r = mutateAndDecode([&](json& j) { j["health"]["rdmaPorts"][0].erase(key); });
    ASSERT_FALSE(r.has_value()) << key;
  }
  EXPECT_FALSE(mutateAndDecode([](json& j) { j["health"]["rdmaPorts"][0]["port"] = 256; }));
  EXPECT_FALSE(mutateAndDecode([](json& j) { j["health"]["rdmaPorts"][0]["device"] = ""; }));
  EXPECT_FALSE(mutateAndDecode([](json& j) { j["health"]["gpusAvailable"] = "yes"; }));
  EXPECT_FALSE(mutateAndDecode([](json& j) { j["health"]["extra"] = 1; }));
  EXPECT_FALSE(mutateAndDecode([](json& j) { j["health"]["rdmaPorts"][0]["x"] = 1; }));
  // An unavailable class round-trips with its reason.
  NodeReport n = sampleNodeReport();
  n.health.gpus.clear();
  n.health.gpus_available = false;
  n.health.gpus_reason = "libnvidia-ml.so.1 not found";
  auto cbor = encodeCbor(n);
  ASSERT_TRUE(cbor.has_value());
  auto back = decodeNodeReportCbor(*cbor);
  ASSERT_TRUE(back.has_value()) << back.error().toString();
  EXPECT_FALSE(back->health.gpus_available);
  EXPECT_EQ(back->health.gpus_reason, "libnvidia-ml.so.1 not found");
}

TEST(ReportTest, DnsSubdomain) {
  EXPECT_TRUE(isDnsSubdomain("node-1"));
  EXPECT_TRUE(isDnsSubdomain("a.b-c.d"));
  EXPECT_FALSE(isDnsSubdomain(""));
  EXPECT_FALSE(isDnsSubdomain("-a"));
  EXPECT_FALSE(isDnsSubdomain("a-"));
  EXPECT_FALSE(isDnsSubdomain("a..b"));
  EXPECT_FALSE(isDnsSubdomain("a.-b"));
  EXPECT_FALSE(isDnsSubdomain("A"));
  EXPECT_FALSE(isDnsSubdomain("a_b"));
  EXPECT_FALSE(isDnsSubdomain(std::string(254, 'a')));
}

}  // namespace
}  // namespace c4::report
