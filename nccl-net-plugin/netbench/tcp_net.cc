// The --baseline: the same point-to-point semantics over plain TCP sockets, `streams` sockets per
// peer and direction (the plugin's C4_SUBFLOWS), each message split evenly across them, progressed
// with non-blocking I/O on the calling thread. No plugin, no telemetry, no extra threads. With
// `acked`, a send's share on a socket is done once the peer's TCP has acknowledged its last byte
// (the socket's unacknowledged bytes, SIOCOUTQ, are fewer than those written after it), as an
// RDMA write completes once the remote HCA acknowledged it; later sends are written meanwhile.
// The receiving sockets then get a large buffer, the stand-in for the receive buffers NCCL posts
// before the sender writes (below).
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <memory>
#include <vector>

#include "c4/common/clock.h"
#include "net.h"

namespace c4::netbench {
namespace {

// --baseline-acked: each receiving socket's buffer (the kernel doubles it for its bookkeeping).
constexpr int kAckedReceiveBuffer = 8 << 20;

struct Op {
  bool send = false;
  char* data = nullptr;
  std::size_t size = 0;
  int sockets_left = 0;
  bool done = false;
};

struct Sock {
  UniqueFd fd;
  std::deque<Op*> queue;   // ops this socket still has to move its share of
  std::size_t offset = 0;  // progress within the front op's share
  int index = 0;
  // acked: bytes written to this socket so far, and the sends written but not yet acknowledged,
  // each with the byte count written up to its end.
  std::uint64_t written = 0;
  std::deque<std::pair<Op*, std::uint64_t>> unacked;
};

class TcpNet final : public Net {
 public:
  TcpNet(int rank, int world, int streams, bool spin, bool acked)
      : rank_(rank), world_(world), streams_(streams), spin_(spin), acked_(acked) {}

  std::string describe() const override {
    return "baseline plain TCP (" + std::to_string(streams_) + " sockets per peer and direction" +
           (spin_ ? ", spinning" : "") + (acked_ ? ", sends complete when acknowledged)" : ")");
  }

