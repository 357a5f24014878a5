#include "c4/common/report.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

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
  C4_ASSIGN_OR_RETURN(json j, parseCbor(bytes, kMaxDatagramBytes, "message"));
  return decodeMessage(j, "Message");
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
  C4_ASSIGN_OR_RETURN(json j, parseCbor(bytes, kMaxBatchBytes, "node report"));
  return decodeNodeReport(j);
}

Result<std::string> encodeJson(const NodeReport& r) {
  C4_RETURN_IF_ERROR(validate(r));
  return toJsonText(nodeReportJson(r), "encode node report");
}

Result<NodeReport> decodeNodeReportJson(std::string_view text) {
  C4_ASSIGN_OR_RETURN(json j, parseJson(text, kMaxBatchBytes * 4, "node report"));
  return decodeNodeReport(j);
}

}  // namespace c4::report
