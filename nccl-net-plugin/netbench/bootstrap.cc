#include "bootstrap.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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

Result<addrinfo*> resolve(const std::string& host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  std::string service = std::to_string(port);
  int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    return makeError(ErrorCode::kInvalidArgument,
                     "cannot resolve " + host + ": " + ::gai_strerror(rc));
  }
  return res;
}

}  // namespace

Result<Bootstrap> Bootstrap::create(int rank, int worldSize, const std::string& masterAddr,
                                    int masterPort, int timeoutMs) {
  if (worldSize < 1 || rank < 0 || rank >= worldSize) {
    return makeError(ErrorCode::kInvalidArgument, "rank must be in [0, world size)");
  }
  Bootstrap b;
  b.rank_ = rank;
  b.worldSize_ = worldSize;
  Clock& clock = realClock();
  auto deadline = clock.monoNow() + std::chrono::milliseconds(timeoutMs);
  // The master's name may not resolve yet (its pod is starting; a headless Service's record
  // appears with the pod): retry until the deadline, as torchrun's rendezvous does.
  Result<addrinfo*> resolved = resolve(masterAddr, masterPort, rank == 0);
  while (!resolved && clock.monoNow() < deadline) {
    clock.sleepFor(std::chrono::milliseconds(100));
    resolved = resolve(masterAddr, masterPort, rank == 0);
  }
  C4_ASSIGN_OR_RETURN(addrinfo * ai, std::move(resolved));
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(ai, &::freeaddrinfo);
  if (worldSize == 1) return b;
  if (rank == 0) {
    UniqueFd lfd(::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    int one = 1;
    ::setsockopt(lfd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(lfd.get(), ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(lfd.get(), 1024) != 0) {
      return std::unexpected(errnoError(
          "bootstrap listen on " + masterAddr + ":" + std::to_string(masterPort), errno));
    }
    b.peers_.resize(static_cast<std::size_t>(worldSize));
    for (int got = 1; got < worldSize;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock.monoNow());
      if (left.count() <= 0)
        return makeError(ErrorCode::kDeadlineExceeded, "bootstrap: ranks missing");
      pollfd p{lfd.get(), POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
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
    for (;;) {
      UniqueFd fd(::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
      if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) == 0) {
        std::int32_t me = rank;
        C4_RETURN_IF_ERROR(sendAll(fd.get(), &me, sizeof(me)));
        int one = 1;
        ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        b.peers_.push_back(std::move(fd));
        break;
      }
      if (clock.monoNow() > deadline) {
        return std::unexpected(errnoError(
            "bootstrap connect to " + masterAddr + ":" + std::to_string(masterPort), errno));
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
  b.localAddress_ = host;
  return b;
}

Result<std::vector<std::string>> Bootstrap::allgather(const std::string& mine) {
  std::vector<std::string> all(static_cast<std::size_t>(worldSize_));
  all[static_cast<std::size_t>(rank_)] = mine;
  if (worldSize_ == 1) return all;
  if (rank_ == 0) {
    for (int r = 1; r < worldSize_; ++r) {
      C4_ASSIGN_OR_RETURN(all[static_cast<std::size_t>(r)],
                          recvBlob(peers_[static_cast<std::size_t>(r)].get()));
    }
    for (int r = 1; r < worldSize_; ++r) {
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
