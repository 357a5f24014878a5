// FNV-1a (64-bit): the plugin's one checksum/hash for handles, plan peer names and netbench
// checkpoints. Not cryptographic: it detects corruption and mismatches, not tampering.
#pragma once

#include <cstddef>
#include <cstdint>

namespace c4 {

inline std::uint64_t fnv1a64(const void* data, std::size_t n) {
  std::uint64_t h = 1469598103934665603ull;
  const auto* b = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) {
    h ^= b[i];
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace c4
