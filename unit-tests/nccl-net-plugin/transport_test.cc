// Transport behaviour over real loopback sockets: data integrity, limits, grouped receives, many
// comms, close with ops in flight, dead and garbage peers.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <random>
#include <thread>

#include "test_util.h"

namespace c4::plugin {
namespace {

using namespace c4::plugin::testing;

struct TransportTest : ::testing::Test {
  void SetUp() override {
    a = makeContext(baseConfig("node-a", 0));
    b = makeContext(baseConfig("node-b", 1));
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
  }
  std::unique_ptr<Context> a, b;
};

// Sends `size` bytes and checks every byte and the reported sizes.
void roundTrip(const Pair& p, std::size_t size, unsigned seed, int tag = 3) {
  std::vector<unsigned char> src(size), dst(size + 16, 0xEE);
  fillPattern(src, seed);
  void* data[1] = {dst.data()};
  std::size_t sizes[1] = {dst.size()};
  int tags[1] = {tag};
  auto rr = irecv(p.recv, 1, data, sizes, tags);
  ASSERT_TRUE(rr.has_value());
  ASSERT_NE(*rr, nullptr);
  auto sr = isend(p.send, src.data(), size, tag);
  ASSERT_TRUE(sr.has_value());
  ASSERT_NE(*sr, nullptr);
  int sendSize = -1;
  int recvSize[kMaxRecvs] = {-1};
  ASSERT_EQ(waitAll({{*sr, &sendSize}, {*rr, recvSize}}), "");
  EXPECT_EQ(sendSize, static_cast<int>(size));
  EXPECT_EQ(recvSize[0], static_cast<int>(size));
  EXPECT_TRUE(std::equal(src.begin(), src.end(), dst.begin())) << "size " << size;
  EXPECT_EQ(dst[size], 0xEE) << "wrote past the message";
}

TEST_F(TransportTest, RandomSizesArriveIntact) {
  Pair p = connectPair(*a, *b);
  ASSERT_NE(p.send, nullptr);
  EXPECT_EQ(peerOf(p.send).rank, 1);
  EXPECT_EQ(peerOf(p.send).node, "node-b");
  EXPECT_EQ(peerOf(p.recv).rank, 0);
  EXPECT_EQ(peerOf(p.recv).node, "node-a");
  EXPECT_EQ(peerOf(p.recv).pod, "node-a-pod");
  std::mt19937 rng(42);
  std::vector<std::size_t> sizes = {0, 1, 7, 4096, 65535, 131072, 131073, (1u << 20) + 3};
  for (int i = 0; i < 12; ++i) sizes.push_back(rng() % (4u << 20));
  sizes.push_back((32u << 20) + 5);
  sizes.push_back(256u << 20);
  unsigned seed = 1;
  for (auto s : sizes) roundTrip(p, s, seed++);
  auto tel = telemetryOf(p.send);
  std::uint64_t total = 0, perSubflow = 0;
  for (auto s : sizes) total += s;
  for (auto& sf : tel->subflows) perSubflow += sf.bytes.load();
  EXPECT_EQ(tel->bytes.load(), total);
  EXPECT_EQ(perSubflow, total);
  EXPECT_EQ(tel->completed_ops.load(), sizes.size());
  auto rtel = telemetryOf(p.recv);
  EXPECT_EQ(rtel->bytes.load(), total);
  // Large messages are spread: every subflow carried bytes.
  for (auto& sf : tel->subflows) EXPECT_GT(sf.bytes.load(), 0u);
  EXPECT_TRUE(closeComm(p.send, CommKind::kSend));
  EXPECT_TRUE(closeComm(p.recv, CommKind::kRecv));
  EXPECT_TRUE(closeComm(p.listen, CommKind::kListen));
}

TEST_F(TransportTest, ManyOutstandingRequestsWithinNcclLimit) {
  Pair p = connectPair(*a, *b);
  ASSERT_NE(p.send, nullptr);
  constexpr int kN = kMaxRequests;
  std::vector<std::vector<unsigned char>> src(kN), dst(kN);
  std::vector<Request*> recvs, sends;
  for (int i = 0; i < kN; ++i) {
    src[static_cast<std::size_t>(i)].resize(static_cast<std::size_t>(1000 * i + 1));
    fillPattern(src[static_cast<std::size_t>(i)], static_cast<unsigned>(i));
    dst[static_cast<std::size_t>(i)].resize(src[static_cast<std::size_t>(i)].size());
    void* d[1] = {dst[static_cast<std::size_t>(i)].data()};
    std::size_t s[1] = {dst[static_cast<std::size_t>(i)].size()};
    int t[1] = {i};
    auto r = irecv(p.recv, 1, d, s, t);
    ASSERT_TRUE(r && *r != nullptr) << i;
    recvs.push_back(*r);
  }
  // The 33rd receive is refused with a NULL request ("retry later"), not an error.
  char extra[8];
  void* d[1] = {extra};
  std::size_t s[1] = {8};
  int t[1] = {0};
  auto over = irecv(p.recv, 1, d, s, t);
  ASSERT_TRUE(over.has_value());
  EXPECT_EQ(*over, nullptr);
  for (int i = 0; i < kN; ++i) {
    auto r = isend(p.send, src[static_cast<std::size_t>(i)].data(),
                   src[static_cast<std::size_t>(i)].size(), i);
    ASSERT_TRUE(r && *r != nullptr);
    sends.push_back(*r);
  }
  Proxy proxy;
  std::vector<std::array<int, kMaxRecvs>> sz(kN);
  for (int i = 0; i < kN; ++i) {
    proxy.track(sends[static_cast<std::size_t>(i)]);
    proxy.track(recvs[static_cast<std::size_t>(i)], sz[static_cast<std::size_t>(i)].data());
  }
  ASSERT_EQ(proxy.waitAll(), "");
  for (int i = 0; i < kN; ++i) {
    EXPECT_EQ(sz[static_cast<std::size_t>(i)][0],
              static_cast<int>(src[static_cast<std::size_t>(i)].size()));
    EXPECT_EQ(src[static_cast<std::size_t>(i)], dst[static_cast<std::size_t>(i)]);
  }
  // Slots are released by test(): posting works again.
  auto again = irecv(p.recv, 1, d, s, t);
  ASSERT_TRUE(again && *again != nullptr);
}

TEST_F(TransportTest, GroupedReceiveMatchesTags) {
  Pair p = connectPair(*a, *b);
  ASSERT_NE(p.send, nullptr);
  constexpr int kN = 4;
  std::vector<std::vector<unsigned char>> src(kN), dst(kN);
  void* data[kN];
  std::size_t sizes[kN];
  int tags[kN] = {10, 11, 12, 13};
  for (int i = 0; i < kN; ++i) {
    auto ui = static_cast<std::size_t>(i);
    src[ui].resize(ui * 300000 + 5);
    fillPattern(src[ui], static_cast<unsigned>(100 + i));
    dst[ui].assign(2 << 20, 0);
    data[i] = dst[ui].data();
    sizes[i] = dst[ui].size();
  }
  auto r = irecv(p.recv, kN, data, sizes, tags);
  ASSERT_TRUE(r && *r != nullptr);
  // Sends arrive in a different order than the buffers; the tag picks the buffer.
  std::vector<Request*> sends;
  for (int i : {2, 0, 3, 1}) {
    auto s = isend(p.send, src[static_cast<std::size_t>(i)].data(),
                   src[static_cast<std::size_t>(i)].size(), tags[i]);
    ASSERT_TRUE(s && *s != nullptr);
    sends.push_back(*s);
  }
  Proxy proxy;
  for (auto* s : sends) proxy.track(s);
  int got[kMaxRecvs] = {};
  proxy.track(*r, got);
  ASSERT_EQ(proxy.waitAll(), "");
  for (int i = 0; i < kN; ++i) {
    auto ui = static_cast<std::size_t>(i);
    EXPECT_EQ(got[i], static_cast<int>(src[ui].size()));
    EXPECT_TRUE(std::equal(src[ui].begin(), src[ui].end(), dst[ui].begin())) << i;
  }
}

// NCCL shares one connection among senders that progress independently (p2p with
// NCCL_NET_SHARED_COMMS=1, PXN), tag = sender's rank, and groups their receives. Two grouped
// receives {11, 22}, then the sends 11, 11, 22, 22: the second 11 belongs to the second receive.
TEST_F(TransportTest, SharedConnectionGroupedReceivesTakeSendsInAnyTagOrder) {
  Pair p = connectPair(*a, *b);
  ASSERT_NE(p.send, nullptr);
  std::vector<std::vector<unsigned char>> src(4), dst(4);
  for (std::size_t i = 0; i < 4; ++i) {
    src[i].resize(1000 + 100 * i);
    fillPattern(src[i], static_cast<unsigned>(7 + i));
    dst[i].assign(4096, 0);
  }
  // dst[0], dst[1]: first receive (tags 11, 22); dst[2], dst[3]: second receive.
  std::vector<Request*> recvs;
  for (std::size_t r = 0; r < 2; ++r) {
    void* data[2] = {dst[2 * r].data(), dst[2 * r + 1].data()};
    std::size_t sizes[2] = {4096, 4096};
    int tags[2] = {11, 22};
    auto rr = irecv(p.recv, 2, data, sizes, tags);
    ASSERT_TRUE(rr && *rr != nullptr);
    recvs.push_back(*rr);
  }
  // src[0]: first 11, src[1]: second 11, src[2]: first 22, src[3]: second 22.
  std::vector<Request*> sends;
  const int sendTags[4] = {11, 11, 22, 22};
  for (std::size_t i = 0; i < 4; ++i) {
    auto sr = isend(p.send, src[i].data(), src[i].size(), sendTags[i]);
    ASSERT_TRUE(sr && *sr != nullptr);
    sends.push_back(*sr);
  }
  Proxy proxy;
  for (auto* s : sends) proxy.track(s);
  int got0[kMaxRecvs] = {}, got1[kMaxRecvs] = {};
  proxy.track(recvs[0], got0);
  proxy.track(recvs[1], got1);
  ASSERT_EQ(proxy.waitAll(), "");
  EXPECT_EQ(got0[0], 1000);
  EXPECT_EQ(got0[1], 1200);
  EXPECT_EQ(got1[0], 1100);
  EXPECT_EQ(got1[1], 1300);
  EXPECT_TRUE(std::equal(src[0].begin(), src[0].end(), dst[0].begin()));
  EXPECT_TRUE(std::equal(src[2].begin(), src[2].end(), dst[1].begin()));
  EXPECT_TRUE(std::equal(src[1].begin(), src[1].end(), dst[2].begin()));
  EXPECT_TRUE(std::equal(src[3].begin(), src[3].end(), dst[3].begin()));
}

// The same root cause with single receives: receive tag A, receive tag B, the sender posts B first.
TEST_F(TransportTest, SingleReceivesTakeTheSendWithTheirTag) {
  Pair p = connectPair(*a, *b);
  ASSERT_NE(p.send, nullptr);
  std::vector<unsigned char> srcA(3000), srcB(5000), dstA(8192, 0), dstB(8192, 0);
  fillPattern(srcA, 1);
  fillPattern(srcB, 2);
  int tagA = 4, tagB = 9;
  void* da[1] = {dstA.data()};
  void* db[1] = {dstB.data()};
  std::size_t cap[1] = {8192};
  auto ra = irecv(p.recv, 1, da, cap, &tagA);
  auto rb = irecv(p.recv, 1, db, cap, &tagB);
  ASSERT_TRUE(ra && *ra && rb && *rb);
  auto sb = isend(p.send, srcB.data(), srcB.size(), tagB);
  ASSERT_TRUE(sb && *sb);
  auto sa = isend(p.send, srcA.data(), srcA.size(), tagA);
  ASSERT_TRUE(sa && *sa);
  int gotA[kMaxRecvs] = {}, gotB[kMaxRecvs] = {};
  ASSERT_EQ(waitAll({{*sb, nullptr}, {*sa, nullptr}, {*rb, gotB}, {*ra, gotA}}), "");
  EXPECT_EQ(gotA[0], 3000);
  EXPECT_EQ(gotB[0], 5000);
  EXPECT_TRUE(std::equal(srcA.begin(), srcA.end(), dstA.begin()));
  EXPECT_TRUE(std::equal(srcB.begin(), srcB.end(), dstB.begin()));
}

// Every interleaving the ext-net contract allows: several tags (senders), each sending its
// messages in order; the receiver groups up to 8 tags per receive, in each tag's order. Sends and
// receives are posted in a random interleaving (sends before their receive included), or the
// receiver posts its next receive only when the previous one completed while every send is
// already on the wire (with one subflow, messages of other tags queue behind unreceived ones).
// Sizes cross the multi-subflow split threshold. Every byte lands in the buffer of its tag.
struct Interleaving {
  int subflows;
  bool lagging_receiver;
};

class TagInterleavingTest : public ::testing::TestWithParam<Interleaving> {};

TEST_P(TagInterleavingTest, EverySendLandsInTheReceiveOfItsTag) {
  for (unsigned seed = 1; seed <= 6; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    auto cfgA = baseConfig("node-a", 0);
    cfgA.subflows = GetParam().subflows;
    auto a = makeContext(cfgA);
    auto b = makeContext(baseConfig("node-b", 1));
    Pair p = connectPair(*a, *b);
    ASSERT_NE(p.send, nullptr);
    std::mt19937 rng(seed);
    const int nTags = 2 + static_cast<int>(rng() % 4);  // 2..5 senders
    // Messages per tag, sizes up to 600 KiB (split over subflows above 128 KiB).
    std::vector<std::vector<std::vector<unsigned char>>> msgs(static_cast<std::size_t>(nTags));
    for (int t = 0; t < nTags; ++t) {
      int m = 3 + static_cast<int>(rng() % 4);
      for (int k = 0; k < m; ++k) {
        std::size_t size = rng() % 4 == 0 ? rng() % (600 << 10) : rng() % 5000;
        msgs[static_cast<std::size_t>(t)].emplace_back(size);
        fillPattern(msgs[static_cast<std::size_t>(t)].back(),
                    static_cast<unsigned>(seed * 1000 + static_cast<unsigned>(t * 100 + k)));
      }
    }
    // Receives: each takes the next message of a random subset of the tags that have some left.
    struct Recv {
      std::vector<int> tags;  // tag index per buffer
      std::vector<std::size_t> index;
      std::vector<std::vector<unsigned char>> bufs;
      Request* req = nullptr;
    };
    std::vector<Recv> recvs;
    std::vector<std::size_t> nextRecv(static_cast<std::size_t>(nTags), 0);
    for (;;) {
      Recv r;
      for (int t = 0; t < nTags; ++t) {
        auto ut = static_cast<std::size_t>(t);
        if (nextRecv[ut] < msgs[ut].size() && (rng() % 3 != 0 || r.tags.empty())) {
          r.tags.push_back(t);
          r.index.push_back(nextRecv[ut]++);
          r.bufs.emplace_back(msgs[ut][r.index.back()].size() + 1 + rng() % 64, 0xEE);
        }
      }
      if (r.tags.empty()) break;
      recvs.push_back(std::move(r));
    }
    ASSERT_LE(recvs.size(), static_cast<std::size_t>(kMaxRequests));
    // Sends: a random interleaving of the tags, each tag in its order.
    std::vector<int> sendOrder;
    for (int t = 0; t < nTags; ++t) {
      sendOrder.insert(sendOrder.end(), msgs[static_cast<std::size_t>(t)].size(), t);
    }
    std::shuffle(sendOrder.begin(), sendOrder.end(), rng);
    std::vector<std::size_t> nextSend(static_cast<std::size_t>(nTags), 0);
    Proxy proxy;  // tests every request in flight, sends included, like NCCL's proxy
    std::vector<std::array<int, kMaxRecvs>> got(recvs.size());
    auto postSend = [&](std::size_t i) {
      int t = sendOrder[i];
      auto& m = msgs[static_cast<std::size_t>(t)][nextSend[static_cast<std::size_t>(t)]++];
      auto s = isend(p.send, m.data(), m.size(), 100 + t);
      ASSERT_TRUE(s && *s != nullptr);
      proxy.track(*s);
    };
    auto postRecv = [&](Recv& r) {
      void* data[kMaxRecvs];
      std::size_t sizes[kMaxRecvs];
      int tags[kMaxRecvs];
      for (std::size_t i = 0; i < r.tags.size(); ++i) {
        data[i] = r.bufs[i].data();
        sizes[i] = r.bufs[i].size();
        tags[i] = 100 + r.tags[i];
      }
      auto q = irecv(p.recv, static_cast<int>(r.tags.size()), data, sizes, tags);
      ASSERT_TRUE(q && *q != nullptr);
      r.req = *q;
      proxy.track(r.req, got[static_cast<std::size_t>(&r - recvs.data())].data());
    };
    auto check = [&](Recv& r) {
      ASSERT_EQ(proxy.waitFor(r.req), "");
      const auto& sizes = got[static_cast<std::size_t>(&r - recvs.data())];
      for (std::size_t i = 0; i < r.tags.size(); ++i) {
        const auto& m = msgs[static_cast<std::size_t>(r.tags[i])][r.index[i]];
        EXPECT_EQ(sizes[i], static_cast<int>(m.size()));
        EXPECT_TRUE(std::equal(m.begin(), m.end(), r.bufs[i].begin()))
            << "tag " << r.tags[i] << " message " << r.index[i];
        EXPECT_EQ(r.bufs[i][m.size()], 0xEE) << "wrote past the message";
      }
    };
    if (GetParam().lagging_receiver) {
      for (std::size_t i = 0; i < sendOrder.size(); ++i) postSend(i);
      for (auto& r : recvs) {
        postRecv(r);
        check(r);
      }
    } else {
      std::size_t si = 0, ri = 0;
      while (si < sendOrder.size() || ri < recvs.size()) {
        bool send = ri == recvs.size() || (si < sendOrder.size() && rng() % 2 == 0);
        if (send) {
          postSend(si++);
        } else {
          postRecv(recvs[ri++]);
        }
      }
      for (auto& r : recvs) check(r);
    }
    ASSERT_EQ(proxy.waitAll(), "");
    EXPECT_TRUE(closeComm(p.send, CommKind::kSend));
    EXPECT_TRUE(closeComm(p.recv, CommKind::kRecv));
    EXPECT_TRUE(closeComm(p.listen, CommKind::kListen));
  }
}

INSTANTIATE_TEST_SUITE_P(Plugin, TagInterleavingTest,
                         ::testing::Values(Interleaving{4, false}, Interleaving{1, false},
                                           Interleaving{4, true}, Interleaving{1, true}),
                         [](const auto& param) {
                           return std::to_string(param.param.subflows) + "Subflows" +
                                  (param.param.lagging_receiver ? "LaggingReceiver"
                                                                : "Interleaved");
                         });

TEST_F(TransportTest, ManyConcurrentComms) {
  constexpr int kComms = 8;
  std::vector<Pair> pairs;
  for (int i = 0; i < kComms; ++i) {
    pairs.push_back(connectPair(i % 2 ? *a : *b, i % 2 ? *b : *a));
    ASSERT_NE(pairs.back().send, nullptr);
  }
  std::vector<std::thread> threads;
  for (int i = 0; i < kComms; ++i) {
    threads.emplace_back([&, i] {
      for (int k = 0; k < 4; ++k) {
        roundTrip(pairs[static_cast<std::size_t>(i)], static_cast<std::size_t>(100000 * k + i),
                  static_cast<unsigned>(i * 10 + k));
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(a->connections().size() + b->connections().size(), 2u * kComms);
}

TEST_F(TransportTest, CloseWithRequestsInFlight) {
  Pair p = connectPair(*a, *b);
  ASSERT_NE(p.send, nullptr);
  std::vector<unsigned char> big(8 << 20), dst(8 << 20);
  void* d[1] = {dst.data()};
  std::size_t s[1] = {dst.size()};
  int t[1] = {0};
  for (int i = 0; i < 4; ++i) {
    auto r = irecv(p.recv, 1, d, s, t);
    ASSERT_TRUE(r && *r != nullptr);
  }
  for (int i = 0; i < 8; ++i) {
    auto r = isend(p.send, big.data(), big.size(), 0);
    ASSERT_TRUE(r && *r != nullptr);
  }
  // Both sides close while ops are in flight: threads stop, nothing hangs or leaks.
  EXPECT_TRUE(closeComm(p.recv, CommKind::kRecv));
  EXPECT_TRUE(closeComm(p.send, CommKind::kSend));
  EXPECT_TRUE(closeComm(p.listen, CommKind::kListen));
  EXPECT_TRUE(a->connections().empty());
}

TEST_F(TransportTest, FinalizeClosesWhatNcclLeftOpen) {
  Pair p = connectPair(*a, *b);
  ASSERT_NE(p.send, nullptr);
  a.reset();  // the sender's context goes: its comm and threads are closed and joined
  // The receiver sees the peer close once it waits for data.
  char buf[16];
  void* d[1] = {buf};
  std::size_t s[1] = {16};
  int t[1] = {0};
  // Either irecv already knows (error) or the request fails promptly; never a hang.
  auto r = irecv(p.recv, 1, d, s, t);
  if (r.has_value()) {
    ASSERT_NE(*r, nullptr);
    std::string err = waitRequest(*r, nullptr, std::chrono::seconds(5));
    EXPECT_NE(err, "");
    EXPECT_NE(err, "timeout");
  } else {
    EXPECT_NE(r.error().message.find("peer closed"), std::string::npos) << r.error().message;
  }
}

TEST_F(TransportTest, GarbageHandleIsAnError) {
  char handle[kHandleBytes];
  std::memset(handle, 0x5A, sizeof(handle));
  auto s = a->connect(0, handle);
  ASSERT_FALSE(s.has_value());
  EXPECT_NE(s.error().message.find("not a valid C4 handle"), std::string::npos);
  // A real handle with one flipped byte fails the checksum.
  auto l = b->listen(0, handle);
  ASSERT_TRUE(l.has_value());
  handle[20] = static_cast<char>(handle[20] ^ 1);
  EXPECT_FALSE(a->connect(0, handle).has_value());
  EXPECT_FALSE(a->connect(5, handle).has_value());  // no such device
  EXPECT_TRUE(closeComm(*l, CommKind::kListen));
}

TEST_F(TransportTest, ReceiveBufferTooSmallIsAnError) {
  Pair p = connectPair(*a, *b);
  ASSERT_NE(p.send, nullptr);
  std::vector<char> src(1000), dst(10);
  void* d[1] = {dst.data()};
  std::size_t s[1] = {dst.size()};
  int t[1] = {0};
  auto r = irecv(p.recv, 1, d, s, t);
  auto w = isend(p.send, src.data(), src.size(), 0);
  ASSERT_TRUE(r && *r && w && *w);
  std::string err = waitRequest(*r);
  EXPECT_NE(err.find("larger than the receive buffer"), std::string::npos) << err;
  // A user error, not a network failure: ncclInvalidUsage at the ABI (kFailedPrecondition).
  EXPECT_EQ(err.rfind("failed_precondition:", 0), 0u) << err;
  // The send may still be queued: close it before `src` goes away.
  EXPECT_TRUE(closeComm(p.send, CommKind::kSend));
}

TEST_F(TransportTest, BadArgumentsAreRejected) {
  Pair p = connectPair(*a, *b);
  ASSERT_NE(p.send, nullptr);
  EXPECT_FALSE(isend(p.recv, nullptr, 0, 0).has_value());  // wrong comm kind
  EXPECT_FALSE(irecv(p.recv, 0, nullptr, nullptr, nullptr).has_value());
  EXPECT_FALSE(irecv(p.recv, kMaxRecvs + 1, nullptr, nullptr, nullptr).has_value());
  EXPECT_FALSE(isend(p.send, nullptr, kMaxMessageBytes + 1, 0).has_value());
  EXPECT_FALSE(regMr(p.send, nullptr, 0, 0x2).has_value());  // CUDA memory: not supported
  auto mr = regMr(p.send, this, 8, kPtrHost);
  ASSERT_TRUE(mr.has_value());
  EXPECT_TRUE(deregMr(p.send, *mr));
  EXPECT_FALSE(deregMr(p.send, *mr));  // twice
  auto f = iflush(p.recv);
  ASSERT_TRUE(f && *f != nullptr);
  auto done = test(*f, nullptr);
  ASSERT_TRUE(done.has_value());
  EXPECT_TRUE(*done);  // host memory: flush completes at once
  EXPECT_FALSE(closeComm(p.send, CommKind::kRecv).has_value());
}

// --- a real peer process, killed mid-transfer ---------------------------------------------------

std::string hex(const char* p, std::size_t n) {
  std::string out;
  char b[3];
  for (std::size_t i = 0; i < n; ++i) {
    std::snprintf(b, sizeof(b), "%02x", static_cast<unsigned char>(p[i]));
    out += b;
  }
  return out;
}

pid_t spawnPeer(const char* mode, const char* handle) {
  std::string h = hex(handle, kHandleBytes);
  pid_t pid = ::fork();
  if (pid == 0) {
    int devnull = ::open("/dev/null", O_WRONLY);
    ::dup2(devnull, 1);
    ::execl(C4_TEST_PEER, C4_TEST_PEER, mode, h.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

CommBase* acceptFrom(CommBase* listen) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    auto r = accept(listen);
    if (!r) return nullptr;
    if (*r != nullptr) return *r;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return nullptr;
}

TEST_F(TransportTest, PeerKilledMidTransferFailsWithinSeconds) {
  char handle[kHandleBytes];
  auto l = b->listen(0, handle);
  ASSERT_TRUE(l.has_value());
  pid_t pid = spawnPeer("stream", handle);
  ASSERT_GT(pid, 0);
  CommBase* rc = acceptFrom(*l);
  ASSERT_NE(rc, nullptr);
  EXPECT_EQ(peerOf(rc).rank, 7);
  EXPECT_EQ(peerOf(rc).node, "peer-node");
  std::vector<char> buf(4 << 20);
  void* d[1] = {buf.data()};
  std::size_t s[1] = {buf.size()};
  int t[1] = {0};
  auto r = irecv(rc, 1, d, s, t);
  ASSERT_TRUE(r && *r);
  ASSERT_EQ(waitRequest(*r), "");  // data flows
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  ::waitpid(pid, nullptr, 0);
  auto killed = std::chrono::steady_clock::now();
  std::string err;
  while (err.empty()) {
    auto rr = irecv(rc, 1, d, s, t);
    if (!rr) {
      err = rr.error().toString();
      break;
    }
    if (*rr == nullptr) continue;
    err = waitRequest(*rr, nullptr, std::chrono::seconds(10));
  }
  auto took = std::chrono::steady_clock::now() - killed;
  EXPECT_NE(err, "timeout");
  EXPECT_LT(took, std::chrono::seconds(5)) << err;
  EXPECT_TRUE(telemetryOf(rc)->failed.load());
  EXPECT_TRUE(closeComm(rc, CommKind::kRecv));
  EXPECT_TRUE(closeComm(*l, CommKind::kListen));
}

TEST_F(TransportTest, SenderSeesKilledReceiver) {
  // A large send is in flight (no receive posted) when the receiving side goes away.
  Pair p = connectPair(*a, *b);
  ASSERT_NE(p.send, nullptr);
  std::vector<char> big(64 << 20);
  auto w = isend(p.send, big.data(), big.size(), 0);  // no receive posted: stays in flight
  ASSERT_TRUE(w && *w);
  b.reset();  // receiver process state gone: sockets closed
  std::string err = waitRequest(*w, nullptr, std::chrono::seconds(10));
  EXPECT_NE(err, "");
  EXPECT_NE(err, "timeout");
}

}  // namespace
}  // namespace c4::plugin
