#include "operator/c4p/planner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>
#include <utility>

namespace c4::op::c4p {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kEps = 1e-9;
using JobState = PlannerJobState;
using JobMap = std::map<std::string, JobState>;

// Dense numbering of the link directions the jobs touch: leaf g (global index over planes),
// uplink u, direction d (0 up, 1 down) -> (g * U + u) * 2 + d.
struct Index {
  int uplinks = 0;
  std::map<std::pair<int, std::string>, int> leaf;
  std::vector<std::pair<int, std::string>> leaf_names;
  std::vector<double> cap;  // Gbps

  Index(const Fabric& fabric, const JobMap& jobs) : uplinks(fabric.uplinksPerLeaf()) {
    std::set<std::pair<int, std::string>> names;
    for (const auto& [_, js] : jobs) {
      for (const auto& p : js.pairs) {
        names.insert({p.plane, p.src_leaf});
        names.insert({p.plane, p.dst_leaf});
      }
    }
    for (const auto& n : names) {
      leaf.emplace(n, static_cast<int>(leaf_names.size()));
      leaf_names.push_back(n);
    }
    cap.resize(leaf_names.size() * static_cast<std::size_t>(uplinks) * 2);
    for (std::size_t g = 0; g < leaf_names.size(); ++g) {
      for (int u = 0; u < uplinks; ++u) {
        for (int d : {0, 1}) {
          cap[link(static_cast<int>(g), u, d)] =
              fabric.capacityGbps(leaf_names[g].first, leaf_names[g].second, u,
                                  d == 0 ? Direction::kUp : Direction::kDown);
        }
      }
    }
  }
  [[nodiscard]] std::size_t link(int g, int u, int d) const {
    return (static_cast<std::size_t>(g) * static_cast<std::size_t>(uplinks) +
            static_cast<std::size_t>(u)) *
               2 +
           static_cast<std::size_t>(d);
  }
};

// One subflow of a cross-leaf pair.
struct Item {
  JobState::Pair* pair = nullptr;
  std::size_t sub = 0;
  int plane = 0;
  int src = 0;  // global leaf indices
  int dst = 0;
  double unit = 0;  // Gbps at an equal share: pair demand / subflows
  bool free = false;
  int ordinal = 0;  // of the pair, over all jobs
};

std::vector<Item> collectItems(JobMap& jobs, const Index& ix,
                               const std::set<std::string>* free_jobs) {
  std::vector<Item> items;
  int ordinal = 0;
  for (auto& [name, js] : jobs) {
    bool free = free_jobs == nullptr || free_jobs->contains(name);
    for (auto& p : js.pairs) {
      ++ordinal;
      int src = ix.leaf.at({p.plane, p.src_leaf});
      int dst = ix.leaf.at({p.plane, p.dst_leaf});
      double unit = p.demand_gbps / static_cast<double>(p.subflows.size());
      for (std::size_t j = 0; j < p.subflows.size(); ++j) {
        items.push_back({&p, j, p.plane, src, dst, unit, free, ordinal});
      }
    }
  }
  return items;
}

double norm(double used, double cap) {
  if (cap <= 0) return used > kEps ? kInf : 0.0;
  return used / cap;
}

// Integer path assignment: every item carries `unit` on its path.
class PathSolver {
 public:
  PathSolver(const Index& ix, std::vector<Item>& items, int max_moves)
      : ix_(ix), items_(items), max_moves_(max_moves), used_(ix.cap.size(), 0.0) {
    on_link_.resize(ix.cap.size());
    path_.resize(items.size(), -1);
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (!items[i].free) place(i, items[i].pair->subflows[items[i].sub].path);
    }
  }

  // Solves the free items; returns the number of planes solved by edge colouring.
  int solve() {
    int tier1 = 0;
    std::map<int, std::vector<std::size_t>> free_by_plane;
    std::set<int> pinned_planes;
    for (std::size_t i = 0; i < items_.size(); ++i) {
      (items_[i].free ? free_by_plane[items_[i].plane].push_back(i),
       0              : (pinned_planes.insert(items_[i].plane), 0));
    }
    std::vector<std::size_t> general;
    for (auto& [plane, list] : free_by_plane) {
      if (!pinned_planes.contains(plane) && colourable(list)) {
        colour(list);
        ++tier1;
      } else {
        general.insert(general.end(), list.begin(), list.end());
      }
    }
    if (!general.empty()) {
      greedy(general);
      localSearch();
    }
    for (std::size_t i = 0; i < items_.size(); ++i) {
      if (items_[i].free) items_[i].pair->subflows[items_[i].sub].path = path_[i];
    }
    return tier1;
  }

