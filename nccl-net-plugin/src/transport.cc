#include "c4/plugin/transport.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <deque>
#include <optional>
#include <random>
#include <thread>
#include <type_traits>
#include <unordered_map>

#include "c4/common/hash.h"
#include "c4/common/log.h"
#include "c4/common/unix_socket.h"

namespace c4::plugin {
namespace {

const Logger& log() {
  static const Logger l("nccl-net-c4");
  return l;
}

constexpr std::uint32_t kHandleMagic = 0x48433443u;  // "C4CH"
constexpr std::uint32_t kHelloMagic = 0x4c483443u;   // "C4HL"
constexpr std::uint32_t kAckMagic = 0x4b413443u;     // "C4AK"
constexpr std::uint32_t kFrameMagic = 0x46443443u;   // "C4DF"
constexpr std::uint16_t kWireVersion = 2;  // 2: frames carry (tag, tagSeq) instead of a seq

// The handle NCCL ships from the listener to the connector (fits NCCL_NET_HANDLE_MAXSIZE).
struct WireHandle {
  std::uint32_t magic;
  std::uint16_t version;
  std::uint16_t family;
  std::uint8_t addr[16];
  std::uint16_t port;  // host order
  std::uint16_t reserved0;
  std::uint32_t reserved1;
  std::uint64_t listen_id;
  std::uint64_t node_hash;  // listener's node name (plan lookup before any byte is exchanged)
  std::uint64_t checksum;   // FNV-1a over the bytes above
};
static_assert(sizeof(WireHandle) <= kHandleBytes, "handle must fit NCCL_NET_HANDLE_MAXSIZE");

struct HelloFixed {
  std::uint32_t magic;
  std::uint16_t version;
  std::uint16_t subflow_index;
  std::uint16_t n_subflows;
  std::uint16_t node_len;
  std::uint16_t pod_len;
  std::uint16_t reserved;
  std::uint64_t listen_id;
  std::uint64_t conn_id;
  std::int32_t rank;
  std::uint32_t reserved2;
};
static_assert(sizeof(HelloFixed) == 40);

struct AckFixed {
  std::uint32_t magic;
  std::uint16_t version;
  std::uint16_t node_len;
  std::uint16_t pod_len;
  std::uint16_t reserved;
  std::int32_t rank;
};
static_assert(sizeof(AckFixed) == 16);

// A message is identified by (tag, tagSeq): tagSeq counts the connection's earlier messages with
// the same tag. The receiver gives the k-th message of a tag to the k-th receive buffer posted
// with that tag, whatever the interleaving of tags (NCCL shares a connection among senders that
// progress independently, tag = sender's rank), and never reorders the messages of one tag.
struct FrameHeader {
  std::uint32_t magic;
  std::int32_t tag;
  std::uint64_t tag_seq;
  std::uint64_t total;
  std::uint64_t offset;
  std::uint64_t len;
};
static_assert(sizeof(FrameHeader) == 40);

std::uint64_t randomU64() {
  static std::mutex mu;
  // Seeded from getrandom(2) rather than std::random_device, whose libstdc++ (built on glibc 2.36)
  // calls arc4random: the module would then not load on older C libraries.
  static std::mt19937_64 gen{[] {
    std::uint64_t seed = 0;
    if (::getrandom(&seed, sizeof(seed), 0) != static_cast<ssize_t>(sizeof(seed))) {
      seed = (static_cast<std::uint64_t>(::getpid()) << 32) ^
             static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(&seed));
    }
    return seed;
  }()};
  std::lock_guard lock(mu);
  return gen();
}

std::atomic<std::uint64_t> gNextConnId{1};
std::atomic<std::uint64_t> gNextReportSeq{0};
// Contexts alive in this process (one per communicator from ABI v11), in creation order: the
// one that ends last sends the process's last report (RankReport::last), and at exit() the live
// ones send theirs (Context::endOfProcess). A context leaves the list first thing in its
// destructor, so whoever holds the mutex sees only whole contexts. An intrusive list in static
// storage with no destructor: the library's destructor reads it after the C++ static destructors
// ran (__cxa_finalize precedes the ELF fini functions), and a dlopen/dlclose cycle leaves nothing.
struct LiveContexts {
  std::mutex mu;
  Context* head = nullptr;
  Context* tail = nullptr;
};
constinit LiveContexts gLiveContexts;
static_assert(std::is_trivially_destructible_v<LiveContexts>);
// Connections closed since the last report that still owe it their final counters; beyond this
// many the oldest are reported no more (bounded memory whatever NCCL opens and closes).
constexpr std::size_t kMaxClosedOwed = 4096;

std::int64_t nanos(Clock& c) {
  return c.monoNow().time_since_epoch().count();
}

Status setNonBlocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    return std::unexpected(errnoError("fcntl(O_NONBLOCK)", errno));
  }
  return {};
}

void setDataSocketOptions(int fd, const PluginConfig& cfg) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  int idle = 5, intvl = 1, cnt = 3;  // a silent dead host is noticed after ~8 s
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
  if (cfg.tcp_user_timeout_ms > 0) {
    unsigned int t = cfg.tcp_user_timeout_ms;
    ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &t, sizeof(t));
  }
}

std::uint16_t localPortOf(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return 0;
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return 0;
}

std::string identityBlob(const std::string& node, const std::string& pod) {
  return node + pod;
}

enum ReqState : int { kFree = 0, kClaimed = 1, kPending = 2, kDone = 3, kFailed = 4 };
enum class ReqKind { kSend, kRecv, kFlush };

}  // namespace

HelloDecode decodeHello(std::span<const std::uint8_t> buf, std::uint64_t listen_id) {
  HelloDecode d;
  d.need = sizeof(HelloFixed);
  if (buf.size() < d.need) return d;
  HelloFixed hf{};
  std::memcpy(&hf, buf.data(), sizeof(hf));
  if (hf.magic != kHelloMagic || hf.version != kWireVersion || hf.listen_id != listen_id ||
      hf.n_subflows == 0 || hf.n_subflows > kMaxSubflows || hf.subflow_index >= hf.n_subflows ||
      hf.node_len > 253 || hf.pod_len > 253) {
    d.step = HandshakeStep::kInvalid;
    return d;
  }
  d.need += static_cast<std::size_t>(hf.node_len) + hf.pod_len;
  if (buf.size() < d.need) return d;
  if (buf.size() > d.need) {
    d.step = HandshakeStep::kInvalid;
    return d;
  }
  d.step = HandshakeStep::kComplete;
  d.hello.subflow_index = hf.subflow_index;
  d.hello.n_subflows = hf.n_subflows;
  d.hello.conn_id = hf.conn_id;
  d.hello.peer.rank = hf.rank;
  const char* names = reinterpret_cast<const char*>(buf.data()) + sizeof(hf);
  d.hello.peer.node.assign(names, hf.node_len);
  d.hello.peer.pod.assign(names + hf.node_len, hf.pod_len);
  return d;
}

AckDecode decodeAck(std::span<const std::uint8_t> buf) {
  AckDecode d;
  d.need = sizeof(AckFixed);
  if (buf.size() < d.need) return d;
  AckFixed a{};
  std::memcpy(&a, buf.data(), sizeof(a));
  if (a.magic != kAckMagic || a.version != kWireVersion || a.node_len > 253 || a.pod_len > 253) {
    d.step = HandshakeStep::kInvalid;
    return d;
  }
  d.need += static_cast<std::size_t>(a.node_len) + a.pod_len;
  if (buf.size() < d.need) return d;
  if (buf.size() > d.need) {
    d.step = HandshakeStep::kInvalid;
    return d;
  }
  d.step = HandshakeStep::kComplete;
  d.peer.rank = a.rank;
  const char* names = reinterpret_cast<const char*>(buf.data()) + sizeof(a);
  d.peer.node.assign(names, a.node_len);
  d.peer.pod.assign(names + a.node_len, a.pod_len);
  return d;
}

struct Request {
  std::atomic<int> state{kFree};
  CommBase* comm = nullptr;
  int slot = 0;
  ReqKind kind = ReqKind::kSend;
  int n = 1;
  char* data[kMaxRecvs] = {};
  std::size_t cap[kMaxRecvs] = {};
  int tags[kMaxRecvs] = {};
  std::uint64_t tag_seq = 0;  // send: index of this message among the comm's sends with its tag
  std::int64_t posted_ns = 0;
  // Under the comm's I/O lock.
  std::int64_t first_byte_ns = 0;
  std::size_t frames_left = 0;
  int slots_done = 0;
  // Result, published by state=kDone (release).
  int sizes[kMaxRecvs] = {};
};

// ---------------------------------------------------------------------------------------------
// Comms
// ---------------------------------------------------------------------------------------------

class ListenComm final : public CommBase {
 public:
  ListenComm(Context* c, UniqueFd fd, std::uint64_t id)
      : CommBase(CommKind::kListen, c), fd_(std::move(fd)), listen_id_(id) {}

