// Differential test of the streaming CBOR decoders against the DOM-based reference decoders
// (common/src/report_internal.h): on random valid documents and on random mutations and
// truncations of them, the public decoders give exactly what the reference gives (value or error),
// and the streaming decoder alone never accepts what the reference refuses.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "c4/common/report.h"
#include "report_internal.h"

namespace c4::report {
namespace {

using json = nlohmann::json;

class Gen {
 public:
  explicit Gen(std::uint64_t seed) : rng_(seed) {}

  std::uint64_t below(std::uint64_t n) { return n == 0 ? 0 : rng_() % n; }
  bool coin() { return (rng_() & 1) != 0; }

  // Counters: small, at a byte-width boundary of the CBOR encoding, or anywhere in 64 bits.
  std::uint64_t counter() {
    static constexpr std::uint64_t kEdges[] = {
        0, 1, 23, 24, 255, 256, 65535, 65536, 0xFFFFFFFF, 1ULL << 32, ~0ULL >> 1, ~0ULL};
    switch (below(3)) {
      case 0:
        return below(1000);
      case 1:
        return kEdges[below(std::size(kEdges))];
      default:
        return rng_();
    }
  }
  std::string name(bool allow_empty = true) {
    if (allow_empty && below(5) == 0) return "";
    static constexpr std::string_view kChars = "abcdefghijklmnopqrstuvwxyz0123456789";
    std::string s;
    const std::size_t n = 1 + below(below(4) == 0 ? 60 : 12);
    for (std::size_t i = 0; i < n; ++i) s += kChars[below(kChars.size())];
    if (n > 2 && coin()) s[n / 2] = coin() ? '-' : '.';
    return s;
  }
  std::string text() {
    static const std::string kPieces[] = {
        "ok",    " ", "/ckpt/step-", "Xid 79", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80",
        "\"q\"", "\n"};
    std::string s;
    const std::size_t n = below(6);
    for (std::size_t i = 0; i < n; ++i) s += kPieces[below(std::size(kPieces))];
    return s;
  }
  std::int64_t time() { return 1 + static_cast<std::int64_t>(rng_() >> 1); }

