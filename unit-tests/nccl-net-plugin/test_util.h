// Helpers shared by the plugin's unit tests: loopback contexts and connected comm pairs.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "c4/plugin/transport.h"

namespace c4::plugin::testing {

inline std::vector<NetInterface> loopback() {
  auto devs = discoverInterfaces("lo");
  EXPECT_TRUE(devs.has_value()) << (devs ? "" : devs.error().toString());
  return devs ? *devs : std::vector<NetInterface>{};
}

inline PluginConfig baseConfig(const std::string& node, int rank) {
  PluginConfig c;
  c.node = node;
  c.pod = node + "-pod";
  c.rank = rank;
  c.subflows = 4;
  c.min_chunk_bytes = 64 * 1024;
  return c;
}

inline std::unique_ptr<Context> makeContext(PluginConfig cfg, Clock* clock = nullptr) {
  ContextOptions o;
  o.config = std::move(cfg);
  o.clock = clock;
  o.devices = loopback();
  auto c = Context::create(std::move(o));
  EXPECT_TRUE(c.has_value()) << (c ? "" : c.error().toString());
  return c ? std::move(*c) : nullptr;
}

struct Pair {
  CommBase* listen = nullptr;
  CommBase* send = nullptr;
  CommBase* recv = nullptr;
};

// Drives the non-blocking connect/accept state machines like NCCL's proxy (same handle buffer on
// every retry). Gives up after 10 s of real time.
inline Pair connectPair(Context& sender, Context& receiver) {
  Pair p;
  char handle[kHandleBytes];
  auto l = receiver.listen(0, handle);
  EXPECT_TRUE(l.has_value());
  if (!l) return p;
  p.listen = *l;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((p.send == nullptr || p.recv == nullptr) && std::chrono::steady_clock::now() < deadline) {
    if (p.send == nullptr) {
      auto s = sender.connect(0, handle);
      EXPECT_TRUE(s.has_value()) << (s ? "" : s.error().toString());
      if (!s) break;
      p.send = *s;
    }
    if (p.recv == nullptr) {
      auto r = accept(p.listen);
      EXPECT_TRUE(r.has_value()) << (r ? "" : r.error().toString());
      if (!r) break;
      p.recv = *r;
    }
  }
  EXPECT_NE(p.send, nullptr);
  EXPECT_NE(p.recv, nullptr);
  return p;
}

// Polls test() on one request until done or error; returns the error text or "" on success. Only
// for a request whose peer is driven elsewhere (another process, or already complete).
inline std::string waitRequest(Request* r, int* sizes = nullptr,
                               std::chrono::seconds limit = std::chrono::seconds(30)) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    auto t = test(r, sizes);
    if (!t) return t.error().toString();
    if (*t) return "";
    std::this_thread::yield();
  }
  return "timeout";
}

// Stands in for NCCL's proxy thread: it polls test() on every request in flight. A connection
// makes progress when isend/irecv/test is called on it (as NCCL's own socket transport without
// helper threads), so a test that waits for a send must keep testing the matching receive too.
class Proxy {
 public:
  void track(Request* r, int* sizes = nullptr) { inflight_.push_back({r, sizes}); }
  // Tests every tracked request until `target` (tracked) is done or fails; others that complete
  // meanwhile are released. Returns the error text, "" on success.
  std::string waitFor(Request* target, std::chrono::seconds limit = std::chrono::seconds(30)) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      bool targetDone = true;
      for (auto it = inflight_.begin(); it != inflight_.end();) {
        auto t = test(it->first, it->second);
        if (!t) return t.error().toString();
        if (*t) {
          it = inflight_.erase(it);
        } else {
          targetDone = targetDone && it->first != target;
          ++it;
        }
      }
      if (targetDone) return "";
      std::this_thread::yield();
    }
    return "timeout";
  }
  std::string waitAll(std::chrono::seconds limit = std::chrono::seconds(30)) {
    while (!inflight_.empty()) {
      std::string err = waitFor(inflight_.front().first, limit);
      if (!err.empty()) return err;
    }
    return "";
  }

 private:
  std::vector<std::pair<Request*, int*>> inflight_;
};

// Waits for all of them together (see Proxy).
inline std::string waitAll(std::initializer_list<std::pair<Request*, int*>> reqs,
                           std::chrono::seconds limit = std::chrono::seconds(30)) {
  Proxy p;
  for (auto [r, s] : reqs) p.track(r, s);
  return p.waitAll(limit);
}

// Pseudo-random bytes (xorshift64, 8 bytes per step: cheap enough for 256 MiB under sanitizers).
inline void fillPattern(std::vector<unsigned char>& v, unsigned seed) {
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  std::size_t i = 0;
  for (; i + 8 <= v.size(); i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(v.data() + i, &x, 8);
  }
  for (; i < v.size(); ++i) v[i] = static_cast<unsigned char>(x >> (8 * (i % 8)));
}

}  // namespace c4::plugin::testing