  struct Incoming {
    UniqueFd fd;
    std::vector<std::uint8_t> buf;
  };
  struct Group {
    Hello first;  // the first subflow's hello: the connection's peer
    std::vector<UniqueFd> fds;
    int have = 0;
  };

  UniqueFd fd_;
  std::uint64_t listen_id_;
  std::vector<Incoming> incoming_;
  std::map<std::uint64_t, Group> groups_;
};

// The clock read at most once per progress pass, and only when something needs the time (never
// with telemetry compiled out).
class LazyNow {
 public:
  explicit LazyNow(Clock& c) : clock_(c) {}
  std::int64_t get() {
    if (ns_ == 0) ns_ = nanos(clock_);
    return ns_;
  }

 private:
  Clock& clock_;
  std::int64_t ns_ = 0;
};

// A send or receive connection. Its sockets are non-blocking and driven by whichever NCCL thread
// calls isend/irecv/test on it, under `io_mu_`: a small message goes out inside isend and is read
// inside test, with no hand-off to another thread and no wake-up. NCCL's proxy thread polls test()
// on every request in flight, which is all the progress a connection needs.
class DataComm : public CommBase {
 public:
  DataComm(CommKind k, Context* c, std::vector<UniqueFd> fds, std::shared_ptr<ConnTelemetry> tel,
           int poolSize)
      : CommBase(k, c),
        fds_(std::move(fds)),
        tel_(std::move(tel)),
        pool_(static_cast<std::size_t>(poolSize)) {
    for (std::size_t i = 0; i < pool_.size(); ++i) {
      pool_[i].comm = this;
      pool_[i].slot = static_cast<int>(i);
    }
  }

  Request* claim() {
    std::size_t n = pool_.size();
    std::size_t start = hint_.load(std::memory_order_relaxed);
    for (std::size_t k = 0; k < n; ++k) {
      Request& r = pool_[(start + k) % n];
      int expected = kFree;
      if (r.state.load(std::memory_order_relaxed) == kFree &&
          r.state.compare_exchange_strong(expected, kClaimed, std::memory_order_acquire)) {
        hint_.store((start + k + 1) % n, std::memory_order_relaxed);
        return &r;
      }
    }
    return nullptr;
  }

  // Hands a claimed request (state kPending) to the connection and makes what progress the sockets
  // allow right away.
  void post(Request* r) {
    std::lock_guard lock(io_mu_);
    LazyNow now(ctx->clock());
    if (failed()) {
      r->state.store(kFailed, std::memory_order_release);
      return;
    }
    if constexpr (kTelemetryEnabled) {
      r->posted_ns = now.get();
      tel_->markPosted(static_cast<std::size_t>(r->slot), r->posted_ns);
      tel_->onPosted();
    }
    if (r->kind == ReqKind::kSend) r->tag_seq = send_seq_[r->tags[0]]++;
    admit(r, now);
    progress(now);
  }

  // Progress on behalf of a test() caller; skipped when another thread is driving this comm.
  void tryProgress() {
    std::unique_lock lock(io_mu_, std::try_to_lock);
    if (!lock.owns_lock() || failed()) return;
    LazyNow now(ctx->clock());
    progress(now);
  }

  [[nodiscard]] bool failed() const { return tel_->failed.load(std::memory_order_acquire); }
  // The error every request of a failed connection reports.
  [[nodiscard]] Error failure() const {
    if (!failed()) return Error(ErrorCode::kInternal, "connection has not failed");
    return Error(tel_->failure_code, tel_->failure);
  }

  std::vector<UniqueFd> fds_;
  std::shared_ptr<ConnTelemetry> tel_;
  std::vector<Request> pool_;
  PeerInfo peer_;
  std::mutex mr_mu_;
  std::vector<std::unique_ptr<MemRegion>> regions_;

 protected:
  virtual void admit(Request* r, LazyNow& now) = 0;
  virtual void progress(LazyNow& now) = 0;

  // Marks the connection failed and fails every op in flight (under io_mu_).
  void fail(std::string why, bool peerClosed = false, ErrorCode code = ErrorCode::kUnavailable) {
    if (!failed()) {
      bool busy = false;
      for (auto& r : pool_) busy = busy || r.state.load(std::memory_order_acquire) == kPending;
      tel_->failure = why;
      tel_->failure_code = code;
      tel_->failed_unix_ns = toUnixNanos(ctx->clock().wallNow());
      tel_->peer_closed.store(peerClosed, std::memory_order_relaxed);
      tel_->failed.store(true, std::memory_order_release);
      // A peer that closes an idle connection is normal teardown; anything else is a fault.
      bool fault = busy || !peerClosed;
      log().log(fault ? LogLevel::kWarn : LogLevel::kInfo,
                fault ? "connection failed" : "peer closed the connection",
                {{"conn", tel_->id},
                 {"direction", report::directionName(tel_->direction)},
                 {"peer_rank", tel_->peer_rank},
                 {"peer_node", tel_->peer_node},
                 {"error", why}});
    }
    for (auto& r : pool_) {
      if (r.state.load(std::memory_order_acquire) == kPending) {
        tel_->inflight[static_cast<std::size_t>(r.slot)].posted_ns.store(0,
                                                                         std::memory_order_relaxed);
        r.state.store(kFailed, std::memory_order_release);
      }
    }
  }

  void complete(Request* r, LazyNow& now) {
    if constexpr (kTelemetryEnabled) {
      std::uint64_t payload = 0;
      for (int i = 0; i < r->n; ++i) payload += static_cast<std::uint64_t>(r->sizes[i]);
      std::int64_t t = now.get();
      tel_->onCompleted(payload, r->posted_ns, r->first_byte_ns == 0 ? t : r->first_byte_ns, t);
      tel_->markDone(static_cast<std::size_t>(r->slot));
    }
    r->state.store(kDone, std::memory_order_release);
  }

  std::mutex io_mu_;  // sockets, queues, matching state

 private:
  std::atomic<std::size_t> hint_{0};
  std::unordered_map<std::int32_t, std::uint64_t> send_seq_;  // next tagSeq per tag
};

class SendComm final : public DataComm {
 public:
  SendComm(Context* c, std::vector<UniqueFd> fds, std::shared_ptr<ConnTelemetry> tel)
      : DataComm(CommKind::kSend, c, std::move(fds), std::move(tel), kMaxSendRequests),
        queues_(fds_.size()),
        owed_(fds_.size(), 0.0),
        share_(fds_.size(), 0) {}

 private:
  struct Frame {
    Request* req;
    FrameHeader hdr;
    const char* data;
    std::size_t done;  // bytes of header+data written
  };
  std::vector<std::deque<Frame>> queues_;
  // Per subflow: the bytes its weight share of every message so far gives it, minus the bytes it
  // was given (deficit round robin in bytes). Carried across messages, so each subflow's
  // cumulative bytes stay within one whole message (or 4 KiB per subflow of split ones) of its
  // weight share: the operator's link monitor reads a lag beyond that as a dead path.
  std::vector<double> owed_;
  std::vector<std::size_t> share_;  // scratch of enqueue(): bytes of this message per subflow

  void admit(Request* r, LazyNow& /*now*/) override {
    r->first_byte_ns = 0;
    r->frames_left = 0;
    r->sizes[0] = static_cast<int>(r->cap[0]);
    enqueue(r);
  }

  void progress(LazyNow& now) override {
    for (std::size_t i = 0; i < queues_.size() && !failed(); ++i) {
      if (!queues_[i].empty()) flush(i, now);
    }
  }