  [[nodiscard]] double maxLoad() const {
    double m = 0;
    for (std::size_t l = 0; l < used_.size(); ++l) m = std::max(m, norm(used_[l], ix_.cap[l]));
    return m;
  }

 private:
  [[nodiscard]] std::size_t up(std::size_t i, int u) const { return ix_.link(items_[i].src, u, 0); }
  [[nodiscard]] std::size_t down(std::size_t i, int u) const {
    return ix_.link(items_[i].dst, u, 1);
  }
  [[nodiscard]] double load(std::size_t l) const { return norm(used_[l], ix_.cap[l]); }
  [[nodiscard]] double loadWith(std::size_t l, double add) const {
    return norm(used_[l] + add, ix_.cap[l]);
  }

  void place(std::size_t i, int u) {
    path_[i] = u;
    for (std::size_t l : {up(i, u), down(i, u)}) {
      used_[l] += items_[i].unit;
      on_link_[l].push_back(i);
    }
  }
  void unplace(std::size_t i) {
    int u = path_[i];
    for (std::size_t l : {up(i, u), down(i, u)}) {
      used_[l] -= items_[i].unit;
      if (std::fabs(used_[l]) < kEps) used_[l] = 0;
      auto& v = on_link_[l];
      v.erase(std::find(v.begin(), v.end(), i));
    }
    path_[i] = -1;
  }

  // Tier 1 applies to a plane whose free items all carry the same demand and whose links (of the
  // leaves involved) all have the same positive capacity.
  bool colourable(const std::vector<std::size_t>& list) const {
    double unit = items_[list.front()].unit;
    std::set<int> leaves;
    for (std::size_t i : list) {
      if (std::fabs(items_[i].unit - unit) > kEps * std::max(1.0, unit)) return false;
      leaves.insert(items_[i].src);
      leaves.insert(items_[i].dst);
    }
    double c = ix_.cap[ix_.link(*leaves.begin(), 0, 0)];
    if (c <= 0) return false;
    for (int g : leaves) {
      for (int u = 0; u < ix_.uplinks; ++u) {
        for (int d : {0, 1}) {
          if (ix_.cap[ix_.link(g, u, d)] != c) return false;
        }
      }
    }
    return true;
  }

