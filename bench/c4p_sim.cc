#include "bench/c4p_sim.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <queue>
#include <random>
#include <tuple>

namespace c4::bench::c4psim {
namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
}  // namespace

std::vector<double> maxMinRates(const std::vector<double>& capacity,
                                const std::vector<std::vector<int>>& paths) {
  const std::size_t nl = capacity.size();
  std::vector<double> remaining = capacity;
  std::vector<int> unfrozen(nl, 0);
  std::vector<std::vector<std::size_t>> on_link(nl);
  for (std::size_t f = 0; f < paths.size(); ++f) {
    for (int l : paths[f]) {
      ++unfrozen[static_cast<std::size_t>(l)];
      on_link[static_cast<std::size_t>(l)].push_back(f);
    }
  }
  std::vector<double> rate(paths.size(), kInf);
  std::vector<bool> frozen(paths.size(), false);
  std::vector<std::uint64_t> version(nl, 0);
  using Entry = std::tuple<double, std::size_t, std::uint64_t>;  // share, link, version
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
  for (std::size_t l = 0; l < nl; ++l) {
    if (unfrozen[l] > 0) heap.emplace(std::max(0.0, remaining[l]) / unfrozen[l], l, 0);
  }
  // Keys only grow (freezing flows at the smallest share leaves every other share >= it), so
  // stale entries are skipped by version.
  while (!heap.empty()) {
    auto [share, l, v] = heap.top();
    heap.pop();
    if (v != version[l] || unfrozen[l] == 0) continue;
    for (std::size_t f : on_link[l]) {
      if (frozen[f]) continue;
      frozen[f] = true;
      rate[f] = share;
      for (int l2i : paths[f]) {
        auto l2 = static_cast<std::size_t>(l2i);
        remaining[l2] -= share;
        --unfrozen[l2];
        ++version[l2];
        if (unfrozen[l2] > 0)
          heap.emplace(std::max(0.0, remaining[l2]) / unfrozen[l2], l2, version[l2]);
      }
    }
  }
  return rate;
}

std::vector<double> completionTimes(const std::vector<double>& capacity,
                                    const std::vector<std::vector<int>>& paths,
                                    const std::vector<double>& bytes) {
  std::vector<double> done(paths.size(), 0.0);
  std::vector<double> left = bytes;
  std::vector<std::size_t> active;
  for (std::size_t f = 0; f < paths.size(); ++f) {
    if (bytes[f] > 0) active.push_back(f);
  }
  double now = 0;
  while (!active.empty()) {
    std::vector<std::vector<int>> sub;
    sub.reserve(active.size());
    for (std::size_t f : active) sub.push_back(paths[f]);
    std::vector<double> r = maxMinRates(capacity, sub);
    double dt = kInf;
    for (std::size_t i = 0; i < active.size(); ++i) {
      if (r[i] > 0) dt = std::min(dt, left[active[i]] / r[i]);
    }
    if (!std::isfinite(dt)) {
      for (std::size_t f : active) done[f] = kInf;
      break;
    }
    now += dt;
    std::vector<std::size_t> next;
    for (std::size_t i = 0; i < active.size(); ++i) {
      std::size_t f = active[i];
      left[f] -= r[i] * dt;
      if (left[f] <= 1e-9 * bytes[f]) {
        done[f] = now;
      } else {
        next.push_back(f);
      }
    }
    active = std::move(next);
  }
  return done;
}

bool LeafSpine::alive(int leaf, int uplink) const {
  return std::find(failed.begin(), failed.end(), std::make_pair(leaf, uplink)) == failed.end();
}

SimJob ringJob(const std::vector<int>& nodes, int subflows) {
  SimJob job;
  job.subflows = subflows;
  if (nodes.size() < 2) return job;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    job.connections.emplace_back(nodes[i], nodes[(i + 1) % nodes.size()]);
  }
  return job;
}

