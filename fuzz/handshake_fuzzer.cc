// The NCCL net plugin's connection handshake: the hello a listener reads from each incoming
// subflow and the ack a connector reads, as the plugin reads them (recv() of at most `need -
// read` bytes into a 600-byte buffer, decode, repeat). The input is cut into the chunks a peer
// could send; a decoder must never ask for fewer bytes than it has, nor for more than the buffer
// takes in one read, and a complete message is exactly the bytes read.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "c4/plugin/transport.h"
#include "fuzz_check.h"

namespace {

constexpr std::uint64_t kListenId = 0x1122334455667788ull;  // the seeds' listener
constexpr std::size_t kRecvBuffer = 600;                    // transport.cc's recv buffer

template <typename Decode>
void readLikeThePlugin(std::span<const std::uint8_t> in, std::size_t chunk, Decode decode) {
  std::vector<std::uint8_t> buf;
  std::size_t pos = 0;
  for (;;) {
    auto d = decode(std::span<const std::uint8_t>(buf));
    if (d.step != c4::plugin::HandshakeStep::kNeedMore) {
      if (d.step == c4::plugin::HandshakeStep::kComplete) C4_FUZZ_CHECK(buf.size() == d.need);
      return;
    }
    C4_FUZZ_CHECK(d.need > buf.size());
    C4_FUZZ_CHECK(d.need - buf.size() <= kRecvBuffer);
    if (pos == in.size()) return;  // the peer stops sending
    const std::size_t n = std::min({d.need - buf.size(), chunk, in.size() - pos});
    buf.insert(buf.end(), in.begin() + static_cast<std::ptrdiff_t>(pos),
               in.begin() + static_cast<std::ptrdiff_t>(pos + n));
    pos += n;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::size_t chunk = data[0] == 0 ? kRecvBuffer : data[0];  // bytes per recv()
  const std::span<const std::uint8_t> in(data + 1, size - 1);
  readLikeThePlugin(in, chunk, [](std::span<const std::uint8_t> b) {
    auto d = c4::plugin::decodeHello(b, kListenId);
    if (d.step == c4::plugin::HandshakeStep::kComplete) {
      C4_FUZZ_CHECK(d.hello.n_subflows >= 1 && d.hello.subflow_index < d.hello.n_subflows);
      C4_FUZZ_CHECK(d.hello.peer.node.size() <= 253 && d.hello.peer.pod.size() <= 253);
    }
    return d;
  });
  readLikeThePlugin(in, chunk, [](std::span<const std::uint8_t> b) {
    auto d = c4::plugin::decodeAck(b);
    if (d.step == c4::plugin::HandshakeStep::kComplete) {
      C4_FUZZ_CHECK(d.peer.node.size() <= 253 && d.peer.pod.size() <= 253);
    }
    return d;
  });
  return 0;
}