  // König: a bipartite multigraph of maximum degree Δ has a proper Δ-edge-colouring. Each edge is
  // coloured with a colour a free at its source; if a is taken at its destination, where b is
  // free, the a/b alternating path from the destination is flipped first (it cannot reach the
  // source in a bipartite graph).
  void colour(const std::vector<std::size_t>& list) {
    std::map<int, int> left_id, right_id;
    std::vector<int> deg_l, deg_r;
    for (std::size_t i : list) {
      auto [l, nl] = left_id.emplace(items_[i].src, static_cast<int>(left_id.size()));
      auto [r, nr] = right_id.emplace(items_[i].dst, static_cast<int>(right_id.size()));
      if (nl) deg_l.push_back(0);
      if (nr) deg_r.push_back(0);
      ++deg_l[static_cast<std::size_t>(l->second)];
      ++deg_r[static_cast<std::size_t>(r->second)];
    }
    int delta = std::max(*std::max_element(deg_l.begin(), deg_l.end()),
                         *std::max_element(deg_r.begin(), deg_r.end()));
    const std::size_t nl = left_id.size();
    const std::size_t nv = nl + right_id.size();
    const auto D = static_cast<std::size_t>(delta);
    std::vector<int> at(nv * D, -1);  // (vertex, colour) -> edge (position in list)
    std::vector<int> col(list.size(), -1);
    std::vector<std::pair<std::size_t, std::size_t>> ends(list.size());
    auto freeColour = [&](std::size_t v) {
      for (std::size_t c = 0; c < D; ++c) {
        if (at[v * D + c] < 0) return c;
      }
      return D;  // unreachable: degree <= Δ
    };
    for (std::size_t e = 0; e < list.size(); ++e) {
      std::size_t a = static_cast<std::size_t>(left_id[items_[list[e]].src]);
      std::size_t b = nl + static_cast<std::size_t>(right_id[items_[list[e]].dst]);
      ends[e] = {a, b};
      std::size_t ca = freeColour(a);
      if (at[b * D + ca] >= 0) {
        std::size_t cb = freeColour(b);
        // Walk the ca/cb path from b and swap its colours.
        std::vector<int> path;
        std::size_t v = b;
        std::size_t c = ca;
        while (at[v * D + c] >= 0) {
          int f = at[v * D + c];
          path.push_back(f);
          v = ends[static_cast<std::size_t>(f)].first == v
                  ? ends[static_cast<std::size_t>(f)].second
                  : ends[static_cast<std::size_t>(f)].first;
          c = c == ca ? cb : ca;
        }
        for (int f : path) {
          auto [x, y] = ends[static_cast<std::size_t>(f)];
          auto fc = static_cast<std::size_t>(col[static_cast<std::size_t>(f)]);
          at[x * D + fc] = -1;
          at[y * D + fc] = -1;
        }
        for (int f : path) {
          auto [x, y] = ends[static_cast<std::size_t>(f)];
          std::size_t nc =
              static_cast<std::size_t>(col[static_cast<std::size_t>(f)]) == ca ? cb : ca;
          col[static_cast<std::size_t>(f)] = static_cast<int>(nc);
          at[x * D + nc] = f;
          at[y * D + nc] = f;
        }
      }
      col[e] = static_cast<int>(ca);
      at[a * D + ca] = static_cast<int>(e);
      at[b * D + ca] = static_cast<int>(e);
    }
    // Fold Δ colours onto U uplinks: colour c = r·U + x (round r, offset x) goes to uplink
    // (x·k_r + r) mod U, with k_r the r-th stride coprime to U (1, 3, 5, ... for even U). Every
    // round maps onto the uplinks one to one, so a link gets at most ⌈Δ/U⌉ colours at any vertex.
    // The subflows of a pair get consecutive colours, hence distinct uplinks; a different stride
    // per round makes the uplink sets of pairs of different rounds overlap, so when a link fails
    // the weights can move its load across all the leaf's links, not only inside one block.
    const int U = ix_.uplinks;
    std::vector<int> strides;
    for (int k = 1; static_cast<int>(strides.size()) < delta / U + 1; k += 2) {
      if (std::gcd(k, U) == 1) strides.push_back(k % U == 0 ? 1 : k);
      if (k > 4 * U + 1) strides.push_back(1);  // U = 1 and the like: any bijection will do
    }
    for (std::size_t e = 0; e < list.size(); ++e) {
      int r = col[e] / U, x = col[e] % U;
      place(list[e], static_cast<int>(
                         (static_cast<long>(x) * strides[static_cast<std::size_t>(r)] + r) % U));
    }
  }

  // Subflows of i's pair already on path u.
  [[nodiscard]] int siblingsOn(std::size_t i, int u) const {
    int n = 0;
    for (std::size_t j : on_link_[up(i, u)]) n += items_[j].pair == items_[i].pair ? 1 : 0;
    return n;
  }

  // Largest demand first, each onto the path with the smallest resulting load; among equal
  // loads the path with fewer subflows of the same pair (a failed link then takes as few of a
  // connection's subflows as possible), then the smaller load sum.
  void greedy(std::vector<std::size_t> list) {
    std::stable_sort(list.begin(), list.end(),
                     [&](std::size_t a, std::size_t b) { return items_[a].unit > items_[b].unit; });
    for (std::size_t i : list) {
      int best = 0, best_same = 0;
      double best_max = kInf, best_sum = kInf;
      // Ties go to the first path in an order that starts at a different uplink per pair, so
      // that pairs do not all pile their subflows onto the same block of uplinks.
      const int start = (items_[i].ordinal * 7) % ix_.uplinks;
      for (int t = 0; t < ix_.uplinks; ++t) {
        const int u = (start + t) % ix_.uplinks;
        double a = loadWith(up(i, u), items_[i].unit);
        double b = loadWith(down(i, u), items_[i].unit);
        double m = std::max(a, b), s = a + b;
        int same = siblingsOn(i, u);
        bool better = m < best_max - kEps ||
                      (m <= best_max + kEps &&
                       (same < best_same || (same == best_same && s < best_sum - kEps)));
        if (better) {
          best = u;
          best_max = m;
          best_sum = s;
          best_same = same;
        }
      }
      place(i, best);
    }
  }

  // Moves (then swaps) free items off the most loaded link while every link they touch ends
  // below that link's load.
  void localSearch() {
    for (int moves = 0; moves < max_moves_; ++moves) {
      std::size_t top = 0;
      double m = -1;
      for (std::size_t l = 0; l < used_.size(); ++l) {
        double x = load(l);
        if (x > m + kEps) {
          m = x;
          top = l;
        }
      }
      if (m <= 0 || !(tryMove(top, m) || trySwap(top, m))) return;
    }
  }

