#include "collectives.h"

#include <algorithm>
#include <deque>

namespace c4::netbench {
namespace {

// One direction of traffic with one peer, cut into slices.
struct Stream {
  bool send = false;
  int peer = 0;
  char* ptr = nullptr;
  std::size_t bytes = 0;
  std::function<void(std::size_t, std::size_t)> onSlice;  // receive slices, in order
  std::size_t posted = 0;                                 // slices posted
  std::size_t total = 0;                                  // slices in all
  struct Inflight {
    void* req;
    std::size_t off, len;
  };
  std::deque<Inflight> inflight;
};

Status runStreams(Net& net, std::vector<Stream>& streams, int tag, const CollectiveOptions& o) {
  std::size_t slice = std::min(o.sliceBytes, net.maxMessageBytes());
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
        if (s.onSlice) s.onSlice(s.inflight.front().off, s.inflight.front().len);
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

Status ringAllreduce(Net& net, int rank, int world, std::uint32_t* data, std::size_t count,
                     std::vector<std::uint32_t>& scratch, const CollectiveOptions& o) {
  if (world == 1) return {};
  int next = (rank + 1) % world;
  int prev = (rank + world - 1) % world;
  scratch.resize(count / static_cast<std::size_t>(world) + 1);
  for (int s = 0; s < world - 1; ++s) {  // reduce-scatter
    int sendC = (rank - s + world) % world;
    int recvC = (rank - s - 1 + 2 * world) % world;
    auto [sb, se] = chunk(count, world, sendC);
    auto [rb, re] = chunk(count, world, recvC);
    std::uint32_t* dst = data + rb;
    std::uint32_t* tmp = scratch.data();
    std::vector<Stream> st(2);
    st[0].send = true;
    st[0].peer = next;
    st[0].ptr = reinterpret_cast<char*>(data + sb);
    st[0].bytes = (se - sb) * 4;
    st[1].peer = prev;
    st[1].ptr = reinterpret_cast<char*>(tmp);
    st[1].bytes = (re - rb) * 4;
    st[1].onSlice = [dst, tmp](std::size_t off, std::size_t len) {
      for (std::size_t i = off / 4; i < (off + len) / 4; ++i) dst[i] += tmp[i];
    };
    C4_RETURN_IF_ERROR(runStreams(net, st, rank, o));
  }
  for (int s = 0; s < world - 1; ++s) {  // allgather
    int sendC = (rank - s + 1 + world) % world;
    int recvC = (rank - s + world) % world;
    auto [sb, se] = chunk(count, world, sendC);
    auto [rb, re] = chunk(count, world, recvC);
    std::vector<Stream> st(2);
    st[0].send = true;
    st[0].peer = next;
    st[0].ptr = reinterpret_cast<char*>(data + sb);
    st[0].bytes = (se - sb) * 4;
    st[1].peer = prev;
    st[1].ptr = reinterpret_cast<char*>(data + rb);
    st[1].bytes = (re - rb) * 4;
    C4_RETURN_IF_ERROR(runStreams(net, st, rank, o));
  }
  return {};
}

Status allToAll(Net& net, int rank, int world, const std::uint32_t* send, std::uint32_t* recv,
                std::size_t block, const CollectiveOptions& o) {
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
