// A TCP proxy on 127.0.0.1 for tests that cut a process off from the API server: it forwards
// bytes both ways (TLS passes through untouched) until cut(); from then on it forwards nothing
// and drops what it reads, keeping connections open, like a network partition that swallows
// packets. New connections are accepted and swallowed too.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace c4::op::it {

class TcpProxy {
 public:
  explicit TcpProxy(int target_port) : target_port_(target_port) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (listen_fd_ < 0 ||
        ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::listen(listen_fd_, 64) != 0) {
      throw std::runtime_error("proxy: cannot listen");
    }
    socklen_t len = sizeof(addr);
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { loop(); });
  }
  ~TcpProxy() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    for (auto& p : pairs_) {
      ::close(p.client);
      if (p.server >= 0) ::close(p.server);
    }
    ::close(listen_fd_);
  }
  TcpProxy(const TcpProxy&) = delete;
  TcpProxy& operator=(const TcpProxy&) = delete;
  [[nodiscard]] int port() const { return port_; }
  void cut() { cut_ = true; }

 private:
  struct Pair {
    int client = -1;
    int server = -1;
    bool closed = false;
  };
  int connectTarget() const {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(target_port_));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) return fd;
    if (fd >= 0) ::close(fd);
    return -1;
  }
  void loop() {
    char buf[65536];
    while (!stop_) {
      std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}};
      for (const auto& p : pairs_) {
        fds.push_back({p.closed ? -1 : p.client, POLLIN, 0});
        fds.push_back({p.closed ? -1 : p.server, POLLIN, 0});
      }
      if (::poll(fds.data(), fds.size(), 50) <= 0) continue;
      if (fds[0].revents & POLLIN) {
        int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c >= 0) pairs_.push_back({c, cut_ ? -1 : connectTarget(), false});
      }
      for (std::size_t i = 0; i < pairs_.size(); ++i) {
        Pair& p = pairs_[i];
        for (int side = 0; side < 2; ++side) {
          const pollfd& f = fds[1 + 2 * i + static_cast<std::size_t>(side)];
          if (f.fd < 0 || !(f.revents & (POLLIN | POLLHUP | POLLERR))) continue;
          int from = side == 0 ? p.client : p.server;
          int to = side == 0 ? p.server : p.client;
          ssize_t n = ::read(from, buf, sizeof(buf));
          if (n <= 0) {
            p.closed = true;  // stop polling the pair; after a cut its close is swallowed too
            continue;
          }
          if (cut_ || to < 0) continue;  // swallowed
          for (ssize_t off = 0; off < n;) {
            ssize_t w = ::write(to, buf + off, static_cast<std::size_t>(n - off));
            if (w <= 0) break;
            off += w;
          }
        }
      }
    }
  }

  int target_port_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<bool> cut_{false};
  std::vector<Pair> pairs_;  // the proxy thread's alone
  std::thread thread_;
};

}  // namespace c4::op::it