  bool tryMove(std::size_t top, double m) {
    std::size_t best_i = 0;
    int best_u = -1;
    double best = m - kEps;
    for (std::size_t i : on_link_[top]) {
      if (!items_[i].free) continue;
      for (int u = 0; u < ix_.uplinks; ++u) {
        if (u == path_[i]) continue;
        double x =
            std::max(loadWith(up(i, u), items_[i].unit), loadWith(down(i, u), items_[i].unit));
        if (x < best) {
          best = x;
          best_i = i;
          best_u = u;
        }
      }
    }
    if (best_u < 0) return false;
    unplace(best_i);
    place(best_i, best_u);
    return true;
  }

  // Exchanges the paths of an item on the top link and an item on one of the links it would move
  // to, when every link either touches ends below m.
  bool trySwap(std::size_t top, double m) {
    std::vector<std::size_t> candidates(on_link_[top].begin(), on_link_[top].end());
    for (std::size_t i : candidates) {
      if (!items_[i].free) continue;
      int pi = path_[i];
      for (int u = 0; u < ix_.uplinks; ++u) {
        if (u == pi) continue;
        std::vector<std::size_t> others;
        for (std::size_t l : {up(i, u), down(i, u)}) {
          for (std::size_t j : on_link_[l]) {
            if (j != i && items_[j].free && path_[j] == u) others.push_back(j);
          }
        }
        for (std::size_t j : others) {
          std::map<std::size_t, double> delta;
          delta[up(i, pi)] -= items_[i].unit;
          delta[down(i, pi)] -= items_[i].unit;
          delta[up(i, u)] += items_[i].unit;
          delta[down(i, u)] += items_[i].unit;
          delta[up(j, u)] -= items_[j].unit;
          delta[down(j, u)] -= items_[j].unit;
          delta[up(j, pi)] += items_[j].unit;
          delta[down(j, pi)] += items_[j].unit;
          bool ok = true;
          for (const auto& [l, d] : delta) ok = ok && loadWith(l, d) < m - kEps;
          if (!ok) continue;
          unplace(i);
          unplace(j);
          place(i, u);
          place(j, pi);
          return true;
        }
      }
    }
    return false;
  }

  const Index& ix_;
  std::vector<Item>& items_;
  int max_moves_;
  std::vector<double> used_;
  std::vector<std::vector<std::size_t>> on_link_;
  std::vector<int> path_;
};

// Weighted loads: each subflow carries pair demand × weight.
std::vector<double> weightedUse(const Index& ix, const std::vector<Item>& items) {
  std::vector<double> used(ix.cap.size(), 0.0);
  for (const auto& it : items) {
    const auto& s = it.pair->subflows[static_cast<std::size_t>(it.sub)];
    double c = it.pair->demand_gbps * s.weight;
    used[ix.link(it.src, s.path, 0)] += c;
    used[ix.link(it.dst, s.path, 1)] += c;
  }
  return used;
}

double maxNorm(const Index& ix, const std::vector<double>& used) {
  double m = 0;
  for (std::size_t l = 0; l < used.size(); ++l) m = std::max(m, norm(used[l], ix.cap[l]));
  return m;
}