  void enqueue(Request* r) {
    std::size_t nsf = fds_.size();
    std::vector<double> w(nsf);
    double total = 0;
    for (std::size_t i = 0; i < nsf; ++i) {
      w[i] = tel_->subflows[i].weight.load(std::memory_order_relaxed);
      if (!(w[i] > 0)) w[i] = 0;
      total += w[i];
    }
    if (total <= 0) {
      std::fill(w.begin(), w.end(), 1.0);
      total = static_cast<double>(nsf);
    }
    std::size_t size = r->cap[0];
    auto push = [&](std::size_t sf, std::size_t off, std::size_t len) {
      Frame f{};
      f.req = r;
      f.hdr = FrameHeader{kFrameMagic, r->tags[0], r->tag_seq, size, off, len};
      f.data = r->data[0] + off;
      f.done = 0;
      queues_[sf].push_back(f);
      r->frames_left++;
    };
    std::size_t positive = 0;
    for (std::size_t i = 0; i < nsf; ++i) {
      if (w[i] > 0) {
        ++positive;
        owed_[i] += static_cast<double>(size) * (w[i] / total);
      } else {
        owed_[i] = 0;  // planned off its path: owed nothing, now or later
      }
    }
    // The subflow owed the most (ties: the lowest index) among those with weight.
    auto mostOwed = [&](const std::vector<std::size_t>& given) {
      std::size_t best = nsf;
      for (std::size_t i = 0; i < nsf; ++i) {
        if (w[i] <= 0) continue;
        if (best == nsf || owed_[i] - static_cast<double>(given[i]) >
                               owed_[best] - static_cast<double>(given[best])) {
          best = i;
        }
      }
      return best;
    };
    std::vector<std::size_t>& share = share_;
    std::fill(share.begin(), share.end(), 0);
    if (size < 2 * ctx->config().min_chunk_bytes || positive == 1) {
      const std::size_t best = mostOwed(share);  // whole message on one subflow
      owed_[best] -= static_cast<double>(size);
      push(best, 0, size);
      return;
    }
    // Each subflow takes what it is owed, 4 KiB aligned; the sum is then made exact: an excess
    // (owed bytes carried from earlier messages) comes off the largest shares, a remainder goes
    // to the subflow owed the most.
    std::size_t assigned = 0;
    for (std::size_t i = 0; i < nsf; ++i) {
      if (w[i] <= 0 || owed_[i] <= 0) continue;
      share[i] =
          std::min(size, static_cast<std::size_t>(owed_[i])) & ~static_cast<std::size_t>(4095);
      assigned += share[i];
    }
    while (assigned > size) {
      auto largest =
          static_cast<std::size_t>(std::max_element(share.begin(), share.end()) - share.begin());
      std::size_t cut = std::min(share[largest], assigned - size);
      share[largest] -= cut;
      assigned -= cut;
    }
    if (assigned < size) share[mostOwed(share)] += size - assigned;
    std::size_t off = 0;
    for (std::size_t i = 0; i < nsf; ++i) {
      owed_[i] -= static_cast<double>(share[i]);
      if (share[i] == 0) continue;
      push(i, off, share[i]);
      off += share[i];
    }
  }

  // Writes as much of subflow `sf`'s queue as the socket takes, several frames per sendmsg.
  void flush(std::size_t sf, LazyNow& now) {
    constexpr std::size_t H = sizeof(FrameHeader);
    constexpr std::size_t kMaxIov = 64;
    auto& q = queues_[sf];
    int fd = fds_[sf].get();
    while (!q.empty()) {
      iovec iov[kMaxIov];
      std::size_t iovcnt = 0;
      for (std::size_t k = 0; k < q.size() && iovcnt + 2 <= kMaxIov; ++k) {
        Frame& f = q[k];
        if (f.done < H) iov[iovcnt++] = {reinterpret_cast<char*>(&f.hdr) + f.done, H - f.done};
        std::size_t dataDone = f.done > H ? f.done - H : 0;
        if (f.hdr.len > dataDone) {
          iov[iovcnt++] = {const_cast<char*>(f.data) + dataDone, f.hdr.len - dataDone};
        }
      }
      msghdr mh{};
      mh.msg_iov = iov;
      mh.msg_iovlen = iovcnt;
      ssize_t n = ::sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        int err = errno;
        if (err == EAGAIN || err == EWOULDBLOCK) return;
        if (err == EINTR) continue;
        fail(errnoError("send on subflow " + std::to_string(sf), err).toString(),
             err == EPIPE || err == ECONNRESET);
        return;
      }
      auto left = static_cast<std::size_t>(n);
      while (left > 0 || (!q.empty() && q.front().done == H + q.front().hdr.len)) {
        Frame& f = q.front();
        if (kTelemetryEnabled && f.req->first_byte_ns == 0) f.req->first_byte_ns = now.get();
        std::size_t take = std::min(left, H + f.hdr.len - f.done);
        std::size_t hdrPart = f.done < H ? std::min(take, H - f.done) : 0;
        tel_->onSubflowBytes(sf, take - hdrPart);
        f.done += take;
        left -= take;
        if (f.done < H + f.hdr.len) return;  // partial write: the socket buffer is full
        Request* r = f.req;
        q.pop_front();
        if (--r->frames_left == 0) complete(r, now);
      }
    }
  }
};

class RecvComm final : public DataComm {
 public:
  RecvComm(Context* c, std::vector<UniqueFd> fds, std::shared_ptr<ConnTelemetry> tel)
      : DataComm(CommKind::kRecv, c, std::move(fds), std::move(tel), kMaxRequests),
        rx_(fds_.size()) {}

 private:
  using MessageKey = std::pair<std::int32_t, std::uint64_t>;  // (tag, tagSeq)

  // A message whose first frame arrived and whose last has not been delivered yet.
  struct Message {
    std::uint64_t total = 0;
    std::uint64_t got = 0;           // payload bytes received so far
    char* base = nullptr;            // where frames land: the receive buffer or `staged`
    std::unique_ptr<char[]> staged;  // arrived before its receive was posted
    Request* req = nullptr;          // the receive buffer it belongs to (nullptr: not posted yet)
    int buf = -1;
  };
  // Per tag: how many receive buffers were posted with it, and those not yet given a message.
  struct TagQueue {
    std::uint64_t posted = 0;
    std::map<std::uint64_t, std::pair<Request*, int>> open;  // tagSeq -> (request, buffer)
  };
  // Bytes read ahead of the current frame: a small message (header and payload) takes one recv.
  // Small, because a process may hold thousands of receive comms (x subflows).
  static constexpr std::size_t kAheadBytes = 8 * 1024;
  // Payloads at least this large are read straight into the receive buffer (no copy).
  static constexpr std::size_t kDirectReadBytes = 4 * 1024;
  struct Rx {
    std::unique_ptr<char[]> ahead = std::make_unique_for_overwrite<char[]>(kAheadBytes);
    std::size_t ahead_beg = 0, ahead_end = 0;
    FrameHeader hdr{};
    bool have_hdr = false;  // hdr read; the frame's payload is next
    bool in_data = false;   // hdr bound to a message: payload goes to dst
    Message* msg = nullptr;
    MessageKey key{};
    std::size_t left = 0;
    char* dst = nullptr;
    bool parked = false;  // hdr read; its message can be neither delivered nor staged yet
    bool eof = false;
    [[nodiscard]] std::size_t buffered() const { return ahead_end - ahead_beg; }
  };
  std::vector<Rx> rx_;
  std::map<MessageKey, Message> messages_;
  std::unordered_map<std::int32_t, TagQueue> tags_;
  std::uint64_t staged_ = 0;  // bytes held in Message::staged
  bool unparked_ = false;     // a posted receive or freed staging may let a parked subflow on

  void admit(Request* r, LazyNow& now) override {
    r->first_byte_ns = 0;
    r->slots_done = 0;
    for (int i = 0; i < kMaxRecvs; ++i) r->sizes[i] = 0;
    postReceive(r, now);
  }

  void progress(LazyNow& now) override {
    for (bool again = true; again && !failed();) {
      bool retryParked = unparked_;
      unparked_ = false;
      for (std::size_t i = 0; i < rx_.size() && !failed(); ++i) {
        if (rx_[i].eof || (rx_[i].parked && !retryParked)) continue;
        readSubflow(i, now);
      }
      // A receive completed in this pass may have freed staging a parked subflow waits for.
      again =
          unparked_ && std::any_of(rx_.begin(), rx_.end(), [](const Rx& x) { return x.parked; });
    }
  }

  void bufferDone(Request* r, int b, std::uint64_t size, LazyNow& now) {
    r->sizes[b] = static_cast<int>(size);
    if (++r->slots_done == r->n) complete(r, now);
  }

  // The k-th buffer posted with tag t is the destination of the k-th message sent with tag t.
  // A message larger than its buffer is the caller's error (ncclInvalidUsage, as in NCCL's
  // socket transport); the connection is torn down because its byte stream is no longer usable.
  bool checkFits(const Message& m, const Request* r, int b) {
    if (m.total <= r->cap[b]) return true;
    fail("message of " + std::to_string(m.total) + " bytes with tag " + std::to_string(r->tags[b]) +
             " is larger than the receive buffer (" + std::to_string(r->cap[b]) + " bytes)",
         false, ErrorCode::kFailedPrecondition);
    return false;
  }

  // A new receive: each buffer takes the next index of its tag; a message that already arrived
  // (staged) for that index is delivered now.
  void postReceive(Request* r, LazyNow& now) {
    for (int i = 0; i < r->n && !failed(); ++i) {
      TagQueue& q = tags_[r->tags[i]];
      std::uint64_t k = q.posted++;
      auto it = messages_.find({r->tags[i], k});
      if (it == messages_.end()) {
        q.open.emplace(k, std::make_pair(r, i));
        continue;
      }
      Message& m = it->second;
      if (!checkFits(m, r, i)) return;
      m.req = r;
      m.buf = i;
      if (kTelemetryEnabled && r->first_byte_ns == 0) r->first_byte_ns = now.get();
      if (m.got == m.total) deliverStaged(it, now);
    }
    unparked_ = true;
  }