  RankIdentity identity() {
    RankIdentity id{name(), name(), name(), name(), -1, 0, 0, 0};
    id.world_size = static_cast<std::int32_t>(below(3) == 0 ? 0 : 1 + below(kMaxRank));
    id.rank = static_cast<std::int32_t>(
        id.world_size == 0
            ? static_cast<std::int64_t>(below(kMaxRank + 1)) - 1
            : static_cast<std::int64_t>(below(static_cast<std::uint64_t>(id.world_size) + 1)) - 1);
    id.restart_attempt = static_cast<std::uint32_t>(counter());
    id.pid = static_cast<std::uint32_t>(rng_());
    return id;
  }
  LatencySummary latency() {
    LatencySummary l;
    if (below(4) == 0) return l;
    l.count = 1 + below(1000);
    l.sum_us = counter();
    l.p50_us = below(10000);
    l.p99_us = l.p50_us + below(10000);
    l.max_us = l.p99_us + below(10000);
    return l;
  }
  ConnectionStats connection() {
    ConnectionStats c;
    c.id = counter();
    c.direction = coin() ? Direction::kSend : Direction::kRecv;
    c.peer_rank = static_cast<std::int32_t>(static_cast<std::int64_t>(below(kMaxRank + 1)) - 1);
    c.peer_node = name();
    c.peer_pod = name();
    c.bytes = counter();
    c.ops = counter();
    c.inflight = static_cast<std::uint32_t>(below(3) == 0 ? 0 : counter());
    c.oldest_inflight_us = c.inflight == 0 ? 0 : counter();
    c.wait = latency();
    c.transfer = latency();
    const std::size_t n = below(6);
    for (std::size_t i = 0; i < n; ++i) {
      static constexpr double kWeights[] = {0.0, 0.25, 0.5, 1.0, 1e6, 0.1, 3.0};
      c.subflows.push_back(
          {static_cast<std::uint32_t>(below(kMaxSubflowsPerConnection)),
           static_cast<std::uint16_t>(rng_()),
           static_cast<std::int32_t>(below(3) == 0 ? -1 : static_cast<std::int64_t>(below(1000))),
           coin() ? kWeights[below(std::size(kWeights))] : static_cast<double>(below(1000)) / 7,
           counter()});
    }
    return c;
  }
  CommunicatorProgress communicator() {
    CommunicatorProgress c;
    c.comm_hash = counter();
    c.nranks = static_cast<std::int32_t>(below(3) == 0 ? 0 : 1 + below(kMaxRank));
    c.rank = static_cast<std::int32_t>(
        static_cast<std::int64_t>(below(c.nranks == 0 ? std::uint64_t{kMaxRank} + 1
                                                      : static_cast<std::uint64_t>(c.nranks) + 1)) -
        1);
    c.coll_entered = counter();
    c.coll_finished = c.coll_entered - below(std::min<std::uint64_t>(c.coll_entered, 1000) + 1);
    c.p2p_entered = counter();
    c.p2p_finished = c.p2p_entered - below(std::min<std::uint64_t>(c.p2p_entered, 1000) + 1);
    c.last_coll_seq = counter();
    c.oldest_unfinished_us = below(3) == 0 ? 0 : counter();
    return c;
  }
  RankReport rankReport() {
    RankReport r;
    r.id = identity();
    r.seq = counter();
    r.parts = static_cast<std::uint16_t>(1 + below(kMaxParts));
    r.part = static_cast<std::uint16_t>(below(r.parts));
    r.time_unix_ns = time();
    r.interval_ms = static_cast<std::uint32_t>(1 + below(3'600'000));
    r.plan_version = static_cast<std::int64_t>(below(1000)) - 1;
    r.dropped_messages = counter();
    const std::size_t n = below(5);
    for (std::size_t i = 0; i < n; ++i) r.connections.push_back(connection());
    const std::size_t m = below(4);
    for (std::size_t i = 0; i < m; ++i) r.communicators.push_back(communicator());
    return r;
  }
  Notice notice() {
    switch (below(3)) {
      case 0:
        return ProgressNotice{identity(), time(), static_cast<std::int64_t>(below(100000)) - 1,
                              static_cast<ProgressState>(below(5))};
      case 1:
        return CheckpointNotice{identity(), time(), static_cast<std::int64_t>(below(100000)),
                                text()};
      default:
        return AnomalyNotice{identity(),
                             time(),
                             static_cast<AnomalyKind>(below(3)),
                             counter(),
                             coin() ? Direction::kSend : Direction::kRecv,
                             static_cast<std::int32_t>(static_cast<std::int64_t>(below(100)) - 1),
                             name(),
                             counter(),
                             text()};
    }
  }
  Message message() {
    if (coin()) return rankReport();
    return std::visit([](auto&& n) -> Message { return n; }, notice());
  }
  NodeReport nodeReport() {
    NodeReport n;
    n.node = name(false);
    n.seq = counter();
    n.time_unix_ns = time();
    for (std::size_t i = below(4); i > 0; --i) {
      NicHealth nic;
      nic.name = name(false);
      nic.up = coin();
      nic.rdma = coin();
      nic.speed_mbps = counter();
      nic.errors = counter();
      nic.operstate = coin() ? "up" : "lowerlayerdown";
      nic.carrier = coin();
      nic.carrier_changes = counter();
      nic.rx_errors = counter();
      nic.tx_errors = counter();
      nic.rx_dropped = counter();
      nic.tx_dropped = counter();
      n.health.nics.push_back(nic);
    }
    for (std::size_t i = below(4); i > 0; --i) {
      GpuHealth g;
      g.index = static_cast<std::int32_t>(below(kMaxDevicesPerNode));
      g.uuid = "GPU-" + name(false);
      g.healthy = coin();
      g.detail = text();
      g.ecc_volatile_uncorrected = counter();
      g.retired_pages_pending = coin();
      g.last_xid = counter();
      g.throttle_reasons = counter();
      n.health.gpus.push_back(g);
    }
    for (std::size_t i = below(3); i > 0; --i) {
      RdmaPortHealth p;
      p.device = "mlx5_" + std::to_string(below(8));
      p.port = static_cast<std::uint32_t>(below(256));
      p.netdev = coin() ? "" : name(false);
      p.state = "ACTIVE";
      p.phys_state = "LinkUp";
      p.rate_mbps = counter();
      p.active = coin();
      p.symbol_errors = counter();
      p.link_downed = counter();
      p.link_error_recovery = counter();
      p.rcv_errors = counter();
      p.xmit_discards = counter();
      n.health.rdma_ports.push_back(p);
    }
    n.health.nics_available = coin();
    n.health.nics_reason = text();
    n.health.rdma_available = coin();
    n.health.rdma_reason = text();
    n.health.gpus_available = coin();
    n.health.gpus_reason = text();
    for (std::size_t i = below(4); i > 0; --i) n.reports.push_back(rankReport());
    for (std::size_t i = below(4); i > 0; --i) n.notices.push_back(notice());
    n.dropped_messages = counter();
    n.rejected_messages = counter();
    return n;
  }

