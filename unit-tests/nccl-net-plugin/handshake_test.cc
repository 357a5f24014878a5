// The connection handshake's decoders (decodeHello / decodeAck) on byte strings laid out as the
// wire carries them (little-endian fixed header, then the node and pod names): what they need
// next, what they refuse, and what a complete message yields. The fuzzer fuzz/handshake_fuzzer.cc
// runs the same decoders on arbitrary bytes.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "c4/plugin/transport.h"

namespace c4::plugin {
namespace {

constexpr std::uint64_t kListenId = 0x1122334455667788ull;

template <typename T>
void put(std::vector<std::uint8_t>& out, T v) {
  std::uint8_t b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  for (std::uint8_t byte : b) out.push_back(byte);
}

std::vector<std::uint8_t> hello(std::uint16_t index, std::uint16_t n, const std::string& node,
                                const std::string& pod, std::uint64_t listen_id = kListenId,
                                std::uint32_t magic = 0x4c483443u, std::uint16_t version = 2) {
  std::vector<std::uint8_t> b;
  put(b, magic);
  put(b, version);
  put(b, index);
  put(b, n);
  put(b, static_cast<std::uint16_t>(node.size()));
  put(b, static_cast<std::uint16_t>(pod.size()));
  put(b, std::uint16_t{0});
  put(b, listen_id);
  put(b, std::uint64_t{42});  // conn id
  put(b, std::int32_t{3});    // rank
  put(b, std::uint32_t{0});
  for (char c : node + pod) b.push_back(static_cast<std::uint8_t>(c));
  return b;
}

std::vector<std::uint8_t> ack(const std::string& node, const std::string& pod,
                              std::uint32_t magic = 0x4b413443u) {
  std::vector<std::uint8_t> b;
  put(b, magic);
  put(b, std::uint16_t{2});
  put(b, static_cast<std::uint16_t>(node.size()));
  put(b, static_cast<std::uint16_t>(pod.size()));
  put(b, std::uint16_t{0});
  put(b, std::int32_t{1});
  for (char c : node + pod) b.push_back(static_cast<std::uint8_t>(c));
  return b;
}

std::span<const std::uint8_t> prefix(const std::vector<std::uint8_t>& b, std::size_t n) {
  return {b.data(), n};
}

TEST(HandshakeTest, HelloAsksForTheHeaderThenTheNames) {
  auto b = hello(1, 4, "node-a", "job-0");
  ASSERT_EQ(b.size(), 40u + 11u);
  for (std::size_t n = 0; n < 40; ++n) {
    auto d = decodeHello(prefix(b, n), kListenId);
    EXPECT_EQ(d.step, HandshakeStep::kNeedMore);
    EXPECT_EQ(d.need, 40u);
  }
  for (std::size_t n = 40; n < b.size(); ++n) {
    auto d = decodeHello(prefix(b, n), kListenId);
    EXPECT_EQ(d.step, HandshakeStep::kNeedMore);
    EXPECT_EQ(d.need, b.size());
  }
  auto d = decodeHello(b, kListenId);
  ASSERT_EQ(d.step, HandshakeStep::kComplete);
  EXPECT_EQ(d.need, b.size());
  EXPECT_EQ(d.hello.subflow_index, 1);
  EXPECT_EQ(d.hello.n_subflows, 4);
  EXPECT_EQ(d.hello.conn_id, 42u);
  EXPECT_EQ(d.hello.peer.rank, 3);
  EXPECT_EQ(d.hello.peer.node, "node-a");
  EXPECT_EQ(d.hello.peer.pod, "job-0");
}

TEST(HandshakeTest, HelloRefusesWhatNoConnectorSends) {
  const std::vector<std::vector<std::uint8_t>> bad{
      hello(0, 4, "n", "p", kListenId, 0xdeadbeefu),     // magic
      hello(0, 4, "n", "p", kListenId, 0x4c483443u, 1),  // version
      hello(0, 4, "n", "p", kListenId + 1),              // another listener
      hello(0, 0, "n", "p"),                             // no subflows
      hello(0, 65, "n", "p"),                            // more than kMaxSubflows
      hello(4, 4, "n", "p"),                             // index out of range
      hello(0, 4, std::string(254, 'n'), "p"),           // node name too long
      hello(0, 4, "n", std::string(254, 'p')),           // pod name too long
  };
  for (const auto& b : bad) {
    EXPECT_EQ(decodeHello(prefix(b, 40), kListenId).step, HandshakeStep::kInvalid);
    EXPECT_EQ(decodeHello(b, kListenId).step, HandshakeStep::kInvalid);
  }
  auto longest = hello(63, 64, std::string(253, 'n'), std::string(253, 'p'));
  EXPECT_EQ(decodeHello(longest, kListenId).step, HandshakeStep::kComplete);
  // The plugin reads at most `need - read` bytes; a longer buffer is not one hello.
  longest.push_back(0);
  EXPECT_EQ(decodeHello(longest, kListenId).step, HandshakeStep::kInvalid);
}

TEST(HandshakeTest, AckAsksForTheHeaderThenTheNames) {
  auto b = ack("node-b", "");
  for (std::size_t n = 0; n < 16; ++n) {
    EXPECT_EQ(decodeAck(prefix(b, n)).step, HandshakeStep::kNeedMore);
    EXPECT_EQ(decodeAck(prefix(b, n)).need, 16u);
  }
  EXPECT_EQ(decodeAck(prefix(b, 16)).need, 22u);
  auto d = decodeAck(b);
  ASSERT_EQ(d.step, HandshakeStep::kComplete);
  EXPECT_EQ(d.peer.rank, 1);
  EXPECT_EQ(d.peer.node, "node-b");
  EXPECT_EQ(d.peer.pod, "");
  EXPECT_EQ(decodeAck(ack("n", "p", 0x4c483443u)).step, HandshakeStep::kInvalid);
  EXPECT_EQ(decodeAck(ack(std::string(254, 'n'), "")).step, HandshakeStep::kInvalid);
  b.push_back('x');
  EXPECT_EQ(decodeAck(b).step, HandshakeStep::kInvalid);
}

}  // namespace
}  // namespace c4::plugin
