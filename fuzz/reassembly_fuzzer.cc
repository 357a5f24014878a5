// The node plugin's datagram path from the agent socket to reassembly: a sequence of datagrams
// (from up to 4 sender pids, with time passing between them) is decoded as the receiver decodes
// each one, and the RankReports go through a Reassembler with small bounds. The bounds hold after
// every datagram, a complete report is one part of one with at most kMaxConnectionsPerReport
// connections, and it is valid (it travels in a NodeReport).
//
// Input: records of [pid: 1 byte][milliseconds to advance: 1 byte][length: 2 bytes LE][datagram].
#include <cstddef>
#include <cstdint>
#include <span>

#include "c4/common/clock.h"
#include "c4/common/report.h"
#include "c4/node_plugin/reassembly.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  c4::SimulatedClock clock;
  c4::node::ReassemblyLimits limits;
  limits.max_partial = 4;
  limits.max_parts = 16;
  limits.timeout = std::chrono::milliseconds{500};
  c4::node::Reassembler reassembler(clock, limits);

  std::size_t pos = 0;
  while (size - pos >= 4) {
    const pid_t pid = 100 + (data[pos] & 3);
    const int advance_ms = data[pos + 1];
    const std::size_t len =
        std::min<std::size_t>(data[pos + 2] | (std::size_t{data[pos + 3]} << 8), size - pos - 4);
    const std::span<const std::uint8_t> datagram(data + pos + 4, len);
    pos += 4 + len;

    clock.advance(std::chrono::milliseconds{advance_ms});
    reassembler.expire();
    auto message = c4::report::decodeMessageCbor(datagram);
    if (!message) continue;
    auto* report = std::get_if<c4::report::RankReport>(&*message);
    if (report == nullptr) continue;
    auto offer = reassembler.offer(pid, std::move(*report));
    C4_FUZZ_CHECK(reassembler.partialReports() <= limits.max_partial);
    C4_FUZZ_CHECK(reassembler.bufferedParts() <= limits.max_parts);
    C4_FUZZ_CHECK(offer.report.has_value() == (offer.outcome == c4::node::PartOutcome::kComplete));
    if (offer.report) {
      C4_FUZZ_CHECK(offer.report->part == 0 && offer.report->parts == 1);
      C4_FUZZ_CHECK(offer.report->connections.size() <= c4::report::kMaxConnectionsPerReport);
      C4_FUZZ_CHECK(c4::report::validate(*offer.report).has_value());
    }
  }
  return 0;
}
