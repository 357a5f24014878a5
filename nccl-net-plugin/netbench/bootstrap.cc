#include "bootstrap.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "c4/common/clock.h"

namespace c4::netbench {
namespace {

Status sendAll(int fd, const void* p, std::size_t n) {
  const auto* b = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::send(fd, b, n, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      return std::unexpected(errnoError("bootstrap send", errno));
    }
    b += w;
    n -= static_cast<std::size_t>(w);
  }
  return {};
}

Status recvAll(int fd, void* p, std::size_t n) {
  auto* b = static_cast<char*>(p);
  while (n > 0) {
    ssize_t r = ::recv(fd, b, n, 0);
    if (r == 0) return makeError(ErrorCode::kUnavailable, "bootstrap peer closed");
    if (r < 0) {
      if (errno == EINTR) continue;
      return std::unexpected(errnoError("bootstrap recv", errno));
    }
    b += r;
    n -= static_cast<std::size_t>(r);
  }
  return {};
}

Status sendBlob(int fd, const std::string& s) {
  auto n = static_cast<std::uint32_t>(s.size());
  C4_RETURN_IF_ERROR(sendAll(fd, &n, sizeof(n)));
  return sendAll(fd, s.data(), s.size());
}

Result<std::string> recvBlob(int fd) {
  std::uint32_t n = 0;
  C4_RETURN_IF_ERROR(recvAll(fd, &n, sizeof(n)));
  if (n > (64u << 20)) return makeError(ErrorCode::kInvalidArgument, "bootstrap blob too large");
  std::string s(n, '\0');
  C4_RETURN_IF_ERROR(recvAll(fd, s.data(), n));
  return s;
}

// Where rank 0 listens.
Result<addrinfo*> resolveListen(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  std::string service = std::to_string(port);
  int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    return makeError(ErrorCode::kInvalidArgument,
                     "cannot resolve " + host + ": " + ::gai_strerror(rc));
  }
  return res;
}

// Every address `host` stands for, numeric, in getaddrinfo's order, without repeats.
Result<std::vector<std::string>> systemResolve(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    return makeError(ErrorCode::kInvalidArgument,
                     "cannot resolve " + host + ": " + ::gai_strerror(rc));
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(res, &::freeaddrinfo);
  std::vector<std::string> out;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    char text[NI_MAXHOST] = {};
    if (::getnameinfo(a->ai_addr, a->ai_addrlen, text, sizeof(text), nullptr, 0, NI_NUMERICHOST) !=
        0) {
      continue;
    }
    if (std::find(out.begin(), out.end(), text) == out.end()) out.emplace_back(text);
  }
  if (out.empty()) return makeError(ErrorCode::kInvalidArgument, "cannot resolve " + host);
  return out;
}

// A blocking TCP connection to numeric:port, or an error once `ms` passed without one (an address
// nobody answers must not take a kernel's SYN timeout off the rank's deadline).
Result<UniqueFd> connectWithin(const std::string& numeric, int port, int ms) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST;
  addrinfo* res = nullptr;
  const std::string where = numeric + ":" + std::to_string(port);
  int rc = ::getaddrinfo(numeric.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    return makeError(ErrorCode::kInvalidArgument,
                     "not a numeric address: " + numeric + ": " + ::gai_strerror(rc));
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(res, &::freeaddrinfo);
  UniqueFd fd(::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return std::unexpected(errnoError("bootstrap socket", errno));
  if (::connect(fd.get(), res->ai_addr, res->ai_addrlen) != 0) {
    if (errno != EINPROGRESS) return std::unexpected(errnoError("connect to " + where, errno));
    pollfd p{fd.get(), POLLOUT, 0};
    int n = ::poll(&p, 1, ms);
    if (n < 0) return std::unexpected(errnoError("connect to " + where, errno));
    if (n == 0) {
      return makeError(ErrorCode::kDeadlineExceeded,
                       "connect to " + where + ": no answer within " + std::to_string(ms) + " ms");
    }
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return std::unexpected(errnoError("connect to " + where, err));
  }
  int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0) {
    return std::unexpected(errnoError("bootstrap fcntl", errno));
  }
  return fd;
}

}  // namespace