  void deliverStaged(std::map<MessageKey, Message>::iterator it, LazyNow& now) {
    Message& m = it->second;
    if (m.total > 0) std::memcpy(m.req->data[m.buf], m.staged.get(), m.total);
    staged_ -= m.total;
    unparked_ = true;
    Request* r = m.req;
    int b = m.buf;
    std::uint64_t total = m.total;
    messages_.erase(it);
    bufferDone(r, b, total, now);
  }

  // More than one tag on this connection: a message that arrives before its receive may block
  // messages of other tags behind it on the same subflow, which NCCL may need before it posts that
  // receive. Such messages are staged in memory (up to C4_MAX_STAGED_BYTES). With a single tag the
  // receives come in message order, so waiting (not reading the subflow) is safe and saves a copy.
  [[nodiscard]] bool sharedByTags(std::int32_t tag) const {
    return tags_.size() > 1 || (tags_.size() == 1 && !tags_.contains(tag));
  }

  // x.hdr is complete: finds or creates its message. false: parked or failed.
  bool bindHeader(std::size_t sf, Rx& x, LazyNow& now) {
    const FrameHeader& h = x.hdr;
    if (h.magic != kFrameMagic) {
      fail("protocol error: bad frame magic on subflow " + std::to_string(sf));
      return false;
    }
    if (h.offset > h.total || h.len > h.total - h.offset || h.total > kMaxMessageBytes) {
      fail("protocol error: inconsistent frame on subflow " + std::to_string(sf));
      return false;
    }
    MessageKey key{h.tag, h.tag_seq};
    auto it = messages_.find(key);
    if (it == messages_.end()) {
      bool shared = sharedByTags(h.tag);  // before this tag is recorded
      TagQueue& q = tags_[h.tag];
      auto open = q.open.find(h.tag_seq);
      Message m;
      m.total = h.total;
      if (open != q.open.end()) {
        auto [r, b] = open->second;
        if (!checkFits(m, r, b)) return false;
        q.open.erase(open);
        m.req = r;
        m.buf = b;
        m.base = r->data[b];
      } else if (h.tag_seq < q.posted) {
        fail("protocol error: message " + std::to_string(h.tag_seq) + " of tag " +
             std::to_string(h.tag) + " arrived twice");
        return false;
      } else if (!shared || staged_ + h.total > ctx->config().max_staged_bytes) {
        x.parked = true;
        return false;
      } else {
        m.staged = std::make_unique_for_overwrite<char[]>(std::max<std::uint64_t>(h.total, 1));
        m.base = m.staged.get();
        staged_ += h.total;
      }
      it = messages_.emplace(key, std::move(m)).first;
    }
    Message& m = it->second;
    if (m.total != h.total) {
      fail("protocol error: frames of one message disagree on its size (subflow " +
           std::to_string(sf) + ")");
      return false;
    }
    if (kTelemetryEnabled && m.req != nullptr && m.req->first_byte_ns == 0) {
      m.req->first_byte_ns = now.get();
    }
    x.msg = &m;
    x.key = key;
    x.dst = m.base + h.offset;
    x.left = h.len;
    x.in_data = true;
    x.parked = false;
    return true;
  }

  void frameDone(Rx& x, LazyNow& now) {
    Message& m = *x.msg;
    m.got += x.hdr.len;
    MessageKey key = x.key;
    x.have_hdr = x.in_data = false;
    x.msg = nullptr;
    if (m.got != m.total || m.req == nullptr) return;  // more frames, or staged until posted
    auto it = messages_.find(key);
    if (m.staged) {
      deliverStaged(it, now);
      return;
    }
    Request* r = m.req;
    int b = m.buf;
    std::uint64_t total = m.total;
    messages_.erase(it);
    bufferDone(r, b, total, now);
  }

  // Payload bytes arrived for the current frame.
  void gotPayload(std::size_t sf, Rx& x, std::size_t n, LazyNow& now) {
    tel_->onSubflowBytes(sf, n);
    x.dst += n;
    x.left -= n;
    if (x.left == 0) frameDone(x, now);
  }

  // Reads what subflow `sf` has until the socket is empty, the subflow parks, or an error.
  void readSubflow(std::size_t sf, LazyNow& now) {
    Rx& x = rx_[sf];
    int fd = fds_[sf].get();
    for (;;) {
      if (x.in_data) {
        if (x.left == 0) {  // a zero-length frame
          frameDone(x, now);
          continue;
        }
        if (x.buffered() > 0) {
          std::size_t take = std::min(x.buffered(), x.left);
          std::memcpy(x.dst, x.ahead.get() + x.ahead_beg, take);
          x.ahead_beg += take;
          gotPayload(sf, x, take, now);
          continue;
        }
        if (x.left >= kDirectReadBytes) {
          ssize_t n = ::recv(fd, x.dst, x.left, MSG_DONTWAIT);
          if (!received(sf, x, n)) return;
          gotPayload(sf, x, static_cast<std::size_t>(n), now);
          continue;
        }
      } else if (x.have_hdr) {  // parked: try again
        if (!bindHeader(sf, x, now)) return;
        continue;
      } else if (x.buffered() >= sizeof(FrameHeader)) {
        std::memcpy(&x.hdr, x.ahead.get() + x.ahead_beg, sizeof(FrameHeader));
        x.ahead_beg += sizeof(FrameHeader);
        x.have_hdr = true;
        if (!bindHeader(sf, x, now)) return;
        continue;
      }
      // Read ahead: the next header, and the payload when it is small.
      if (x.ahead_beg == x.ahead_end) {
        x.ahead_beg = x.ahead_end = 0;
      } else if (x.ahead_beg > 0) {
        std::memmove(x.ahead.get(), x.ahead.get() + x.ahead_beg, x.buffered());
        x.ahead_end -= x.ahead_beg;
        x.ahead_beg = 0;
      }
      ssize_t n = ::recv(fd, x.ahead.get() + x.ahead_end, kAheadBytes - x.ahead_end, MSG_DONTWAIT);
      if (!received(sf, x, n)) return;
      x.ahead_end += static_cast<std::size_t>(n);
    }
  }

  // Classifies a recv result: true when n > 0 bytes arrived. Fails the connection on errors and
  // on a close in the middle of a frame.
  bool received(std::size_t sf, Rx& x, ssize_t n) {
    if (n > 0) return true;
    if (n < 0) {
      int err = errno;
      if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR) return false;
      fail(errnoError("recv on subflow " + std::to_string(sf), err).toString(), err == ECONNRESET);
      return false;
    }
    if (x.in_data || x.have_hdr || x.buffered() > 0) {
      fail("peer closed subflow " + std::to_string(sf) + " in the middle of a frame", true);
      return false;
    }
    x.eof = true;
    if (std::all_of(rx_.begin(), rx_.end(), [](const Rx& y) { return y.eof; })) {
      fail("peer closed the connection", true);
    }
    return false;
  }
};

// ---------------------------------------------------------------------------------------------
// Context
// ---------------------------------------------------------------------------------------------

struct Context::PendingConnect {
  WireHandle handle{};
  std::vector<UniqueFd> fds;
  std::vector<bool> connected;
  std::vector<std::string> hello;
  std::vector<std::size_t> hello_sent;
  std::vector<std::uint8_t> ack;
  std::uint64_t conn_id = 0;
  std::vector<PlannedSubflow> planned;
};

struct Context::Reporter {
  std::optional<UnixDatagramSender> sender;
  std::int64_t last_report_ns = 0;
  std::int64_t last_plan_ns = 0;
  struct Prev {
    LatencyHistogram::Snapshot wait, transfer;
  };
  std::map<std::uint64_t, Prev> prev;
};

Result<std::vector<NetInterface>> processDevices(const PluginConfig& config) {
  static std::mutex mu;
  static std::optional<std::vector<NetInterface>> devices;
  std::lock_guard lock(mu);
  if (!devices) {
    C4_ASSIGN_OR_RETURN(auto found, discoverInterfaces(config.socket_ifname));
    devices = std::move(found);
  }
  return *devices;
}

Context::Context(ContextOptions o)
    : config_(std::move(o.config)),
      clock_(o.clock != nullptr ? o.clock : &realClock()),
      last_words_linger_(o.last_words_linger),
      devices_(std::move(o.devices)),
      plan_(config_.plan_file),
      reporter_(std::make_unique<Reporter>()) {
  std::lock_guard lock(gLiveContexts.mu);
  live_prev_ = gLiveContexts.tail;
  (live_prev_ != nullptr ? live_prev_->live_next_ : gLiveContexts.head) = this;
  gLiveContexts.tail = this;
}

