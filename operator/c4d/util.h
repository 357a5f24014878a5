// Small helpers shared by the analyser's window builder, rules and confirmation: time
// conversions, order statistics, evidence text and culprit constructors. Internal to c4::op-c4d.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "c4/common/clock.h"
#include "operator/c4d/verdict.h"

namespace c4::c4d {

inline constexpr double kInf = std::numeric_limits<double>::infinity();

inline double secs(Duration d) {
  return std::chrono::duration<double>(d).count();
}
inline Duration toDuration(double seconds) {
  return std::chrono::duration_cast<Duration>(std::chrono::duration<double>(seconds));
}

// printf into a std::string (at most 511 characters).
__attribute__((format(printf, 1, 2))) std::string strf(const char* format, ...);

// The q-quantile (0..1, nearest rank below) of v (reordered); 0 for an empty v.
double quantile(std::vector<double>& v, double q);

// The median of v (reordered); 0 for an empty v.
double median(std::vector<double>& v);

// Sorts ranks and drops duplicates.
void sortUnique(std::vector<std::int32_t>& ranks);

// "1,2,3" (the first 8, then the count).
std::string rankList(const std::vector<std::int32_t>& ranks);

Culprit nodeCulprit(const std::string& node);
Culprit rankCulprit(const std::string& node, std::int32_t rank);
Culprit linkCulprit(const std::string& a, const std::string& b);  // ends sorted

// The one node that every (a, b) node pair (the keys of `pairs`) has at an end, when there are
// two or more pairs; none otherwise.
template <typename Pairs>
std::optional<std::size_t> commonNode(const Pairs& pairs) {
  if (pairs.size() < 2) return std::nullopt;
  std::set<std::size_t> shared = {pairs.begin()->first.first, pairs.begin()->first.second};
  for (const auto& [key, p] : pairs) {
    std::set<std::size_t> next;
    for (std::size_t x : shared) {
      if (x == key.first || x == key.second) next.insert(x);
    }
    shared = std::move(next);
  }
  if (shared.size() != 1) return std::nullopt;
  return *shared.begin();
}

}  // namespace c4::c4d