  // A value that is wrong somewhere, right somewhere else, or of another type.
  json oddValue() {
    switch (below(14)) {
      case 0:
        return -1;
      case 1:
        return -2;
      case 2:
        return 0;
      case 3:
        return std::numeric_limits<std::uint64_t>::max();
      case 4:
        return std::numeric_limits<std::int64_t>::min();
      case 5:
        return 1ULL << 32;
      case 6:
        return 0.5;
      case 7:
        return std::nan("");
      case 8:
        return "";
      case 9:
        return "Not-A-Name";
      case 10:
        return json::array();
      case 11:
        return json::object();
      case 12:
        return nullptr;
      default:
        return std::string(below(2) == 0 ? 300 : 5000, 'a');
    }
  }

  // Mutates one random node of the document: replace a value, drop or add a key, duplicate an
  // array item, or change a string.
  void mutate(json& j) {
    std::vector<json*> nodes;
    std::vector<json*> todo{&j};
    while (!todo.empty()) {
      json* n = todo.back();
      todo.pop_back();
      nodes.push_back(n);
      if (n->is_structured()) {
        for (auto& child : *n) todo.push_back(&child);
      }
    }
    json& target = *nodes[below(nodes.size())];
    switch (below(5)) {
      case 0:
        target = oddValue();
        break;
      case 1:
        if (target.is_object() && !target.empty()) {
          auto it = target.begin();
          std::advance(it, static_cast<std::ptrdiff_t>(below(target.size())));
          target.erase(it);
        } else {
          target = oddValue();
        }
        break;
      case 2:
        if (target.is_object()) {
          target[coin() ? "extra" : "kind"] = oddValue();
        } else {
          target = oddValue();
        }
        break;
      case 3:
        if (target.is_array() && !target.empty()) {
          target.push_back(target[below(target.size())]);
        } else if (target.is_number_unsigned()) {
          target = coin() ? target.get<std::uint64_t>() + 1 : target.get<std::uint64_t>() - 1;
        } else {
          target = oddValue();
        }
        break;
      default:
        if (target.is_string()) {
          std::string s = target.get<std::string>();
          static const std::string kBad[] = {"\xff", "\xc0\x80", "\xed\xa0\x80", "A", "-", "."};
          s.insert(below(s.size() + 1), kBad[below(std::size(kBad))]);
          target = s;
        } else {
          target = oddValue();
        }
        break;
    }
  }

  // Byte-level damage: flips, truncation, insertion, deletion, CBOR-significant bytes.
  std::vector<std::uint8_t> damage(std::vector<std::uint8_t> b) {
    static constexpr std::uint8_t kSpecial[] = {0xFF, 0x9F, 0xBF, 0x7F, 0xF9, 0xFA, 0xFB, 0xF6,
                                                0xF7, 0xC0, 0x5F, 0x1B, 0x3B, 0x00, 0x18, 0x60};
    const std::size_t edits = 1 + below(3);
    for (std::size_t e = 0; e < edits && !b.empty(); ++e) {
      const std::size_t at = below(b.size());
      switch (below(5)) {
        case 0:
          b[at] ^= static_cast<std::uint8_t>(1u << below(8));
          break;
        case 1:
          b.resize(at);
          break;
        case 2:
          b.insert(b.begin() + static_cast<std::ptrdiff_t>(at),
                   kSpecial[below(std::size(kSpecial))]);
          break;
        case 3:
          b.erase(b.begin() + static_cast<std::ptrdiff_t>(at));
          break;
        default:
          b[at] = kSpecial[below(std::size(kSpecial))];
          break;
      }
    }
    return b;
  }

