#include "c4/common/report.h"

#include <bit>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "report_internal.h"

namespace c4::report {
namespace {

using json = nlohmann::json;

// The schema nests at most 5 levels (batch > reports > connections > subflows > object).
constexpr std::size_t kMaxDepth = 8;

Error invalid(const std::string& path, const std::string& what) {
  return Error{ErrorCode::kInvalidArgument, path + ": " + what};
}

// ---- Depth-limited DOM building (nlohmann's binary readers recurse per nesting level) ---------

class DepthLimitedSax {
 public:
  explicit DepthLimitedSax(json& root) : dom_(root, false) {}

  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) { return dom_.number_integer(v); }
  bool number_unsigned(json::number_unsigned_t v) { return dom_.number_unsigned(v); }
  bool number_float(json::number_float_t v, const std::string& s) {
    return dom_.number_float(v, s);
  }
  bool string(std::string& v) { return dom_.string(v); }
  bool binary(json::binary_t& /*v*/) {
    error_ = "binary values are not part of the schema";
    return false;
  }
  bool start_object(std::size_t n) {
    if (++depth_ > kMaxDepth) return tooDeep();
    return dom_.start_object(n);
  }
  bool key(std::string& k) { return dom_.key(k); }
  bool end_object() {
    --depth_;
    return dom_.end_object();
  }
  bool start_array(std::size_t n) {
    if (++depth_ > kMaxDepth) return tooDeep();
    return dom_.start_array(n);
  }
  bool end_array() {
    --depth_;
    return dom_.end_array();
  }
  bool parse_error(std::size_t pos, const std::string&, const nlohmann::detail::exception& ex) {
    error_ = "malformed input at byte " + std::to_string(pos) + ": " + ex.what();
    return false;
  }
  [[nodiscard]] const std::string& error() const { return error_; }