Result<std::unique_ptr<Context>> Context::create(ContextOptions options) {
  if (options.devices.empty()) {
    C4_ASSIGN_OR_RETURN(options.devices, processDevices(options.config));
  }
  std::unique_ptr<Context> ctx(new Context(std::move(options)));
  if (!ctx->config_.agent_socket.empty()) {
    auto sender = UnixDatagramSender::create(ctx->config_.agent_socket);
    if (!sender) {
      log().warn("C4_AGENT_SOCKET unusable; telemetry is not sent",
                 {{"path", ctx->config_.agent_socket}, {"error", sender.error()}});
    } else {
      ctx->reporter_->sender.emplace(std::move(*sender));
    }
  }
  if (!ctx->config_.plan_file.empty()) ctx->plan_.poll();
  ctx->reporter_->last_report_ns = nanos(*ctx->clock_);
  ctx->reporter_->last_plan_ns = ctx->reporter_->last_report_ns;
  Context* raw = ctx.get();
  ctx->thread_ = std::thread([raw] { raw->reporterLoop(); });
  return ctx;
}

Context::~Context() {
  bool last_of_process = false;
  bool reported_at_exit = false;
  {
    std::lock_guard lock(gLiveContexts.mu);
    (live_prev_ != nullptr ? live_prev_->live_next_ : gLiveContexts.head) = live_next_;
    (live_next_ != nullptr ? live_next_->live_prev_ : gLiveContexts.tail) = live_prev_;
    last_of_process = gLiveContexts.head == nullptr;
    reported_at_exit = reported_at_exit_;
  }
  {
    std::lock_guard lock(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Last words: the failures of connections still open not reported yet (a rank usually exits
  // right after a connection error, often before the reporter's next tick; the notice is what
  // lets C4D tell the rank that died first from the peers that failed because of it).
  {
    std::lock_guard tickLock(report_mu_);
    tick(false, false);
  }
  std::vector<CommBase*> left;
  {
    std::lock_guard lock(mu_);
    for (auto& [c, t] : comms_) left.push_back(c);
    pending_.clear();
  }
  for (CommBase* c : left) (void)closeComm(c, c->kind);
  // The last report: what every connection moved since the last tick, those NCCL closed before
  // this finalize included; from the process's last context, the word that its telemetry ended
  // in order (a killed or crashed process sends none: C4D tells the rank that died from the
  // peers that exited after it by that).
  // (Once endOfProcess sent this context's last report, it is not sent twice.)
  if (!reported_at_exit) {
    std::lock_guard tickLock(report_mu_);
    try {
      tick(true, false, last_of_process);
    } catch (...) {  // nothing leaves a destructor (bad_alloc while building the report)
    }
  }
  // The process usually exits next: give the node plugin a moment to read the last words while
  // this pid still names the process (it attributes by the pid's cgroup).
  if (reporter_->sender) (void)reporter_->sender->awaitRead(last_words_linger_);
}

void Context::endOfProcess() noexcept {
  // Held throughout: a context being destroyed meanwhile waits at its first line, and none is
  // freed while its report is built.
  std::lock_guard lock(gLiveContexts.mu);
  for (Context* c = gLiveContexts.head; c != nullptr; c = c->live_next_) {
    std::lock_guard tickLock(c->report_mu_);
    c->reported_at_exit_ = true;
    try {
      c->tick(true, false, c->live_next_ == nullptr);
    } catch (...) {  // nothing leaves (bad_alloc while building the report)
    }
  }
  for (Context* c = gLiveContexts.head; c != nullptr; c = c->live_next_) {
    if (c->reporter_->sender) (void)c->reporter_->sender->awaitRead(c->last_words_linger_);
  }
}

void Context::registerComm(CommBase* comm, std::shared_ptr<ConnTelemetry> tel) {
  std::lock_guard lock(mu_);
  comms_[comm] = std::move(tel);
}

void Context::unregisterComm(CommBase* comm) {
  std::shared_ptr<ConnTelemetry> tel;
  {
    std::lock_guard lock(mu_);
    auto it = comms_.find(comm);
    if (it == comms_.end()) return;
    tel = std::move(it->second);
    comms_.erase(it);
    // Its counters since the last report go into the next one (the bytes of its last
    // operations would be lost otherwise: NCCL closes its connections right before it ends).
    if (tel) {
      if (closed_.size() >= kMaxClosedOwed) closed_.erase(closed_.begin());
      closed_.push_back(tel);
    }
  }
  // A failed connection closed before the reporter's next tick (a rank closes its comms and
  // exits right after an error): its notice goes now or never.
  if (tel) {
    std::lock_guard tickLock(report_mu_);
    reportFailureOnce(*tel, toUnixNanos(clock_->wallNow()));
  }
}

std::vector<std::shared_ptr<ConnTelemetry>> Context::connections() const {
  std::lock_guard lock(mu_);
  std::vector<std::shared_ptr<ConnTelemetry>> out;
  for (auto& [c, t] : comms_) {
    if (t) out.push_back(t);
  }
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a->id < b->id; });
  return out;
}

std::int64_t Context::planVersion() const {
  auto p = plan_.current();
  return p ? p->version : -1;
}

std::uint64_t Context::droppedMessages() const {
  std::uint64_t d = encode_failures_.load();
  if (reporter_->sender) d += reporter_->sender->dropped();
  return d;
}

std::uint64_t Context::sentMessages() const {
  return reporter_->sender ? reporter_->sender->sent() : 0;
}

report::RankIdentity Context::identity() const {
  report::RankIdentity id;
  id.ns = config_.ns;
  id.job = config_.job;
  id.pod = config_.pod;
  id.node = config_.node;
  id.rank = config_.rank;
  id.world_size = config_.world_size;
  id.restart_attempt = config_.restart_attempt;
  id.pid = static_cast<std::uint32_t>(::getpid());
  return id;
}

Result<CommBase*> Context::listen(int dev, void* handle) {
  if (handle == nullptr) return makeError(ErrorCode::kInvalidArgument, "listen: null handle");
  if (dev < 0 || dev >= deviceCount()) {
    return makeError(ErrorCode::kInvalidArgument, "listen: no device " + std::to_string(dev));
  }
  const NetInterface& nic = devices_[static_cast<std::size_t>(dev)];
  UniqueFd fd(::socket(nic.addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return std::unexpected(errnoError("listen: socket", errno));
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&nic.addr), nic.addr_len) != 0) {
    return std::unexpected(errnoError("listen: bind " + formatAddress(nic.addr), errno));
  }
  if (::listen(fd.get(), 16384) != 0) return std::unexpected(errnoError("listen", errno));
  C4_RETURN_IF_ERROR(setNonBlocking(fd.get()));
  WireHandle h{};
  h.magic = kHandleMagic;
  h.version = kWireVersion;
  h.family = nic.addr.ss_family;
  if (nic.addr.ss_family == AF_INET) {
    std::memcpy(h.addr, &reinterpret_cast<const sockaddr_in*>(&nic.addr)->sin_addr, 4);
  } else {
    std::memcpy(h.addr, &reinterpret_cast<const sockaddr_in6*>(&nic.addr)->sin6_addr, 16);
  }
  h.port = localPortOf(fd.get());
  h.listen_id = randomU64();
  h.node_hash = nodeHash(config_.node);
  h.checksum = fnv1a64(&h, offsetof(WireHandle, checksum));
  std::memset(handle, 0, kHandleBytes);
  std::memcpy(handle, &h, sizeof(h));
  auto* lc = new ListenComm(this, std::move(fd), h.listen_id);
  registerComm(lc, nullptr);
  return static_cast<CommBase*>(lc);
}

std::vector<double> Context::plannedWeights(const ConnTelemetry& tel) const {
  std::vector<double> w(tel.subflows.size(), 1.0);
  auto plan = plan_.current();
  if (!plan) return w;
  const PlanPair* pair = plan->find(config_.node, tel.peer_node_hash);
  if (pair == nullptr) return w;
  for (std::size_t i = 0; i < w.size() && i < pair->subflows.size(); ++i) {
    w[i] = pair->subflows[i].weight;
  }
  return w;
}

