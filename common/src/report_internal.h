// Internals of the report codecs, for their tests and benchmarks only (not installed, not part of
// the API): the two CBOR decoders that decodeMessageCbor / decodeNodeReportCbor combine.
//
// The streaming decoders read CBOR straight into the structs and accept exactly the documents the
// DOM decoders accept, with the same value, or give up (std::nullopt) on anything else — including
// encodings the DOM decoders accept but this project's encoder never writes (duplicate keys,
// indefinite-length strings, half-precision floats). The public decoders try the streaming one and
// fall back to the DOM one, whose verdict and error message (naming the field path) are
// authoritative.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "c4/common/report.h"

namespace c4::report::internal {

// nlohmann::json DOM (depth-limited sax_parse) walked by a strict reader: the reference decoder.
Result<Message> decodeMessageCborDom(std::span<const std::uint8_t> bytes);
Result<NodeReport> decodeNodeReportCborDom(std::span<const std::uint8_t> bytes);

// One pass over the bytes into the structs; std::nullopt when the document is not accepted.
std::optional<Message> decodeMessageCborStreaming(std::span<const std::uint8_t> bytes);
std::optional<NodeReport> decodeNodeReportCborStreaming(std::span<const std::uint8_t> bytes);

}  // namespace c4::report::internal