 private:
  bool tooDeep() {
    error_ = "nesting deeper than " + std::to_string(kMaxDepth) + " levels";
    return false;
  }
  nlohmann::detail::json_sax_dom_parser<json> dom_;
  std::size_t depth_ = 0;
  std::string error_;
};

Result<json> parseCbor(std::span<const std::uint8_t> bytes, std::size_t max_bytes,
                       const char* what) {
  if (bytes.empty())
    return makeError(ErrorCode::kInvalidArgument, std::string(what) + ": empty input");
  if (bytes.size() > max_bytes) {
    return makeError(ErrorCode::kInvalidArgument,
                     std::string(what) + ": " + std::to_string(bytes.size()) +
                         " bytes exceeds the limit of " + std::to_string(max_bytes));
  }
  json root;
  DepthLimitedSax sax(root);
  bool ok = false;
  try {
    ok = json::sax_parse(bytes.begin(), bytes.end(), &sax, json::input_format_t::cbor, true);
  } catch (const std::exception& e) {
    return makeError(ErrorCode::kInvalidArgument, std::string(what) + ": " + e.what());
  }
  if (!ok) {
    return makeError(ErrorCode::kInvalidArgument,
                     std::string(what) + ": invalid CBOR: " +
                         (sax.error().empty() ? std::string("rejected") : sax.error()));
  }
  return root;
}

Result<json> parseJson(std::string_view text, std::size_t max_bytes, const char* what) {
  if (text.size() > max_bytes) {
    return makeError(ErrorCode::kInvalidArgument,
                     std::string(what) + ": " + std::to_string(text.size()) +
                         " bytes exceeds the limit of " + std::to_string(max_bytes));
  }
  json root;
  DepthLimitedSax sax(root);
  bool ok = false;
  try {
    ok = json::sax_parse(text.begin(), text.end(), &sax, json::input_format_t::json, true);
  } catch (const std::exception& e) {
    return makeError(ErrorCode::kInvalidArgument, std::string(what) + ": " + e.what());
  }
  if (!ok) {
    return makeError(ErrorCode::kInvalidArgument,
                     std::string(what) + ": invalid JSON: " +
                         (sax.error().empty() ? std::string("rejected") : sax.error()));
  }
  return root;
}

// ---- Strict object reader
// ------------------------------------------------------------------------

bool validUtf8(std::string_view s) {
  std::size_t i = 0;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  while (i < s.size()) {
    unsigned char c = p[i];
    std::size_t n = 0;
    std::uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    for (std::size_t k = 1; k <= n; ++k) {
      if (i + k >= s.size() || (p[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
        cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += n + 1;
  }
  return true;
}

class Reader {
 public:
  Reader(const json& obj, std::string path) : obj_(obj), path_(std::move(path)) {}

  static Result<Reader> open(const json& j, std::string path) {
    if (!j.is_object()) return std::unexpected(invalid(path, "must be an object"));
    return Reader(j, std::move(path));
  }

  [[nodiscard]] std::string field(std::string_view key) const {
    return path_ + "." + std::string(key);
  }

  Result<const json*> get(std::string_view key) {
    auto it = obj_.find(std::string(key));
    if (it == obj_.end()) return std::unexpected(invalid(field(key), "missing"));
    seen_.insert(std::string(key));
    return &*it;
  }

  Result<std::uint64_t> u64(std::string_view key,
                            std::uint64_t max = std::numeric_limits<std::uint64_t>::max()) {
    C4_ASSIGN_OR_RETURN(const json* v, get(key));
    std::uint64_t out = 0;
    if (v->is_number_unsigned()) {
      out = v->get<std::uint64_t>();
    } else if (v->is_number_integer() && v->get<std::int64_t>() >= 0) {
      out = static_cast<std::uint64_t>(v->get<std::int64_t>());
    } else {
      return std::unexpected(invalid(field(key), "must be a non-negative integer"));
    }
    if (out > max) {
      return std::unexpected(
          invalid(field(key), std::to_string(out) + " exceeds the maximum " + std::to_string(max)));
    }
    return out;
  }

  Result<std::int64_t> i64(std::string_view key, std::int64_t min, std::int64_t max) {
    C4_ASSIGN_OR_RETURN(const json* v, get(key));
    std::int64_t out = 0;
    if (v->is_number_unsigned()) {
      auto u = v->get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        return std::unexpected(invalid(field(key), "out of range"));
      }
      out = static_cast<std::int64_t>(u);
    } else if (v->is_number_integer()) {
      out = v->get<std::int64_t>();
    } else {
      return std::unexpected(invalid(field(key), "must be an integer"));
    }
    if (out < min || out > max) {
      return std::unexpected(invalid(field(key), std::to_string(out) + " is outside [" +
                                                     std::to_string(min) + ", " +
                                                     std::to_string(max) + "]"));
    }
    return out;
  }

  Result<double> f64(std::string_view key, double min, double max) {
    C4_ASSIGN_OR_RETURN(const json* v, get(key));
    if (!v->is_number()) return std::unexpected(invalid(field(key), "must be a number"));
    double d = v->get<double>();
    if (!std::isfinite(d) || d < min || d > max) {
      return std::unexpected(invalid(
          field(key),
          "must be finite and within [" + std::to_string(min) + ", " + std::to_string(max) + "]"));
    }
    return d;
  }

  Result<bool> boolean(std::string_view key) {
    C4_ASSIGN_OR_RETURN(const json* v, get(key));
    if (!v->is_boolean()) return std::unexpected(invalid(field(key), "must be a boolean"));
    return v->get<bool>();
  }

  Result<std::string> str(std::string_view key, std::size_t max_bytes) {
    C4_ASSIGN_OR_RETURN(const json* v, get(key));
    if (!v->is_string()) return std::unexpected(invalid(field(key), "must be a string"));
    const auto& s = v->get_ref<const std::string&>();
    if (s.size() > max_bytes) {
      return std::unexpected(
          invalid(field(key), "longer than " + std::to_string(max_bytes) + " bytes"));
    }
    if (!validUtf8(s)) return std::unexpected(invalid(field(key), "is not valid UTF-8"));
    return s;
  }

  Result<const json*> array(std::string_view key, std::size_t max_items) {
    C4_ASSIGN_OR_RETURN(const json* v, get(key));
    if (!v->is_array()) return std::unexpected(invalid(field(key), "must be an array"));
    if (v->size() > max_items) {
      return std::unexpected(invalid(
          field(key),
          std::to_string(v->size()) + " items exceeds the limit of " + std::to_string(max_items)));
    }
    return v;
  }

  Result<Reader> object(std::string_view key) {
    C4_ASSIGN_OR_RETURN(const json* v, get(key));
    return open(*v, field(key));
  }

  // Rejects keys that were not read.
  Status finish() const {
    for (const auto& [k, v] : obj_.items()) {
      if (!seen_.contains(k)) return std::unexpected(invalid(field(k), "unknown field"));
    }
    return {};
  }

 private:
  const json& obj_;
  std::string path_;
  std::set<std::string, std::less<>> seen_;
};

// ---- Enum names ------------------------------------------------------------------------------

template <typename E, std::size_t N>
Result<E> parseEnum(const std::string& text,
                    const std::array<std::pair<E, std::string_view>, N>& table,
                    const std::string& path) {
  for (const auto& [e, name] : table) {
    if (text == name) return e;
  }
  std::string allowed;
  for (const auto& [e, name] : table) {
    if (!allowed.empty()) allowed += ", ";
    allowed += name;
  }
  return std::unexpected(invalid(path, "\"" + text + "\" is not one of: " + allowed));
}

constexpr std::array<std::pair<Direction, std::string_view>, 2> kDirections{
    {{Direction::kSend, "send"}, {Direction::kRecv, "recv"}}};
constexpr std::array<std::pair<ProgressState, std::string_view>, 5> kProgressStates{
    {{ProgressState::kTraining, "training"},
     {ProgressState::kCheckpointing, "checkpointing"},
     {ProgressState::kEvaluating, "evaluating"},
     {ProgressState::kIdle, "idle"},
     {ProgressState::kFinished, "finished"}}};
constexpr std::array<std::pair<AnomalyKind, std::string_view>, 3> kAnomalyKinds{
    {{AnomalyKind::kStall, "stall"},
     {AnomalyKind::kConnectionError, "connectionError"},
     {AnomalyKind::kPeerClosed, "peerClosed"}}};

template <typename E, std::size_t N>
std::string_view enumName(E e, const std::array<std::pair<E, std::string_view>, N>& table) {
  for (const auto& [v, name] : table) {
    if (v == e) return name;
  }
  return "unknown";
}

// ---- Value validation ------------------------------------------------------------------------

Status checkName(const std::string& v, const std::string& path, bool required) {
  if (v.empty()) {
    if (required) return std::unexpected(invalid(path, "must not be empty"));
    return {};
  }
  if (!isDnsSubdomain(v)) {
    return std::unexpected(invalid(
        path, "\"" + v.substr(0, 64) + "\" is not a valid Kubernetes name (DNS-1123 subdomain)"));
  }
  return {};
}

Status checkText(const std::string& v, const std::string& path) {
  if (v.size() > kMaxTextBytes) {
    return std::unexpected(
        invalid(path, "longer than " + std::to_string(kMaxTextBytes) + " bytes"));
  }
  if (!validUtf8(v)) return std::unexpected(invalid(path, "is not valid UTF-8"));
  return {};
}

Status checkTime(std::int64_t t, const std::string& path) {
  if (t <= 0) return std::unexpected(invalid(path, "must be a positive Unix time in nanoseconds"));
  return {};
}

Status checkIdentity(const RankIdentity& id, const std::string& path) {
  C4_RETURN_IF_ERROR(checkName(id.ns, path + ".namespace", false));
  C4_RETURN_IF_ERROR(checkName(id.job, path + ".job", false));
  C4_RETURN_IF_ERROR(checkName(id.pod, path + ".pod", false));
  C4_RETURN_IF_ERROR(checkName(id.node, path + ".node", false));
  if (id.rank < -1 || id.rank >= kMaxRank) {
    return std::unexpected(
        invalid(path + ".rank", "must be -1 or in [0, " + std::to_string(kMaxRank) + ")"));
  }
  if (id.worldSize < 0 || id.worldSize > kMaxRank) {
    return std::unexpected(
        invalid(path + ".worldSize", "must be in [0, " + std::to_string(kMaxRank) + "]"));
  }
  if (id.worldSize > 0 && id.rank >= id.worldSize) {
    return std::unexpected(invalid(path + ".rank", "must be below worldSize"));
  }
  return {};
}

Status checkLatency(const LatencySummary& l, const std::string& path) {
  if (l.maxUs > 0 && (l.p50Us > l.maxUs || l.p99Us > l.maxUs)) {
    return std::unexpected(invalid(path, "percentiles exceed the maximum"));
  }
  if (l.p50Us > l.p99Us) return std::unexpected(invalid(path, "p50Us exceeds p99Us"));
  if (l.count == 0 && (l.sumUs != 0 || l.maxUs != 0)) {
    return std::unexpected(invalid(path, "non-zero latencies with a zero count"));
  }
  return {};
}

constexpr double kMaxWeight = 1e6;

Status checkConnection(const ConnectionStats& c, const std::string& path) {
  if (c.peerRank < -1 || c.peerRank >= kMaxRank) {
    return std::unexpected(
        invalid(path + ".peerRank", "must be -1 or in [0, " + std::to_string(kMaxRank) + ")"));
  }
  C4_RETURN_IF_ERROR(checkName(c.peerNode, path + ".peerNode", false));
  C4_RETURN_IF_ERROR(checkName(c.peerPod, path + ".peerPod", false));
  if (c.inflight == 0 && c.oldestInflightUs != 0) {
    return std::unexpected(invalid(path + ".oldestInflightUs", "non-zero with no op in flight"));
  }
  C4_RETURN_IF_ERROR(checkLatency(c.wait, path + ".wait"));
  C4_RETURN_IF_ERROR(checkLatency(c.transfer, path + ".transfer"));
  if (c.subflows.size() > kMaxSubflowsPerConnection) {
    return std::unexpected(invalid(
        path + ".subflows", std::to_string(c.subflows.size()) + " items exceeds the limit of " +
                                std::to_string(kMaxSubflowsPerConnection)));
  }
  for (std::size_t i = 0; i < c.subflows.size(); ++i) {
    const auto& s = c.subflows[i];
    const std::string sp = path + ".subflows[" + std::to_string(i) + "]";
    if (!std::isfinite(s.weight) || s.weight < 0 || s.weight > kMaxWeight) {
      return std::unexpected(invalid(sp + ".weight", "must be finite and within [0, 1e6]"));
    }
    if (s.pathId < -1) return std::unexpected(invalid(sp + ".pathId", "must be >= -1"));
  }
  return {};
}

// ---- Encoding --------------------------------------------------------------------------------

json identityJson(const RankIdentity& id) {
  return json{{"namespace", id.ns},
              {"job", id.job},
              {"pod", id.pod},
              {"node", id.node},
              {"rank", id.rank},
              {"worldSize", id.worldSize},
              {"restartAttempt", id.restartAttempt},
              {"pid", id.pid}};
}

json latencyJson(const LatencySummary& l) {
  return json{{"count", l.count},
              {"sumUs", l.sumUs},
              {"maxUs", l.maxUs},
              {"p50Us", l.p50Us},
              {"p99Us", l.p99Us}};
}

json connectionJson(const ConnectionStats& c) {
  json subflows = json::array();
  for (const auto& s : c.subflows) {
    subflows.push_back(json{{"index", s.index},
                            {"localPort", s.localPort},
                            {"pathId", s.pathId},
                            {"weight", s.weight},
                            {"bytes", s.bytes}});
  }
  return json{{"id", c.id},
              {"direction", enumName(c.direction, kDirections)},
              {"peerRank", c.peerRank},
              {"peerNode", c.peerNode},
              {"peerPod", c.peerPod},
              {"bytes", c.bytes},
              {"ops", c.ops},
              {"inflight", c.inflight},
              {"oldestInflightUs", c.oldestInflightUs},
              {"wait", latencyJson(c.wait)},
              {"transfer", latencyJson(c.transfer)},
              {"subflows", std::move(subflows)}};
}

json bodyJson(const RankReport& r) {
  json conns = json::array();
  for (const auto& c : r.connections) conns.push_back(connectionJson(c));
  return json{{"v", kSchemaVersion},
              {"kind", "RankReport"},
              {"id", identityJson(r.id)},
              {"seq", r.seq},
              {"part", r.part},
              {"parts", r.parts},
              {"timeUnixNs", r.timeUnixNs},
              {"intervalMs", r.intervalMs},
              {"planVersion", r.planVersion},
              {"droppedMessages", r.droppedMessages},
              {"connections", std::move(conns)}};
}

json bodyJson(const ProgressNotice& n) {
  return json{{"v", kSchemaVersion},      {"kind", "ProgressNotice"},
              {"id", identityJson(n.id)}, {"timeUnixNs", n.timeUnixNs},
              {"step", n.step},           {"state", enumName(n.state, kProgressStates)}};
}

json bodyJson(const CheckpointNotice& n) {
  return json{{"v", kSchemaVersion},      {"kind", "CheckpointNotice"},
              {"id", identityJson(n.id)}, {"timeUnixNs", n.timeUnixNs},
              {"step", n.step},           {"path", n.path}};
}

json bodyJson(const AnomalyNotice& n) {
  return json{{"v", kSchemaVersion},
              {"kind", "AnomalyNotice"},
              {"id", identityJson(n.id)},
              {"timeUnixNs", n.timeUnixNs},
              {"anomaly", enumName(n.kind, kAnomalyKinds)},
              {"connectionId", n.connectionId},
              {"direction", enumName(n.direction, kDirections)},
              {"peerRank", n.peerRank},
              {"peerNode", n.peerNode},
              {"ageUs", n.ageUs},
              {"detail", n.detail}};
}

json messageJson(const Message& m) {
  return std::visit([](const auto& v) { return bodyJson(v); }, m);
}

json noticeJson(const Notice& n) {
  return std::visit([](const auto& v) { return bodyJson(v); }, n);
}

json nodeReportJson(const NodeReport& r) {
  json nics = json::array();
  for (const auto& n : r.health.nics) {
    nics.push_back(json{{"name", n.name},
                        {"up", n.up},
                        {"rdma", n.rdma},
                        {"speedMbps", n.speedMbps},
                        {"errors", n.errors},
                        {"operstate", n.operstate},
                        {"carrier", n.carrier},
                        {"carrierChanges", n.carrierChanges},
                        {"rxErrors", n.rxErrors},
                        {"txErrors", n.txErrors},
                        {"rxDropped", n.rxDropped},
                        {"txDropped", n.txDropped}});
  }
  json ports = json::array();
  for (const auto& p : r.health.rdmaPorts) {
    ports.push_back(json{{"device", p.device},
                         {"port", p.port},
                         {"netdev", p.netdev},
                         {"state", p.state},
                         {"physState", p.physState},
                         {"rateMbps", p.rateMbps},
                         {"active", p.active},
                         {"symbolErrors", p.symbolErrors},
                         {"linkDowned", p.linkDowned},
                         {"linkErrorRecovery", p.linkErrorRecovery},
                         {"rcvErrors", p.rcvErrors},
                         {"xmitDiscards", p.xmitDiscards}});
  }
  json gpus = json::array();
  for (const auto& g : r.health.gpus) {
    gpus.push_back(json{{"index", g.index},
                        {"uuid", g.uuid},
                        {"healthy", g.healthy},
                        {"detail", g.detail},
                        {"eccVolatileUncorrected", g.eccVolatileUncorrected},
                        {"retiredPagesPending", g.retiredPagesPending},
                        {"lastXid", g.lastXid},
                        {"throttleReasons", g.throttleReasons}});
  }
  json health{{"nics", std::move(nics)},           {"gpus", std::move(gpus)},
              {"rdmaPorts", std::move(ports)},     {"nicsAvailable", r.health.nicsAvailable},
              {"nicsReason", r.health.nicsReason}, {"rdmaAvailable", r.health.rdmaAvailable},
              {"rdmaReason", r.health.rdmaReason}, {"gpusAvailable", r.health.gpusAvailable},
              {"gpusReason", r.health.gpusReason}};
  json reports = json::array();
  for (const auto& rr : r.reports) reports.push_back(bodyJson(rr));
  json notices = json::array();
  for (const auto& n : r.notices) notices.push_back(noticeJson(n));
  return json{{"v", kSchemaVersion},
              {"kind", "NodeReport"},
              {"node", r.node},
              {"seq", r.seq},
              {"timeUnixNs", r.timeUnixNs},
              {"health", std::move(health)},
              {"reports", std::move(reports)},
              {"notices", std::move(notices)},
              {"droppedMessages", r.droppedMessages},
              {"rejectedMessages", r.rejectedMessages}};
}

// ---- Decoding --------------------------------------------------------------------------------

Result<RankIdentity> decodeIdentity(Reader& parent) {
  C4_ASSIGN_OR_RETURN(Reader r, parent.object("id"));
  RankIdentity id;
  C4_ASSIGN_OR_RETURN(id.ns, r.str("namespace", kMaxNameBytes));
  C4_ASSIGN_OR_RETURN(id.job, r.str("job", kMaxNameBytes));
  C4_ASSIGN_OR_RETURN(id.pod, r.str("pod", kMaxNameBytes));
  C4_ASSIGN_OR_RETURN(id.node, r.str("node", kMaxNameBytes));
  C4_ASSIGN_OR_RETURN(auto rank, r.i64("rank", -1, kMaxRank - 1));
  id.rank = static_cast<std::int32_t>(rank);
  C4_ASSIGN_OR_RETURN(auto ws, r.i64("worldSize", 0, kMaxRank));
  id.worldSize = static_cast<std::int32_t>(ws);
  C4_ASSIGN_OR_RETURN(auto ra, r.u64("restartAttempt", std::numeric_limits<std::uint32_t>::max()));
  id.restartAttempt = static_cast<std::uint32_t>(ra);
  C4_ASSIGN_OR_RETURN(auto pid, r.u64("pid", std::numeric_limits<std::uint32_t>::max()));
  id.pid = static_cast<std::uint32_t>(pid);
  C4_RETURN_IF_ERROR(r.finish());
  return id;
}

Result<LatencySummary> decodeLatency(Reader& parent, std::string_view key) {
  C4_ASSIGN_OR_RETURN(Reader r, parent.object(key));
  LatencySummary l;
  C4_ASSIGN_OR_RETURN(l.count, r.u64("count"));
  C4_ASSIGN_OR_RETURN(l.sumUs, r.u64("sumUs"));
  C4_ASSIGN_OR_RETURN(l.maxUs, r.u64("maxUs"));
  C4_ASSIGN_OR_RETURN(l.p50Us, r.u64("p50Us"));
  C4_ASSIGN_OR_RETURN(l.p99Us, r.u64("p99Us"));
  C4_RETURN_IF_ERROR(r.finish());
  return l;
}

Result<Direction> decodeDirection(Reader& r, std::string_view key) {
  C4_ASSIGN_OR_RETURN(auto s, r.str(key, 16));
  return parseEnum(s, kDirections, r.field(key));
}

Result<ConnectionStats> decodeConnection(const json& j, const std::string& path) {
  C4_ASSIGN_OR_RETURN(Reader r, Reader::open(j, path));
  ConnectionStats c;
  C4_ASSIGN_OR_RETURN(c.id, r.u64("id"));
  C4_ASSIGN_OR_RETURN(c.direction, decodeDirection(r, "direction"));
  C4_ASSIGN_OR_RETURN(auto pr, r.i64("peerRank", -1, kMaxRank - 1));
  c.peerRank = static_cast<std::int32_t>(pr);
  C4_ASSIGN_OR_RETURN(c.peerNode, r.str("peerNode", kMaxNameBytes));
  C4_ASSIGN_OR_RETURN(c.peerPod, r.str("peerPod", kMaxNameBytes));
  C4_ASSIGN_OR_RETURN(c.bytes, r.u64("bytes"));
  C4_ASSIGN_OR_RETURN(c.ops, r.u64("ops"));
  C4_ASSIGN_OR_RETURN(auto inflight, r.u64("inflight", std::numeric_limits<std::uint32_t>::max()));
  c.inflight = static_cast<std::uint32_t>(inflight);
  C4_ASSIGN_OR_RETURN(c.oldestInflightUs, r.u64("oldestInflightUs"));
  C4_ASSIGN_OR_RETURN(c.wait, decodeLatency(r, "wait"));
  C4_ASSIGN_OR_RETURN(c.transfer, decodeLatency(r, "transfer"));
  C4_ASSIGN_OR_RETURN(const json* subflows, r.array("subflows", kMaxSubflowsPerConnection));
  c.subflows.reserve(subflows->size());
  for (std::size_t i = 0; i < subflows->size(); ++i) {
    C4_ASSIGN_OR_RETURN(Reader s, Reader::open((*subflows)[i], r.field("subflows") + "[" +
                                                                   std::to_string(i) + "]"));
    SubflowStats sf;
    C4_ASSIGN_OR_RETURN(auto idx, s.u64("index", kMaxSubflowsPerConnection - 1));
    sf.index = static_cast<std::uint32_t>(idx);
    C4_ASSIGN_OR_RETURN(auto port, s.u64("localPort", 65535));
    sf.localPort = static_cast<std::uint16_t>(port);
    C4_ASSIGN_OR_RETURN(auto pid, s.i64("pathId", -1, std::numeric_limits<std::int32_t>::max()));
    sf.pathId = static_cast<std::int32_t>(pid);
    C4_ASSIGN_OR_RETURN(sf.weight, s.f64("weight", 0.0, kMaxWeight));
    C4_ASSIGN_OR_RETURN(sf.bytes, s.u64("bytes"));
    C4_RETURN_IF_ERROR(s.finish());
    c.subflows.push_back(sf);
  }
  C4_RETURN_IF_ERROR(r.finish());
  C4_RETURN_IF_ERROR(checkConnection(c, path));
  return c;
}

Status checkHeader(Reader& r, std::string_view expected_kind) {
  C4_ASSIGN_OR_RETURN(auto v, r.i64("v", std::numeric_limits<std::int64_t>::min(),
                                    std::numeric_limits<std::int64_t>::max()));
  if (v != kSchemaVersion) {
    return std::unexpected(invalid(r.field("v"), "schema version " + std::to_string(v) +
                                                     " is not supported (this build speaks " +
                                                     std::to_string(kSchemaVersion) + ")"));
  }
  C4_ASSIGN_OR_RETURN(auto kind, r.str("kind", 64));
  if (kind != expected_kind) {
    return std::unexpected(invalid(
        r.field("kind"), "expected \"" + std::string(expected_kind) + "\", got \"" + kind + "\""));
  }
  return {};
}

Result<RankReport> decodeRankReport(Reader& r) {
  RankReport out;
  C4_ASSIGN_OR_RETURN(out.id, decodeIdentity(r));
  C4_ASSIGN_OR_RETURN(out.seq, r.u64("seq"));
  C4_ASSIGN_OR_RETURN(auto part, r.u64("part", kMaxParts - 1));
  out.part = static_cast<std::uint16_t>(part);
  C4_ASSIGN_OR_RETURN(auto parts, r.u64("parts", kMaxParts));
  out.parts = static_cast<std::uint16_t>(parts);
  C4_ASSIGN_OR_RETURN(out.timeUnixNs,
                      r.i64("timeUnixNs", 1, std::numeric_limits<std::int64_t>::max()));
  C4_ASSIGN_OR_RETURN(auto interval, r.u64("intervalMs", 3'600'000));
  out.intervalMs = static_cast<std::uint32_t>(interval);
  C4_ASSIGN_OR_RETURN(out.planVersion,
                      r.i64("planVersion", -1, std::numeric_limits<std::int64_t>::max()));
  C4_ASSIGN_OR_RETURN(out.droppedMessages, r.u64("droppedMessages"));
  C4_ASSIGN_OR_RETURN(const json* conns, r.array("connections", kMaxConnectionsPerReport));
  out.connections.reserve(conns->size());
  for (std::size_t i = 0; i < conns->size(); ++i) {
    C4_ASSIGN_OR_RETURN(auto c, decodeConnection((*conns)[i], r.field("connections") + "[" +
                                                                  std::to_string(i) + "]"));
    out.connections.push_back(std::move(c));
  }
  C4_RETURN_IF_ERROR(r.finish());
  C4_RETURN_IF_ERROR(validate(out));
  return out;
}

Result<ProgressNotice> decodeProgress(Reader& r) {
  ProgressNotice n;
  C4_ASSIGN_OR_RETURN(n.id, decodeIdentity(r));
  C4_ASSIGN_OR_RETURN(n.timeUnixNs,
                      r.i64("timeUnixNs", 1, std::numeric_limits<std::int64_t>::max()));
  C4_ASSIGN_OR_RETURN(n.step, r.i64("step", -1, std::numeric_limits<std::int64_t>::max()));
  C4_ASSIGN_OR_RETURN(auto s, r.str("state", 32));
  C4_ASSIGN_OR_RETURN(n.state, parseEnum(s, kProgressStates, r.field("state")));
  C4_RETURN_IF_ERROR(r.finish());
  C4_RETURN_IF_ERROR(validate(n));
  return n;
}

Result<CheckpointNotice> decodeCheckpoint(Reader& r) {
  CheckpointNotice n;
  C4_ASSIGN_OR_RETURN(n.id, decodeIdentity(r));
  C4_ASSIGN_OR_RETURN(n.timeUnixNs,
                      r.i64("timeUnixNs", 1, std::numeric_limits<std::int64_t>::max()));
  C4_ASSIGN_OR_RETURN(n.step, r.i64("step", 0, std::numeric_limits<std::int64_t>::max()));
  C4_ASSIGN_OR_RETURN(n.path, r.str("path", kMaxTextBytes));
  C4_RETURN_IF_ERROR(r.finish());
  C4_RETURN_IF_ERROR(validate(n));
  return n;
}

Result<AnomalyNotice> decodeAnomaly(Reader& r) {
  AnomalyNotice n;
  C4_ASSIGN_OR_RETURN(n.id, decodeIdentity(r));
  C4_ASSIGN_OR_RETURN(n.timeUnixNs,
                      r.i64("timeUnixNs", 1, std::numeric_limits<std::int64_t>::max()));
  C4_ASSIGN_OR_RETURN(auto k, r.str("anomaly", 32));
  C4_ASSIGN_OR_RETURN(n.kind, parseEnum(k, kAnomalyKinds, r.field("anomaly")));
  C4_ASSIGN_OR_RETURN(n.connectionId, r.u64("connectionId"));
  C4_ASSIGN_OR_RETURN(n.direction, decodeDirection(r, "direction"));
  C4_ASSIGN_OR_RETURN(auto pr, r.i64("peerRank", -1, kMaxRank - 1));
  n.peerRank = static_cast<std::int32_t>(pr);
  C4_ASSIGN_OR_RETURN(n.peerNode, r.str("peerNode", kMaxNameBytes));
  C4_ASSIGN_OR_RETURN(n.ageUs, r.u64("ageUs"));
  C4_ASSIGN_OR_RETURN(n.detail, r.str("detail", kMaxTextBytes));
  C4_RETURN_IF_ERROR(r.finish());
  C4_RETURN_IF_ERROR(validate(n));
  return n;
}

Result<Message> decodeMessage(const json& j, const std::string& path) {
  C4_ASSIGN_OR_RETURN(Reader r, Reader::open(j, path));
  C4_ASSIGN_OR_RETURN(auto v, r.i64("v", std::numeric_limits<std::int64_t>::min(),
                                    std::numeric_limits<std::int64_t>::max()));
  if (v != kSchemaVersion) {
    return std::unexpected(invalid(r.field("v"), "schema version " + std::to_string(v) +
                                                     " is not supported (this build speaks " +
                                                     std::to_string(kSchemaVersion) + ")"));
  }
  C4_ASSIGN_OR_RETURN(auto kind, r.str("kind", 64));
  if (kind == "RankReport") return decodeRankReport(r);
  if (kind == "ProgressNotice") return decodeProgress(r);
  if (kind == "CheckpointNotice") return decodeCheckpoint(r);
  if (kind == "AnomalyNotice") return decodeAnomaly(r);
  return std::unexpected(
      invalid(r.field("kind"), "unknown message kind \"" + kind.substr(0, 64) + "\""));
}

Result<Notice> decodeNotice(const json& j, const std::string& path) {
  C4_ASSIGN_OR_RETURN(Message m, decodeMessage(j, path));
  if (auto* p = std::get_if<ProgressNotice>(&m)) return Notice{std::move(*p)};
  if (auto* c = std::get_if<CheckpointNotice>(&m)) return Notice{std::move(*c)};
  if (auto* a = std::get_if<AnomalyNotice>(&m)) return Notice{std::move(*a)};
  return std::unexpected(invalid(path + ".kind", "a RankReport is not a notice"));
}

Result<NodeReport> decodeNodeReport(const json& j) {
  C4_ASSIGN_OR_RETURN(Reader r, Reader::open(j, "NodeReport"));
  C4_RETURN_IF_ERROR(checkHeader(r, "NodeReport"));
  NodeReport out;
  C4_ASSIGN_OR_RETURN(out.node, r.str("node", kMaxNameBytes));
  C4_ASSIGN_OR_RETURN(out.seq, r.u64("seq"));
  C4_ASSIGN_OR_RETURN(out.timeUnixNs,
                      r.i64("timeUnixNs", 1, std::numeric_limits<std::int64_t>::max()));
  {
    C4_ASSIGN_OR_RETURN(Reader h, r.object("health"));
    C4_ASSIGN_OR_RETURN(const json* nics, h.array("nics", kMaxDevicesPerNode));
    for (std::size_t i = 0; i < nics->size(); ++i) {
      C4_ASSIGN_OR_RETURN(
          Reader n, Reader::open((*nics)[i], h.field("nics") + "[" + std::to_string(i) + "]"));
      NicHealth nic;
      C4_ASSIGN_OR_RETURN(nic.name, n.str("name", kMaxNameBytes));
      C4_ASSIGN_OR_RETURN(nic.up, n.boolean("up"));
      C4_ASSIGN_OR_RETURN(nic.rdma, n.boolean("rdma"));
      C4_ASSIGN_OR_RETURN(nic.speedMbps, n.u64("speedMbps"));
      C4_ASSIGN_OR_RETURN(nic.errors, n.u64("errors"));
      C4_ASSIGN_OR_RETURN(nic.operstate, n.str("operstate", 32));
      C4_ASSIGN_OR_RETURN(nic.carrier, n.boolean("carrier"));
      C4_ASSIGN_OR_RETURN(nic.carrierChanges, n.u64("carrierChanges"));
      C4_ASSIGN_OR_RETURN(nic.rxErrors, n.u64("rxErrors"));
      C4_ASSIGN_OR_RETURN(nic.txErrors, n.u64("txErrors"));
      C4_ASSIGN_OR_RETURN(nic.rxDropped, n.u64("rxDropped"));
      C4_ASSIGN_OR_RETURN(nic.txDropped, n.u64("txDropped"));
      C4_RETURN_IF_ERROR(n.finish());
      out.health.nics.push_back(std::move(nic));
    }
    C4_ASSIGN_OR_RETURN(const json* gpus, h.array("gpus", kMaxDevicesPerNode));
    for (std::size_t i = 0; i < gpus->size(); ++i) {
      C4_ASSIGN_OR_RETURN(
          Reader g, Reader::open((*gpus)[i], h.field("gpus") + "[" + std::to_string(i) + "]"));
      GpuHealth gpu;
      C4_ASSIGN_OR_RETURN(auto idx,
                          g.i64("index", 0, static_cast<std::int64_t>(kMaxDevicesPerNode) - 1));
      gpu.index = static_cast<std::int32_t>(idx);
      C4_ASSIGN_OR_RETURN(gpu.uuid, g.str("uuid", kMaxNameBytes));
      C4_ASSIGN_OR_RETURN(gpu.healthy, g.boolean("healthy"));
      C4_ASSIGN_OR_RETURN(gpu.detail, g.str("detail", kMaxTextBytes));
      C4_ASSIGN_OR_RETURN(gpu.eccVolatileUncorrected, g.u64("eccVolatileUncorrected"));
      C4_ASSIGN_OR_RETURN(gpu.retiredPagesPending, g.boolean("retiredPagesPending"));
      C4_ASSIGN_OR_RETURN(gpu.lastXid, g.u64("lastXid"));
      C4_ASSIGN_OR_RETURN(gpu.throttleReasons, g.u64("throttleReasons"));
      C4_RETURN_IF_ERROR(g.finish());
      out.health.gpus.push_back(std::move(gpu));
    }
    C4_ASSIGN_OR_RETURN(const json* ports, h.array("rdmaPorts", kMaxDevicesPerNode));
    for (std::size_t i = 0; i < ports->size(); ++i) {
      C4_ASSIGN_OR_RETURN(Reader p, Reader::open((*ports)[i], h.field("rdmaPorts") + "[" +
                                                                  std::to_string(i) + "]"));
      RdmaPortHealth port;
      C4_ASSIGN_OR_RETURN(port.device, p.str("device", kMaxNameBytes));
      C4_ASSIGN_OR_RETURN(auto num, p.u64("port", 255));
      port.port = static_cast<std::uint32_t>(num);
      C4_ASSIGN_OR_RETURN(port.netdev, p.str("netdev", kMaxNameBytes));
      C4_ASSIGN_OR_RETURN(port.state, p.str("state", 32));
      C4_ASSIGN_OR_RETURN(port.physState, p.str("physState", 32));
      C4_ASSIGN_OR_RETURN(port.rateMbps, p.u64("rateMbps"));
      C4_ASSIGN_OR_RETURN(port.active, p.boolean("active"));
      C4_ASSIGN_OR_RETURN(port.symbolErrors, p.u64("symbolErrors"));
      C4_ASSIGN_OR_RETURN(port.linkDowned, p.u64("linkDowned"));
      C4_ASSIGN_OR_RETURN(port.linkErrorRecovery, p.u64("linkErrorRecovery"));
      C4_ASSIGN_OR_RETURN(port.rcvErrors, p.u64("rcvErrors"));
      C4_ASSIGN_OR_RETURN(port.xmitDiscards, p.u64("xmitDiscards"));
      C4_RETURN_IF_ERROR(p.finish());
      out.health.rdmaPorts.push_back(std::move(port));
    }
    C4_ASSIGN_OR_RETURN(out.health.nicsAvailable, h.boolean("nicsAvailable"));
    C4_ASSIGN_OR_RETURN(out.health.nicsReason, h.str("nicsReason", kMaxTextBytes));
    C4_ASSIGN_OR_RETURN(out.health.rdmaAvailable, h.boolean("rdmaAvailable"));
    C4_ASSIGN_OR_RETURN(out.health.rdmaReason, h.str("rdmaReason", kMaxTextBytes));
    C4_ASSIGN_OR_RETURN(out.health.gpusAvailable, h.boolean("gpusAvailable"));
    C4_ASSIGN_OR_RETURN(out.health.gpusReason, h.str("gpusReason", kMaxTextBytes));
    C4_RETURN_IF_ERROR(h.finish());
  }
  C4_ASSIGN_OR_RETURN(const json* reports, r.array("reports", kMaxReportsPerBatch));
  out.reports.reserve(reports->size());
  for (std::size_t i = 0; i < reports->size(); ++i) {
    const std::string path = r.field("reports") + "[" + std::to_string(i) + "]";
    C4_ASSIGN_OR_RETURN(Reader rr, Reader::open((*reports)[i], path));
    C4_RETURN_IF_ERROR(checkHeader(rr, "RankReport"));
    C4_ASSIGN_OR_RETURN(auto rep, decodeRankReport(rr));
    out.reports.push_back(std::move(rep));
  }
  C4_ASSIGN_OR_RETURN(const json* notices, r.array("notices", kMaxNoticesPerBatch));
  out.notices.reserve(notices->size());
  for (std::size_t i = 0; i < notices->size(); ++i) {
    C4_ASSIGN_OR_RETURN(
        auto n, decodeNotice((*notices)[i], r.field("notices") + "[" + std::to_string(i) + "]"));
    out.notices.push_back(std::move(n));
  }
  C4_ASSIGN_OR_RETURN(out.droppedMessages, r.u64("droppedMessages"));
  C4_ASSIGN_OR_RETURN(out.rejectedMessages, r.u64("rejectedMessages"));
  C4_RETURN_IF_ERROR(r.finish());
  C4_RETURN_IF_ERROR(validate(out));
  return out;
}

// ---- Streaming CBOR decoding -----------------------------------------------------------------
//
// Decodes CBOR straight into the structs, for exactly this schema: maps with definite or
// indefinite length and definite-length text keys, unsigned/negative integers, float32/float64,
// booleans, definite-length text strings. It is a predicate with a by-product: it accepts only
// documents the DOM decoder above accepts, with the same value, and checks every rule that decoder
// checks (field set, types, ranges, sizes, UTF-8, names, validate()). Anything it does not accept
// (including the encodings it does not handle: duplicate keys, indefinite-length strings, half
// floats, non-canonical negative integers) goes to the DOM decoder, which then gives the verdict
// and the diagnostic naming the field. Valid input never takes the slow path; invalid input costs
// what it cost before. Iterative over a fixed schema: no recursion driven by the input.

class CborIn {
 public:
  explicit CborIn(std::span<const std::uint8_t> b) : p_(b.data()), end_(b.data() + b.size()) {}

  [[nodiscard]] bool atEnd() const { return p_ == end_; }
  [[nodiscard]] bool failed() const { return fail_; }
  bool fail() {
    fail_ = true;
    return false;
  }

  // A map or array header: the item count (definite) or `indefinite`.
  struct Seq {
    std::uint64_t left = 0;
    bool indefinite = false;
  };

  bool beginMap(Seq& s) { return begin(5, s, 2); }
  bool beginArray(Seq& s) { return begin(4, s, 1); }

  // True while `s` has another item (map: another key/value pair). Sets failed() on truncation.
  bool more(Seq& s) {
    if (s.indefinite) {
      if (p_ == end_) return fail();
      if (*p_ == 0xFF) {
        ++p_;
        return false;
      }
      return true;
    }
    if (s.left == 0) return false;
    --s.left;
    return true;
  }

  bool key(std::string_view& out) { return text(out, std::numeric_limits<std::size_t>::max()); }

  bool str(std::string& out, std::size_t max_bytes) {
    std::string_view v;
    if (!text(v, max_bytes) || !validUtf8(v)) return fail();
    out.assign(v);
    return true;
  }
  bool strView(std::string_view& out, std::size_t max_bytes) {
    if (!text(out, max_bytes) || !validUtf8(out)) return fail();
    return true;
  }

  bool u64(std::uint64_t& out, std::uint64_t max = std::numeric_limits<std::uint64_t>::max()) {
    std::uint64_t arg = 0;
    if (!head(0, arg) || arg > max) return fail();
    out = arg;
    return true;
  }
  template <typename T>
  bool uint(T& out, std::uint64_t max = std::numeric_limits<T>::max()) {
    std::uint64_t v = 0;
    if (!u64(v, max)) return false;
    out = static_cast<T>(v);
    return true;
  }

  bool i64(std::int64_t& out, std::int64_t min = std::numeric_limits<std::int64_t>::min(),
           std::int64_t max = std::numeric_limits<std::int64_t>::max()) {
    if (!integer(out) || out < min || out > max) return fail();
    return true;
  }
  template <typename T>
  bool sint(T& out, std::int64_t min, std::int64_t max) {
    std::int64_t v = 0;
    if (!i64(v, min, max)) return false;
    out = static_cast<T>(v);
    return true;
  }

  bool f64(double& out, double min, double max) {
    if (p_ == end_) return fail();
    const std::uint8_t ib = *p_;
    if (ib == 0xFA || ib == 0xFB) {
      const std::size_t n = ib == 0xFA ? 4 : 8;
      if (static_cast<std::size_t>(end_ - p_) < n + 1) return fail();
      ++p_;
      std::uint64_t bits = 0;
      for (std::size_t i = 0; i < n; ++i) bits = (bits << 8) | *p_++;
      if (n == 4) {
        out = static_cast<double>(std::bit_cast<float>(static_cast<std::uint32_t>(bits)));
      } else {
        out = std::bit_cast<double>(bits);
      }
    } else if ((ib >> 5) == 0) {
      std::uint64_t u = 0;
      if (!u64(u)) return false;
      out = static_cast<double>(u);
    } else {
      std::int64_t i = 0;
      if (!integer(i)) return fail();
      out = static_cast<double>(i);
    }
    if (!std::isfinite(out) || out < min || out > max) return fail();
    return true;
  }

  bool boolean(bool& out) {
    if (p_ == end_ || (*p_ != 0xF4 && *p_ != 0xF5)) return fail();
    out = *p_++ == 0xF5;
    return true;
  }

 private:
  // An initial byte of major type `major` with a definite argument.
  bool head(unsigned major, std::uint64_t& arg) {
    bool indefinite = false;
    return headAny(major, arg, indefinite) && !indefinite;
  }
  bool headAny(unsigned major, std::uint64_t& arg, bool& indefinite) {
    if (p_ == end_ || (*p_ >> 5) != major) return false;
    const unsigned ai = *p_++ & 0x1F;
    indefinite = false;
    if (ai < 24) {
      arg = ai;
      return true;
    }
    if (ai == 31) {
      indefinite = true;
      return true;
    }
    if (ai > 27) return false;
    const std::size_t n = std::size_t{1} << (ai - 24);
    if (static_cast<std::size_t>(end_ - p_) < n) return false;
    arg = 0;
    for (std::size_t i = 0; i < n; ++i) arg = (arg << 8) | *p_++;
    return true;
  }
  // Major type 0 or 1 as a signed 64-bit value (negative values below INT64_MIN: not ours).
  bool integer(std::int64_t& out) {
    if (p_ == end_) return false;
    const unsigned major = *p_ >> 5;
    if (major != 0 && major != 1) return false;
    std::uint64_t arg = 0;
    if (!head(major, arg) ||
        arg > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      return false;
    }
    out = major == 0 ? static_cast<std::int64_t>(arg) : -1 - static_cast<std::int64_t>(arg);
    return true;
  }
  bool text(std::string_view& out, std::size_t max_bytes) {
    std::uint64_t len = 0;
    if (!head(3, len) || len > static_cast<std::uint64_t>(end_ - p_) || len > max_bytes) {
      return fail();
    }
    out = std::string_view(reinterpret_cast<const char*>(p_), len);
    p_ += len;
    return true;
  }
  bool begin(unsigned major, Seq& s, std::uint64_t min_bytes_per_item) {
    std::uint64_t n = 0;
    bool indefinite = false;
    if (!headAny(major, n, indefinite)) return fail();
    s.indefinite = indefinite;
    s.left = n;
    // Every item takes at least one byte (a pair two): a count the input cannot hold is false.
    if (!indefinite && n > static_cast<std::uint64_t>(end_ - p_) / min_bytes_per_item) {
      return fail();
    }
    return true;
  }

  const std::uint8_t* p_;
  const std::uint8_t* end_;
  bool fail_ = false;
};

// Index of `key` in `names`, or N.
template <std::size_t N>
std::size_t fieldIndex(const std::array<std::string_view, N>& names, std::string_view key) {
  for (std::size_t i = 0; i < N; ++i) {
    if (names[i] == key) return i;
  }
  return N;
}

// Reads one map whose keys are all in `names`, each exactly once (`required` is the mask of the
// keys that must be present; the default: all), calling on_field(index) to read each value.
template <std::size_t N, typename F>
bool readObject(CborIn& in, const std::array<std::string_view, N>& names, F&& on_field,
                std::uint64_t* seen_out = nullptr) {
  static_assert(N < 64);
  CborIn::Seq s;
  if (!in.beginMap(s)) return false;
  std::uint64_t seen = 0;
  while (in.more(s)) {
    std::string_view k;
    if (!in.key(k)) return false;
    const std::size_t i = fieldIndex(names, k);
    if (i == N || (seen & (std::uint64_t{1} << i)) != 0) return in.fail();
    seen |= std::uint64_t{1} << i;
    if (!on_field(i)) return in.fail();
  }
  if (in.failed()) return false;
  if (seen_out != nullptr) {
    *seen_out = seen;
    return true;
  }
  return seen == (std::uint64_t{1} << N) - 1 || in.fail();
}

// Reads one array of at most `max_items` items, calling on_item() for each.
template <typename F>
bool readArray(CborIn& in, std::size_t max_items, F&& on_item) {
  CborIn::Seq s;
  if (!in.beginArray(s)) return false;
  if (!s.indefinite && s.left > max_items) return in.fail();
  std::size_t count = 0;
  while (in.more(s)) {
    if (++count > max_items || !on_item(s.indefinite ? 0 : s.left + 1)) return in.fail();
  }
  return !in.failed();
}

template <typename E, std::size_t N>
bool enumValue(CborIn& in, const std::array<std::pair<E, std::string_view>, N>& table, E& out,
               std::size_t max_bytes) {
  std::string_view s;
  if (!in.strView(s, max_bytes)) return false;
  for (const auto& [e, name] : table) {
    if (s == name) {
      out = e;
      return true;
    }
  }
  return in.fail();
}

constexpr std::array<std::string_view, 8> kIdentityFields{
    "namespace", "job", "pod", "node", "rank", "worldSize", "restartAttempt", "pid"};

bool streamIdentity(CborIn& in, RankIdentity& id) {
  return readObject(in, kIdentityFields, [&](std::size_t f) {
    switch (f) {
      case 0:
        return in.str(id.ns, kMaxNameBytes);
      case 1:
        return in.str(id.job, kMaxNameBytes);
      case 2:
        return in.str(id.pod, kMaxNameBytes);
      case 3:
        return in.str(id.node, kMaxNameBytes);
      case 4:
        return in.sint(id.rank, -1, kMaxRank - 1);
      case 5:
        return in.sint(id.worldSize, 0, kMaxRank);
      case 6:
        return in.uint(id.restartAttempt);
      default:
        return in.uint(id.pid);
    }
  });
}

constexpr std::array<std::string_view, 5> kLatencyFields{"count", "sumUs", "maxUs", "p50Us",
                                                         "p99Us"};

bool streamLatency(CborIn& in, LatencySummary& l) {
  return readObject(in, kLatencyFields, [&](std::size_t f) {
    switch (f) {
      case 0:
        return in.u64(l.count);
      case 1:
        return in.u64(l.sumUs);
      case 2:
        return in.u64(l.maxUs);
      case 3:
        return in.u64(l.p50Us);
      default:
        return in.u64(l.p99Us);
    }
  });
}

constexpr std::array<std::string_view, 5> kSubflowFields{"index", "localPort", "pathId", "weight",
                                                         "bytes"};
constexpr std::array<std::string_view, 12> kConnectionFields{
    "id",  "direction", "peerRank",         "peerNode", "peerPod",  "bytes",
    "ops", "inflight",  "oldestInflightUs", "wait",     "transfer", "subflows"};

bool streamConnection(CborIn& in, ConnectionStats& c) {
  return readObject(in, kConnectionFields, [&](std::size_t f) {
    switch (f) {
      case 0:
        return in.u64(c.id);
      case 1:
        return enumValue(in, kDirections, c.direction, 16);
      case 2:
        return in.sint(c.peerRank, -1, kMaxRank - 1);
      case 3:
        return in.str(c.peerNode, kMaxNameBytes);
      case 4:
        return in.str(c.peerPod, kMaxNameBytes);
      case 5:
        return in.u64(c.bytes);
      case 6:
        return in.u64(c.ops);
      case 7:
        return in.uint(c.inflight);
      case 8:
        return in.u64(c.oldestInflightUs);
      case 9:
        return streamLatency(in, c.wait);
      case 10:
        return streamLatency(in, c.transfer);
      default:
        return readArray(in, kMaxSubflowsPerConnection, [&](std::uint64_t hint) {
          if (c.subflows.empty() && hint > 0) c.subflows.reserve(hint);
          SubflowStats& s = c.subflows.emplace_back();
          return readObject(in, kSubflowFields, [&](std::size_t g) {
            switch (g) {
              case 0:
                return in.uint(s.index, kMaxSubflowsPerConnection - 1);
              case 1:
                return in.uint(s.localPort);
              case 2:
                return in.sint(s.pathId, -1, std::numeric_limits<std::int32_t>::max());
              case 3:
                return in.f64(s.weight, 0.0, kMaxWeight);
              default:
                return in.u64(s.bytes);
            }
          });
        });
    }
  });
}

// Every field any message kind has; which of them must be present depends on `kind`, which may
// come last (the encoder writes keys in byte order), so one pass reads them all and checks the set
// at the end.
enum MessageField : std::size_t {
  kFV,
  kFKind,
  kFId,
  kFTimeUnixNs,
  kFSeq,
  kFPart,
  kFParts,
  kFIntervalMs,
  kFPlanVersion,
  kFDroppedMessages,
  kFConnections,
  kFStep,
  kFState,
  kFPath,
  kFAnomaly,
  kFConnectionId,
  kFDirection,
  kFPeerRank,
  kFPeerNode,
  kFAgeUs,
  kFDetail,
  kNumMessageFields
};
constexpr std::array<std::string_view, kNumMessageFields> kMessageFields{
    "v",        "kind",       "id",          "timeUnixNs",      "seq",         "part",
    "parts",    "intervalMs", "planVersion", "droppedMessages", "connections", "step",
    "state",    "path",       "anomaly",     "connectionId",    "direction",   "peerRank",
    "peerNode", "ageUs",      "detail"};

constexpr std::uint64_t fieldMask(std::initializer_list<MessageField> fields) {
  std::uint64_t m = 0;
  for (auto f : fields) m |= std::uint64_t{1} << f;
  return m;
}
constexpr std::uint64_t kRankReportMask =
    fieldMask({kFV, kFKind, kFId, kFTimeUnixNs, kFSeq, kFPart, kFParts, kFIntervalMs, kFPlanVersion,
               kFDroppedMessages, kFConnections});
constexpr std::uint64_t kProgressMask =
    fieldMask({kFV, kFKind, kFId, kFTimeUnixNs, kFStep, kFState});
constexpr std::uint64_t kCheckpointMask =
    fieldMask({kFV, kFKind, kFId, kFTimeUnixNs, kFStep, kFPath});
constexpr std::uint64_t kAnomalyMask =
    fieldMask({kFV, kFKind, kFId, kFTimeUnixNs, kFAnomaly, kFConnectionId, kFDirection, kFPeerRank,
               kFPeerNode, kFAgeUs, kFDetail});

// Decodes one message (top level or an item of NodeReport.reports / notices) into `out`; the
// caller's validate() finishes the checks.
bool streamMessage(CborIn& in, Message& out) {
  std::int64_t v = 0;
  std::string_view kind;
  RankIdentity id;
  std::int64_t time = 0;
  std::int64_t step = 0;
  std::string_view state;
  std::string_view anomaly;
  RankReport rep;
  std::string path;
  AnomalyNotice an;
  std::uint64_t seen = 0;
  const bool ok = readObject(
      in, kMessageFields,
      [&](std::size_t f) {
        switch (f) {
          case kFV:
            return in.i64(v);
          case kFKind:
            return in.strView(kind, 64);
          case kFId:
            return streamIdentity(in, id);
          case kFTimeUnixNs:
            return in.i64(time, 1);
          case kFSeq:
            return in.u64(rep.seq);
          case kFPart:
            return in.uint(rep.part, kMaxParts - 1);
          case kFParts:
            return in.uint(rep.parts, kMaxParts);
          case kFIntervalMs:
            return in.uint(rep.intervalMs, 3'600'000);
          case kFPlanVersion:
            return in.i64(rep.planVersion, -1);
          case kFDroppedMessages:
            return in.u64(rep.droppedMessages);
          case kFConnections:
            return readArray(in, kMaxConnectionsPerReport, [&](std::uint64_t hint) {
              if (rep.connections.empty() && hint > 0) rep.connections.reserve(hint);
              return streamConnection(in, rep.connections.emplace_back());
            });
          case kFStep:
            return in.i64(step, -1);
          case kFState:
            return in.strView(state, 32);
          case kFPath:
            return in.str(path, kMaxTextBytes);
          case kFAnomaly:
            return in.strView(anomaly, 32);
          case kFConnectionId:
            return in.u64(an.connectionId);
          case kFDirection:
            return enumValue(in, kDirections, an.direction, 16);
          case kFPeerRank:
            return in.sint(an.peerRank, -1, kMaxRank - 1);
          case kFPeerNode:
            return in.str(an.peerNode, kMaxNameBytes);
          case kFAgeUs:
            return in.u64(an.ageUs);
          default:
            return in.str(an.detail, kMaxTextBytes);
        }
      },
      &seen);
  if (!ok || v != kSchemaVersion) return in.fail();
  if (kind == "RankReport" && seen == kRankReportMask) {
    rep.id = std::move(id);
    rep.timeUnixNs = time;
    out = std::move(rep);
    return true;
  }
  auto parseState = [&](ProgressState& s) {
    for (const auto& [e, name] : kProgressStates) {
      if (state == name) {
        s = e;
        return true;
      }
    }
    return false;
  };
  if (kind == "ProgressNotice" && seen == kProgressMask) {
    ProgressNotice n{std::move(id), time, step, ProgressState::kTraining};
    if (!parseState(n.state)) return in.fail();
    out = std::move(n);
    return true;
  }
  if (kind == "CheckpointNotice" && seen == kCheckpointMask && step >= 0) {
    out = CheckpointNotice{std::move(id), time, step, std::move(path)};
    return true;
  }
  if (kind == "AnomalyNotice" && seen == kAnomalyMask) {
    bool known = false;
    for (const auto& [e, name] : kAnomalyKinds) {
      if (anomaly == name) {
        an.kind = e;
        known = true;
      }
    }
    if (!known) return in.fail();
    an.id = std::move(id);
    an.timeUnixNs = time;
    out = std::move(an);
    return true;
  }
  return in.fail();
}

constexpr std::array<std::string_view, 12> kNicFields{
    "name",           "up",       "rdma",     "speedMbps", "errors",   "operstate", "carrier",
    "carrierChanges", "rxErrors", "txErrors", "rxDropped", "txDropped"};
constexpr std::array<std::string_view, 8> kGpuFields{"index",
                                                     "uuid",
                                                     "healthy",
                                                     "detail",
                                                     "eccVolatileUncorrected",
                                                     "retiredPagesPending",
                                                     "lastXid",
                                                     "throttleReasons"};
constexpr std::array<std::string_view, 12> kRdmaPortFields{
    "device",    "port",        "netdev",       "state",      "physState",
    "rateMbps",  "active",      "symbolErrors", "linkDowned", "linkErrorRecovery",
    "rcvErrors", "xmitDiscards"};
constexpr std::array<std::string_view, 9> kHealthFields{
    "nics",          "gpus",       "rdmaPorts",     "nicsAvailable", "nicsReason",
    "rdmaAvailable", "rdmaReason", "gpusAvailable", "gpusReason"};

bool streamHealth(CborIn& in, NodeHealth& h) {
  return readObject(in, kHealthFields, [&](std::size_t f) {
    switch (f) {
      case 0:
        return readArray(in, kMaxDevicesPerNode, [&](std::uint64_t) {
          NicHealth& n = h.nics.emplace_back();
          return readObject(in, kNicFields, [&](std::size_t g) {
            switch (g) {
              case 0:
                return in.str(n.name, kMaxNameBytes);
              case 1:
                return in.boolean(n.up);
              case 2:
                return in.boolean(n.rdma);
              case 3:
                return in.u64(n.speedMbps);
              case 4:
                return in.u64(n.errors);
              case 5:
                return in.str(n.operstate, 32);
              case 6:
                return in.boolean(n.carrier);
              case 7:
                return in.u64(n.carrierChanges);
              case 8:
                return in.u64(n.rxErrors);
              case 9:
                return in.u64(n.txErrors);
              case 10:
                return in.u64(n.rxDropped);
              default:
                return in.u64(n.txDropped);
            }
          });
        });
      case 1:
        return readArray(in, kMaxDevicesPerNode, [&](std::uint64_t) {
          GpuHealth& g = h.gpus.emplace_back();
          return readObject(in, kGpuFields, [&](std::size_t k) {
            switch (k) {
              case 0:
                return in.sint(g.index, 0, static_cast<std::int64_t>(kMaxDevicesPerNode) - 1);
              case 1:
                return in.str(g.uuid, kMaxNameBytes);
              case 2:
                return in.boolean(g.healthy);
              case 3:
                return in.str(g.detail, kMaxTextBytes);
              case 4:
                return in.u64(g.eccVolatileUncorrected);
              case 5:
                return in.boolean(g.retiredPagesPending);
              case 6:
                return in.u64(g.lastXid);
              default:
                return in.u64(g.throttleReasons);
            }
          });
        });
      case 2:
        return readArray(in, kMaxDevicesPerNode, [&](std::uint64_t) {
          RdmaPortHealth& p = h.rdmaPorts.emplace_back();
          return readObject(in, kRdmaPortFields, [&](std::size_t k) {
            switch (k) {
              case 0:
                return in.str(p.device, kMaxNameBytes);
              case 1:
                return in.uint(p.port, 255);
              case 2:
                return in.str(p.netdev, kMaxNameBytes);
              case 3:
                return in.str(p.state, 32);
              case 4:
                return in.str(p.physState, 32);
              case 5:
                return in.u64(p.rateMbps);
              case 6:
                return in.boolean(p.active);
              case 7:
                return in.u64(p.symbolErrors);
              case 8:
                return in.u64(p.linkDowned);
              case 9:
                return in.u64(p.linkErrorRecovery);
              case 10:
                return in.u64(p.rcvErrors);
              default:
                return in.u64(p.xmitDiscards);
            }
          });
        });
      case 3:
        return in.boolean(h.nicsAvailable);
      case 4:
        return in.str(h.nicsReason, kMaxTextBytes);
      case 5:
        return in.boolean(h.rdmaAvailable);
      case 6:
        return in.str(h.rdmaReason, kMaxTextBytes);
      case 7:
        return in.boolean(h.gpusAvailable);
      default:
        return in.str(h.gpusReason, kMaxTextBytes);
    }
  });
}

constexpr std::array<std::string_view, 10> kNodeReportFields{"v",
                                                             "kind",
                                                             "node",
                                                             "seq",
                                                             "timeUnixNs",
                                                             "health",
                                                             "reports",
                                                             "notices",
                                                             "droppedMessages",
                                                             "rejectedMessages"};

bool streamNodeReport(CborIn& in, NodeReport& out) {
  return readObject(in, kNodeReportFields, [&](std::size_t f) {
    switch (f) {
      case 0: {
        std::int64_t v = 0;
        return in.i64(v) && v == kSchemaVersion;
      }
      case 1: {
        std::string_view kind;
        return in.strView(kind, 64) && kind == "NodeReport";
      }
      case 2:
        return in.str(out.node, kMaxNameBytes);
      case 3:
        return in.u64(out.seq);
      case 4:
        return in.i64(out.timeUnixNs, 1);
      case 5:
        return streamHealth(in, out.health);
      case 6:
        return readArray(in, kMaxReportsPerBatch, [&](std::uint64_t hint) {
          if (out.reports.empty() && hint > 0) out.reports.reserve(hint);
          Message m;
          if (!streamMessage(in, m) || !std::holds_alternative<RankReport>(m)) return false;
          out.reports.push_back(std::move(std::get<RankReport>(m)));
          return true;
        });
      case 7:
        return readArray(in, kMaxNoticesPerBatch, [&](std::uint64_t) {
          Message m;
          if (!streamMessage(in, m)) return false;
          if (auto* p = std::get_if<ProgressNotice>(&m)) {
            out.notices.emplace_back(std::move(*p));
          } else if (auto* c = std::get_if<CheckpointNotice>(&m)) {
            out.notices.emplace_back(std::move(*c));
          } else if (auto* a = std::get_if<AnomalyNotice>(&m)) {
            out.notices.emplace_back(std::move(*a));
          } else {
            return false;
          }
          return true;
        });
      case 8:
        return in.u64(out.droppedMessages);
      default:
        return in.u64(out.rejectedMessages);
    }
  });
}

template <typename T>
Result<std::vector<std::uint8_t>> toCbor(const json& j, std::size_t limit, const char* what) {
  std::vector<std::uint8_t> out;
  try {
    out = json::to_cbor(j);
  } catch (const std::exception& e) {
    return makeError(ErrorCode::kInvalidArgument, std::string(what) + ": " + e.what());
  }
  if (out.size() > limit) {
    return makeError(ErrorCode::kInvalidArgument,
                     std::string(what) + ": encoded size " + std::to_string(out.size()) +
                         " exceeds the limit of " + std::to_string(limit) + " bytes");
  }
  return out;
}

Result<std::string> toJsonText(const json& j, const char* what) {
  try {
    return j.dump();
  } catch (const std::exception& e) {
    return makeError(ErrorCode::kInvalidArgument, std::string(what) + ": " + e.what());
  }
}

}  // namespace

std::string_view directionName(Direction d) noexcept {
  return enumName(d, kDirections);
}
std::string_view progressStateName(ProgressState s) noexcept {
  return enumName(s, kProgressStates);
}
std::string_view anomalyKindName(AnomalyKind k) noexcept {
  return enumName(k, kAnomalyKinds);
}

std::string_view messageKind(const Message& m) noexcept {
  switch (m.index()) {
    case 0:
      return "RankReport";
    case 1:
      return "ProgressNotice";
    case 2:
      return "CheckpointNotice";
    case 3:
      return "AnomalyNotice";
    default:
      return "unknown";
  }
}

bool isDnsSubdomain(std::string_view name) noexcept {
  if (name.empty() || name.size() > kMaxNameBytes) return false;
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(name.front()) || !alnum(name.back())) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    if (alnum(c) || c == '-') continue;
    if (c == '.') {
      // Each dot-separated label must start and end alphanumeric.
      if (!alnum(name[i - 1]) || !alnum(name[i + 1])) return false;
      continue;
    }
    return false;
  }
  return true;
}

Status validate(const RankReport& r) {
  C4_RETURN_IF_ERROR(checkIdentity(r.id, "RankReport.id"));
  C4_RETURN_IF_ERROR(checkTime(r.timeUnixNs, "RankReport.timeUnixNs"));
  if (r.parts == 0 || r.parts > kMaxParts || r.part >= r.parts) {
    return std::unexpected(invalid(
        "RankReport.part", "must satisfy 0 <= part < parts <= " + std::to_string(kMaxParts)));
  }
  if (r.intervalMs == 0 || r.intervalMs > 3'600'000) {
    return std::unexpected(invalid("RankReport.intervalMs", "must be in [1, 3600000]"));
  }
  if (r.planVersion < -1)
    return std::unexpected(invalid("RankReport.planVersion", "must be >= -1"));
  if (r.connections.size() > kMaxConnectionsPerReport) {
    return std::unexpected(
        invalid("RankReport.connections", std::to_string(r.connections.size()) +
                                              " items exceeds the limit of " +
                                              std::to_string(kMaxConnectionsPerReport)));
  }
  for (std::size_t i = 0; i < r.connections.size(); ++i) {
    C4_RETURN_IF_ERROR(
        checkConnection(r.connections[i], "RankReport.connections[" + std::to_string(i) + "]"));
  }
  return {};
}

Status validate(const ProgressNotice& n) {
  C4_RETURN_IF_ERROR(checkIdentity(n.id, "ProgressNotice.id"));
  C4_RETURN_IF_ERROR(checkTime(n.timeUnixNs, "ProgressNotice.timeUnixNs"));
  if (n.step < -1) return std::unexpected(invalid("ProgressNotice.step", "must be >= -1"));
  return {};
}

Status validate(const CheckpointNotice& n) {
  C4_RETURN_IF_ERROR(checkIdentity(n.id, "CheckpointNotice.id"));
  C4_RETURN_IF_ERROR(checkTime(n.timeUnixNs, "CheckpointNotice.timeUnixNs"));
  if (n.step < 0) return std::unexpected(invalid("CheckpointNotice.step", "must be >= 0"));
  C4_RETURN_IF_ERROR(checkText(n.path, "CheckpointNotice.path"));
  return {};
}

Status validate(const AnomalyNotice& n) {
  C4_RETURN_IF_ERROR(checkIdentity(n.id, "AnomalyNotice.id"));
  C4_RETURN_IF_ERROR(checkTime(n.timeUnixNs, "AnomalyNotice.timeUnixNs"));
  if (n.peerRank < -1 || n.peerRank >= kMaxRank) {
    return std::unexpected(invalid("AnomalyNotice.peerRank",
                                   "must be -1 or in [0, " + std::to_string(kMaxRank) + ")"));
  }
  C4_RETURN_IF_ERROR(checkName(n.peerNode, "AnomalyNotice.peerNode", false));
  C4_RETURN_IF_ERROR(checkText(n.detail, "AnomalyNotice.detail"));
  return {};
}

Status validate(const Message& m) {
  return std::visit([](const auto& v) { return validate(v); }, m);
}

Status validate(const NodeReport& r) {
  C4_RETURN_IF_ERROR(checkName(r.node, "NodeReport.node", true));
  C4_RETURN_IF_ERROR(checkTime(r.timeUnixNs, "NodeReport.timeUnixNs"));
  if (r.health.nics.size() > kMaxDevicesPerNode || r.health.gpus.size() > kMaxDevicesPerNode ||
      r.health.rdmaPorts.size() > kMaxDevicesPerNode) {
    return std::unexpected(invalid("NodeReport.health", "too many devices"));
  }
  for (std::size_t i = 0; i < r.health.nics.size(); ++i) {
    const auto& nic = r.health.nics[i];
    const std::string p = "NodeReport.health.nics[" + std::to_string(i) + "].name";
    if (nic.name.empty() || nic.name.size() > kMaxNameBytes || !validUtf8(nic.name)) {
      return std::unexpected(invalid(p, "must be a non-empty UTF-8 name of at most 253 bytes"));
    }
  }
  for (std::size_t i = 0; i < r.health.gpus.size(); ++i) {
    const auto& g = r.health.gpus[i];
    const std::string p = "NodeReport.health.gpus[" + std::to_string(i) + "]";
    if (g.index < 0 || static_cast<std::size_t>(g.index) >= kMaxDevicesPerNode) {
      return std::unexpected(invalid(p + ".index", "out of range"));
    }
    C4_RETURN_IF_ERROR(checkText(g.uuid, p + ".uuid"));
    C4_RETURN_IF_ERROR(checkText(g.detail, p + ".detail"));
  }
  for (std::size_t i = 0; i < r.health.nics.size(); ++i) {
    const std::string p = "NodeReport.health.nics[" + std::to_string(i) + "].operstate";
    if (r.health.nics[i].operstate.size() > 32) return std::unexpected(invalid(p, "too long"));
    C4_RETURN_IF_ERROR(checkText(r.health.nics[i].operstate, p));
  }
  for (std::size_t i = 0; i < r.health.rdmaPorts.size(); ++i) {
    const auto& port = r.health.rdmaPorts[i];
    const std::string p = "NodeReport.health.rdmaPorts[" + std::to_string(i) + "]";
    if (port.device.empty() || port.device.size() > kMaxNameBytes || !validUtf8(port.device)) {
      return std::unexpected(
          invalid(p + ".device", "must be a non-empty UTF-8 name of at most 253 bytes"));
    }
    if (port.port > 255) return std::unexpected(invalid(p + ".port", "must be <= 255"));
    if (port.netdev.size() > kMaxNameBytes || !validUtf8(port.netdev)) {
      return std::unexpected(invalid(p + ".netdev", "must be UTF-8 of at most 253 bytes"));
    }
    if (port.state.size() > 32 || port.physState.size() > 32) {
      return std::unexpected(invalid(p + ".state", "too long"));
    }
    C4_RETURN_IF_ERROR(checkText(port.state, p + ".state"));
    C4_RETURN_IF_ERROR(checkText(port.physState, p + ".physState"));
  }
  C4_RETURN_IF_ERROR(checkText(r.health.nicsReason, "NodeReport.health.nicsReason"));
  C4_RETURN_IF_ERROR(checkText(r.health.rdmaReason, "NodeReport.health.rdmaReason"));
  C4_RETURN_IF_ERROR(checkText(r.health.gpusReason, "NodeReport.health.gpusReason"));
  if (r.reports.size() > kMaxReportsPerBatch) {
    return std::unexpected(invalid("NodeReport.reports", "too many reports"));
  }
  if (r.notices.size() > kMaxNoticesPerBatch) {
    return std::unexpected(invalid("NodeReport.notices", "too many notices"));
  }
  for (std::size_t i = 0; i < r.reports.size(); ++i) {
    auto s = validate(r.reports[i]);
    if (!s)
      return std::unexpected(
          s.error().withContext("NodeReport.reports[" + std::to_string(i) + "]"));
  }
  for (std::size_t i = 0; i < r.notices.size(); ++i) {
    auto s = std::visit([](const auto& v) { return validate(v); }, r.notices[i]);
    if (!s)
      return std::unexpected(
          s.error().withContext("NodeReport.notices[" + std::to_string(i) + "]"));
  }
  return {};
}

Result<std::vector<std::uint8_t>> encodeCbor(const Message& m) {
  C4_RETURN_IF_ERROR(validate(m));
  return toCbor<Message>(messageJson(m), kMaxDatagramBytes, "encode message");
}

Result<Message> decodeMessageCbor(std::span<const std::uint8_t> bytes) {
  if (auto m = internal::decodeMessageCborStreaming(bytes)) return std::move(*m);
  return internal::decodeMessageCborDom(bytes);
}

Result<std::string> encodeJson(const Message& m) {
  C4_RETURN_IF_ERROR(validate(m));
  return toJsonText(messageJson(m), "encode message");
}

Result<Message> decodeMessageJson(std::string_view text) {
  C4_ASSIGN_OR_RETURN(json j, parseJson(text, kMaxDatagramBytes * 4, "message"));
  return decodeMessage(j, "Message");
}

Result<std::vector<std::uint8_t>> encodeCbor(const NodeReport& r) {
  C4_RETURN_IF_ERROR(validate(r));
  return toCbor<NodeReport>(nodeReportJson(r), kMaxBatchBytes, "encode node report");
}

Result<NodeReport> decodeNodeReportCbor(std::span<const std::uint8_t> bytes) {
  if (auto r = internal::decodeNodeReportCborStreaming(bytes)) return std::move(*r);
  return internal::decodeNodeReportCborDom(bytes);
}

Result<std::string> encodeJson(const NodeReport& r) {
  C4_RETURN_IF_ERROR(validate(r));
  return toJsonText(nodeReportJson(r), "encode node report");
}

Result<NodeReport> decodeNodeReportJson(std::string_view text) {
  C4_ASSIGN_OR_RETURN(json j, parseJson(text, kMaxBatchBytes * 4, "node report"));
  return decodeNodeReport(j);
}

namespace internal {

Result<Message> decodeMessageCborDom(std::span<const std::uint8_t> bytes) {
  C4_ASSIGN_OR_RETURN(json j, parseCbor(bytes, kMaxDatagramBytes, "message"));
  return decodeMessage(j, "Message");
}

Result<NodeReport> decodeNodeReportCborDom(std::span<const std::uint8_t> bytes) {
  C4_ASSIGN_OR_RETURN(json j, parseCbor(bytes, kMaxBatchBytes, "node report"));
  return decodeNodeReport(j);
}

std::optional<Message> decodeMessageCborStreaming(std::span<const std::uint8_t> bytes) {
  if (bytes.empty() || bytes.size() > kMaxDatagramBytes) return std::nullopt;
  CborIn in(bytes);
  Message m;
  if (!streamMessage(in, m) || !in.atEnd() || !validate(m).has_value()) return std::nullopt;
  return m;
}

std::optional<NodeReport> decodeNodeReportCborStreaming(std::span<const std::uint8_t> bytes) {
  if (bytes.empty() || bytes.size() > kMaxBatchBytes) return std::nullopt;
  CborIn in(bytes);
  NodeReport r;
  if (!streamNodeReport(in, r) || !in.atEnd() || !validate(r).has_value()) return std::nullopt;
  return r;
}

}  // namespace internal

}  // namespace c4::report