Routes ecmpRoutes(const LeafSpine& fabric, const std::vector<SimJob>& jobs, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Routes routes;
  std::vector<int> live;
  for (const auto& job : jobs) {
    auto& jr = routes.emplace_back();
    for (auto [src, dst] : job.connections) {
      auto& cr = jr.emplace_back();
      int a = fabric.leafOf(src), b = fabric.leafOf(dst);
      live.clear();
      for (int u = 0; u < fabric.uplinks; ++u) {
        if (fabric.alive(a, u) && fabric.alive(b, u)) live.push_back(u);
      }
      for (int s = 0; s < job.subflows; ++s) {
        int path = -1;
        if (a != b && !live.empty()) {
          std::uniform_int_distribution<std::size_t> pick(0, live.size() - 1);
          path = live[pick(rng)];
        }
        cr.push_back({path, 1.0 / job.subflows});
      }
    }
  }
  return routes;
}

namespace {

// The links of the fabric and one flow per positive-weight subflow.
struct Network {
  std::vector<double> cap;
  std::vector<std::vector<int>> paths;
  std::vector<double> share;  // the subflow's weight / its connection's total weight
  std::vector<std::size_t> owner;
};

Network build(const LeafSpine& fabric, const std::vector<SimJob>& jobs, const Routes& routes) {
  // Links: host up/down per node, then leaf up/down per (leaf, uplink).
  const int N = fabric.nodes();
  auto hostUp = [](int n) { return 2 * n; };
  auto hostDown = [](int n) { return 2 * n + 1; };
  auto leafLink = [&](int leaf, int u, int d) {
    return 2 * N + (leaf * fabric.uplinks + u) * 2 + d;
  };
  Network net;
  net.cap.resize(static_cast<std::size_t>(2 * N + 2 * fabric.leaves * fabric.uplinks));
  for (int n = 0; n < N; ++n) {
    net.cap[static_cast<std::size_t>(hostUp(n))] = fabric.host_gbps;
    net.cap[static_cast<std::size_t>(hostDown(n))] = fabric.host_gbps;
  }
  for (int l = 0; l < fabric.leaves; ++l) {
    for (int u = 0; u < fabric.uplinks; ++u) {
      double c = fabric.alive(l, u) ? fabric.uplink_gbps : 0.0;
      net.cap[static_cast<std::size_t>(leafLink(l, u, 0))] = c;
      net.cap[static_cast<std::size_t>(leafLink(l, u, 1))] = c;
    }
  }
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    for (std::size_t c = 0; c < jobs[j].connections.size(); ++c) {
      auto [src, dst] = jobs[j].connections[c];
      double total = 0;
      for (const auto& r : routes[j][c]) total += r.weight;
      for (const auto& r : routes[j][c]) {
        if (r.weight <= 0) continue;
        std::vector<int> p{hostUp(src)};
        if (fabric.leafOf(src) != fabric.leafOf(dst)) {
          p.push_back(leafLink(fabric.leafOf(src), r.path, 0));
          p.push_back(leafLink(fabric.leafOf(dst), r.path, 1));
        }
        p.push_back(hostDown(dst));
        net.paths.push_back(std::move(p));
        net.share.push_back(r.weight / total);
        net.owner.push_back(j);
      }
    }
  }
  return net;
}

}  // namespace

std::vector<double> ringStepBusbw(const LeafSpine& fabric, const std::vector<SimJob>& jobs,
                                  const Routes& routes) {
  Network net = build(fabric, jobs, routes);
  const double chunk = 1.0;  // Gbit per connection per step
  std::vector<double> bytes;
  for (double s : net.share) bytes.push_back(chunk * s);
  std::vector<double> t = completionTimes(net.cap, net.paths, bytes);
  std::vector<double> step(jobs.size(), 0.0);
  for (std::size_t f = 0; f < t.size(); ++f) {
    step[net.owner[f]] = std::max(step[net.owner[f]], t[f]);
  }
  std::vector<double> busbw(jobs.size(), 0.0);
  for (std::size_t j = 0; j < jobs.size(); ++j) busbw[j] = step[j] > 0 ? chunk / step[j] : 0.0;
  return busbw;
}