 private:
  std::mt19937_64 rng_;
};

// The public decoder gives exactly the reference's answer; the streaming decoder alone accepts
// nothing the reference refuses and gives the same value. Returns whether streaming accepted.
template <typename T, typename Public, typename Dom, typename Stream>
bool agree(const std::vector<std::uint8_t>& bytes, Public pub, Dom dom, Stream stream,
           const char* what) {
  const Result<T> ref = dom(bytes);
  const Result<T> got = pub(bytes);
  const std::optional<T> fast = stream(bytes);
  EXPECT_EQ(got.has_value(), ref.has_value()) << what;
  if (got.has_value() && ref.has_value()) {
    EXPECT_TRUE(*got == *ref) << what;
  } else if (!got.has_value() && !ref.has_value()) {
    EXPECT_EQ(got.error(), ref.error()) << what;
  }
  if (fast.has_value()) {
    EXPECT_TRUE(ref.has_value()) << what << ": streaming accepted what the reference refuses: "
                                 << ref.error().message;
    if (ref.has_value()) {
      EXPECT_TRUE(*fast == *ref) << what;
    }
  }
  return fast.has_value();
}

bool agreeMessage(const std::vector<std::uint8_t>& bytes) {
  return agree<Message>(
      bytes, [](auto b) { return decodeMessageCbor(b); },
      [](auto b) { return internal::decodeMessageCborDom(b); },
      [](auto b) { return internal::decodeMessageCborStreaming(b); }, "message");
}

bool agreeNodeReport(const std::vector<std::uint8_t>& bytes) {
  return agree<NodeReport>(
      bytes, [](auto b) { return decodeNodeReportCbor(b); },
      [](auto b) { return internal::decodeNodeReportCborDom(b); },
      [](auto b) { return internal::decodeNodeReportCborStreaming(b); }, "node report");
}

TEST(ReportStreamTest, StreamingDecodesEveryValidDocument) {
  Gen gen(1);
  for (int i = 0; i < 3000; ++i) {
    const Message m = gen.message();
    auto bytes = encodeCbor(m);
    ASSERT_TRUE(bytes.has_value()) << bytes.error().toString();
    auto fast = internal::decodeMessageCborStreaming(*bytes);
    ASSERT_TRUE(fast.has_value()) << "iteration " << i << " " << messageKind(m);
    EXPECT_TRUE(*fast == m) << "iteration " << i;
    EXPECT_TRUE(agreeMessage(*bytes));
  }
  for (int i = 0; i < 1000; ++i) {
    const NodeReport n = gen.nodeReport();
    auto bytes = encodeCbor(n);
    ASSERT_TRUE(bytes.has_value()) << bytes.error().toString();
    auto fast = internal::decodeNodeReportCborStreaming(*bytes);
    ASSERT_TRUE(fast.has_value()) << "iteration " << i;
    EXPECT_TRUE(*fast == n) << "iteration " << i;
    EXPECT_TRUE(agreeNodeReport(*bytes));
  }
}

TEST(ReportStreamTest, SchemaMutationsAgreeWithReference) {
  Gen gen(2);
  int accepted = 0;
  int refused = 0;
  for (int i = 0; i < 6000; ++i) {
    const bool node = gen.below(3) == 0;
    json j =
        node ? json::parse(*encodeJson(gen.nodeReport())) : json::parse(*encodeJson(gen.message()));
    for (std::size_t k = 1 + gen.below(2); k > 0; --k) gen.mutate(j);
    std::vector<std::uint8_t> bytes;
    try {
      bytes = json::to_cbor(j);
    } catch (const std::exception&) {
      continue;
    }
    const bool ok = node ? agreeNodeReport(bytes) : agreeMessage(bytes);
    (ok ? accepted : refused)++;
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << "document: " << j.dump().substr(0, 2000);
      return;
    }
  }
  // Both verdicts occur: the mutations reach past the first check.
  EXPECT_GT(accepted, 100);
  EXPECT_GT(refused, 3000);
}

TEST(ReportStreamTest, ByteDamageAndTruncationAgreeWithReference) {
  Gen gen(3);
  for (int i = 0; i < 6000; ++i) {
    const bool node = gen.below(3) == 0;
    std::vector<std::uint8_t> bytes =
        node ? *encodeCbor(gen.nodeReport()) : *encodeCbor(gen.message());
    bytes = gen.damage(std::move(bytes));
    node ? agreeNodeReport(bytes) : agreeMessage(bytes);
    if (::testing::Test::HasFailure()) return;
  }
  const auto whole = *encodeCbor(gen.nodeReport());
  for (std::size_t n = 0; n <= whole.size(); ++n) {
    agreeNodeReport(
        std::vector<std::uint8_t>(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(n)));
  }
  auto trailing = whole;
  trailing.push_back(0x00);
  EXPECT_FALSE(agreeNodeReport(trailing));
}

TEST(ReportStreamTest, EncodingsOurEncoderDoesNotWriteStillDecode) {
  // Indefinite-length map and array (0xBF / 0x9F ... 0xFF) with a non-minimal integer: the
  // streaming decoder reads them; the reference agrees.
  const CheckpointNotice n{RankIdentity{"ns", "job", "pod", "node", 1, 4, 0, 7}, 5, 3, "/p"};
  json j = json::parse(*encodeJson(Message{n}));
  auto definite = json::to_cbor(j);
  ASSERT_EQ(definite[0], 0xA6);  // map of 6
  std::vector<std::uint8_t> indefinite = definite;
  indefinite[0] = 0xBF;
  indefinite.push_back(0xFF);
  EXPECT_TRUE(agreeMessage(indefinite));
  EXPECT_TRUE(decodeMessageCbor(indefinite).has_value());
  // Duplicate key: the reference takes the last value; the streaming decoder hands it over.
  json dup = j;
  auto bytes = json::to_cbor(dup);
  bytes[0] = 0xA7;
  const auto step = json::to_cbor(json("step"));
  bytes.insert(bytes.end(), step.begin(), step.end());
  bytes.push_back(0x09);
  EXPECT_FALSE(internal::decodeMessageCborStreaming(bytes).has_value());
  agreeMessage(bytes);
}

// Pins the wire format and the error texts: FNV-1a over the CBOR and JSON encodings of random
// valid documents, and over the decoders' error messages for random schema mutations of them.
// The expected values were taken from the codec before its schema became one description
// (issue #22) and renewed once, when RankReport gained `communicators` (issue #23; the generator
// makes them too); a change to either hash is a change of the wire format or of an error text.
class Fnv {
 public:
  void add(std::string_view s) {
    for (const char c : s) {
      h_ = (h_ ^ static_cast<std::uint8_t>(c)) * 0x100000001b3ULL;
    }
    h_ = (h_ ^ 0xFFU) * 0x100000001b3ULL;
  }
  void add(const std::vector<std::uint8_t>& b) {
    add(std::string_view(reinterpret_cast<const char*>(b.data()), b.size()));
  }
  [[nodiscard]] std::uint64_t value() const { return h_; }

