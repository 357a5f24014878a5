#include "operator/c4p/planner.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <deque>
#include <iterator>
#include <limits>
#include <numeric>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

namespace c4::op::c4p {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kEps = 1e-9;
using JobState = PlannerJobState;
using JobMap = std::map<std::string, JobState>;

// One (source location, destination location) pair: its leaves and (across pods) pods in the
// Index, and how many paths it has.
struct Route {
  std::string src_pod;
  std::string dst_pod;
  bool across_pods = false;
  int count = 0;
  int g_src = 0;  // global leaf indices
  int g_dst = 0;
  int k_src = -1;  // global pod indices (across pods)
  int k_dst = -1;
  int next = -1;  // another route between the same two leaves (other pods named), or -1
};

// The link directions of one path, in order along it (2 inside a pod, 4 across pods).
struct PathLinks {
  std::array<std::size_t, 4> l{};
  std::size_t n = 0;
  [[nodiscard]] const std::size_t* begin() const { return l.data(); }
  [[nodiscard]] const std::size_t* end() const { return l.data() + n; }
};

// One link direction of a path, relative to its pair: a leaf link (uplink `a`) of the source or
// destination leaf, or a spine–core link (spine `a`, core uplink `b`) of the source or destination
// pod.
struct Hop {
  bool spine_tier = false;
  bool at_dst = false;
  int a = 0;
  int b = 0;
  int d = 0;  // 0 up, 1 down
};

// Dense numbering of the link directions the jobs' pairs can use. Leaf links first: leaf g
// (global index over planes), uplink u, direction d (0 up, 1 down) -> (g·U + u)·2 + d. Then the
// spine–core links of the pods that pairs across pods connect: pod k (global index over planes),
// spine s, core uplink c, direction d -> base + ((k·S + s)·C + c)·2 + d. Capacities come from the
// fabric. Every distinct pair of locations is a route; the link directions of its paths follow
// Fabric::pathLinks, read once per kind of pair (inside a pod, across pods).
struct Index {
  int uplinks = 0;
  int spines = 0;
  int core_uplinks = 0;
  std::map<std::pair<int, std::string>, int> leaf;
  std::vector<std::pair<int, std::string>> leaf_names;
  std::map<std::pair<int, std::string>, int> pod;
  std::vector<std::pair<int, std::string>> pod_names;
  std::size_t spine_base = 0;  // index of the first spine–core link direction
  std::vector<double> cap;     // Gbps
  std::vector<Route> routes;
  // (source leaf, destination leaf) -> the first route between them; Route::next links the
  // others (one per pair of pods named).
  std::map<std::pair<int, int>, int> route;
  // The route of every pair of the jobs, in the order of the job map and its jobs' pairs (the
  // order collectItems visits them in: it must be given the same map).
  std::vector<int> pair_route;
  // Per kind of pair (inside a pod, across pods): every path's hops (path p: hops
  // [p·n, (p + 1)·n)), from Fabric::pathLinks of the first pair of that kind (the paths of all
  // pairs of a kind have the same form).
  std::vector<Hop> shape[2];
  std::size_t shape_hops[2] = {0, 0};

  Index(const Fabric& fabric, const JobMap& jobs)
      : uplinks(fabric.uplinksPerLeaf()),
        spines(fabric.spines()),
        core_uplinks(fabric.coreUplinksPerSpine()) {
    using LeafIt = std::map<std::pair<int, std::string>, int>::iterator;
    std::vector<std::pair<LeafIt, LeafIt>> ends;  // per pair: its leaves in `leaf`
    for (const auto& [_, js] : jobs) {
      for (const auto& p : js.pairs) {
        ends.emplace_back(leaf.try_emplace({p.plane, p.src.leaf}, 0).first,
                          leaf.try_emplace({p.plane, p.dst.leaf}, 0).first);
        if (p.src.pod != p.dst.pod) {
          pod.try_emplace({p.plane, p.src.pod}, 0);
          pod.try_emplace({p.plane, p.dst.pod}, 0);
        }
      }
    }
    for (auto& [name, g] : leaf) {
      g = static_cast<int>(leaf_names.size());
      leaf_names.push_back(name);
    }
    for (auto& [name, k] : pod) {
      k = static_cast<int>(pod_names.size());
      pod_names.push_back(name);
    }
    spine_base = leaf_names.size() * static_cast<std::size_t>(uplinks) * 2;
    cap.resize(spine_base + pod_names.size() * static_cast<std::size_t>(spines) *
                                static_cast<std::size_t>(core_uplinks) * 2);
    for (std::size_t g = 0; g < leaf_names.size(); ++g) {
      for (int u = 0; u < uplinks; ++u) {
        for (int d : {0, 1}) {
          cap[link(static_cast<int>(g), u, d)] =
              fabric.capacityGbps(leaf_names[g].first, leaf_names[g].second, u,
                                  d == 0 ? Direction::kUp : Direction::kDown);
        }
      }
    }
    for (std::size_t l = spine_base; l < cap.size(); ++l) {
      auto [ref, dir] = refOf(l);
      cap[l] = fabric.capacityGbps(ref, dir);
    }
    std::size_t k = 0;
    for (const auto& [_, js] : jobs) {
      for (const auto& p : js.pairs) {
        const int g_src = ends[k].first->second, g_dst = ends[k].second->second;
        ++k;
        int r = findRoute(p, g_src, g_dst);
        if (r < 0) {
          r = static_cast<int>(routes.size());
          routes.push_back(makeRoute(fabric, p.src, p.dst, g_src, g_dst));
          auto [first, added] = route.try_emplace({g_src, g_dst}, r);
          if (!added) {
            routes.back().next = first->second;
            first->second = r;
          }
        }
        pair_route.push_back(r);
      }
    }
  }

  [[nodiscard]] std::size_t link(int g, int u, int d) const {
    return (static_cast<std::size_t>(g) * static_cast<std::size_t>(uplinks) +
            static_cast<std::size_t>(u)) *
               2 +
           static_cast<std::size_t>(d);
  }
  [[nodiscard]] std::size_t spineLink(int k, int s, int c, int d) const {
    return spine_base +
           ((static_cast<std::size_t>(k) * static_cast<std::size_t>(spines) +
             static_cast<std::size_t>(s)) *
                static_cast<std::size_t>(core_uplinks) +
            static_cast<std::size_t>(c)) *
               2 +
           static_cast<std::size_t>(d);
  }
  [[nodiscard]] std::pair<LinkRef, Direction> refOf(std::size_t l) const {
    const Direction dir = l % 2 == 0 ? Direction::kUp : Direction::kDown;
    if (l < spine_base) {
      const std::size_t U = static_cast<std::size_t>(uplinks);
      const auto& [plane, name] = leaf_names[l / 2 / U];
      return {LinkRef{plane, name, static_cast<int>(l / 2 % U)}, dir};
    }
    const std::size_t C = static_cast<std::size_t>(core_uplinks);
    const std::size_t S = static_cast<std::size_t>(spines);
    const std::size_t x = (l - spine_base) / 2;
    const auto& [plane, name] = pod_names[x / C / S];
    return {LinkRef::spineTier(plane, name, static_cast<int>(x / C % S), static_cast<int>(x % C)),
            dir};
  }
  // The route of pair p between global leaves g_src and g_dst; -1 before the constructor made it.
  [[nodiscard]] int findRoute(const JobState::Pair& p, int g_src, int g_dst) const {
    auto it = route.find({g_src, g_dst});
    for (int r = it == route.end() ? -1 : it->second; r >= 0;
         r = routes[static_cast<std::size_t>(r)].next) {
      const Route& x = routes[static_cast<std::size_t>(r)];
      if (x.src_pod == p.src.pod && x.dst_pod == p.dst.pod) return r;
    }
    return -1;
  }
  // The link directions of path `path` of route `r`; none for a path the route does not have
  // (buildJob and setFabric keep every planned path inside its pair's paths).
  [[nodiscard]] PathLinks links(int r, int path) const {
    PathLinks out;
    const Route& x = routes[static_cast<std::size_t>(r)];
    if (path < 0 || path >= x.count) return out;
    const std::size_t kind = x.across_pods ? 1 : 0;
    const std::size_t n = std::min(shape_hops[kind], out.l.size());
    const Hop* h = shape[kind].data() + static_cast<std::size_t>(path) * shape_hops[kind];
    for (; out.n < n; ++out.n, ++h) {
      out.l[out.n] = h->spine_tier ? spineLink(h->at_dst ? x.k_dst : x.k_src, h->a, h->b, h->d)
                                   : link(h->at_dst ? x.g_dst : x.g_src, h->a, h->d);
    }
    return out;
  }
  [[nodiscard]] int pathCount(int r) const { return routes[static_cast<std::size_t>(r)].count; }