std::vector<double> ringPipelinedBusbw(const LeafSpine& fabric, const std::vector<SimJob>& jobs,
                                       const Routes& routes) {
  Network net = build(fabric, jobs, routes);
  const std::size_t nl = net.cap.size();
  // coef[j][l]: the share of job j's pace that crosses link l.
  std::vector<std::vector<double>> coef(jobs.size(), std::vector<double>(nl, 0.0));
  for (std::size_t f = 0; f < net.paths.size(); ++f) {
    for (int l : net.paths[f]) coef[net.owner[f]][static_cast<std::size_t>(l)] += net.share[f];
  }
  std::vector<double> pace(jobs.size(), 0.0);
  std::vector<bool> frozen(jobs.size(), false);
  for (std::size_t j = 0; j < jobs.size(); ++j) frozen[j] = jobs[j].connections.empty();
  std::vector<double> used(nl, 0.0);  // by frozen jobs
  while (true) {
    double t = kInf;
    std::size_t bottleneck = nl;
    for (std::size_t l = 0; l < nl; ++l) {
      double c = 0;
      for (std::size_t j = 0; j < jobs.size(); ++j) c += frozen[j] ? 0.0 : coef[j][l];
      if (c <= 0) continue;
      double tl = std::max(0.0, net.cap[l] - used[l]) / c;
      if (tl < t) {
        t = tl;
        bottleneck = l;
      }
    }
    if (bottleneck == nl) break;
    for (std::size_t j = 0; j < jobs.size(); ++j) {
      if (frozen[j] || coef[j][bottleneck] <= 0) continue;
      frozen[j] = true;
      pace[j] = t;
      for (std::size_t l = 0; l < nl; ++l) used[l] += t * coef[j][l];
    }
  }
  return pace;
}

double idealBusbw(const LeafSpine& fabric, const std::vector<SimJob>& jobs, std::size_t job) {
  // Cross-leaf demand per leaf and direction, every connection at host speed.
  std::vector<double> out(static_cast<std::size_t>(fabric.leaves), 0.0);
  std::vector<double> in(static_cast<std::size_t>(fabric.leaves), 0.0);
  for (const auto& j : jobs) {
    for (auto [src, dst] : j.connections) {
      int a = fabric.leafOf(src), b = fabric.leafOf(dst);
      if (a == b) continue;
      out[static_cast<std::size_t>(a)] += fabric.host_gbps;
      in[static_cast<std::size_t>(b)] += fabric.host_gbps;
    }
  }
  double factor = 1.0;
  for (auto [src, dst] : jobs[job].connections) {
    int a = fabric.leafOf(src), b = fabric.leafOf(dst);
    if (a == b) continue;
    for (auto [leaf, demand] : {std::pair{a, out[static_cast<std::size_t>(a)]},
                                std::pair{b, in[static_cast<std::size_t>(b)]}}) {
      int live = 0;
      for (int u = 0; u < fabric.uplinks; ++u) live += fabric.alive(leaf, u) ? 1 : 0;
      factor = std::min(factor, live * fabric.uplink_gbps / demand);
    }
  }
  return fabric.host_gbps * factor;
}

double expectedMaxLoad(int balls, int bins) {
  // P(max <= m) = n! / k^n · [x^n] (sum_{i=0}^{m} x^i / i!)^k  (Poissonisation identity),
  // E[max] = sum_{m>=0} (1 - P(max <= m)).
  const int n = balls;
  double log_scale = std::lgamma(n + 1.0) - n * std::log(static_cast<double>(bins));
  double expected = 0;
  for (int m = 0; m < n; ++m) {
    std::vector<double> term(static_cast<std::size_t>(m) + 1);
    for (int i = 0; i <= m; ++i)
      term[static_cast<std::size_t>(i)] = std::exp(-std::lgamma(i + 1.0));
    std::vector<double> poly(static_cast<std::size_t>(n) + 1, 0.0);
    poly[0] = 1.0;
    for (int b = 0; b < bins; ++b) {
      std::vector<double> next(static_cast<std::size_t>(n) + 1, 0.0);
      for (int d = 0; d <= n; ++d) {
        if (poly[static_cast<std::size_t>(d)] == 0) continue;
        for (int i = 0; i <= m && d + i <= n; ++i) {
          next[static_cast<std::size_t>(d + i)] +=
              poly[static_cast<std::size_t>(d)] * term[static_cast<std::size_t>(i)];
        }
      }
      poly = std::move(next);
    }
    double p_le = poly[static_cast<std::size_t>(n)] * std::exp(log_scale);
    expected += 1.0 - std::min(1.0, p_le);
  }
  return expected;
}

}  // namespace c4::bench::c4psim