 private:
  std::uint64_t h_ = 0xcbf29ce484222325ULL;
};

TEST(ReportStreamTest, WireFormatIsPinned) {
  Gen gen(7);
  Fnv cbor;
  Fnv text;
  for (int i = 0; i < 600; ++i) {
    const Message m = gen.message();
    cbor.add(*encodeCbor(m));
    text.add(*encodeJson(m));
  }
  for (int i = 0; i < 200; ++i) {
    const NodeReport n = gen.nodeReport();
    cbor.add(*encodeCbor(n));
    text.add(*encodeJson(n));
  }
  EXPECT_EQ(cbor.value(), 0x541c0b792ef0b497ULL) << std::hex << cbor.value();
  EXPECT_EQ(text.value(), 0x3052f3abfc4ce366ULL) << std::hex << text.value();
}

TEST(ReportStreamTest, ErrorTextsArePinned) {
  Gen gen(8);
  Fnv errors;
  int refused = 0;
  for (int i = 0; i < 4000; ++i) {
    const bool node = gen.below(3) == 0;
    json j =
        node ? json::parse(*encodeJson(gen.nodeReport())) : json::parse(*encodeJson(gen.message()));
    for (std::size_t k = 1 + gen.below(2); k > 0; --k) gen.mutate(j);
    std::vector<std::uint8_t> bytes;
    try {
      bytes = json::to_cbor(j);
    } catch (const std::exception&) {
      continue;
    }
    std::string dumped;  // stays empty where the mutation put invalid UTF-8 in the document
    try {
      dumped = j.dump();
    } catch (const std::exception&) {
    }
    if (node) {
      auto viaCbor = decodeNodeReportCbor(bytes);
      errors.add(viaCbor ? std::string("ok") : viaCbor.error().message);
      refused += viaCbor ? 0 : 1;
      if (!dumped.empty()) {
        auto viaJson = decodeNodeReportJson(dumped);
        errors.add(viaJson ? std::string("ok") : viaJson.error().message);
      }
    } else {
      auto viaCbor = decodeMessageCbor(bytes);
      errors.add(viaCbor ? std::string("ok") : viaCbor.error().message);
      refused += viaCbor ? 0 : 1;
      if (!dumped.empty()) {
        auto viaJson = decodeMessageJson(dumped);
        errors.add(viaJson ? std::string("ok") : viaJson.error().message);
      }
    }
  }
  EXPECT_GT(refused, 2000);
  // Re-pinned when AnomalyKind gained processExited: the refusal of an unknown name lists the
  // allowed ones.
  EXPECT_EQ(errors.value(), 0x4fc6104165d53c2ULL) << std::hex << errors.value();
}

}  // namespace
}  // namespace c4::report
