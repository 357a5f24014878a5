#include "operator/c4d/util.h"

#include <cstdarg>
#include <cstdio>

namespace c4::c4d {

std::string strf(const char* format, ...) {
  char buf[512];
  va_list args;
  va_start(args, format);
  const int n = std::vsnprintf(buf, sizeof buf, format, args);
  va_end(args);
  if (n < 0) return {};
  return std::string(buf, std::min(static_cast<std::size_t>(n), sizeof buf - 1));
}

double quantile(std::vector<double>& v, double q) {
  if (v.empty()) return 0.0;
  const auto k = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

double median(std::vector<double>& v) {
  if (v.empty()) return 0.0;
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  if (v.size() % 2 == 1) return *mid;
  const double hi = *mid;
  const double lo = *std::max_element(v.begin(), mid);
  return (lo + hi) / 2.0;
}

void sortUnique(std::vector<std::int32_t>& ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
}

std::string rankList(const std::vector<std::int32_t>& ranks) {
  std::string out;
  const std::size_t shown = std::min<std::size_t>(ranks.size(), 8);
  for (std::size_t i = 0; i < shown; ++i) {
    if (i > 0) out += ",";
    out += std::to_string(ranks[i]);
  }
  if (ranks.size() > shown) out += strf(",... (%zu ranks)", ranks.size());
  return out;
}

Culprit nodeCulprit(const std::string& node) {
  Culprit c;
  c.kind = CulpritKind::kNode;
  c.node = node;
  return c;
}

Culprit rankCulprit(const std::string& node, std::int32_t rank) {
  Culprit c;
  c.kind = CulpritKind::kRank;
  c.node = node;
  c.rank = rank;
  return c;
}

Culprit linkCulprit(const std::string& a, const std::string& b) {
  Culprit c;
  c.kind = CulpritKind::kLink;
  c.node = std::min(a, b);
  c.peer_node = std::max(a, b);
  return c;
}

}  // namespace c4::c4d
