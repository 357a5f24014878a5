// Test peer: connects to a C4 handle (hex on argv) and then either streams 4 MiB messages forever
// ("stream") or connects and sends nothing ("silent"). The tests kill it to simulate a dead peer.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "c4/plugin/transport.h"

using namespace c4::plugin;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s stream|silent <handle-hex>\n", argv[0]);
    return 2;
  }
  std::string mode = argv[1];
  std::string hex = argv[2];
  char handle[kHandleBytes] = {};
  for (std::size_t i = 0; i < kHandleBytes && 2 * i + 1 < hex.size(); ++i) {
    handle[i] = static_cast<char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  }
  ContextOptions o;
  o.config.node = "peer-node";
  o.config.rank = 7;
  o.config.subflows = 2;
  auto devs = discoverInterfaces("lo");
  if (!devs) return 3;
  o.devices = *devs;
  auto ctx = Context::create(std::move(o));
  if (!ctx) return 4;
  CommBase* send = nullptr;
  while (send == nullptr) {
    auto s = (*ctx)->connect(0, handle);
    if (!s) {
      std::fprintf(stderr, "connect: %s\n", s.error().toString().c_str());
      return 5;
    }
    send = *s;
    std::this_thread::yield();
  }
  std::printf("connected\n");
  std::fflush(stdout);
  if (mode == "silent") {
    for (;;) ::pause();
  }
  std::vector<char> buf(4 << 20, 'x');
  for (;;) {
    auto r = isend(send, buf.data(), buf.size(), 0);
    if (!r) return 6;
    if (*r == nullptr) continue;
    for (;;) {
      auto t = test(*r, nullptr);
      if (!t) return 7;
      if (*t) break;
      std::this_thread::yield();
    }
  }
}