  Status connectAll(Bootstrap& bs) override {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICHOST | AI_PASSIVE;
    addrinfo* ai = nullptr;
    std::string addr = bs.localAddress().empty() ? "127.0.0.1" : bs.localAddress();
    if (::getaddrinfo(addr.c_str(), "0", &hints, &ai) != 0 || ai == nullptr) {
      return makeError(ErrorCode::kInvalidArgument, "baseline: cannot resolve " + addr);
    }
    std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(ai, &::freeaddrinfo);
    UniqueFd lfd(::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (acked_) {
      // An RDMA write lands in a buffer the receiver posted; TCP's stand-in for that buffer is the
      // receive window. Without room in it a send would wait for the receiving process to read,
      // and its time would be the receiver's, not the wire's. Accepted sockets inherit this.
      int bytes = kAckedReceiveBuffer;
      if (::setsockopt(lfd.get(), SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof(bytes)) != 0) {
        ::setsockopt(lfd.get(), SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));  // capped: rmem_max
      }
    }
    if (::bind(lfd.get(), ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(lfd.get(), 4096) != 0) {
      return std::unexpected(errnoError("baseline listen", errno));
    }
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    ::getsockname(lfd.get(), reinterpret_cast<sockaddr*>(&ss), &len);
    char host[NI_MAXHOST], serv[NI_MAXSERV];
    ::getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof(host), serv, sizeof(serv),
                  NI_NUMERICHOST | NI_NUMERICSERV);
    C4_ASSIGN_OR_RETURN(auto all, bs.allgather(std::string(host) + " " + serv));
    send_.resize(static_cast<std::size_t>(world_));
    recv_.resize(static_cast<std::size_t>(world_));
    for (int p = 0; p < world_; ++p) {
      if (p == rank_) continue;
      const std::string& a = all[static_cast<std::size_t>(p)];
      auto sp = a.find(' ');
      addrinfo* pai = nullptr;
      hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
      if (sp == std::string::npos ||
          ::getaddrinfo(a.substr(0, sp).c_str(), a.substr(sp + 1).c_str(), &hints, &pai) != 0) {
        return makeError(ErrorCode::kInvalidArgument, "baseline: bad peer address " + a);
      }
      std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> pg(pai, &::freeaddrinfo);
      for (int s = 0; s < streams_; ++s) {
        UniqueFd fd(::socket(pai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
        if (::connect(fd.get(), pai->ai_addr, pai->ai_addrlen) != 0) {
          return std::unexpected(errnoError("baseline connect " + a, errno));
        }
        std::int32_t hello[2] = {rank_, s};
        if (::send(fd.get(), hello, sizeof(hello), MSG_NOSIGNAL) != sizeof(hello)) {
          return std::unexpected(errnoError("baseline hello", errno));
        }
        auto sock = std::make_unique<Sock>();
        sock->fd = std::move(fd);
        sock->index = s;
        send_[static_cast<std::size_t>(p)].push_back(std::move(sock));
      }
    }
    for (int i = 0; i < (world_ - 1) * streams_; ++i) {
      UniqueFd fd(::accept4(lfd.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!fd.valid()) return std::unexpected(errnoError("baseline accept", errno));
      std::int32_t hello[2];
      if (::recv(fd.get(), hello, sizeof(hello), MSG_WAITALL) != sizeof(hello) || hello[0] < 0 ||
          hello[0] >= world_) {
        return makeError(ErrorCode::kUnavailable, "baseline: bad hello");
      }
      auto sock = std::make_unique<Sock>();
      sock->fd = std::move(fd);
      sock->index = hello[1];
      recv_[static_cast<std::size_t>(hello[0])].push_back(std::move(sock));
    }
    for (auto* side : {&send_, &recv_}) {
      for (auto& socks : *side) {
        std::sort(socks.begin(), socks.end(), [](auto& x, auto& y) { return x->index < y->index; });
        for (auto& s : socks) {
          int one = 1;
          ::setsockopt(s->fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
          int fl = ::fcntl(s->fd.get(), F_GETFL);
          ::fcntl(s->fd.get(), F_SETFL, fl | O_NONBLOCK);
          all_.push_back(s.get());
        }
      }
    }
    return bs.barrier();
  }

  Result<void*> isend(int peer, void* data, std::size_t size, int /*tag*/) override {
    return post(send_[static_cast<std::size_t>(peer)], true, data, size);
  }
  Result<void*> irecv(int peer, void* data, std::size_t size, int /*tag*/) override {
    return post(recv_[static_cast<std::size_t>(peer)], false, data, size);
  }

  Result<bool> test(void* req) override {
    C4_RETURN_IF_ERROR(progress());
    auto* op = static_cast<Op*>(req);
    if (!op->done) return false;
    delete op;
    return true;
  }

  void idle() override {
    if (spin_) {
      ::sched_yield();
      return;
    }
    std::vector<pollfd> pfds;
    bool awaitingAcks = false;
    for (Sock* s : all_) {
      awaitingAcks = awaitingAcks || !s->unacked.empty();
      if (s->queue.empty()) continue;
      pfds.push_back(
          {s->fd.get(), static_cast<short>(s->queue.front()->send ? POLLOUT : POLLIN), 0});
    }
    // No event tells of an acknowledgement: look again within a millisecond.
    if (!pfds.empty() || awaitingAcks) {
      ::poll(pfds.data(), pfds.size(), awaitingAcks ? 1 : 100);
    }
  }

  std::size_t maxMessageBytes() const override { return std::size_t{1} << 30; }

 private:
  Result<void*> post(std::vector<std::unique_ptr<Sock>>& socks, bool send, void* data,
                     std::size_t size) {
    auto* op = new Op{send, static_cast<char*>(data), size, streams_, false};
    for (auto& s : socks) s->queue.push_back(op);
    return static_cast<void*>(op);
  }

  std::pair<std::size_t, std::size_t> share(const Op& op, int index) const {
    std::size_t n = op.size;
    auto s = static_cast<std::size_t>(streams_);
    auto i = static_cast<std::size_t>(index);
    return {n * i / s, n * (i + 1) / s};
  }

  static void complete(Op* op) {
    if (--op->sockets_left == 0) op->done = true;
  }

  Status progress() {
    for (Sock* s : all_) {
      if (!s->unacked.empty()) {
        int unackedBytes = 0;
        if (::ioctl(s->fd.get(), SIOCOUTQ, &unackedBytes) != 0) {
          return std::unexpected(errnoError("baseline SIOCOUTQ", errno));
        }
        const std::uint64_t acked = s->written - static_cast<std::uint64_t>(unackedBytes);
        while (!s->unacked.empty() && s->unacked.front().second <= acked) {
          complete(s->unacked.front().first);
          s->unacked.pop_front();
        }
      }
      while (!s->queue.empty()) {
        Op* op = s->queue.front();
        auto [b, e] = share(*op, s->index);
        std::size_t left = e - b - s->offset;
        if (left > 0) {
          char* p = op->data + b + s->offset;
          ssize_t n = op->send ? ::send(s->fd.get(), p, left, MSG_NOSIGNAL | MSG_DONTWAIT)
                               : ::recv(s->fd.get(), p, left, MSG_DONTWAIT);
          if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
            return std::unexpected(errnoError("baseline socket", errno));
          }
          if (n == 0 && !op->send)
            return makeError(ErrorCode::kUnavailable, "baseline: peer closed");
          s->offset += static_cast<std::size_t>(n);
          if (op->send) s->written += static_cast<std::uint64_t>(n);
          if (s->offset < e - b) break;
        }
        s->offset = 0;
        s->queue.pop_front();
        if (acked_ && op->send) {
          s->unacked.emplace_back(op, s->written);
        } else {
          complete(op);
        }
      }
    }
    return {};
  }

  int rank_, world_, streams_;
  bool spin_;
  bool acked_;
  std::vector<std::vector<std::unique_ptr<Sock>>> send_, recv_;
  std::vector<Sock*> all_;
};

}  // namespace

std::unique_ptr<Net> makeTcpNet(int rank, int worldSize, int streams, bool spin, bool acked) {
  return std::make_unique<TcpNet>(rank, worldSize, streams < 1 ? 1 : streams, spin, acked);
}

}  // namespace c4::netbench