// Weights: equal over live paths, then, for pairs with a path loaded above 1, pairwise moves from
// the pair's most loaded path to its least loaded one; the best state seen is kept. Weights are
// rounded to 1e-4.
void balanceWeights(const Index& ix, std::vector<Item>& items, int rounds) {
  // Group the items of each pair (they are consecutive).
  std::vector<std::pair<std::size_t, std::size_t>> groups;
  for (std::size_t i = 0; i < items.size();) {
    std::size_t j = i;
    while (j < items.size() && items[j].pair == items[i].pair) ++j;
    groups.push_back({i, j});
    i = j;
  }
  auto alive = [&](const Item& it) {
    int u = it.pair->subflows[static_cast<std::size_t>(it.sub)].path;
    return ix.cap[ix.link(it.src, u, 0)] > 0 && ix.cap[ix.link(it.dst, u, 1)] > 0;
  };
  for (auto [b, e] : groups) {
    std::size_t live = 0;
    for (std::size_t i = b; i < e; ++i) live += alive(items[i]) ? 1U : 0U;
    for (std::size_t i = b; i < e; ++i) {
      auto& s = items[i].pair->subflows[static_cast<std::size_t>(items[i].sub)];
      s.weight = live == 0 ? 1.0 / static_cast<double>(e - b)
                           : (alive(items[i]) ? 1.0 / static_cast<double>(live) : 0.0);
    }
  }
  std::vector<double> used = weightedUse(ix, items);
  auto snapshot = [&] {
    std::vector<double> w;
    w.reserve(items.size());
    for (const auto& it : items)
      w.push_back(it.pair->subflows[static_cast<std::size_t>(it.sub)].weight);
    return w;
  };
  std::vector<double> best = snapshot();
  double best_max = maxNorm(ix, used);
  for (int r = 0; r < rounds; ++r) {
    bool moved = false;
    for (auto [b, e] : groups) {
      if (e - b < 2) continue;
      double demand = items[b].pair->demand_gbps;
      std::size_t hi = e, lo = e;
      double chi = -1, clo = kInf;
      for (std::size_t i = b; i < e; ++i) {
        if (!alive(items[i])) continue;
        const auto& s = items[i].pair->subflows[static_cast<std::size_t>(items[i].sub)];
        std::size_t lu = ix.link(items[i].src, s.path, 0), ld = ix.link(items[i].dst, s.path, 1);
        double c = std::max(norm(used[lu], ix.cap[lu]), norm(used[ld], ix.cap[ld]));
        if (s.weight > 1e-12 && c > chi) {
          chi = c;
          hi = i;
        }
        if (c < clo) {
          clo = c;
          lo = i;
        }
      }
      // Below 1 a link is not what limits the connection (its host link is) and equal weights
      // are best: the transport shares a host link equally among the subflows.
      if (hi == e || lo == e || hi == lo || chi <= 1.0 + 1e-9 || chi - clo <= 1e-6) continue;
      auto& sh = items[hi].pair->subflows[static_cast<std::size_t>(items[hi].sub)];
      auto& sl = items[lo].pair->subflows[static_cast<std::size_t>(items[lo].sub)];
      std::size_t hu = ix.link(items[hi].src, sh.path, 0), hd = ix.link(items[hi].dst, sh.path, 1);
      std::size_t lu = ix.link(items[lo].src, sl.path, 0), ld = ix.link(items[lo].dst, sl.path, 1);
      double a = demand / std::min(ix.cap[hu], ix.cap[hd]);
      double c = demand / std::min(ix.cap[lu], ix.cap[ld]);
      double delta = std::min(sh.weight, 0.5 * (chi - clo) / (a + c));
      if (delta < 1e-9) continue;
      sh.weight -= delta;
      sl.weight += delta;
      used[hu] -= demand * delta;
      used[hd] -= demand * delta;
      used[lu] += demand * delta;
      used[ld] += demand * delta;
      moved = true;
    }
    double m = maxNorm(ix, used);
    if (m < best_max - 1e-12) {
      best_max = m;
      best = snapshot();
    }
    if (!moved) break;
  }
  for (std::size_t i = 0; i < items.size(); ++i) {
    items[i].pair->subflows[static_cast<std::size_t>(items[i].sub)].weight = best[i];
  }
  // Round to 1e-4; the largest weight of a pair takes the remainder so the pair sums to 1.
  for (auto [b, e] : groups) {
    std::size_t big = b;
    double sum = 0;
    for (std::size_t i = b; i < e; ++i) {
      auto& s = items[i].pair->subflows[static_cast<std::size_t>(items[i].sub)];
      s.weight = std::round(s.weight * 1e4) / 1e4;
      sum += s.weight;
      if (s.weight > items[big].pair->subflows[static_cast<std::size_t>(items[big].sub)].weight) {
        big = i;
      }
    }
    auto& sb = items[big].pair->subflows[static_cast<std::size_t>(items[big].sub)];
    sb.weight = std::round((sb.weight + 1.0 - sum) * 1e4) / 1e4;
  }
}