 private:
  Route makeRoute(const Fabric& fabric, const NodeLocation& src, const NodeLocation& dst, int g_src,
                  int g_dst) {
    Route r;
    r.src_pod = src.pod;
    r.dst_pod = dst.pod;
    r.across_pods = src.pod != dst.pod;
    r.count = std::max(fabric.pathCount(src, dst), 0);
    r.g_src = g_src;
    r.g_dst = g_dst;
    if (r.across_pods) {
      r.k_src = pod.at({src.plane, src.pod});
      r.k_dst = pod.at({dst.plane, dst.pod});
    }
    const std::size_t kind = r.across_pods ? 1 : 0;
    std::vector<Hop>& hops = shape[kind];
    if (hops.empty() && r.count > 0) {
      for (int path = 0; path < r.count; ++path) {
        auto links = fabric.pathLinks(src, dst, path);
        if (!links) continue;  // not reached: pathCount(src, dst) > path
        for (const auto& [ref, dir] : *links) {
          const int d = dir == Direction::kDown ? 1 : 0;
          hops.push_back(ref.isSpineTier() ? Hop{true, ref.pod == dst.pod, ref.spine, ref.uplink, d}
                                           : Hop{false, ref.leaf == dst.leaf, ref.uplink, 0, d});
        }
      }
      shape_hops[kind] = hops.size() / static_cast<std::size_t>(r.count);
    }
    return r;
  }
};

// One subflow of a cross-leaf pair.
struct Item {
  JobState::Pair* pair = nullptr;
  std::size_t sub = 0;
  int plane = 0;
  int src = 0;  // global leaf indices
  int dst = 0;
  int route = 0;
  double unit = 0;  // Gbps at an equal share: pair demand / primary subflows
  bool free = false;
  bool spare = false;  // a spare subflow (PlannerJobState::Pair::spares)
  int ordinal = 0;     // of the pair, over all jobs
};

std::vector<Item> collectItems(JobMap& jobs, const Index& ix,
                               const std::set<std::string>* free_jobs) {
  std::vector<Item> items;
  int ordinal = 0;
  for (auto& [name, js] : jobs) {
    bool free = free_jobs == nullptr || free_jobs->contains(name);
    for (auto& p : js.pairs) {
      ++ordinal;
      int route = ix.pair_route[static_cast<std::size_t>(ordinal - 1)];
      int src = ix.routes[static_cast<std::size_t>(route)].g_src;
      int dst = ix.routes[static_cast<std::size_t>(route)].g_dst;
      const std::size_t primaries = p.subflows.size() - p.spares;
      double unit = p.demand_gbps / static_cast<double>(primaries);
      for (std::size_t j = 0; j < p.subflows.size(); ++j) {
        items.push_back({&p, j, p.plane, src, dst, route, unit, free, j >= primaries, ordinal});
      }
    }
  }
  return items;
}

double norm(double used, double cap) {
  if (cap <= 0) return used > kEps ? kInf : 0.0;
  return used / cap;
}

template <typename Range>
bool contains(const Range& v, std::size_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// Integer path assignment: every item carries `unit` on every link direction of its path.
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
    std::size_t searched = 0;  // free items the search below may move
    bool across = false;
    for (auto& [plane, list] : free_by_plane) {
      bool has_across = false;
      if (!pinned_planes.contains(plane) && colourable(list, &has_across)) {
        ++tier1;
        if (!has_across) {
          colour(list);
          continue;
        }
        // Optimal on a non-blocking Clos; elsewhere a start the search below improves on.
        colour3(list);
        searched += list.size();
        across = true;
      } else {
        general.insert(general.end(), list.begin(), list.end());
      }
    }
    if (!general.empty()) {
      greedy(general);
      searched += general.size();
      across = across || std::any_of(general.begin(), general.end(), [&](std::size_t i) {
                 return ix_.routes[static_cast<std::size_t>(items_[i].route)].across_pods;
               });
    }
    if (searched > 0) {
      localSearch();
      if (across) plateauSearch(searched);
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
  [[nodiscard]] PathLinks links(std::size_t i, int path) const {
    return ix_.links(items_[i].route, path);
  }
  [[nodiscard]] int paths(std::size_t i) const { return ix_.pathCount(items_[i].route); }
  [[nodiscard]] double load(std::size_t l) const { return norm(used_[l], ix_.cap[l]); }
  [[nodiscard]] double loadWith(std::size_t l, double add) const {
    return norm(used_[l] + add, ix_.cap[l]);
  }

  void place(std::size_t i, int path) {
    path_[i] = path;
    for (std::size_t l : links(i, path)) {
      used_[l] += items_[i].unit;
      on_link_[l].push_back(i);
    }
  }
  void unplace(std::size_t i) {
    for (std::size_t l : links(i, path_[i])) {
      used_[l] -= items_[i].unit;
      if (std::fabs(used_[l]) < kEps) used_[l] = 0;
      auto& v = on_link_[l];
      v.erase(std::find(v.begin(), v.end(), i));
    }
    path_[i] = -1;
  }

  // Tier 1 applies to a plane whose free items all carry the same demand, whose leaf links (of
  // the leaves involved) all have one positive capacity and, when some items are pairs across pods
  // (`*across`), whose spine–core links (of the pods involved) all have one positive capacity.
  bool colourable(const std::vector<std::size_t>& list, bool* across) const {
    double unit = items_[list.front()].unit;
    std::set<int> leaves, pods;
    for (std::size_t i : list) {
      if (std::fabs(items_[i].unit - unit) > kEps * std::max(1.0, unit)) return false;
      const Route& r = ix_.routes[static_cast<std::size_t>(items_[i].route)];
      leaves.insert(items_[i].src);
      leaves.insert(items_[i].dst);
      if (r.across_pods) {
        pods.insert(r.k_src);
        pods.insert(r.k_dst);
      }
    }
    *across = !pods.empty();
    const double c = ix_.cap[ix_.link(*leaves.begin(), 0, 0)];
    if (c <= 0) return false;
    for (int g : leaves) {
      for (int u = 0; u < ix_.uplinks; ++u) {
        for (int d : {0, 1}) {
          if (ix_.cap[ix_.link(g, u, d)] != c) return false;
        }
      }
    }
    if (pods.empty()) return true;
    if (ix_.core_uplinks <= 0) return false;
    const double c2 = ix_.cap[ix_.spineLink(*pods.begin(), 0, 0, 0)];
    if (c2 <= 0) return false;
    for (int k : pods) {
      for (int sp = 0; sp < ix_.spines; ++sp) {
        for (int cu = 0; cu < ix_.core_uplinks; ++cu) {
          for (int d : {0, 1}) {
            if (ix_.cap[ix_.spineLink(k, sp, cu, d)] != c2) return false;
          }
        }
      }
    }
    return true;
  }

  // König: a bipartite multigraph of maximum degree Δ has a proper Δ-edge-colouring. Edge e joins
  // left vertex left[e] and right vertex right[e] (any ints; the two sides are apart). Each edge
  // is coloured with a colour a free at its left end; if a is taken at its right end, where b is
  // free, the a/b alternating path from the right end is flipped first (it cannot reach the left
  // end in a bipartite graph). Returns the colours in [0, Δ) and Δ.
  static std::pair<std::vector<int>, int> edgeColour(const std::vector<int>& left,
                                                     const std::vector<int>& right) {
    std::map<int, int> left_id, right_id;
    std::vector<int> deg_l, deg_r;
    for (std::size_t e = 0; e < left.size(); ++e) {
      auto [l, nl] = left_id.emplace(left[e], static_cast<int>(left_id.size()));
      auto [r, nr] = right_id.emplace(right[e], static_cast<int>(right_id.size()));
      if (nl) deg_l.push_back(0);
      if (nr) deg_r.push_back(0);
      ++deg_l[static_cast<std::size_t>(l->second)];
      ++deg_r[static_cast<std::size_t>(r->second)];
    }
    if (left.empty()) return {{}, 0};
    int delta = std::max(*std::max_element(deg_l.begin(), deg_l.end()),
                         *std::max_element(deg_r.begin(), deg_r.end()));
    const std::size_t nl = left_id.size();
    const std::size_t nv = nl + right_id.size();
    const auto D = static_cast<std::size_t>(delta);
    std::vector<int> at(nv * D, -1);  // (vertex, colour) -> edge
    std::vector<int> col(left.size(), -1);
    std::vector<std::pair<std::size_t, std::size_t>> ends(left.size());
    auto freeColour = [&](std::size_t v) {
      for (std::size_t c = 0; c < D; ++c) {
        if (at[v * D + c] < 0) return c;
      }
      return D;  // unreachable: degree <= Δ
    };
    for (std::size_t e = 0; e < left.size(); ++e) {
      std::size_t a = static_cast<std::size_t>(left_id[left[e]]);
      std::size_t b = nl + static_cast<std::size_t>(right_id[right[e]]);
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
    return {col, delta};
  }

  // Folds Δ colours onto n links: colour c = r·n + x (round r, offset x) goes to link
  // (x·k_r + r) mod n, with k_r the r-th stride coprime to n (1, 3, 5, ... for even n). Every
  // round maps onto the links one to one, so a link gets at most ⌈Δ/n⌉ colours at any vertex.
  // The subflows of a pair get distinct colours, so those of one round get distinct links; a
  // different stride per round makes the link sets of pairs of different rounds overlap, so when
  // a link fails the weights can move its load across all the leaf's links, not only inside one
  // block.
  static std::vector<int> fold(const std::vector<int>& col, int delta, int n) {
    std::vector<int> strides;
    for (int k = 1; static_cast<int>(strides.size()) < delta / n + 1; k += 2) {
      if (std::gcd(k, n) == 1) strides.push_back(k % n == 0 ? 1 : k);
      if (k > 4 * n + 1) strides.push_back(1);  // n = 1 and the like: any bijection will do
    }
    std::vector<int> out(col.size());
    for (std::size_t e = 0; e < col.size(); ++e) {
      int r = col[e] / n, x = col[e] % n;
      out[e] =
          static_cast<int>((static_cast<long>(x) * strides[static_cast<std::size_t>(r)] + r) % n);
    }
    return out;
  }

  // Leaf uplinks by colouring the bipartite multigraph source leaf → destination leaf: every
  // leaf link then carries at most ⌈Δ/U⌉ of the subflows.
  std::vector<int> leafColouring(const std::vector<std::size_t>& list) const {
    std::vector<int> left, right;
    for (std::size_t i : list) {
      left.push_back(items_[i].src);
      right.push_back(items_[i].dst);
    }
    auto [col, delta] = edgeColour(left, right);
    return fold(col, delta, ix_.uplinks);
  }

  void colour(const std::vector<std::size_t>& list) {
    const std::vector<int> u = leafColouring(list);
    for (std::size_t e = 0; e < list.size(); ++e) place(list[e], u[e]);
  }

  // Two levels (Clos): leaf uplinks u as in colour(); then, per spine index s, the subflows
  // across pods whose uplink reaches spine s (u mod S = s) form a bipartite multigraph source pod
  // → destination pod, coloured and folded onto the spine's C core uplinks. Path u + U·c. Every
  // spine–core link then carries at most ⌈Δ_s/C⌉ subflows, Δ_s the largest number of them
  // through spine s of one pod; on a rearrangeably non-blocking Clos (C at least the leaves per
  // pod, one link speed) that is at most the leaf links' ⌈Δ/U⌉.
  void colour3(const std::vector<std::size_t>& list) {
    const std::vector<int> u = leafColouring(list);
    std::map<int, std::vector<std::size_t>> by_spine;  // positions in `list`
    for (std::size_t e = 0; e < list.size(); ++e) {
      const Route& r = ix_.routes[static_cast<std::size_t>(items_[list[e]].route)];
      if (r.across_pods) {
        by_spine[u[e] % ix_.spines].push_back(e);
      } else {
        place(list[e], u[e]);
      }
    }
    for (const auto& [_, es] : by_spine) {
      std::vector<int> left, right;
      for (std::size_t e : es) {
        const Route& r = ix_.routes[static_cast<std::size_t>(items_[list[e]].route)];
        left.push_back(r.k_src);
        right.push_back(r.k_dst);
      }
      auto [col, delta] = edgeColour(left, right);
      const std::vector<int> c = fold(col, delta, ix_.core_uplinks);
      for (std::size_t j = 0; j < es.size(); ++j) {
        place(list[es[j]], u[es[j]] + ix_.uplinks * c[j]);
      }
    }
  }

  // Link directions of path `path` that subflows of i's pair already use, counted per link; inside
  // a pod only the up link is counted (the down link carries the same subflows of the pair), which
  // is the number of sibling subflows on the path.
  [[nodiscard]] int siblingsOn(std::size_t i, int path) const {
    const bool across = ix_.routes[static_cast<std::size_t>(items_[i].route)].across_pods;
    int n = 0;
    for (std::size_t l : links(i, path)) {
      for (std::size_t j : on_link_[l]) n += items_[j].pair == items_[i].pair ? 1 : 0;
      if (!across) break;
    }
    return n;
  }

  // Largest demand first, each onto the path with the smallest resulting load over its link
  // directions; among equal loads the path that shares fewer link directions with subflows of the
  // same pair (a failed link then takes as few of a connection's subflows as possible), then the
  // smaller load sum.
  void greedy(std::vector<std::size_t> list) {
    std::stable_sort(list.begin(), list.end(),
                     [&](std::size_t a, std::size_t b) { return items_[a].unit > items_[b].unit; });
    for (std::size_t i : list) {
      int best = 0, best_same = 0;
      double best_max = kInf, best_sum = kInf;
      // Ties go to the first path in an order that starts at a different path per pair, so
      // that pairs do not all pile their subflows onto the same block of paths.
      const int n = paths(i);
      const int start = n > 0 ? (items_[i].ordinal * 7) % n : 0;
      for (int t = 0; t < n; ++t) {
        const int p = (start + t) % n;
        double m = -kInf, s = 0;
        for (std::size_t l : links(i, p)) {
          double x = loadWith(l, items_[i].unit);
          m = std::max(m, x);
          s += x;
        }
        int same = siblingsOn(i, p);
        bool better = m < best_max - kEps ||
                      (m <= best_max + kEps &&
                       (same < best_same || (same == best_same && s < best_sum - kEps)));
        if (better) {
          best = p;
          best_max = m;
          best_sum = s;
          best_same = same;
        }
      }
      place(i, best);
    }
  }

  // The most loaded link direction (the first of equals) and its load.
  [[nodiscard]] std::pair<std::size_t, double> top() const {
    std::size_t first = 0;
    double m = -1;
    for (std::size_t l = 0; l < used_.size(); ++l) {
      double x = load(l);
      if (x > m + kEps) {
        m = x;
        first = l;
      }
    }
    return {first, m};
  }

  // Moves (then swaps) free items off the most loaded link direction while every link direction
  // they newly touch ends below that load.
  void localSearch() {
    for (int moves = 0; moves < max_moves_; ++moves) {
      auto [t, m] = top();
      if (m <= 0 || !(tryMove(t, m) || trySwap(t, m))) return;
    }
  }

  // The largest load on the link directions path `path` adds to what i uses now (with i on
  // them); none when that path also uses `top` (moving there would not relieve it) or adds none.
  [[nodiscard]] std::optional<double> moveLoad(std::size_t i, int path, std::size_t top) const {
    const auto now = links(i, path_[i]);
    std::optional<double> x;
    for (std::size_t l : links(i, path)) {
      if (l == top) return std::nullopt;
      if (!contains(now, l)) x = std::max(x.value_or(-kInf), loadWith(l, items_[i].unit));
    }
    return x;
  }

  // Plateau search, for solves with pairs across pods (whose 4-link paths leave the move/swap
  // neighbourhood stuck more often): when no move or swap lowers the most loaded link direction,
  // one subflow leaves it for a path whose new link directions end at most at that load, so the
  // bottleneck moves on (as along an alternating path of König's colouring); a subflow that moved
  // stays for the next kTabu steps; improving moves and swaps resume after every step. The best
  // state seen (smallest maximum, then fewest link directions at it) is kept. Ends after
  // min(2·(free items) + 8, 64) steps without a better state, or after kMaxSteps steps.
  void plateauSearch(std::size_t free_items) {
    constexpr int kTabu = 4;
    constexpr long kMaxSteps = 256;
    auto score = [&] {
      double m = maxLoad();
      int at = 0;
      for (std::size_t l = 0; l < used_.size(); ++l) at += load(l) >= m - kEps ? 1 : 0;
      return std::make_pair(m, at);
    };
    auto best_score = score();
    std::vector<int> best = path_;
    std::vector<long> moved_at(items_.size(), -kTabu - 1);
    const long patience = std::min(2 * static_cast<long>(free_items) + 8, 64L);
    const long steps = std::min(kMaxSteps, static_cast<long>(max_moves_));
    long since_best = 0;
    for (long step = 0; step < steps && since_best < patience; ++step, ++since_best) {
      auto [t, m] = top();
      if (m <= 0 || !std::isfinite(m)) break;
      std::size_t best_i = 0;
      int best_p = -1;
      double best_x = m + kEps;
      for (std::size_t i : on_link_[t]) {
        if (!items_[i].free || step - moved_at[i] <= kTabu) continue;
        for (int p = 0; p < paths(i); ++p) {
          if (p == path_[i]) continue;
          std::optional<double> x = moveLoad(i, p, t);
          if (x && *x <= best_x && (best_p < 0 || *x < best_x - kEps)) {
            best_x = *x;
            best_i = i;
            best_p = p;
          }
        }
      }
      if (best_p < 0) break;
      unplace(best_i);
      place(best_i, best_p);
      moved_at[best_i] = step;
      localSearch();
      auto now = score();
      if (now.first < best_score.first - kEps ||
          (now.first <= best_score.first + kEps && now.second < best_score.second)) {
        best_score = now;
        best = path_;
        since_best = -1;
      }
    }
    std::vector<std::size_t> differ;
    for (std::size_t i = 0; i < items_.size(); ++i) {
      if (path_[i] != best[i]) differ.push_back(i);
    }
    for (std::size_t i : differ) unplace(i);
    for (std::size_t i : differ) place(i, best[i]);
  }

  bool tryMove(std::size_t top, double m) {
    std::size_t best_i = 0;
    int best_p = -1;
    double best = m - kEps;
    for (std::size_t i : on_link_[top]) {
      if (!items_[i].free) continue;
      for (int p = 0; p < paths(i); ++p) {
        if (p == path_[i]) continue;
        std::optional<double> x = moveLoad(i, p, top);
        if (x && *x < best) {
          best = *x;
          best_i = i;
          best_p = p;
        }
      }
    }
    if (best_p < 0) return false;
    unplace(best_i);
    place(best_i, best_p);
    return true;
  }

  // Exchanges the paths of an item on the top link and an item of the same path id on one of the
  // link directions it would move to, when every link direction either touches ends below m.
  bool trySwap(std::size_t top, double m) {
    std::vector<std::size_t> candidates(on_link_[top].begin(), on_link_[top].end());
    for (std::size_t i : candidates) {
      if (!items_[i].free) continue;
      int pi = path_[i];
      for (int p = 0; p < paths(i); ++p) {
        if (p == pi) continue;
        // Each candidate once, in the order of the links of path p.
        std::vector<std::size_t> others;
        for (std::size_t l : links(i, p)) {
          for (std::size_t j : on_link_[l]) {
            if (j != i && items_[j].free && path_[j] == p && pi < paths(j) &&
                !contains(others, j)) {
              others.push_back(j);
            }
          }
        }
        for (std::size_t j : others) {
          // Net change per link direction (at most 8 of them).
          std::vector<std::pair<std::size_t, double>> delta;
          auto add = [&](std::size_t l, double d) {
            for (auto& [k, v] : delta) {
              if (k == l) {
                v += d;
                return;
              }
            }
            delta.emplace_back(l, d);
          };
          for (std::size_t l : links(i, pi)) add(l, -items_[i].unit);
          for (std::size_t l : links(i, p)) add(l, items_[i].unit);
          for (std::size_t l : links(j, p)) add(l, -items_[j].unit);
          for (std::size_t l : links(j, pi)) add(l, items_[j].unit);
          bool ok = true;
          for (const auto& [l, d] : delta) ok = ok && loadWith(l, d) < m - kEps;
          if (!ok) continue;
          unplace(i);
          unplace(j);
          place(i, p);
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

// Weighted loads: each subflow carries pair demand × weight on every link direction of its path.
std::vector<double> weightedUse(const Index& ix, const std::vector<Item>& items) {
  std::vector<double> used(ix.cap.size(), 0.0);
  for (const auto& it : items) {
    const auto& s = it.pair->subflows[static_cast<std::size_t>(it.sub)];
    if (s.path < 0) continue;  // a spare not placed yet (placeSpares)
    double c = it.pair->demand_gbps * s.weight;
    for (std::size_t l : ix.links(it.route, s.path)) used[l] += c;
  }
  return used;
}

double maxNorm(const Index& ix, const std::vector<double>& used) {
  double m = 0;
  for (std::size_t l = 0; l < used.size(); ++l) m = std::max(m, norm(used[l], ix.cap[l]));
  return m;
}

// The items of one pair: [begin, end) in the item vector (a pair's items are consecutive).
using Group = std::pair<std::size_t, std::size_t>;

std::vector<Group> pairGroups(const std::vector<Item>& items) {
  std::vector<Group> groups;
  for (std::size_t i = 0; i < items.size();) {
    std::size_t j = i;
    while (j < items.size() && items[j].pair == items[i].pair) ++j;
    groups.emplace_back(i, j);
    i = j;
  }
  return groups;
}

PlannedSubflow& subflowOf(const Item& it) {
  return it.pair->subflows[it.sub];
}

// Whether every link direction of item i's path has capacity.
bool aliveItem(const Index& ix, const Item& item) {
  const auto links = ix.links(item.route, subflowOf(item).path);
  return std::all_of(links.begin(), links.end(), [&](std::size_t l) { return ix.cap[l] > 0; });
}

// The items the path solver places: every subflow but the spares (which carry no load as planned).
std::vector<Item> primaryItems(const std::vector<Item>& items) {
  std::vector<Item> out;
  out.reserve(items.size());
  std::copy_if(items.begin(), items.end(), std::back_inserter(out),
               [](const Item& it) { return !it.spare; });
  return out;
}

// Paths of the spares that have none yet (a newly planned pair's), once its primaries have theirs:
// in index order, each takes the path that shares the fewest link directions with the pair's
// other placed subflows (a failure there would take the subflow it stands in for with it), then a
// live one, then the one whose busiest link direction would be least loaded if every spare on it
// carried its equal share on top of the primaries (so a dead link hands its subflows' shares to
// spares spread over idle paths), then the smallest such sum, scanning from a path that differs
// per pair. Spares are placed last (the weighted loads of Item::unit's primaries come first).
void placeSpares(const Index& ix, std::vector<Item>& items) {
  std::vector<double> standby = weightedUse(ix, items);  // spares weigh 0: the primaries' loads
  for (const Item& it : items) {
    if (it.spare && subflowOf(it).path >= 0) {
      for (std::size_t l : ix.links(it.route, subflowOf(it).path)) standby[l] += it.unit;
    }
  }
  for (auto [b, e] : pairGroups(items)) {
    for (std::size_t i = b; i < e; ++i) {
      if (!items[i].spare || subflowOf(items[i]).path >= 0) continue;
      const int n = ix.pathCount(items[i].route);
      const int start = n > 0 ? (items[i].ordinal * 7) % n : 0;
      int best = -1;
      std::tuple<int, int, double, double> best_key{};
      for (int q = 0; q < n; ++q) {
        const int path = (start + q) % n;
        const auto links = ix.links(items[i].route, path);
        int shared = 0;
        for (std::size_t j = b; j < e; ++j) {
          if (j == i || subflowOf(items[j]).path < 0) continue;
          for (std::size_t l : ix.links(items[j].route, subflowOf(items[j]).path)) {
            shared += contains(links, l) ? 1 : 0;
          }
        }
        int dead = 0;
        double busiest = 0, sum = 0;
        for (std::size_t l : links) {
          dead += ix.cap[l] > 0 ? 0 : 1;
          const double x = norm(standby[l] + items[i].unit, ix.cap[l]);
          busiest = std::max(busiest, x);
          sum += x;
        }
        const std::tuple<int, int, double, double> key{shared, dead > 0 ? 1 : 0, busiest, sum};
        if (best < 0 || key < best_key) {
          best = path;
          best_key = key;
        }
      }
      subflowOf(items[i]).path = best;
      for (std::size_t l : ix.links(items[i].route, best)) standby[l] += items[i].unit;
    }
  }
}

// Item i's weight when its pair leans nowhere: equal over the pair's active subflows, its live
// primaries and, for each dead primary, one live spare (the first in index order); equal over the
// primaries when none is active (every path dead).
double levelWeight(const Index& ix, const std::vector<Item>& items, Group g, std::size_t i) {
  std::size_t primaries = 0;
  std::size_t dead = 0;
  for (std::size_t j = g.first; j < g.second; ++j) {
    if (items[j].spare) continue;
    ++primaries;
    dead += aliveItem(ix, items[j]) ? 0U : 1U;
  }
  std::size_t active = primaries - dead;
  bool i_active = !items[i].spare && aliveItem(ix, items[i]);
  for (std::size_t j = g.first; j < g.second && dead > 0; ++j) {
    if (!items[j].spare || !aliveItem(ix, items[j])) continue;
    --dead;
    ++active;
    i_active = i_active || j == i;
  }
  if (active == 0) return items[i].spare ? 0.0 : 1.0 / static_cast<double>(primaries);
  return i_active ? 1.0 / static_cast<double>(active) : 0.0;
}

// Whether a pair's weights lean: differ from levelWeight by more than the rounding allows.
bool leaning(const Index& ix, const std::vector<Item>& items, Group g) {
  for (std::size_t i = g.first; i < g.second; ++i) {
    if (std::fabs(subflowOf(items[i]).weight - levelWeight(ix, items, g, i)) > 1e-3) return true;
  }
  return false;
}

// Weights of the pairs `groups`, every other pair's weights fixed: levelWeight (equal over the
// active subflows; a path is dead when any of its link directions has capacity 0), then, for
// pairs with an active subflow's path loaded above 1, pairwise moves from the pair's most loaded
// active path to its least loaded one (a path's load: the largest over its link directions); the
// best state seen (the lowest maximum over the link directions these pairs' paths use) is kept.
// Weights are rounded to 1e-4. `used` holds every item's weighted load on entry; on return it is
// stale (weightedUse gives it again).
void balanceWeights(const Index& ix, std::vector<Item>& items, const std::vector<Group>& groups,
                    std::vector<double>& used, int rounds) {
  // Per item of the groups (in group order): the link directions of its path, and whether they
  // all have capacity (after the reset below: whether the item is active, levelWeight > 0).
  std::size_t n = 0;
  for (auto [b, e] : groups) n += e - b;
  std::vector<PathLinks> path_of;
  std::vector<char> alive;
  std::vector<std::size_t> touched;  // link directions the groups' paths use
  std::vector<char> seen(used.size(), 0);
  path_of.reserve(n);
  alive.reserve(n);
  for (auto [b, e] : groups) {
    for (std::size_t i = b; i < e; ++i) {
      const auto links = ix.links(items[i].route, subflowOf(items[i]).path);
      path_of.push_back(links);
      alive.push_back(
          std::all_of(links.begin(), links.end(), [&](std::size_t l) { return ix.cap[l] > 0; })
              ? 1
              : 0);
      for (std::size_t l : links) {
        if (seen[l] == 0) touched.push_back(l);
        seen[l] = 1;
      }
    }
  }
  auto addAll = [&](double sign) {
    std::size_t k = 0;
    for (auto [b, e] : groups) {
      for (std::size_t i = b; i < e; ++i, ++k) {
        const double c = sign * items[i].pair->demand_gbps * subflowOf(items[i]).weight;
        for (std::size_t l : path_of[k]) used[l] += c;
      }
    }
  };
  addAll(-1);
  {
    std::size_t k = 0;
    for (const Group& g : groups) {
      for (std::size_t i = g.first; i < g.second; ++i, ++k) {
        subflowOf(items[i]).weight = levelWeight(ix, items, g, i);
        // Only active subflows take part below: a spare stays idle while its primaries live.
        if (!(subflowOf(items[i]).weight > 0)) alive[k] = 0;
      }
    }
  }
  if (n == items.size()) {
    used = weightedUse(ix, items);  // every pair: the loads afresh, as when nothing was fixed
  } else {
    addAll(1);
  }
  auto snapshot = [&] {
    std::vector<double> w;
    w.reserve(n);
    for (auto [b, e] : groups) {
      for (std::size_t i = b; i < e; ++i) w.push_back(subflowOf(items[i]).weight);
    }
    return w;
  };
  auto maxTouched = [&] {
    double m = 0;
    for (std::size_t l : touched) m = std::max(m, norm(used[l], ix.cap[l]));
    return m;
  };
  auto minCap = [&](PathLinks links) {
    double c = kInf;
    for (std::size_t l : links) c = std::min(c, ix.cap[l]);
    return c;
  };
  std::vector<double> best = snapshot();
  double best_max = maxTouched();
  for (int r = 0; r < rounds; ++r) {
    bool moved = false;
    std::size_t k = 0;
    for (auto [b, e] : groups) {
      const std::size_t k0 = k;
      k += e - b;
      if (e - b < 2) continue;
      double demand = items[b].pair->demand_gbps;
      std::size_t hi = e, lo = e;
      double chi = -1, clo = kInf;
      for (std::size_t i = b; i < e; ++i) {
        if (alive[k0 + i - b] == 0) continue;
        const auto& s = subflowOf(items[i]);
        double c = -kInf;
        for (std::size_t l : path_of[k0 + i - b]) c = std::max(c, norm(used[l], ix.cap[l]));
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
      auto& sh = subflowOf(items[hi]);
      auto& sl = subflowOf(items[lo]);
      const auto hl = path_of[k0 + hi - b];
      const auto ll = path_of[k0 + lo - b];
      double a = demand / minCap(hl);
      double c = demand / minCap(ll);
      double delta = std::min(sh.weight, 0.5 * (chi - clo) / (a + c));
      if (delta < 1e-9) continue;
      sh.weight -= delta;
      sl.weight += delta;
      for (std::size_t l : hl) used[l] -= demand * delta;
      for (std::size_t l : ll) used[l] += demand * delta;
      moved = true;
    }
    double m = maxTouched();
    if (m < best_max - 1e-12) {
      best_max = m;
      best = snapshot();
    }
    if (!moved) break;
  }
  // Back to the best state, rounded to 1e-4; the largest weight of a pair takes the remainder so
  // the pair sums to 1.
  {
    std::size_t k = 0;
    for (auto [b, e] : groups) {
      for (std::size_t i = b; i < e; ++i, ++k) subflowOf(items[i]).weight = best[k];
    }
  }
  for (auto [b, e] : groups) {
    std::size_t big = b;
    double sum = 0;
    for (std::size_t i = b; i < e; ++i) {
      auto& s = subflowOf(items[i]);
      s.weight = std::round(s.weight * 1e4) / 1e4;
      sum += s.weight;
      if (s.weight > subflowOf(items[big]).weight) big = i;
    }
    auto& sb = subflowOf(items[big]);
    sb.weight = std::round((sb.weight + 1.0 - sum) * 1e4) / 1e4;
  }
}

}  // namespace

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

namespace {

// Brings the jobs' plans up to date with their pairs and the loads `used`: every pair, or only the
// pairs `only` marks (one flag per pair ordinal, Item::ordinal - 1) in jobs whose plan has every
// pair already. Returns the jobs whose plan changed.
std::vector<std::string> refreshPlans(JobMap& jobs, const Index& ix, const std::vector<Item>& items,
                                      const std::vector<double>& used,
                                      const std::vector<char>* only) {
  std::vector<std::string> changed;
  std::size_t next = 0;     // the items are the jobs' subflows in this order
  std::size_t ordinal = 0;  // of the pair, over all jobs
  for (auto& [name, js] : jobs) {
    double max_load = 0;
    for (const auto& p : js.pairs) {
      for (const auto& s : p.subflows) {
        for (std::size_t l : ix.links(items[next].route, s.path)) {
          max_load = std::max(max_load, norm(used[l], ix.cap[l]));
        }
        ++next;
      }
    }
    JobPlan& plan = js.plan;
    if (only == nullptr || plan.job != name || plan.pairs.size() != js.pairs.size()) {
      JobPlan fresh;
      fresh.job = name;
      fresh.subflows_per_connection = js.placement.subflows_per_connection;
      fresh.spare_subflows = js.placement.spare_subflows;
      fresh.planes = js.planes;
      fresh.max_link_load = max_load;
      for (const auto& p : js.pairs) {
        fresh.pairs.push_back({p.conn.src, p.conn.dst, p.plane, p.subflows});
      }
      ordinal += js.pairs.size();
      if (!(fresh == plan)) {
        changed.push_back(name);
        plan = std::move(fresh);
      }
      continue;
    }
    bool differs = max_load != plan.max_link_load;
    plan.max_link_load = max_load;
    for (std::size_t k = 0; k < js.pairs.size(); ++k, ++ordinal) {
      if ((*only)[ordinal] == 0 || plan.pairs[k].subflows == js.pairs[k].subflows) continue;
      plan.pairs[k].subflows = js.pairs[k].subflows;
      differs = true;
    }
    if (differs) changed.push_back(name);
  }
  return changed;
}

// A link direction this far above a load of 1 is hot: below it the difference is the 1e-4
// rounding of the weights (a few subflows' worth on one link), which no re-weighting removes.
constexpr double kHot = 1.0 + 1e-3;

// Whether a subflow of pair g has a link direction `pred` holds for on its path.
template <typename Pred>
bool onAnyLink(const Index& ix, const std::vector<Item>& items, Group g, const Pred& pred) {
  for (std::size_t i = g.first; i < g.second; ++i) {
    for (std::size_t l : ix.links(items[i].route, subflowOf(items[i]).path)) {
      if (pred(l)) return true;
    }
  }
  return false;
}

// Incremental re-weighting after a change (a link's capacity, a job arriving or leaving; paths of
// running pairs stay). The pairs `in` marks (one flag per pair ordinal) are re-weighted, and with
// them, breadth first, the pairs their paths lead to:
//   - every pair with a subflow on a *hot* link direction of their paths: loaded above kHot now,
//     before the change (`hot_before`: one flag per link direction, or empty), or once the
//     re-weighted pairs' weights are equal over their live paths. Such a pair may have leant away
//     from that link, or must now;
//   - every pair on a link direction of their paths whose load fell that is *leaning* (weights
//     not equal to levelWeight) or has a subflow on a hot link direction: what it leant away from
//     may be gone (left alone, it would keep a lean nothing justifies, and the host link, shared
//     equally by its subflows, would pace the connection by its heaviest subflow), or it may now
//     lean onto the link that cooled.
// Then every pair on a hot link direction anywhere, and the pairs the rules lead to from there.
// After the weights are balanced, the same two rules run on the loads reached (at most 8 passes).
// At most `max_pairs` pairs are re-weighted (0: no bound, and past half of the pairs all of them
// in one balance); the nearest are taken first. Every other pair keeps its weights. `used` holds
// the loads on entry (current weights and capacities) and on return; `in` marks, on return, every
// pair re-weighted. Returns how many there were.
std::size_t reweightAround(const Index& ix, std::vector<Item>& items, std::vector<double>& used,
                           std::vector<char>& in, const std::vector<char>& hot_before, int rounds,
                           std::size_t max_pairs) {
  const std::vector<Group> all = pairGroups(items);
  auto ordinalOf = [&](std::size_t g) {
    return static_cast<std::size_t>(items[all[g].first].ordinal - 1);
  };
  auto pathOf = [&](std::size_t i) { return ix.links(items[i].route, subflowOf(items[i]).path); };
  // The pairs on each link direction (group indices, ascending).
  std::vector<std::vector<std::uint32_t>> on_link(ix.cap.size());
  for (std::size_t g = 0; g < all.size(); ++g) {
    for (std::size_t i = all[g].first; i < all[g].second; ++i) {
      for (std::size_t l : pathOf(i)) {
        if (on_link[l].empty() || on_link[l].back() != g) {
          on_link[l].push_back(static_cast<std::uint32_t>(g));
        }
      }
    }
  }
  const std::vector<double> start = used;
  // `level`: the loads with every taken pair's weights equal over its live paths.
  std::vector<double> level = used;
  std::vector<char> taken(all.size(), 0);
  std::size_t count = 0;
  std::vector<char> expanded(ix.cap.size(), 0);  // bit 1: as hot, bit 2: as cooled
  std::deque<std::size_t> queue;                 // breadth first: the nearest pairs are taken first
  auto take = [&](std::size_t g) {
    if (taken[g] != 0 || (max_pairs > 0 && count >= max_pairs)) return;
    taken[g] = 1;
    ++count;
    in[ordinalOf(g)] = 1;
    queue.push_back(g);
    for (std::size_t i = all[g].first; i < all[g].second; ++i) {
      const double d = items[i].pair->demand_gbps *
                       (levelWeight(ix, items, all[g], i) - subflowOf(items[i]).weight);
      for (std::size_t l : pathOf(i)) level[l] += d;
    }
  };
  auto hot = [&](std::size_t l) {
    return (!hot_before.empty() && hot_before[l] != 0) || norm(used[l], ix.cap[l]) > kHot ||
           norm(level[l], ix.cap[l]) > kHot;
  };
  // Whether pair g has a subflow on a hot link direction (it could lean off it).
  auto onHot = [&](std::size_t g) { return onAnyLink(ix, items, all[g], hot); };
  // The two rules on link direction l: hot, take every pair on it; cooled, take its pairs that
  // lean, or that are on a hot link and may now lean onto l.
  auto expand = [&](std::size_t l, bool is_hot, bool cooled) {
    if (is_hot && (expanded[l] & 1) == 0) {
      expanded[l] |= 1;
      for (std::uint32_t h : on_link[l]) take(h);
    } else if (cooled && (expanded[l] & 3) == 0) {
      expanded[l] |= 2;
      for (std::uint32_t h : on_link[l]) {
        if (taken[h] == 0 && (leaning(ix, items, all[h]) || onHot(h))) take(h);
      }
    }
  };
  auto closure = [&] {
    while (!queue.empty()) {
      const std::size_t g = queue.front();
      queue.pop_front();
      for (std::size_t i = all[g].first; i < all[g].second; ++i) {
        for (std::size_t l : pathOf(i)) expand(l, hot(l), level[l] < start[l] - 1e-9);
      }
    }
  };
  for (std::size_t g = 0; g < all.size(); ++g) {
    if (in[ordinalOf(g)] != 0) take(g);
  }
  closure();
  // Then, within the bound, the pairs on every other hot link direction of the fabric: a change
  // can free room that only a chain of moves reaches (a pair leans onto a link whose pairs lean
  // onto the one that cooled), which the passes below follow from there.
  for (std::size_t l = 0; l < ix.cap.size(); ++l) {
    if (norm(used[l], ix.cap[l]) > kHot) expand(l, true, false);
  }
  closure();
  std::size_t done = 0;
  for (int pass = 0; pass < 8; ++pass) {
    // Unbounded and past half of the pairs: every pair, in one balance, rather than passes over
    // a growing set that each cost about as much.
    if (max_pairs == 0 && 2 * count >= all.size()) {
      for (std::size_t g = 0; g < all.size(); ++g) take(g);
      queue.clear();
    }
    std::vector<Group> groups;
    for (std::size_t g = 0; g < all.size(); ++g) {
      if (taken[g] != 0) groups.push_back(all[g]);
    }
    done = groups.size();
    if (groups.empty()) break;
    balanceWeights(ix, items, groups, used, rounds);
    used = weightedUse(ix, items);
    level = used;
    std::fill(expanded.begin(), expanded.end(), 0);
    for (std::size_t g = 0; g < all.size(); ++g) {
      if (taken[g] == 0) continue;
      for (std::size_t i = all[g].first; i < all[g].second; ++i) {
        for (std::size_t l : pathOf(i)) {
          expand(l, norm(used[l], ix.cap[l]) > kHot, used[l] < start[l] - 1e-9);
        }
      }
    }
    if (queue.empty()) break;
    closure();
  }
  return done;
}

// (job, pair index) of every pair of the other jobs that may have leant away from `job`: with a
// subflow on a link direction that one of the job's subflows loads above kHot, or with a subflow
// on any link direction the job uses (its load leaves them) and either leaning or on a hot link
// direction elsewhere (it may now lean onto what the job leaves).
std::set<std::pair<std::string, std::size_t>> hotPartners(const Fabric& fabric, JobMap& jobs,
                                                          const std::string& job) {
  std::set<std::pair<std::string, std::size_t>> out;
  auto it = jobs.find(job);
  if (it == jobs.end()) return out;
  std::size_t first = 0;  // the job's pairs are the ordinals [first, last)
  for (auto j = jobs.begin(); j != it; ++j) first += j->second.pairs.size();
  const std::size_t last = first + it->second.pairs.size();
  Index ix(fabric, jobs);
  const std::vector<Item> items = collectItems(jobs, ix, nullptr);
  const std::vector<double> used = weightedUse(ix, items);
  auto ordinal = [](const Item& item) { return static_cast<std::size_t>(item.ordinal - 1); };
  std::vector<char> mark(ix.cap.size(), 0);  // 1: the job uses it, 2: and loads it above kHot
  for (const Item& item : items) {
    if (ordinal(item) < first || ordinal(item) >= last) continue;
    for (std::size_t l : ix.links(item.route, subflowOf(item).path)) {
      mark[l] = norm(used[l], ix.cap[l]) > kHot ? 2 : 1;
    }
  }
  std::vector<std::pair<const std::string*, std::size_t>> names;  // per ordinal
  for (const auto& [name, js] : jobs) {
    for (std::size_t k = 0; k < js.pairs.size(); ++k) names.emplace_back(&name, k);
  }
  auto onHot = [&](Group g) {
    return onAnyLink(ix, items, g, [&](std::size_t l) { return norm(used[l], ix.cap[l]) > kHot; });
  };
  for (const Group& g : pairGroups(items)) {
    const std::size_t o = ordinal(items[g.first]);
    if (o >= first && o < last) continue;
    char m = 0;
    for (std::size_t i = g.first; i < g.second; ++i) {
      for (std::size_t l : ix.links(items[i].route, subflowOf(items[i]).path)) {
        m = std::max(m, mark[l]);
      }
    }
    if (m == 2 || (m == 1 && (leaning(ix, items, g) || onHot(g)))) {
      out.emplace(*names[o].first, names[o].second);
    }
  }
  return out;
}

// reweightAround, then the fabric's maximum load and the jobs' plans.
PlanOutcome reweightAndRefresh(JobMap& jobs, const Index& ix, std::vector<Item>& items,
                               std::vector<double>& used, std::vector<char>& in,
                               const std::vector<char>& hot_before, const PlannerOptions& options) {
  PlanOutcome out;
  out.pairs_reweighted = reweightAround(ix, items, used, in, hot_before, options.weight_rounds,
                                        options.reweight_max_pairs);
  out.max_link_load = maxNorm(ix, used);
  out.changed = refreshPlans(jobs, ix, items, used, &in);
  return out;
}

// Re-weights the pairs `seeds` names, with their neighbours (reweightAround), then the jobs'
// plans; the outcome's loads are the fabric's.
PlanOutcome reweightFrom(const Fabric& fabric, JobMap& jobs,
                         const std::set<std::pair<std::string, std::size_t>>& seeds,
                         const PlannerOptions& options) {
  Index ix(fabric, jobs);
  std::vector<Item> items = collectItems(jobs, ix, nullptr);
  std::vector<double> used = weightedUse(ix, items);
  std::vector<char> in;
  for (const auto& [name, js] : jobs) {
    for (std::size_t k = 0; k < js.pairs.size(); ++k) {
      in.push_back(seeds.contains({name, k}) ? 1 : 0);
    }
  }
  return reweightAndRefresh(jobs, ix, items, used, in, {}, options);
}

}  // namespace

// Recomputes weights, ports of subflows whose path changed, plans and loads; reports changes.
PlanOutcome Planner::finish(JobMap& jobs) {
  Index ix(fabric_, jobs);
  std::vector<Item> items = collectItems(jobs, ix, nullptr);
  std::vector<double> used = weightedUse(ix, items);
  const std::vector<Group> groups = pairGroups(items);
  balanceWeights(ix, items, groups, used, options_.weight_rounds);
  used = weightedUse(ix, items);
  PlanOutcome out;
  out.max_link_load = maxNorm(ix, used);
  out.changed = refreshPlans(jobs, ix, items, used, nullptr);
  out.pairs_reweighted = groups.size();
  max_load_ = out.max_link_load;
  return out;
}

namespace {

std::string quoted(const std::string& pod) {
  return "\"" + pod + "\"";
}

// Builds a job's state (cross-leaf pairs with equal weights, no paths yet). Refuses connections
// across planes, across pods that the fabric does not connect, and a leaf whose nodes name two
// pods.
Result<JobState> buildJob(const JobPlacement& placement,
                          const std::map<std::string, NodeLocation>& nodes, const Fabric& fabric) {
  const double host_gbps = fabric.hostLinkSpeedGbps();
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
  // A leaf belongs to one pod: when the job spans pods, every node of a leaf names the same one.
  const bool one_pod =
      std::all_of(placement.nodes.begin(), placement.nodes.end(), [&](const std::string& n) {
        return nodes.at(n).pod == nodes.at(placement.nodes.front()).pod;
      });
  if (!one_pod) {
    std::map<std::pair<int, std::string>, const std::string*> first_on_leaf;
    for (const auto& n : placement.nodes) {
      const NodeLocation& at = nodes.at(n);
      auto [first, added] = first_on_leaf.emplace(std::make_pair(at.plane, at.leaf), &n);
      const NodeLocation& other = nodes.at(*first->second);
      if (!added && other.pod != at.pod) {
        return makeError(ErrorCode::kInvalidArgument,
                         "placement " + placement.job + ": leaf " + at.leaf + " of plane " +
                             std::to_string(at.plane) + " has node " + *first->second + " in pod " +
                             quoted(other.pod) + " and node " + n + " in pod " + quoted(at.pod) +
                             " (label " + kPodLabel + "); a leaf belongs to one pod");
      }
    }
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
    if (fabric.pathCount(a, b) == 0) {
      return makeError(ErrorCode::kInvalidArgument,
                       "placement " + placement.job + ": nodes " + c.src + " (pod " +
                           quoted(a.pod) + ") and " + c.dst + " (pod " + quoted(b.pod) +
                           ") of plane " + std::to_string(a.plane) +
                           " are connected but the fabric does not connect their pods "
                           "(coreUplinksPerSpine is 0: two tiers)");
    }
    JobState::Pair p;
    p.conn = c;
    p.plane = a.plane;
    p.src = a;
    p.dst = b;
    p.demand_gbps =
        host_gbps * c.count / static_cast<double>(std::max(out_deg[c.src], in_deg[c.dst]));
    p.subflows.assign(s, PlannedSubflow{0, -1, 1.0 / static_cast<double>(s)});
    p.spares = static_cast<std::size_t>(placement.spare_subflows);
    p.subflows.resize(s + p.spares, PlannedSubflow{0, -1, 0.0});
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
        if (s.local_port != 0 && fabric.pathOfPortFor(s.local_port, p.src, p.dst) == s.path) {
          continue;
        }
        auto& mine = used[p.conn.src];
        if (s.local_port != 0) mine.erase(s.local_port);
        auto port =
            fabric.freePortForPathFor(p.src, p.dst, s.path, o.port_first, o.port_last, mine);
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
  C4_ASSIGN_OR_RETURN(auto fresh, buildJob(placement, nodes_, fabric_));
  // Every other job is pinned: live connections stay bound to their ports and apply new weights
  // by subflow index, so only this job's paths are free (a fresh plan of everything would move
  // them onto paths nobody uses).
  // A re-placed job's old pairs leave: the pairs that leant away from them are re-weighted.
  const auto partners = hotPartners(fabric_, jobs_, placement.job);
  JobMap next = jobs_;
  next[placement.job] = std::move(fresh);  // a re-placed job's old plan goes
  int tier1 = 0;
  {  // the solver's index is freed before finish() builds its own
    Index ix(fabric_, next);
    std::set<std::string> free_jobs{placement.job};
    auto items = collectItems(next, ix, &free_jobs);
    auto primaries = primaryItems(items);
    PathSolver solver(ix, primaries, options_.local_search_moves);
    tier1 = solver.solve();
    placeSpares(ix, items);
  }
  C4_RETURN_IF_ERROR(assignPorts(next, fabric_, options_));
  // The new job's pairs are weighted, and with them the running pairs that leant away from the
  // job's old placement or share a hot link with it (reweightAround, no bound: past half of the
  // pairs, all of them in one balance); every other pair keeps its weights.
  std::set<std::pair<std::string, std::size_t>> seeds = partners;
  for (std::size_t k = 0; k < next.at(placement.job).pairs.size(); ++k) {
    seeds.emplace(placement.job, k);
  }
  PlannerOptions unbounded = options_;
  unbounded.reweight_max_pairs = 0;
  PlanOutcome out = reweightFrom(fabric_, next, seeds, unbounded);
  jobs_ = std::move(next);
  max_load_ = out.max_link_load;
  out.tier1_planes = tier1;
  return out;
}

PlanOutcome Planner::removeJob(const std::string& job) {
  if (!jobs_.contains(job)) return {max_load_, {}, 0, 0};
  // Pairs of other jobs that shared a link direction loaded above 1 with the job had leant away
  // from it: they are re-weighted, with their hot neighbours; every other pair keeps its weights.
  const auto partners = hotPartners(fabric_, jobs_, job);
  jobs_.erase(job);
  PlanOutcome out = reweightFrom(fabric_, jobs_, partners, options_);
  max_load_ = out.max_link_load;
  return out;
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
  auto primaries = primaryItems(items);
  PathSolver solver(ix, primaries, options_.local_search_moves);
  int tier1 = solver.solve();
  placeSpares(ix, items);
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
      const int count = fabric.pathCount(p.src, p.dst);
      if (count == 0) {
        return makeError(ErrorCode::kFailedPrecondition,
                         "fabric: job " + name + " connects " + p.conn.src + " (pod " +
                             quoted(p.src.pod) + ") and " + p.conn.dst + " (pod " +
                             quoted(p.dst.pod) + ") of plane " + std::to_string(p.plane) +
                             ", pods the new description does not connect "
                             "(coreUplinksPerSpine is 0)");
      }
      for (const auto& s : p.subflows) {
        if (s.path < count) continue;
        if (p.src.pod == p.dst.pod) {
          return makeError(ErrorCode::kFailedPrecondition, "fabric: job " + name + " uses path " +
                                                               std::to_string(s.path) +
                                                               ", beyond the new uplinksPerLeaf");
        }
        return makeError(ErrorCode::kFailedPrecondition,
                         "fabric: job " + name + " uses path " + std::to_string(s.path) +
                             " between pods " + quoted(p.src.pod) + " and " + quoted(p.dst.pod) +
                             ", beyond the new uplinksPerLeaf × coreUplinksPerSpine (" +
                             std::to_string(count) + " paths)");
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
  Index ix(fabric_, jobs_);  // capacities before the change
  C4_RETURN_IF_ERROR(fabric_.setLinkState(link, capacity_fraction, direction));
  // The link directions of the index whose capacity changed: none when no pair uses the link.
  std::vector<std::pair<std::size_t, Direction>> changed;
  for (Direction d : {Direction::kUp, Direction::kDown}) {
    if (direction != Direction::kBoth && direction != d) continue;
    const int dir = d == Direction::kDown ? 1 : 0;
    if (link.isSpineTier()) {
      if (auto k = ix.pod.find({link.plane, link.pod}); k != ix.pod.end()) {
        changed.emplace_back(ix.spineLink(k->second, link.spine, link.uplink, dir), d);
      }
    } else if (auto g = ix.leaf.find({link.plane, link.leaf}); g != ix.leaf.end()) {
      changed.emplace_back(ix.link(g->second, link.uplink, dir), d);
    }
  }
  std::vector<Item> items = collectItems(jobs_, ix, nullptr);
  std::vector<double> used = weightedUse(ix, items);
  std::vector<char> hot_before(ix.cap.size(), 0);
  std::vector<char> on_link(ix.cap.size(), 0);
  for (auto [l, d] : changed) {
    hot_before[l] = norm(used[l], ix.cap[l]) > kHot ? 1 : 0;
    ix.cap[l] = fabric_.capacityGbps(link, d);
    on_link[l] = 1;
  }
  // Every pair with a subflow on a changed link direction is re-weighted (with its hot
  // neighbours); the others keep their weights.
  std::size_t pairs = 0;
  for (const auto& [_, js] : jobs_) pairs += js.pairs.size();
  std::vector<char> in(pairs, 0);
  for (const Item& it : items) {
    const auto links = ix.links(it.route, subflowOf(it).path);
    if (std::any_of(links.begin(), links.end(), [&](std::size_t l) { return on_link[l] != 0; })) {
      in[static_cast<std::size_t>(it.ordinal - 1)] = 1;
    }
  }
  PlanOutcome out = reweightAndRefresh(jobs_, ix, items, used, in, hot_before, options_);
  max_load_ = out.max_link_load;
  return out;
}

std::vector<LinkLoad> Planner::linkLoads() const {
  JobMap copy = jobs_;
  Index ix(fabric_, copy);
  auto items = collectItems(copy, ix, nullptr);
  auto used = weightedUse(ix, items);
  std::vector<LinkLoad> out;
  for (std::size_t l = 0; l < used.size(); ++l) {
    if (used[l] <= kEps) continue;
    auto [ref, dir] = ix.refOf(l);
    out.push_back({std::move(ref), dir, ix.cap[l], used[l], norm(used[l], ix.cap[l])});
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const LinkLoad& a, const LinkLoad& b) { return a.load > b.load; });
  return out;
}

}  // namespace c4::op::c4p