Result<CommBase*> Context::connect(int dev, void* handle) {
  if (handle == nullptr) return makeError(ErrorCode::kInvalidArgument, "connect: null handle");
  if (dev < 0 || dev >= deviceCount()) {
    return makeError(ErrorCode::kInvalidArgument, "connect: no device " + std::to_string(dev));
  }
  PendingConnect* pc = nullptr;
  {
    std::lock_guard lock(mu_);
    auto it = pending_.find(handle);
    if (it != pending_.end()) pc = it->second.get();
  }
  auto abandon = [&](Error e) -> Result<CommBase*> {
    std::lock_guard lock(mu_);
    pending_.erase(handle);
    return std::unexpected(std::move(e));
  };
  if (pc == nullptr) {
    // First call for this handle: validate it and start the subflow connects.
    WireHandle h{};
    std::memcpy(&h, handle, sizeof(h));
    if (h.magic != kHandleMagic || h.version != kWireVersion ||
        h.checksum != fnv1a64(&h, offsetof(WireHandle, checksum)) ||
        (h.family != AF_INET && h.family != AF_INET6) || h.port == 0) {
      return makeError(ErrorCode::kInvalidArgument,
                       "connect: the handle is not a valid C4 handle (bad magic, version or "
                       "checksum)");
    }
    // An Enforce job's pod may start before the operator has planned its placement: a
    // connection to another node waits (up to C4_PLAN_WAIT_MS) for a plan that includes this
    // node, since its source ports are chosen now and stay for the connection's life. A pair
    // that plan leaves out (a flow the planner does not plan) connects unplanned at once, and
    // so does every pair while the plan file exists but cannot be read (garbage is not a plan
    // still to come: waiting would only cost the job; the watcher has said so).
    if (config_.plan_wait_ms > 0 && !config_.plan_file.empty() &&
        h.node_hash != nodeHash(config_.node)) {
      auto current = plan_.current();
      const bool covered = (current && (current->find(config_.node, h.node_hash) != nullptr ||
                                        current->mentions(config_.node))) ||
                           (!current && !plan_.unusable().empty());
      const std::int64_t now = nanos(*clock_);
      std::lock_guard lock(mu_);
      if (!covered) {
        auto since = plan_wait_since_.try_emplace(handle, now).first->second;
        if (now - since < static_cast<std::int64_t>(config_.plan_wait_ms) * 1'000'000) {
          return nullptr;  // not yet: NCCL calls again
        }
        log().warn("no plan for this node within C4_PLAN_WAIT_MS; connecting unplanned",
                   {{"plan_file", config_.plan_file},
                    {"plan_version", current ? current->version : -1},
                    {"wait_ms", config_.plan_wait_ms}});
      }
      plan_wait_since_.erase(handle);
    }
    auto owned = std::make_unique<PendingConnect>();
    pc = owned.get();
    pc->handle = h;
    pc->conn_id = randomU64();
    auto plan = plan_.current();
    const PlanPair* pair = plan ? plan->find(config_.node, h.node_hash) : nullptr;
    int nsf = config_.subflows;
    if (pair != nullptr) {
      nsf = static_cast<int>(pair->subflows.size());
      pc->planned = pair->subflows;
    } else if (plan && plan->default_subflows > 0) {
      nsf = plan->default_subflows;
    }
    pc->planned.resize(static_cast<std::size_t>(nsf));
    sockaddr_storage peer{};
    socklen_t peerLen = 0;
    if (h.family == AF_INET) {
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(h.port);
      std::memcpy(&a.sin_addr, h.addr, 4);
      std::memcpy(&peer, &a, sizeof(a));
      peerLen = sizeof(a);
    } else {
      sockaddr_in6 a{};
      a.sin6_family = AF_INET6;
      a.sin6_port = htons(h.port);
      std::memcpy(&a.sin6_addr, h.addr, 16);
      std::memcpy(&peer, &a, sizeof(a));
      peerLen = sizeof(a);
    }
    const NetInterface& nic = devices_[static_cast<std::size_t>(dev)];
    for (int i = 0; i < nsf; ++i) {
      UniqueFd fd(::socket(h.family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
      if (!fd.valid()) return std::unexpected(errnoError("connect: socket", errno));
      setDataSocketOptions(fd.get(), config_);
      std::uint16_t port = pc->planned[static_cast<std::size_t>(i)].local_port;
      if (port != 0 && nic.addr.ss_family == h.family) {
        int one = 1;
        ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        sockaddr_storage local = nic.addr;
        if (h.family == AF_INET) {
          reinterpret_cast<sockaddr_in*>(&local)->sin_port = htons(port);
        } else {
          reinterpret_cast<sockaddr_in6*>(&local)->sin6_port = htons(port);
        }
        if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&local), nic.addr_len) != 0) {
          log().warn("cannot bind the planned source port; using an ephemeral port",
                     {{"port", static_cast<int>(port)},
                      {"subflow", i},
                      {"error", errnoError("bind", errno)}});
        }
      }
      if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&peer), peerLen) != 0 &&
          errno != EINPROGRESS) {
        return std::unexpected(errnoError("connect to " + formatAddress(peer), errno));
      }
      HelloFixed hf{};
      hf.magic = kHelloMagic;
      hf.version = kWireVersion;
      hf.subflow_index = static_cast<std::uint16_t>(i);
      hf.n_subflows = static_cast<std::uint16_t>(nsf);
      hf.node_len = static_cast<std::uint16_t>(config_.node.size());
      hf.pod_len = static_cast<std::uint16_t>(config_.pod.size());
      hf.listen_id = h.listen_id;
      hf.conn_id = pc->conn_id;
      hf.rank = config_.rank;
      std::string msg(reinterpret_cast<const char*>(&hf), sizeof(hf));
      msg += identityBlob(config_.node, config_.pod);
      pc->hello.push_back(std::move(msg));
      pc->hello_sent.push_back(0);
      pc->connected.push_back(false);
      pc->fds.push_back(std::move(fd));
    }
    std::lock_guard lock(mu_);
    pending_[handle] = std::move(owned);
  }

  // Advance: finish TCP connects, send hellos, read the ack.
  bool allSent = true;
  for (std::size_t i = 0; i < pc->fds.size(); ++i) {
    int fd = pc->fds[i].get();
    if (!pc->connected[i]) {
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, 0) <= 0) {
        allSent = false;
        continue;
      }
      int err = 0;
      socklen_t len = sizeof(err);
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) return abandon(errnoError("connect subflow " + std::to_string(i), err));
      pc->connected[i] = true;
    }
    while (pc->hello_sent[i] < pc->hello[i].size()) {
      ssize_t n = ::send(fd, pc->hello[i].data() + pc->hello_sent[i],
                         pc->hello[i].size() - pc->hello_sent[i], MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
        return abandon(errnoError("connect: hello on subflow " + std::to_string(i), errno));
      }
      pc->hello_sent[i] += static_cast<std::size_t>(n);
    }
    if (pc->hello_sent[i] < pc->hello[i].size()) allSent = false;
  }
  if (!allSent) return nullptr;
  // Ack on subflow 0.
  PeerInfo peer;
  for (;;) {
    AckDecode d = decodeAck(pc->ack);
    if (d.step == HandshakeStep::kInvalid) {
      return abandon(Error(ErrorCode::kUnavailable, "connect: peer sent an invalid ack"));
    }
    if (d.step == HandshakeStep::kComplete) {
      peer = std::move(d.peer);
      break;
    }
    std::uint8_t buf[600];
    ssize_t n = ::recv(pc->fds[0].get(), buf, d.need - pc->ack.size(), MSG_DONTWAIT);
    if (n == 0) return abandon(Error(ErrorCode::kUnavailable, "connect: peer closed before ack"));
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return nullptr;
      return abandon(errnoError("connect: reading ack", errno));
    }
    pc->ack.insert(pc->ack.end(), buf, buf + n);
  }
  auto nsf = static_cast<int>(pc->fds.size());
  auto tel = std::make_shared<ConnTelemetry>(gNextConnId.fetch_add(1), report::Direction::kSend,
                                             nsf, kMaxSendRequests);
  tel->peer_rank = peer.rank;
  tel->peer_node = sanitizeName(peer.node);
  tel->peer_pod = sanitizeName(peer.pod);
  tel->peer_node_hash = pc->handle.node_hash;
  for (int i = 0; i < nsf; ++i) {
    auto& s = tel->subflows[static_cast<std::size_t>(i)];
    s.local_port = localPortOf(pc->fds[static_cast<std::size_t>(i)].get());
    const PlannedSubflow& planned = pc->planned[static_cast<std::size_t>(i)];
    // A planned port that could not be bound (taken): the ECMP hash of the ephemeral port picks
    // the path, not the plan. Reported without a path, so nobody judges the planned one by it.
    s.path_id =
        planned.local_port == 0 || planned.local_port == s.local_port ? planned.path_id : -1;
    s.weight.store(pc->planned[static_cast<std::size_t>(i)].weight);
  }
  auto* sc = new SendComm(this, std::move(pc->fds), tel);
  sc->peer_ = peer;
  {
    std::lock_guard lock(mu_);
    pending_.erase(handle);
    comms_[sc] = tel;
  }
  CommBase* out = sc;
  log().info(
      "connected",
      {{"conn", tel->id}, {"peer_rank", peer.rank}, {"peer_node", peer.node}, {"subflows", nsf}});
  return out;
}

// ---------------------------------------------------------------------------------------------
// Reporter
// ---------------------------------------------------------------------------------------------