// Renames the colours (paths) of a plane so that as many subflows as possible keep their old
// path; only when every link of the plane has the same capacity (renaming then keeps all loads).
void keepOldPaths(const Index& ix, std::vector<Item>& items,
                  const std::map<const JobState::Pair*, std::vector<int>>& old_paths) {
  std::map<int, std::vector<std::size_t>> by_plane;
  for (std::size_t i = 0; i < items.size(); ++i) by_plane[items[i].plane].push_back(i);
  const int U = ix.uplinks;
  for (auto& [plane, list] : by_plane) {
    std::set<int> leaves;
    for (std::size_t i : list) {
      leaves.insert(items[i].src);
      leaves.insert(items[i].dst);
    }
    double c = ix.cap[ix.link(*leaves.begin(), 0, 0)];
    bool uniform = true;
    for (int g : leaves) {
      for (int u = 0; u < U; ++u) {
        for (int d : {0, 1}) uniform = uniform && ix.cap[ix.link(g, u, d)] == c;
      }
    }
    if (!uniform) continue;
    std::vector<long> agree(static_cast<std::size_t>(U * U), 0);
    for (std::size_t i : list) {
      auto it = old_paths.find(items[i].pair);
      if (it == old_paths.end()) continue;
      int was = it->second[static_cast<std::size_t>(items[i].sub)];
      int now = items[i].pair->subflows[static_cast<std::size_t>(items[i].sub)].path;
      if (was >= 0) ++agree[static_cast<std::size_t>(now * U + was)];
    }
    // Greedy matching, largest agreement first (ties: lower indices).
    std::vector<std::pair<long, int>> cells;
    for (int k = 0; k < U * U; ++k) cells.push_back({-agree[static_cast<std::size_t>(k)], k});
    std::sort(cells.begin(), cells.end());
    std::vector<int> perm(static_cast<std::size_t>(U), -1);
    std::vector<bool> taken(static_cast<std::size_t>(U), false);
    for (auto [neg, k] : cells) {
      int now = k / U, was = k % U;
      if (perm[static_cast<std::size_t>(now)] >= 0 || taken[static_cast<std::size_t>(was)])
        continue;
      perm[static_cast<std::size_t>(now)] = was;
      taken[static_cast<std::size_t>(was)] = true;
    }
    for (std::size_t i : list) {
      auto& s = items[i].pair->subflows[static_cast<std::size_t>(items[i].sub)];
      s.path = perm[static_cast<std::size_t>(s.path)];
    }
  }
}

}  // namespace

Result<Mode> parseMode(std::string_view name) {
  if (name == "Off") return Mode::kOff;
  if (name == "Advisory") return Mode::kAdvisory;
  if (name == "Enforce") return Mode::kEnforce;
  return makeError(ErrorCode::kInvalidArgument, "trafficPlanning.mode: \"" + std::string(name) +
                                                    "\" is not one of Off, Advisory, Enforce");
}

std::string_view modeName(Mode mode) {
  switch (mode) {
    case Mode::kOff:
      return "Off";
    case Mode::kAdvisory:
      return "Advisory";
    case Mode::kEnforce:
      return "Enforce";
  }
  return "Off";
}

Planner::Planner(Fabric fabric, PlannerOptions options)
    : fabric_(std::move(fabric)), options_(options) {}

Status Planner::setNode(const std::string& name, const std::map<std::string, std::string>& labels) {
  C4_ASSIGN_OR_RETURN(auto loc, fabric_.locate(name, labels));
  nodes_[name] = std::move(loc);
  return {};
}

void Planner::removeNode(const std::string& name) {
  nodes_.erase(name);
}

const JobPlan* Planner::plan(const std::string& job) const {
  auto it = jobs_.find(job);
  return it == jobs_.end() ? nullptr : &it->second.plan;
}

std::vector<std::string> Planner::jobs() const {
  std::vector<std::string> out;
  for (const auto& [name, _] : jobs_) out.push_back(name);
  return out;
}

namespace {

// Ports in use per source node, over every job except `skip`.
std::map<std::string, std::set<std::uint16_t>> portsInUse(const JobMap& jobs,
                                                          const std::set<std::string>& skip) {
  std::map<std::string, std::set<std::uint16_t>> used;
  for (const auto& [name, js] : jobs) {
    if (skip.contains(name)) continue;
    for (const auto& p : js.pairs) {
      for (const auto& s : p.subflows) {
        if (s.local_port != 0) used[p.conn.src].insert(s.local_port);
      }
    }
  }
  return used;
}

}  // namespace

// Recomputes weights, ports of subflows whose path changed, plans and loads; reports changes.
PlanOutcome Planner::finish(JobMap& jobs) {
  Index ix(fabric_, jobs);
  std::vector<Item> items = collectItems(jobs, ix, nullptr);
  balanceWeights(ix, items, options_.weight_rounds);
  std::vector<double> used = weightedUse(ix, items);
  PlanOutcome out;
  out.max_link_load = maxNorm(ix, used);
  for (auto& [name, js] : jobs) {
    JobPlan plan;
    plan.job = name;
    plan.subflows_per_connection = js.placement.subflows_per_connection;
    plan.planes = js.planes;
    for (const auto& p : js.pairs) {
      plan.pairs.push_back({p.conn.src, p.conn.dst, p.plane, p.subflows});
      int src = ix.leaf.at({p.plane, p.src_leaf});
      int dst = ix.leaf.at({p.plane, p.dst_leaf});
      for (const auto& s : p.subflows) {
        std::size_t lu = ix.link(src, s.path, 0), ld = ix.link(dst, s.path, 1);
        plan.max_link_load =
            std::max({plan.max_link_load, norm(used[lu], ix.cap[lu]), norm(used[ld], ix.cap[ld])});
      }
    }
    if (!(plan == js.plan)) {
      out.changed.push_back(name);
      js.plan = std::move(plan);
    }
  }
  max_load_ = out.max_link_load;
  return out;
}

