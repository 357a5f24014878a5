// The telemetry core both NCCL plugins share (rank_telemetry.h).
#include "c4/common/rank_telemetry.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

namespace c4::telemetry {

std::string sanitizeName(std::string_view name) {
  std::string out;
  for (char c : name.substr(0, report::kMaxNameBytes)) {
    auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u)) {
      out.push_back(static_cast<char>(std::tolower(u)));
    } else if (c == '-' || c == '.') {
      out.push_back(c);
    } else {
      out.push_back('-');
    }
  }
  std::size_t b = 0;
  while (b < out.size() && !std::isalnum(static_cast<unsigned char>(out[b]))) ++b;
  std::size_t e = out.size();
  while (e > b && !std::isalnum(static_cast<unsigned char>(out[e - 1]))) --e;
  out = out.substr(b, e - b);
  if (!out.empty() && !report::isDnsSubdomain(out)) return "";
  return out;
}

void EnvLoader::text(const char* name, std::string& field) {
  auto v = getenv_(name);
  if (v) field = *v;
  sources_.push_back(std::string(name) + "=" + field + (v ? " (env)" : " (default)"));
}

void EnvLoader::name(const char* name, std::string& field) {
  auto v = getenv_(name);
  if (v) {
    std::string clean = sanitizeName(*v);
    if (clean != *v) {
      warnings_.push_back(std::string(name) + "=\"" + *v + "\" is not a DNS-1123 name; using \"" +
                          clean + "\"");
    }
    field = std::move(clean);
  }
  sources_.push_back(std::string(name) + "=" + field + (v ? " (env)" : " (default)"));
}

EnvLoader::Getenv EnvLoader::processEnvironment() {
  return [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

void loadRankEnv(EnvLoader& l, RankEnv& env) {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) == 0) env.node = sanitizeName(host);
  // torchrun and most launchers export RANK; the operator exports C4_RANK, which wins.
  const char* rank_name = !l.has("C4_RANK") && l.has("RANK") ? "RANK" : "C4_RANK";
  l.integer<std::int32_t>(rank_name, env.rank, -1, report::kMaxRank - 1);
  l.name("C4_POD_NAME", env.pod);
  l.name("C4_NODE_NAME", env.node);
  l.name("C4_JOB", env.job);
  l.name("C4_NAMESPACE", env.ns);
  l.integer<std::int32_t>("WORLD_SIZE", env.world_size, 0, report::kMaxRank);
  if (env.world_size > 0 && env.rank >= env.world_size) {
    l.warn("rank " + std::to_string(env.rank) + " >= WORLD_SIZE " + std::to_string(env.world_size) +
           "; WORLD_SIZE ignored");
    env.world_size = 0;
  }
  l.integer<std::uint32_t>("C4_RESTART_ATTEMPT", env.restart_attempt, 0, 1u << 30);
  l.text("C4_AGENT_SOCKET", env.agent_socket);
  l.integer<std::uint32_t>("C4_REPORT_INTERVAL_MS", env.report_interval_ms, 10, 3600 * 1000);
}

LatencyHistogram::Snapshot LatencyHistogram::snapshot() const noexcept {
  Snapshot s;
  for (std::size_t i = 0; i < buckets_.size(); ++i) {
    s.buckets[i] = buckets_[i].load(std::memory_order_relaxed);
  }
  s.count = count_.load(std::memory_order_relaxed);
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

report::LatencySummary LatencyHistogram::summarize(const Snapshot& before, const Snapshot& now,
                                                   std::uint64_t interval_max) noexcept {
  report::LatencySummary out;
  out.count = now.count - before.count;
  out.sum_us = now.sum - before.sum;
  out.max_us = out.count > 0 ? interval_max : 0;
  if (out.count == 0) return out;
  auto pct = [&](double q) -> std::uint64_t {
    // Nearest rank: the smallest value with at least q of the samples at or below it.
    auto rank = static_cast<std::uint64_t>(std::ceil(q * static_cast<double>(out.count)));
    if (rank == 0) rank = 1;
    std::uint64_t acc = 0;
    for (int b = 0; b < kBuckets; ++b) {
      auto i = static_cast<std::size_t>(b);
      acc += now.buckets[i] - before.buckets[i];
      if (acc >= rank) {
        std::uint64_t upper = b == 0 ? 0 : (std::uint64_t{1} << b) - 1;
        return std::min(upper, out.max_us);
      }
    }
    return out.max_us;
  };
  out.p50_us = pct(0.5);
  out.p99_us = pct(0.99);
  return out;
}

Result<std::vector<std::vector<std::uint8_t>>> encodeReportParts(const report::RankReport& r,
                                                                 std::size_t limit) {
  std::size_t parts =
      std::max<std::size_t>(1, (r.connections.size() + report::kMaxConnectionsPerReport - 1) /
                                   report::kMaxConnectionsPerReport);
  for (;;) {
    std::vector<std::vector<std::uint8_t>> encoded;
    bool fits = true;
    std::size_t per = (r.connections.size() + parts - 1) / parts;
    std::size_t used = per == 0 ? 1 : (r.connections.size() + per - 1) / per;
    for (std::size_t p = 0; p < used && fits; ++p) {
      report::RankReport part = r;
      part.part = static_cast<std::uint16_t>(p);
      part.parts = static_cast<std::uint16_t>(used);
      part.connections.clear();
      if (p > 0) part.communicators.clear();  // part 0 carries them
      for (std::size_t i = p * per; i < std::min(r.connections.size(), (p + 1) * per); ++i) {
        part.connections.push_back(r.connections[i]);
      }
      C4_ASSIGN_OR_RETURN(auto bytes, report::encodeCbor(part));
      if (bytes.size() > limit) fits = false;
      encoded.push_back(std::move(bytes));
    }
    if (fits) return encoded;
    if (parts >= report::kMaxParts || parts >= r.connections.size()) {
      return makeError(ErrorCode::kResourceExhausted,
                       "rank report does not fit " + std::to_string(limit) + "-byte datagrams");
    }
    parts = std::min<std::size_t>(parts * 2, report::kMaxParts);
  }
}

}  // namespace c4::telemetry