void Context::reporterLoop() {
  std::int64_t stallCheckNs =
      std::max<std::int64_t>(1'000'000, std::min<std::int64_t>(config_.stall_ms, 250) * 250'000);
  std::unique_lock lock(stop_mu_);
  while (!stop_) {
    std::int64_t now = nanos(*clock_);
    std::int64_t nextReport = reporter_->last_report_ns +
                              static_cast<std::int64_t>(config_.report_interval_ms) * 1'000'000;
    std::int64_t nextPlan =
        reporter_->last_plan_ns + static_cast<std::int64_t>(config_.plan_poll_ms) * 1'000'000;
    std::int64_t wake = std::min({nextReport, nextPlan, now + stallCheckNs});
    if (clock_->waitUntil(lock, stop_cv_, MonoTime{std::chrono::nanoseconds{wake}},
                          [this] { return stop_; })) {
      break;
    }
    lock.unlock();
    now = nanos(*clock_);
    {
      std::lock_guard tickLock(report_mu_);
      bool planDue = now >= nextPlan;
      if (planDue) reporter_->last_plan_ns = now;
      bool reportDue = now >= nextReport;
      if (reportDue) reporter_->last_report_ns = now;
      tick(reportDue, planDue);
    }
    lock.lock();
  }
}

void Context::tickNow(bool forceReport) {
  std::lock_guard tickLock(report_mu_);
  tick(forceReport, true);
}

void Context::reportFailureOnce(ConnTelemetry& t, std::int64_t wallNs) {
  if (!t.failed.load(std::memory_order_acquire) ||
      t.failure_reported.exchange(true, std::memory_order_relaxed)) {
    return;
  }
  report::AnomalyNotice n;
  n.id = identity();
  // The failure's own time, not the tick's: C4D orders a crash cascade by it (a rank that failed
  // before anyone saw it fail is a victim of the peer it names).
  n.time_unix_ns = t.failed_unix_ns != 0 ? t.failed_unix_ns : wallNs;
  n.kind = t.peer_closed.load() ? report::AnomalyKind::kPeerClosed
                                : report::AnomalyKind::kConnectionError;
  n.connection_id = t.id;
  n.direction = t.direction;
  n.peer_rank = t.peer_rank;
  n.peer_node = t.peer_node;
  n.detail = t.failure.substr(0, report::kMaxTextBytes);
  sendMessage(n);
}

void Context::sendMessage(const report::Message& m) {
  if (!reporter_->sender) return;
  auto bytes = report::encodeCbor(m);
  if (!bytes) {
    encode_failures_.fetch_add(1);
    log().warn("telemetry message not encodable", {{"error", bytes.error()}});
    return;
  }
  reporter_->sender->send(*bytes);
}

void Context::applyPlanToLiveConnections() {
  for (auto& t : connections()) {
    if (t->direction != report::Direction::kSend) continue;
    auto w = plannedWeights(*t);
    for (std::size_t i = 0; i < t->subflows.size(); ++i) {
      t->subflows[i].weight.store(w[i], std::memory_order_relaxed);
    }
  }
}

void Context::tick(bool forceReport, bool planDue, bool last) {
  if (planDue && !config_.plan_file.empty() && plan_.poll()) applyPlanToLiveConnections();
  std::int64_t now = nanos(*clock_);
  std::int64_t wallNs = toUnixNanos(clock_->wallNow());
  auto conns = connections();
  // Stalls and failures: immediate notices.
  for (auto& t : conns) {
    for (auto& slot : t->inflight) {
      std::int64_t posted = slot.posted_ns.load(std::memory_order_relaxed);
      if (posted == 0) continue;
      std::int64_t age = now - posted;
      if (age > static_cast<std::int64_t>(config_.stall_ms) * 1'000'000 &&
          !slot.stall_reported.exchange(true, std::memory_order_relaxed)) {
        report::AnomalyNotice n;
        n.id = identity();
        n.time_unix_ns = wallNs;
        n.kind = report::AnomalyKind::kStall;
        n.connection_id = t->id;
        n.direction = t->direction;
        n.peer_rank = t->peer_rank;
        n.peer_node = t->peer_node;
        n.age_us = static_cast<std::uint64_t>(age / 1000);
        n.detail =
            "operation in flight longer than C4_STALL_MS=" + std::to_string(config_.stall_ms);
        log().warn("operation stalled", {{"conn", t->id},
                                         {"peer_rank", t->peer_rank},
                                         {"peer_node", t->peer_node},
                                         {"age_us", n.age_us}});
        sendMessage(n);
      }
    }
    reportFailureOnce(*t, wallNs);
  }
  if (!forceReport) return;
  {
    // Connections closed since the last report: reported once more, with their final counters.
    std::lock_guard lock(mu_);
    conns.insert(conns.end(), closed_.begin(), closed_.end());
    closed_.clear();
  }
  std::sort(conns.begin(), conns.end(), [](auto& a, auto& b) { return a->id < b->id; });
  report::RankReport r;
  r.id = identity();
  r.last = last;
  r.seq = gNextReportSeq.fetch_add(1) + 1;  // process-wide: contexts share the pid
  r.time_unix_ns = wallNs;
  r.interval_ms = config_.report_interval_ms;
  r.plan_version = planVersion();
  r.dropped_messages = droppedMessages();
  std::map<std::uint64_t, Reporter::Prev> prev;
  for (auto& t : conns) {
    report::ConnectionStats c;
    c.id = t->id;
    c.direction = t->direction;
    c.peer_rank = t->peer_rank;
    c.peer_node = t->peer_node;
    c.peer_pod = t->peer_pod;
    c.bytes = t->bytes.load(std::memory_order_relaxed);
    std::uint64_t completed = t->completed_ops.load(std::memory_order_relaxed);
    std::uint64_t posted = t->posted_ops.load(std::memory_order_relaxed);
    c.ops = completed;
    c.inflight = posted > completed ? static_cast<std::uint32_t>(posted - completed) : 0;
    std::int64_t oldest = 0;
    for (auto& slot : t->inflight) {
      std::int64_t p = slot.posted_ns.load(std::memory_order_relaxed);
      if (p != 0 && (oldest == 0 || p < oldest)) oldest = p;
    }
    c.oldest_inflight_us =
        oldest != 0 && now > oldest ? static_cast<std::uint64_t>((now - oldest) / 1000) : 0;
    Reporter::Prev& before = reporter_->prev[t->id];
    Reporter::Prev nowSnap{t->wait.snapshot(), t->transfer.snapshot()};
    c.wait = LatencyHistogram::summarize(before.wait, nowSnap.wait, t->wait.takeIntervalMax());
    c.transfer = LatencyHistogram::summarize(before.transfer, nowSnap.transfer,
                                             t->transfer.takeIntervalMax());
    prev[t->id] = nowSnap;
    for (std::size_t i = 0; i < t->subflows.size(); ++i) {
      report::SubflowStats s;
      s.index = static_cast<std::uint32_t>(i);
      s.local_port = t->subflows[i].local_port;
      s.path_id = t->subflows[i].path_id;
      s.weight = t->subflows[i].weight.load(std::memory_order_relaxed);
      s.bytes = t->subflows[i].bytes.load(std::memory_order_relaxed);
      c.subflows.push_back(s);
    }
    r.connections.push_back(std::move(c));
  }
  reporter_->prev = std::move(prev);  // forget closed connections
  if (!reporter_->sender) return;
  auto parts = encodeReportParts(r, report::kMaxDatagramBytes);
  if (!parts) {
    encode_failures_.fetch_add(1);
    log().warn("rank report not sendable", {{"error", parts.error()}});
    return;
  }
  for (auto& b : *parts) reporter_->sender->send(b);
}

// ---------------------------------------------------------------------------------------------
// Free functions: accept, data path, close, registration
// ---------------------------------------------------------------------------------------------

Result<CommBase*> accept(CommBase* base) {
  if (base == nullptr || base->kind != CommKind::kListen) {
    return makeError(ErrorCode::kInvalidArgument, "accept: not a listen comm");
  }
  auto* lc = static_cast<ListenComm*>(base);
  for (;;) {
    int fd = ::accept4(lc->fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return std::unexpected(errnoError("accept", errno));
    }
    setDataSocketOptions(fd, lc->ctx->config());
    lc->incoming_.push_back({UniqueFd(fd), {}});
  }
  // Read hellos.
  for (auto it = lc->incoming_.begin(); it != lc->incoming_.end();) {
    auto& in = *it;
    bool drop = false;
    bool ready = false;
    Hello hello;
    for (;;) {
      HelloDecode d = decodeHello(in.buf, lc->listen_id_);
      if (d.step == HandshakeStep::kInvalid) {
        log().warn("accept: dropping a connection with an invalid hello");
        drop = true;
        break;
      }
      if (d.step == HandshakeStep::kComplete) {
        hello = std::move(d.hello);
        ready = true;
        break;
      }
      std::uint8_t buf[600];
      ssize_t n = ::recv(in.fd.get(), buf, d.need - in.buf.size(), MSG_DONTWAIT);
      if (n == 0) {
        drop = true;
        break;
      }
      if (n < 0) {
        if (errno == EINTR) continue;
        drop = errno != EAGAIN && errno != EWOULDBLOCK;
        break;
      }
      in.buf.insert(in.buf.end(), buf, buf + n);
    }
    if (ready) {
      auto& g = lc->groups_[hello.conn_id];
      if (g.fds.empty()) {
        g.first = hello;
        g.fds.resize(hello.n_subflows);
      }
      if (hello.n_subflows != g.first.n_subflows || g.fds[hello.subflow_index].valid()) {
        log().warn("accept: dropping a subflow with an inconsistent hello");
      } else {
        g.fds[hello.subflow_index] = std::move(in.fd);
        g.have++;
      }
      it = lc->incoming_.erase(it);
    } else if (drop) {
      it = lc->incoming_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = lc->groups_.begin(); it != lc->groups_.end(); ++it) {
    auto& g = it->second;
    if (g.have != static_cast<int>(g.fds.size())) continue;
    Context* ctx = lc->ctx;
    const auto& cfg = ctx->config();
    AckFixed a{kAckMagic,
               kWireVersion,
               static_cast<std::uint16_t>(cfg.node.size()),
               static_cast<std::uint16_t>(cfg.pod.size()),
               0,
               cfg.rank};
    std::string ack(reinterpret_cast<const char*>(&a), sizeof(a));
    ack += identityBlob(cfg.node, cfg.pod);
    ssize_t n = ::send(g.fds[0].get(), ack.data(), ack.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n != static_cast<ssize_t>(ack.size())) {
      // A fresh socket always takes a few hundred bytes; anything else means the peer is gone.
      lc->groups_.erase(it);
      return std::unexpected(errnoError("accept: sending ack", n < 0 ? errno : EPIPE));
    }
    auto nsf = static_cast<int>(g.fds.size());
    auto tel = std::make_shared<ConnTelemetry>(gNextConnId.fetch_add(1), report::Direction::kRecv,
                                               nsf, kMaxRequests);
    tel->peer_rank = g.first.peer.rank;
    tel->peer_node = sanitizeName(g.first.peer.node);
    tel->peer_pod = sanitizeName(g.first.peer.pod);
    for (int i = 0; i < nsf; ++i) {
      tel->subflows[static_cast<std::size_t>(i)].local_port =
          localPortOf(g.fds[static_cast<std::size_t>(i)].get());
    }
    auto* rc = new RecvComm(ctx, std::move(g.fds), tel);
    rc->peer_ = g.first.peer;
    lc->groups_.erase(it);
    ctx->registerComm(rc, tel);
    log().info("accepted", {{"conn", tel->id},
                            {"peer_rank", rc->peer_.rank},
                            {"peer_node", rc->peer_.node},
                            {"subflows", nsf}});
    return static_cast<CommBase*>(rc);
  }
  return nullptr;
}

Result<Request*> isend(CommBase* base, const void* data, std::size_t size, int tag) {
  if (base == nullptr || base->kind != CommKind::kSend) {
    return makeError(ErrorCode::kInvalidArgument, "isend: not a send comm");
  }
  auto* sc = static_cast<SendComm*>(base);
  if (size > kMaxMessageBytes) {
    return makeError(ErrorCode::kInvalidArgument,
                     "isend: " + std::to_string(size) + " bytes exceeds maxP2pBytes");
  }
  if (data == nullptr && size > 0)
    return makeError(ErrorCode::kInvalidArgument, "isend: null data");
  if (sc->failed()) return std::unexpected(sc->failure());
  Request* r = sc->claim();
  if (r == nullptr) return nullptr;  // all 32 x maxRecvs in flight: NCCL retries
  r->kind = ReqKind::kSend;
  r->n = 1;
  r->data[0] = static_cast<char*>(const_cast<void*>(data));
  r->cap[0] = size;
  r->tags[0] = tag;
  r->state.store(kPending, std::memory_order_release);
  sc->post(r);
  return r;
}

Result<Request*> irecv(CommBase* base, int n, void* const* data, const std::size_t* sizes,
                       const int* tags) {
  if (base == nullptr || base->kind != CommKind::kRecv) {
    return makeError(ErrorCode::kInvalidArgument, "irecv: not a recv comm");
  }
  auto* rc = static_cast<RecvComm*>(base);
  if (n < 1 || n > kMaxRecvs || data == nullptr || sizes == nullptr || tags == nullptr) {
    return makeError(
        ErrorCode::kInvalidArgument,
        "irecv: n must be in [1, " + std::to_string(kMaxRecvs) + "] with data, sizes and tags");
  }
  for (int i = 0; i < n; ++i) {
    if (data[i] == nullptr && sizes[i] > 0) {
      return makeError(ErrorCode::kInvalidArgument, "irecv: null buffer");
    }
  }
  if (rc->failed()) return std::unexpected(rc->failure());
  Request* r = rc->claim();
  if (r == nullptr) return nullptr;
  r->kind = ReqKind::kRecv;
  r->n = n;
  for (int i = 0; i < n; ++i) {
    r->data[i] = static_cast<char*>(data[i]);
    r->cap[i] = sizes[i];
    r->tags[i] = tags[i];
  }
  r->state.store(kPending, std::memory_order_release);
  rc->post(r);
  return r;
}

Result<Request*> iflush(CommBase* base) {
  if (base == nullptr || base->kind != CommKind::kRecv) {
    return makeError(ErrorCode::kInvalidArgument, "iflush: not a recv comm");
  }
  auto* rc = static_cast<RecvComm*>(base);
  Request* r = rc->claim();
  if (r == nullptr) return nullptr;
  r->kind = ReqKind::kFlush;
  r->n = 0;
  r->state.store(kDone, std::memory_order_release);
  return r;
}

Result<bool> test(Request* r, int* sizes) {
  if (r == nullptr) return makeError(ErrorCode::kInvalidArgument, "test: null request");
  int s = r->state.load(std::memory_order_acquire);
  if (s == kPending) {
    static_cast<DataComm*>(r->comm)->tryProgress();
    s = r->state.load(std::memory_order_acquire);
    if (s == kPending) return false;
  }
  auto* dc = static_cast<DataComm*>(r->comm);
  if (s == kFailed) return std::unexpected(dc->failure());
  if (s != kDone) return makeError(ErrorCode::kInvalidArgument, "test: request is not in flight");
  if (sizes != nullptr) {
    for (int i = 0; i < r->n; ++i) sizes[i] = r->sizes[i];
  }
  r->state.store(kFree, std::memory_order_release);
  return true;
}

Status closeComm(CommBase* comm, CommKind expected) {
  if (comm == nullptr || comm->kind != expected) {
    return makeError(ErrorCode::kInvalidArgument, "close: wrong or null comm");
  }
  comm->ctx->unregisterComm(comm);
  delete comm;  // virtual destructor
  return {};
}

Result<MemRegion*> regMr(CommBase* comm, void* data, std::size_t size, int type) {
  if (comm == nullptr || (comm->kind != CommKind::kSend && comm->kind != CommKind::kRecv)) {
    return makeError(ErrorCode::kInvalidArgument, "regMr: not a send or recv comm");
  }
  if ((type & kPtrHost) == 0) {
    return makeError(ErrorCode::kInvalidArgument,
                     "regMr: only host memory (NCCL_PTR_HOST) is supported by the TCP transport");
  }
  auto* dc = static_cast<DataComm*>(comm);
  auto mr = std::make_unique<MemRegion>(MemRegion{data, size, type, comm});
  MemRegion* raw = mr.get();
  std::lock_guard lock(dc->mr_mu_);
  dc->regions_.push_back(std::move(mr));
  return raw;
}

Status deregMr(CommBase* comm, MemRegion* mr) {
  if (comm == nullptr || (comm->kind != CommKind::kSend && comm->kind != CommKind::kRecv)) {
    return makeError(ErrorCode::kInvalidArgument, "deregMr: not a send or recv comm");
  }
  auto* dc = static_cast<DataComm*>(comm);
  std::lock_guard lock(dc->mr_mu_);
  auto it = std::find_if(dc->regions_.begin(), dc->regions_.end(),
                         [mr](const auto& p) { return p.get() == mr; });
  if (it == dc->regions_.end()) {
    return makeError(ErrorCode::kInvalidArgument, "deregMr: unknown memory handle");
  }
  dc->regions_.erase(it);
  return {};
}

PeerInfo peerOf(const CommBase* comm) {
  if (comm == nullptr || comm->kind == CommKind::kListen) return {};
  return static_cast<const DataComm*>(comm)->peer_;
}

std::shared_ptr<ConnTelemetry> telemetryOf(const CommBase* comm) {
  if (comm == nullptr || comm->kind == CommKind::kListen) return nullptr;
  return static_cast<const DataComm*>(comm)->tel_;
}

std::vector<std::uint16_t> subflowLocalPorts(const CommBase* comm) {
  std::vector<std::uint16_t> out;
  if (comm == nullptr || comm->kind == CommKind::kListen) return out;
  for (const auto& fd : static_cast<const DataComm*>(comm)->fds_)
    out.push_back(localPortOf(fd.get()));
  return out;
}

}  // namespace c4::plugin