namespace {

// Builds a job's state (cross-leaf pairs with equal weights, no paths yet).
Result<JobState> buildJob(const JobPlacement& placement,
                          const std::map<std::string, NodeLocation>& nodes, double host_gbps) {
  C4_ASSIGN_OR_RETURN(auto conns, jobConnections(placement));
  JobState js;
  js.placement = placement;
  for (const auto& n : placement.nodes) {
    auto it = nodes.find(n);
    if (it == nodes.end()) {
      return makeError(ErrorCode::kFailedPrecondition, "placement " + placement.job + ": node " +
                                                           n + " has no known location (labels " +
                                                           kLeafLabel + ", " + kPlaneLabel + ")");
    }
    js.planes[n] = it->second.plane;
  }
  std::map<std::string, int> out_deg, in_deg;
  for (const auto& c : conns) {
    out_deg[c.src] += c.count;
    in_deg[c.dst] += c.count;
  }
  const auto s = static_cast<std::size_t>(placement.subflows_per_connection);
  for (const auto& c : conns) {
    const auto& a = nodes.at(c.src);
    const auto& b = nodes.at(c.dst);
    if (a.plane != b.plane) {
      return makeError(ErrorCode::kInvalidArgument,
                       "placement " + placement.job + ": nodes " + c.src + " (plane " +
                           std::to_string(a.plane) + ") and " + c.dst + " (plane " +
                           std::to_string(b.plane) + ") are connected but on different planes");
    }
    if (a.leaf == b.leaf) continue;
    JobState::Pair p;
    p.conn = c;
    p.plane = a.plane;
    p.src_leaf = a.leaf;
    p.dst_leaf = b.leaf;
    p.demand_gbps =
        host_gbps * c.count / static_cast<double>(std::max(out_deg[c.src], in_deg[c.dst]));
    p.subflows.assign(s, PlannedSubflow{0, -1, 1.0 / static_cast<double>(s)});
    js.pairs.push_back(std::move(p));
  }
  return js;
}

// Gives every subflow whose path has no matching port a fresh port (lowest free for the path).
Status assignPorts(JobMap& jobs, const Fabric& fabric, const PlannerOptions& o) {
  auto used = portsInUse(jobs, {});
  for (auto& [name, js] : jobs) {
    for (auto& p : js.pairs) {
      for (auto& s : p.subflows) {
        if (s.local_port != 0 && fabric.pathOfPort(s.local_port) == s.path) continue;
        auto& mine = used[p.conn.src];
        if (s.local_port != 0) mine.erase(s.local_port);
        auto port = fabric.freePortForPath(s.path, o.port_first, o.port_last, mine);
        if (!port) {
          return makeError(ErrorCode::kResourceExhausted,
                           "job " + name + ": no free source port for path " +
                               std::to_string(s.path) + " on node " + p.conn.src + " in [" +
                               std::to_string(o.port_first) + ", " + std::to_string(o.port_last) +
                               "]");
        }
        s.local_port = *port;
        mine.insert(*port);
      }
    }
  }
  return {};
}

}  // namespace

