// The report JSON decoders (a DOM built under depth and item bounds, then the strict reader) on
// arbitrary text, as a Message and as a NodeReport. Whatever is accepted encodes again to JSON
// that decodes to the same value, and to CBOR that the streaming CBOR decoder takes.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/src/report_internal.h"
#include "fuzz_check.h"

namespace {

using namespace c4::report;

template <typename T, typename Decode>
void checkRoundTrip(const T& value, Decode decode) {
  auto text = encodeJson(value);
  C4_FUZZ_CHECK(text.has_value());
  auto again = decode(*text);
  C4_FUZZ_CHECK(again.has_value());
  C4_FUZZ_CHECK(encodeJson(*again) == text);
  auto cbor = encodeCbor(value);
  C4_FUZZ_CHECK(cbor.has_value());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto m = decodeMessageJson(text)) {
    checkRoundTrip(*m, [](std::string_view t) { return decodeMessageJson(t); });
    auto cbor = encodeCbor(*m);
    C4_FUZZ_CHECK(internal::decodeMessageCborStreaming(*cbor).has_value());
  }
  if (auto b = decodeNodeReportJson(text)) {
    checkRoundTrip(*b, [](std::string_view t) { return decodeNodeReportJson(t); });
    auto cbor = encodeCbor(*b);
    C4_FUZZ_CHECK(internal::decodeNodeReportCborStreaming(*cbor).has_value());
  }
  return 0;
}
