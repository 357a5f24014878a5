#include "collectives.h"

#include <algorithm>
#include <deque>

namespace c4::netbench {
namespace {

// A collective's bounds for the transport (a profiled one reports them as NCCL's Coll events).
class CollectiveScope {
 public:
  CollectiveScope(Net& net, const char* func, std::size_t count) : net_(net) {
    net_.collectiveStart(func, count);
  }
  ~CollectiveScope() { net_.collectiveEnd(); }
  CollectiveScope(const CollectiveScope&) = delete;
  CollectiveScope& operator=(const CollectiveScope&) = delete;

 private:
  Net& net_;
};

// One direction of traffic with one peer, cut into slices.
struct Stream {
  bool send = false;
  int peer = 0;
  char* ptr = nullptr;
  std::size_t bytes = 0;
  std::function<void(std::size_t, std::size_t)> on_slice;  // receive slices, in order
  std::size_t posted = 0;                                  // slices posted
  std::size_t total = 0;                                   // slices in all
  struct Inflight {
    void* req;
    std::size_t off, len;
  };
  std::deque<Inflight> inflight;
};

Status runStreams(Net& net, std::vector<Stream>& streams, int tag, const CollectiveOptions& o) {
  std::size_t slice = std::min(o.slice_bytes, net.maxMessageBytes());
  for (auto& s : streams) s.total = std::max<std::size_t>(1, (s.bytes + slice - 1) / slice);
  for (;;) {
    bool progressed = false;
    bool pending = false;
    for (auto& s : streams) {
      while (s.posted < s.total && s.inflight.size() < static_cast<std::size_t>(o.window)) {
        std::size_t off = s.posted * slice;
        std::size_t len = std::min(slice, s.bytes - std::min(off, s.bytes));
        auto r = s.send ? net.isend(s.peer, s.ptr + off, len, tag)
                        : net.irecv(s.peer, s.ptr + off, len, s.peer);
        if (!r) return std::unexpected(r.error());
        if (*r == nullptr) break;  // request limit: retry after completions
        s.inflight.push_back({*r, off, len});
        s.posted++;
        progressed = true;
      }
      while (!s.inflight.empty()) {
        auto t = net.test(s.inflight.front().req);
        if (!t) return std::unexpected(t.error());
        if (!*t) break;
        if (s.on_slice) s.on_slice(s.inflight.front().off, s.inflight.front().len);
        s.inflight.pop_front();
        progressed = true;
      }
      pending = pending || s.posted < s.total || !s.inflight.empty();
    }
    if (!pending) return {};
    if (!progressed) net.idle();
  }
}

std::pair<std::size_t, std::size_t> chunk(std::size_t count, int world, int c) {
  auto w = static_cast<std::size_t>(world);
  auto uc = static_cast<std::size_t>(c);
  return {count * uc / w, count * (uc + 1) / w};
}

}  // namespace

// The ring allreduce, pipelined across its 2 (world - 1) steps the way NCCL's ring is: reduce-
// scatter steps 0 .. world-2, then allgather steps world-1 .. 2 world-3. What a rank sends in step
// k >= 1 is the chunk it received (and, in the reduce-scatter, reduced) in step k - 1, so slice j
// of step k goes out as soon as slice j of step k - 1 has arrived: the link does not idle at the
// step boundaries. Sends to `next` and receives from `prev` are each posted in (step, slice)
// order, which is also the order the peer posts its side in.
Status ringAllreduce(Net& net, int rank, int world, std::uint32_t* data, std::size_t count,
                     std::vector<std::uint32_t>& scratch, const CollectiveOptions& o) {
  if (world == 1) return {};
  CollectiveScope scope(net, "AllReduce", count);
  const int next = (rank + 1) % world;
  const int prev = (rank + world - 1) % world;
  const int steps = 2 * (world - 1);
  const std::size_t slice =
      std::max<std::size_t>(4, std::min(o.slice_bytes, net.maxMessageBytes()) & ~std::size_t{3});
  const std::size_t maxChunk = count / static_cast<std::size_t>(world) + 1;
  // Two step-sized receive buffers for the reduce-scatter, used by alternate steps: a receive of
  // step k is posted only once step k - 1's (and so step k - 2's) has completed.
  scratch.resize(2 * maxChunk);
  auto mod = [world](int x) { return ((x % world) + world) % world; };
  // Chunk index sent / received in step k.
  auto sendChunk = [&](int k) {
    return k < world - 1 ? mod(rank - k) : mod(rank - (k - (world - 1)) + 1);
  };
  auto recvChunk = [&](int k) {
    return k < world - 1 ? mod(rank - k - 1) : mod(rank - (k - (world - 1)));
  };
  auto chunkBytes = [&](int c) {
    auto [b, e] = chunk(count, world, c);
    return (e - b) * 4;
  };
  auto slices = [&](std::size_t bytes) {
    return std::max<std::size_t>(1, (bytes + slice - 1) / slice);
  };
  struct Op {
    void* req;
    int step;
    std::size_t off, len;
  };
  std::deque<Op> sends, recvs;
  int sendStep = 0, recvStep = 0;            // the step whose slices are being posted
  std::size_t sendSlice = 0, recvSlice = 0;  // the next slice of that step to post
  std::vector<std::size_t> recvCompleted(static_cast<std::size_t>(steps), 0);
  const std::size_t window = static_cast<std::size_t>(o.window);
  auto recvPtr = [&](int k, std::size_t off) -> char* {
    if (k < world - 1) {
      return reinterpret_cast<char*>(scratch.data() + static_cast<std::size_t>(k % 2) * maxChunk) +
             off;
    }
    return reinterpret_cast<char*>(data + chunk(count, world, recvChunk(k)).first) + off;
  };
  for (;;) {
    bool progressed = false;
    // Post sends: slice j of step k needs slice j of step k - 1's receive (the same chunk).
    while (sendStep < steps && sends.size() < window) {
      const std::size_t bytes = chunkBytes(sendChunk(sendStep));
      const std::size_t n = slices(bytes);
      if (sendStep > 0 && recvCompleted[static_cast<std::size_t>(sendStep - 1)] <= sendSlice) break;
      const std::size_t off = sendSlice * slice;
      const std::size_t len = std::min(slice, bytes - std::min(off, bytes));
      char* ptr =
          reinterpret_cast<char*>(data + chunk(count, world, sendChunk(sendStep)).first) + off;
      auto r = net.isend(next, ptr, len, rank);
      if (!r) return std::unexpected(r.error());
      if (*r == nullptr) break;  // request limit: retry after completions
      sends.push_back({*r, sendStep, off, len});
      progressed = true;
      if (++sendSlice == n) {
        sendSlice = 0;
        ++sendStep;
      }
    }
    // Post receives: slice j of step k once slice j of step k - 1 has arrived, as its sender
    // sends it; a receive is not posted steps ahead, so its wait (posted -> first byte, what C4D
    // reads) stays the wait of one step. Receives complete in order, so step k - 2 (whose
    // reduce-scatter buffer step k reuses) has then completed too.
    while (recvStep < steps && recvs.size() < window) {
      const std::size_t bytes = chunkBytes(recvChunk(recvStep));
      const std::size_t n = slices(bytes);
      if (recvStep > 0 && recvCompleted[static_cast<std::size_t>(recvStep - 1)] <= recvSlice) break;
      const std::size_t off = recvSlice * slice;
      const std::size_t len = std::min(slice, bytes - std::min(off, bytes));
      auto r = net.irecv(prev, recvPtr(recvStep, off), len, prev);
      if (!r) return std::unexpected(r.error());
      if (*r == nullptr) break;
      recvs.push_back({*r, recvStep, off, len});
      progressed = true;
      if (++recvSlice == n) {
        recvSlice = 0;
        ++recvStep;
      }
    }
    while (!sends.empty()) {
      auto t = net.test(sends.front().req);
      if (!t) return std::unexpected(t.error());
      if (!*t) break;
      sends.pop_front();
      progressed = true;
    }
    while (!recvs.empty()) {
      auto t = net.test(recvs.front().req);
      if (!t) return std::unexpected(t.error());
      if (!*t) break;
      const Op& op = recvs.front();
      if (op.step < world - 1) {  // reduce-scatter: add into the chunk this rank owns this step
        std::uint32_t* dst = data + chunk(count, world, recvChunk(op.step)).first;
        const std::uint32_t* tmp =
            scratch.data() + static_cast<std::size_t>(op.step % 2) * maxChunk;
        for (std::size_t i = op.off / 4; i < (op.off + op.len) / 4; ++i) dst[i] += tmp[i];
      }
      ++recvCompleted[static_cast<std::size_t>(op.step)];
      recvs.pop_front();
      progressed = true;
    }
    if (sendStep == steps && recvStep == steps && sends.empty() && recvs.empty()) return {};
    if (!progressed) net.idle();
  }
}

Status allToAll(Net& net, int rank, int world, const std::uint32_t* send, std::uint32_t* recv,
                std::size_t block, const CollectiveOptions& o) {
  CollectiveScope scope(net, "AllToAll", block * static_cast<std::size_t>(world));
  std::copy(send + static_cast<std::size_t>(rank) * block,
            send + static_cast<std::size_t>(rank + 1) * block,
            recv + static_cast<std::size_t>(rank) * block);
  std::vector<Stream> st;
  for (int p = 0; p < world; ++p) {
    if (p == rank) continue;
    Stream out;
    out.send = true;
    out.peer = p;
    out.ptr = reinterpret_cast<char*>(const_cast<std::uint32_t*>(send) +
                                      static_cast<std::size_t>(p) * block);
    out.bytes = block * 4;
    st.push_back(std::move(out));
    Stream in;
    in.peer = p;
    in.ptr = reinterpret_cast<char*>(recv + static_cast<std::size_t>(p) * block);
    in.bytes = block * 4;
    st.push_back(std::move(in));
  }
  return runStreams(net, st, rank, o);
}

Status ringPump(Net& net, int rank, int world, char* send, char* recv, std::size_t bytes,
                const CollectiveOptions& o) {
  if (world == 1) return {};
  CollectiveScope scope(net, "SendRecv", bytes);
  std::vector<Stream> st(2);
  st[0].send = true;
  st[0].peer = (rank + 1) % world;
  st[0].ptr = send;
  st[0].bytes = bytes;
  st[1].peer = (rank + world - 1) % world;
  st[1].ptr = recv;
  st[1].bytes = bytes;
  return runStreams(net, st, rank, o);
}

std::uint32_t allreduceInput(int rank, std::size_t i) {
  return static_cast<std::uint32_t>(rank + 1) * (static_cast<std::uint32_t>(i) * 2654435761u + 1u);
}

std::uint32_t allreduceExpected(int world, std::size_t i, int k) {
  auto w = static_cast<std::uint32_t>(world);
  std::uint32_t v = (static_cast<std::uint32_t>(i) * 2654435761u + 1u) * (w * (w + 1) / 2);
  for (int j = 1; j < k; ++j) v *= w;
  return v;
}

std::uint32_t allToAllInput(int src, int dst, std::size_t i) {
  return static_cast<std::uint32_t>(src) * 0x01000193u ^ static_cast<std::uint32_t>(dst) * 7919u ^
         static_cast<std::uint32_t>(i) * 2654435761u;
}

}  // namespace c4::netbench