Result<PlanOutcome> Planner::planJob(const JobPlacement& placement) {
  C4_ASSIGN_OR_RETURN(auto fresh, buildJob(placement, nodes_, fabric_.hostLinkSpeedGbps()));
  // Plan 1: every other job pinned.
  JobMap pinned = jobs_;
  pinned.erase(placement.job);
  pinned[placement.job] = fresh;
  PlanOutcome out;
  double pinned_max = 0;
  {
    Index ix(fabric_, pinned);
    std::set<std::string> free_jobs{placement.job};
    auto items = collectItems(pinned, ix, &free_jobs);
    PathSolver solver(ix, items, options_.local_search_moves);
    out.tier1_planes = solver.solve();
    pinned_max = solver.maxLoad();
  }
  JobMap* chosen = &pinned;
  JobMap full;
  if (pinned.size() > 1 && pinned_max > kEps) {
    // Plan 2: everything afresh; taken only when it lowers the maximum load.
    full = jobs_;
    full.erase(placement.job);
    full[placement.job] = std::move(fresh);
    std::map<const JobState::Pair*, std::vector<int>> old_paths;
    for (auto& [name, js] : full) {
      for (auto& p : js.pairs) {
        std::vector<int> was;
        for (auto& s : p.subflows) was.push_back(s.path);
        old_paths[&p] = std::move(was);
      }
    }
    Index ix(fabric_, full);
    auto items = collectItems(full, ix, nullptr);
    PathSolver solver(ix, items, options_.local_search_moves);
    int tier1 = solver.solve();
    if (solver.maxLoad() < pinned_max - kEps) {
      keepOldPaths(ix, items, old_paths);
      chosen = &full;
      out.moved_other_jobs = true;
      out.tier1_planes = tier1;
    }
  }
  C4_RETURN_IF_ERROR(assignPorts(*chosen, fabric_, options_));
  PlanOutcome fin = finish(*chosen);
  jobs_ = std::move(*chosen);
  fin.moved_other_jobs = out.moved_other_jobs;
  fin.tier1_planes = out.tier1_planes;
  return fin;
}

PlanOutcome Planner::removeJob(const std::string& job) {
  jobs_.erase(job);
  return finish(jobs_);
}

PlanOutcome Planner::rebalance() {
  return finish(jobs_);
}

Result<PlanOutcome> Planner::replanAll() {
  JobMap next = jobs_;
  for (auto& [_, js] : next) {
    for (auto& p : js.pairs) {
      for (auto& s : p.subflows) s.path = -1;
    }
  }
  Index ix(fabric_, next);
  auto items = collectItems(next, ix, nullptr);
  PathSolver solver(ix, items, options_.local_search_moves);
  int tier1 = solver.solve();
  C4_RETURN_IF_ERROR(assignPorts(next, fabric_, options_));
  PlanOutcome out = finish(next);
  jobs_ = std::move(next);
  out.tier1_planes = tier1;
  return out;
}

Result<PlanOutcome> Planner::setFabric(Fabric fabric) {
  for (const auto& [name, js] : jobs_) {
    for (const auto& [node, plane] : js.planes) {
      if (plane >= fabric.planes()) {
        return makeError(ErrorCode::kFailedPrecondition,
                         "fabric: job " + name + " uses node " + node + " of plane " +
                             std::to_string(plane) + ", which the new description does not have");
      }
    }
    for (const auto& p : js.pairs) {
      for (const auto& s : p.subflows) {
        if (s.path >= fabric.uplinksPerLeaf()) {
          return makeError(ErrorCode::kFailedPrecondition, "fabric: job " + name + " uses path " +
                                                               std::to_string(s.path) +
                                                               ", beyond the new uplinksPerLeaf");
        }
      }
    }
  }
  for (const auto& [name, loc] : nodes_) {
    if (loc.plane >= fabric.planes()) {
      return makeError(ErrorCode::kFailedPrecondition,
                       "fabric: node " + name + " is on plane " + std::to_string(loc.plane) +
                           ", which the new description does not have");
    }
  }
  fabric.adoptTelemetry(fabric_);
  fabric_ = std::move(fabric);
  return finish(jobs_);
}

Result<PlanOutcome> Planner::setLinkState(const LinkRef& link, double capacity_fraction,
                                          Direction direction) {
  C4_RETURN_IF_ERROR(fabric_.setLinkState(link, capacity_fraction, direction));
  return finish(jobs_);
}

std::vector<LinkLoad> Planner::linkLoads() const {
  JobMap copy = jobs_;
  Index ix(fabric_, copy);
  auto items = collectItems(copy, ix, nullptr);
  auto used = weightedUse(ix, items);
  std::vector<LinkLoad> out;
  for (std::size_t g = 0; g < ix.leaf_names.size(); ++g) {
    for (int u = 0; u < ix.uplinks; ++u) {
      for (int d : {0, 1}) {
        std::size_t l = ix.link(static_cast<int>(g), u, d);
        if (used[l] <= kEps) continue;
        out.push_back({LinkRef{ix.leaf_names[g].first, ix.leaf_names[g].second, u},
                       d == 0 ? Direction::kUp : Direction::kDown, ix.cap[l], used[l],
                       norm(used[l], ix.cap[l])});
      }
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const LinkLoad& a, const LinkLoad& b) { return a.load > b.load; });
  return out;
}

}  // namespace c4::op::c4p
