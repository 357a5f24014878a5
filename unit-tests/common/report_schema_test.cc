// Walks the schema description (common/src/report_schema.h) field by field and checks that every
// field of every struct goes through every path of the codec: the sample's value and a second
// one each come back from the CBOR encoder through the public, DOM and
// streaming decoders and from the JSON encoder through the JSON decoder; a value outside its wire
// rule is refused by validate() (and so by the encoders) and by the decoders, each naming the
// field. The test names no field: a field added to the description is covered without an edit.
#include "report_schema.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <type_traits>

#include "c4/common/report.h"
#include "report_internal.h"

namespace c4::report {
namespace {

using json = nlohmann::json;

RankIdentity identity() {
  return RankIdentity{"team-a", "llama-70b", "llama-70b-3", "node-7", 3, 8, 2, 4242};
}

RankReport sampleReport() {
  RankReport r;
  r.id = identity();
  r.seq = 17;
  r.part = 1;
  r.parts = 3;
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
  c.subflows = {{5, 40001, 7, 0.5, 1000}};
  r.connections.push_back(c);
  return r;
}

ProgressNotice sampleProgress() {
  return {identity(), 1'764'673'209'000'000'001LL, 1200, ProgressState::kCheckpointing};
}
CheckpointNotice sampleCheckpoint() {
  return {identity(), 1'764'673'209'000'000'002LL, 1200, "/ckpt/step-1200"};
}
AnomalyNotice sampleAnomaly() {
  return {identity(),
          1'764'673'209'000'000'003LL,
          AnomalyKind::kConnectionError,
          99,
          Direction::kRecv,
          2,
          "node-6",
          31'000'000,
          "recv posted 31 s ago"};
}

NodeReport sampleNodeReport() {
  NodeReport n;
  n.node = "node-7";
  n.seq = 9;
  n.time_unix_ns = 1'764'673'210'000'000'000LL;
  n.health.nics = {NicHealth{"eth0", true, true, 100000, 17, "up", true, 4, 10, 7, 3, 2}};
  n.health.gpus = {GpuHealth{1, "GPU-5678", false, "Xid 79", 2, true, 79, 0x40}};
  n.health.rdma_ports = {
      RdmaPortHealth{"mlx5_0", 1, "ib0", "ACTIVE", "LinkUp", 400000, true, 1, 2, 3, 4, 5}};
  n.health.nics_available = true;
  n.health.nics_reason = "sysfs";
  n.health.rdma_available = true;
  n.health.rdma_reason = "sysfs";
  n.health.gpus_available = true;
  n.health.gpus_reason = "nvml";
  n.reports = {sampleReport()};
  n.notices = {sampleProgress(), sampleCheckpoint(), sampleAnomaly()};
  n.dropped_messages = 3;
  n.rejected_messages = 4;
  return n;
}

// ---- Every path, for a whole document ---------------------------------------------------------

void expectRoundTrip(const Message& m, const std::string& what) {
  auto cbor = encodeCbor(m);
  ASSERT_TRUE(cbor.has_value()) << what << ": " << cbor.error().message;
  auto pub = decodeMessageCbor(*cbor);
  ASSERT_TRUE(pub.has_value()) << what << ": " << pub.error().message;
  EXPECT_TRUE(*pub == m) << what << ": public CBOR decoder";
  auto dom = internal::decodeMessageCborDom(*cbor);
  ASSERT_TRUE(dom.has_value()) << what << ": " << dom.error().message;
  EXPECT_TRUE(*dom == m) << what << ": DOM decoder";
  auto fast = internal::decodeMessageCborStreaming(*cbor);
  ASSERT_TRUE(fast.has_value()) << what << ": streaming decoder refused it";
  EXPECT_TRUE(*fast == m) << what << ": streaming decoder";
  auto text = encodeJson(m);
  ASSERT_TRUE(text.has_value()) << what << ": " << text.error().message;
  auto viaJson = decodeMessageJson(*text);
  ASSERT_TRUE(viaJson.has_value()) << what << ": " << viaJson.error().message;
  EXPECT_TRUE(*viaJson == m) << what << ": JSON";
}

void expectRoundTrip(const NodeReport& n, const std::string& what) {
  auto cbor = encodeCbor(n);
  ASSERT_TRUE(cbor.has_value()) << what << ": " << cbor.error().message;
  auto pub = decodeNodeReportCbor(*cbor);
  ASSERT_TRUE(pub.has_value()) << what << ": " << pub.error().message;
  EXPECT_TRUE(*pub == n) << what << ": public CBOR decoder";
  auto dom = internal::decodeNodeReportCborDom(*cbor);
  ASSERT_TRUE(dom.has_value()) << what << ": " << dom.error().message;
  EXPECT_TRUE(*dom == n) << what << ": DOM decoder";
  auto fast = internal::decodeNodeReportCborStreaming(*cbor);
  ASSERT_TRUE(fast.has_value()) << what << ": streaming decoder refused it";
  EXPECT_TRUE(*fast == n) << what << ": streaming decoder";
  auto text = encodeJson(n);
  ASSERT_TRUE(text.has_value()) << what << ": " << text.error().message;
  auto viaJson = decodeNodeReportJson(*text);
  ASSERT_TRUE(viaJson.has_value()) << what << ": " << viaJson.error().message;
  EXPECT_TRUE(*viaJson == n) << what << ": JSON";
}

// The decoders' verdict on a document in JSON form, through JSON and through CBOR.
template <typename D>
std::vector<Result<D>> decodeBoth(const json& j) {
  const auto cbor = json::to_cbor(j);
  if constexpr (std::is_same_v<D, Message>) {
    return {decodeMessageJson(j.dump()), decodeMessageCbor(cbor)};
  } else {
    return {decodeNodeReportJson(j.dump()), decodeNodeReportCbor(cbor)};
  }
}

// ---- Values for one field ----------------------------------------------------------------------

// Candidate values, in order of preference, for a probe that must differ from `cur`.
template <typename M, typename W>
std::vector<M> candidates(const M& cur, W wire) {
  if constexpr (std::is_same_v<M, bool>) {
    return {!cur};
  } else if constexpr (std::is_same_v<M, double>) {
    return {0.75, 0.25, 2.0};
  } else if constexpr (std::is_same_v<M, std::string>) {
    return {"probe-1", "p", ""};
  } else if constexpr (std::is_enum_v<M>) {
    std::vector<M> out;
    for (const auto& [e, name] : *wire.names) out.push_back(e);
    return out;
  } else {
    static_assert(std::is_integral_v<M>);
    std::vector<M> out;
    if (cur < std::numeric_limits<M>::max()) out.push_back(static_cast<M>(cur + 1));
    if (cur > std::numeric_limits<M>::min()) out.push_back(static_cast<M>(cur - 1));
    out.push_back(1);
    out.push_back(2);
    out.push_back(0);
    return out;
  }
}

// A value the wire rule refuses that M can hold (for validate()), and one the wire can carry (for
// the decoders), where there are such.
struct OutOfRange {
  std::optional<std::function<void(void*)>> set;  // sets the member (a M*)
  std::optional<json> wire;
};

template <typename M, typename W>
OutOfRange outOfRange(W wire) {
  OutOfRange o;
  if constexpr (std::is_same_v<W, schema::U>) {
    const std::uint64_t max = std::min<std::uint64_t>(wire.max, std::numeric_limits<M>::max());
    if (max < std::numeric_limits<std::uint64_t>::max()) o.wire = json(max + 1);
    if (max < std::numeric_limits<M>::max()) {
      o.set = [max](void* p) { *static_cast<M*>(p) = static_cast<M>(max + 1); };
    }
  } else if constexpr (std::is_same_v<W, schema::I>) {
    const std::int64_t min = std::max<std::int64_t>(wire.min, std::numeric_limits<M>::min());
    if (min > std::numeric_limits<std::int64_t>::min()) o.wire = json(min - 1);
    if (min > std::numeric_limits<M>::min()) {
      o.set = [min](void* p) { *static_cast<M*>(p) = static_cast<M>(min - 1); };
    }
  } else if constexpr (std::is_same_v<W, schema::F>) {
    o.wire = json(wire.min - 1);
    o.set = [wire](void* p) { *static_cast<M*>(p) = wire.min - 1; };
  } else if constexpr (std::is_same_v<W, schema::S>) {
    o.wire = json(std::string(wire.max_bytes + 1, 'a'));
    o.set = [wire](void* p) { *static_cast<M*>(p) = std::string(wire.max_bytes + 1, 'a'); };
  } else if constexpr (!std::is_same_v<W, schema::B> && !std::is_same_v<W, schema::Obj> &&
                       !std::is_same_v<W, schema::Arr>) {
    o.wire = json("no-such-name");
    o.set = [](void* p) { *static_cast<M*>(p) = static_cast<M>(99); };
  }
  return o;
}

bool names(const Result<void>& r, const std::string& path, std::string_view field) {
  if (r.has_value()) return false;
  const std::string& m = r.error().message;
  return m.find(path + "." + std::string(field)) != std::string::npos ||
         (m.find(path + ".") != std::string::npos && m.find(field) != std::string::npos);
}

// One occurrence of a struct T in a document D: where it is in the struct (at), in the JSON
// (pointer), and the paths validate() and the decoders name it by.
template <typename T, typename D>
struct Site {
  D doc;
  T& (*at)(D&);
  std::string pointer;
  std::string validate_path;
  std::string decode_path;
};

template <typename T, typename D>
void probeEveryField(const Site<T, D>& site) {
  // The sample goes through every path as it is; then each field takes a second value.
  expectRoundTrip(site.doc, site.decode_path);
  schema::forEachField<T>([&](const auto& f) {
    using M = typename std::remove_cvref_t<decltype(f)>::Member;
    using W = std::remove_cvref_t<decltype(f.wire)>;
    const std::string what =
        site.validate_path + "." + std::string(f.name) + " (in " + site.decode_path + ")";
    if constexpr (!std::is_same_v<W, schema::Obj> && !std::is_same_v<W, schema::Arr>) {
      // A second value goes through every path (so the field carries two different values).
      bool probed = false;
      D base = site.doc;
      const M cur = site.at(base).*f.member;
      for (const M& value : candidates(cur, f.wire)) {
        D doc = site.doc;
        if (value == cur) continue;
        site.at(doc).*f.member = value;
        if (!validate(doc).has_value()) continue;
        expectRoundTrip(doc, what);
        probed = true;
        break;
      }
      EXPECT_TRUE(probed) << what << ": no valid value to probe it with";

      // A value outside its wire rule is refused, naming the field.
      const OutOfRange bad = outOfRange<M>(f.wire);
      if (bad.set) {
        D doc = site.doc;
        (*bad.set)(&(site.at(doc).*f.member));
        const Status s = validate(doc);
        EXPECT_TRUE(names(s, site.validate_path, f.name))
            << what << ": validate() says " << (s ? std::string("ok") : s.error().message);
        EXPECT_FALSE(encodeCbor(doc).has_value()) << what;
        EXPECT_FALSE(encodeJson(doc).has_value()) << what;
      }
      if (bad.wire) {
        json j = json::parse(*encodeJson(site.doc));
        j[json::json_pointer(site.pointer)][std::string(f.name)] = *bad.wire;
        for (const auto& r : decodeBoth<D>(j)) {
          const Status s = r.has_value() ? Status{} : Status{std::unexpected(r.error())};
          EXPECT_TRUE(names(s, site.decode_path, f.name))
              << what << ": decoder says " << (s ? std::string("ok") : s.error().message);
        }
      }
    }
    // Missing and unknown: the decoders refuse both, naming the field — except an optional
    // field, whose absence both take as the default (what an older writer sends).
    json j = json::parse(*encodeJson(site.doc));
    j[json::json_pointer(site.pointer)].erase(std::string(f.name));
    if (f.optional) {
      for (const auto& r : decodeBoth<D>(j)) {
        EXPECT_TRUE(r.has_value()) << what << ": refused without it: " << r.error().message;
        if (!r) continue;
        D decoded = *r;
        EXPECT_EQ(site.at(decoded).*f.member, M{}) << what;
      }
      return true;
    }
    for (const auto& r : decodeBoth<D>(j)) {
      EXPECT_FALSE(r.has_value()) << what << ": accepted without it";
      if (!r) {
        EXPECT_NE(
            r.error().message.find(site.decode_path + "." + std::string(f.name) + ": missing"),
            std::string::npos)
            << r.error().message;
      }
    }
    return true;
  });
  json j = json::parse(*encodeJson(site.doc));
  j[json::json_pointer(site.pointer)]["noSuchField"] = 1;
  for (const auto& r : decodeBoth<D>(j)) {
    ASSERT_FALSE(r.has_value()) << site.decode_path << ": accepted an unknown field";
    EXPECT_NE(r.error().message.find(site.decode_path + ".noSuchField: unknown field"),
              std::string::npos)
        << r.error().message;
  }
}

// expectedSeconds came after the schema's first release: a writer leaves it out at its default
// (0, not said), so an older reader, which refuses unknown fields, accepts such notices; every
// decoder takes its absence as 0 (an older c4-notify in a trainer image); it is for pauses only.
TEST(ReportSchemaTest, AnOptionalFieldIsLeftOutAtItsDefaultAndReadWhenAbsent) {
  ProgressNotice training = sampleProgress();
  training.state = ProgressState::kTraining;
  const json text = json::parse(*encodeJson(Message{training}));
  EXPECT_FALSE(text.contains("expectedSeconds")) << text.dump();

  ProgressNotice pause = sampleProgress();
  pause.expected_seconds = 90;
  const json with = json::parse(*encodeJson(Message{pause}));
  EXPECT_EQ(with.at("expectedSeconds"), 90);
  json without = with;
  without.erase("expectedSeconds");
  const auto cbor = json::to_cbor(without);
  auto streamed = internal::decodeMessageCborStreaming(cbor);
  ASSERT_TRUE(streamed.has_value());
  EXPECT_EQ(std::get<ProgressNotice>(*streamed).expected_seconds, 0u);
  auto viaJson = decodeMessageJson(without.dump());
  ASSERT_TRUE(viaJson.has_value()) << viaJson.error().message;
  EXPECT_EQ(std::get<ProgressNotice>(*viaJson).expected_seconds, 0u);
  auto full = internal::decodeMessageCborStreaming(json::to_cbor(with));
  ASSERT_TRUE(full.has_value());
  EXPECT_EQ(std::get<ProgressNotice>(*full).expected_seconds, 90u);

  training.expected_seconds = 90;
  const Status s = validate(Message{training});
  ASSERT_FALSE(s.has_value());
  EXPECT_NE(s.error().message.find("ProgressNotice.expectedSeconds: is for pauses only"),
            std::string::npos)
      << s.error().message;
  pause.expected_seconds = kMaxPauseSeconds + 1;
  EXPECT_FALSE(validate(Message{pause}).has_value());
}

TEST(ReportSchemaTest, EveryFieldOfEveryStructGoesThroughEveryPath) {
  const Message rank = sampleReport();
  auto rr = [](Message& m) -> RankReport& { return std::get<RankReport>(m); };
  probeEveryField(Site<RankReport, Message>{rank, rr, "", "RankReport", "Message"});
  probeEveryField(Site<RankIdentity, Message>{
      rank, [](Message& m) -> RankIdentity& { return std::get<RankReport>(m).id; }, "/id",
      "RankReport.id", "Message.id"});
  probeEveryField(Site<ConnectionStats, Message>{
      rank, [](Message& m) -> ConnectionStats& { return std::get<RankReport>(m).connections[0]; },
      "/connections/0", "RankReport.connections[0]", "Message.connections[0]"});
  probeEveryField(Site<LatencySummary, Message>{
      rank,
      [](Message& m) -> LatencySummary& { return std::get<RankReport>(m).connections[0].wait; },
      "/connections/0/wait", "RankReport.connections[0].wait", "Message.connections[0].wait"});
  probeEveryField(Site<SubflowStats, Message>{
      rank,
      [](Message& m) -> SubflowStats& {
        return std::get<RankReport>(m).connections[0].subflows[0];
      },
      "/connections/0/subflows/0", "RankReport.connections[0].subflows[0]",
      "Message.connections[0].subflows[0]"});
  probeEveryField(Site<ProgressNotice, Message>{
      sampleProgress(), [](Message& m) -> ProgressNotice& { return std::get<ProgressNotice>(m); },
      "", "ProgressNotice", "Message"});
  probeEveryField(Site<CheckpointNotice, Message>{
      sampleCheckpoint(),
      [](Message& m) -> CheckpointNotice& { return std::get<CheckpointNotice>(m); }, "",
      "CheckpointNotice", "Message"});
  probeEveryField(Site<AnomalyNotice, Message>{
      sampleAnomaly(), [](Message& m) -> AnomalyNotice& { return std::get<AnomalyNotice>(m); }, "",
      "AnomalyNotice", "Message"});
}

TEST(ReportSchemaTest, EveryFieldOfEveryStructGoesThroughEveryPathInABatch) {
  const NodeReport n = sampleNodeReport();
  probeEveryField(Site<NodeReport, NodeReport>{n, [](NodeReport& d) -> NodeReport& { return d; },
                                               "", "NodeReport", "NodeReport"});
  probeEveryField(
      Site<NodeHealth, NodeReport>{n, [](NodeReport& d) -> NodeHealth& { return d.health; },
                                   "/health", "NodeReport.health", "NodeReport.health"});
  probeEveryField(Site<NicHealth, NodeReport>{
      n, [](NodeReport& d) -> NicHealth& { return d.health.nics[0]; }, "/health/nics/0",
      "NodeReport.health.nics[0]", "NodeReport.health.nics[0]"});
  probeEveryField(Site<GpuHealth, NodeReport>{
      n, [](NodeReport& d) -> GpuHealth& { return d.health.gpus[0]; }, "/health/gpus/0",
      "NodeReport.health.gpus[0]", "NodeReport.health.gpus[0]"});
  probeEveryField(Site<RdmaPortHealth, NodeReport>{
      n, [](NodeReport& d) -> RdmaPortHealth& { return d.health.rdma_ports[0]; },
      "/health/rdmaPorts/0", "NodeReport.health.rdmaPorts[0]", "NodeReport.health.rdmaPorts[0]"});
  probeEveryField(
      Site<RankReport, NodeReport>{n, [](NodeReport& d) -> RankReport& { return d.reports[0]; },
                                   "/reports/0", "RankReport", "NodeReport.reports[0]"});
  probeEveryField(Site<SubflowStats, NodeReport>{
      n, [](NodeReport& d) -> SubflowStats& { return d.reports[0].connections[0].subflows[0]; },
      "/reports/0/connections/0/subflows/0", "RankReport.connections[0].subflows[0]",
      "NodeReport.reports[0].connections[0].subflows[0]"});
  probeEveryField(Site<ProgressNotice, NodeReport>{
      n, [](NodeReport& d) -> ProgressNotice& { return std::get<ProgressNotice>(d.notices[0]); },
      "/notices/0", "ProgressNotice", "NodeReport.notices[0]"});
  probeEveryField(Site<CheckpointNotice, NodeReport>{
      n,
      [](NodeReport& d) -> CheckpointNotice& { return std::get<CheckpointNotice>(d.notices[1]); },
      "/notices/1", "CheckpointNotice", "NodeReport.notices[1]"});
  probeEveryField(Site<AnomalyNotice, NodeReport>{
      n, [](NodeReport& d) -> AnomalyNotice& { return std::get<AnomalyNotice>(d.notices[2]); },
      "/notices/2", "AnomalyNotice", "NodeReport.notices[2]"});
}

}  // namespace
}  // namespace c4::report
