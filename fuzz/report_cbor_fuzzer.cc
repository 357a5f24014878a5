// The report CBOR decoders on arbitrary bytes, read as a plugin datagram (Message) and as a node
// batch (NodeReport). Besides "never crashes, never leaks", it checks what report_internal.h
// promises: the streaming (fast) decoder accepts only what the DOM (fallback) decoder accepts,
// with the same value; whatever is accepted encodes again, and the encoding is taken by the
// streaming decoder with the same value.
#include <cstddef>
#include <cstdint>
#include <span>

#include "common/src/report_internal.h"
#include "fuzz_check.h"

namespace {

using namespace c4::report;

template <typename T>
void checkRoundTrip(const T& value, bool is_message) {
  auto bytes = encodeCbor(value);
  C4_FUZZ_CHECK(bytes.has_value());
  if (is_message) {
    auto again = internal::decodeMessageCborStreaming(*bytes);
    C4_FUZZ_CHECK(again.has_value());
    C4_FUZZ_CHECK(encodeCbor(*again) == bytes);
  } else {
    auto again = internal::decodeNodeReportCborStreaming(*bytes);
    C4_FUZZ_CHECK(again.has_value());
    C4_FUZZ_CHECK(encodeCbor(*again) == bytes);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::uint8_t> bytes(data, size);

  auto fast_message = internal::decodeMessageCborStreaming(bytes);
  auto dom_message = internal::decodeMessageCborDom(bytes);
  if (fast_message) {
    C4_FUZZ_CHECK(dom_message.has_value());
    C4_FUZZ_CHECK(encodeCbor(*fast_message) == encodeCbor(*dom_message));
  }
  if (dom_message) checkRoundTrip(*dom_message, true);
  C4_FUZZ_CHECK(decodeMessageCbor(bytes).has_value() == dom_message.has_value());

  auto fast_batch = internal::decodeNodeReportCborStreaming(bytes);
  auto dom_batch = internal::decodeNodeReportCborDom(bytes);
  if (fast_batch) {
    C4_FUZZ_CHECK(dom_batch.has_value());
    C4_FUZZ_CHECK(encodeCbor(*fast_batch) == encodeCbor(*dom_batch));
  }
  if (dom_batch) checkRoundTrip(*dom_batch, false);
  C4_FUZZ_CHECK(decodeNodeReportCbor(bytes).has_value() == dom_batch.has_value());
  return 0;
}