Result<Bootstrap> Bootstrap::create(int rank, int worldSize, const std::string& masterAddr,
                                    int masterPort, int timeoutMs, const Resolver& resolver) {
  if (worldSize < 1 || rank < 0 || rank >= worldSize) {
    return makeError(ErrorCode::kInvalidArgument, "rank must be in [0, world size)");
  }
  Bootstrap b;
  b.rank_ = rank;
  b.world_size_ = worldSize;
  Clock& clock = realClock();
  auto deadline = clock.monoNow() + std::chrono::milliseconds(timeoutMs);
  auto msLeft = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock.monoNow())
        .count();
  };
  if (rank == 0) {
    // The master's name may not resolve yet (its pod is starting; a headless Service's record
    // appears with the pod): retry until the deadline, as torchrun's rendezvous does.
    Result<addrinfo*> resolved = resolveListen(masterAddr, masterPort);
    while (!resolved && msLeft() > 0) {
      clock.sleepFor(std::chrono::milliseconds(100));
      resolved = resolveListen(masterAddr, masterPort);
    }
    C4_ASSIGN_OR_RETURN(addrinfo * ai, std::move(resolved));
    std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(ai, &::freeaddrinfo);
    if (worldSize == 1) return b;
    UniqueFd lfd(::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    int one = 1;
    ::setsockopt(lfd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(lfd.get(), ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(lfd.get(), 1024) != 0) {
      return std::unexpected(errnoError(
          "bootstrap listen on " + masterAddr + ":" + std::to_string(masterPort), errno));
    }
    b.peers_.resize(static_cast<std::size_t>(worldSize));
    for (int got = 1; got < worldSize;) {
      auto left = msLeft();
      if (left <= 0) return makeError(ErrorCode::kDeadlineExceeded, "bootstrap: ranks missing");
      pollfd p{lfd.get(), POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
      UniqueFd fd(::accept4(lfd.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!fd.valid()) continue;
      std::int32_t peer = -1;
      C4_RETURN_IF_ERROR(recvAll(fd.get(), &peer, sizeof(peer)));
      if (peer <= 0 || peer >= worldSize || b.peers_[static_cast<std::size_t>(peer)].valid()) {
        return makeError(ErrorCode::kInvalidArgument,
                         "bootstrap: bad or duplicate rank " + std::to_string(peer));
      }
      ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      b.peers_[static_cast<std::size_t>(peer)] = std::move(fd);
      ++got;
    }
  } else {
    // Resolve on every try and try every address, until one accepts or the deadline passes.
    std::string last_error;
    for (;;) {
      auto addresses = resolver ? resolver(masterAddr) : systemResolve(masterAddr);
      if (!addresses) last_error = addresses.error().message;
      for (const std::string& address : addresses ? *addresses : std::vector<std::string>{}) {
        auto fd = connectWithin(address, masterPort,
                                static_cast<int>(std::clamp<std::int64_t>(msLeft(), 1, 1000)));
        if (!fd) {
          last_error = fd.error().message;
          continue;
        }
        std::int32_t me = rank;
        C4_RETURN_IF_ERROR(sendAll(fd->get(), &me, sizeof(me)));
        int one = 1;
        ::setsockopt(fd->get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        b.peers_.push_back(std::move(*fd));
        break;
      }
      if (!b.peers_.empty()) break;
      if (msLeft() <= 0) {
        return makeError(ErrorCode::kDeadlineExceeded, "bootstrap connect to " + masterAddr + ":" +
                                                           std::to_string(masterPort) +
                                                           " timed out: " + last_error);
      }
      clock.sleepFor(std::chrono::milliseconds(50));
    }
  }
  // Local address as seen on the bootstrap connection.
  int fd = rank == 0 ? b.peers_[1].get() : b.peers_[0].get();
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  char host[NI_MAXHOST] = {};
  ::getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof(host), nullptr, 0,
                NI_NUMERICHOST);
  b.local_address_ = host;
  return b;
}

Result<std::vector<std::string>> Bootstrap::allgather(const std::string& mine) {
  std::vector<std::string> all(static_cast<std::size_t>(world_size_));
  all[static_cast<std::size_t>(rank_)] = mine;
  if (world_size_ == 1) return all;
  if (rank_ == 0) {
    for (int r = 1; r < world_size_; ++r) {
      C4_ASSIGN_OR_RETURN(all[static_cast<std::size_t>(r)],
                          recvBlob(peers_[static_cast<std::size_t>(r)].get()));
    }
    for (int r = 1; r < world_size_; ++r) {
      for (const auto& s : all)
        C4_RETURN_IF_ERROR(sendBlob(peers_[static_cast<std::size_t>(r)].get(), s));
    }
  } else {
    C4_RETURN_IF_ERROR(sendBlob(peers_[0].get(), mine));
    for (auto& s : all) {
      C4_ASSIGN_OR_RETURN(s, recvBlob(peers_[0].get()));
    }
  }
  return all;
}

Status Bootstrap::barrier() {
  C4_ASSIGN_OR_RETURN(auto ignored, allgather(""));
  (void)ignored;
  return {};
}

}  // namespace c4::netbench
