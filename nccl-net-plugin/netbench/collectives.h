// Ring allreduce and all-to-all over a Net, as NCCL runs them over a net plugin: messages cut into
// slices, at most `window` slices in flight per peer and direction (NCCL_STEPS = 8), the sender's
// rank as tag. Data are uint32 words summed with wrap-around, so results are exact and verifiable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "c4/common/error.h"
#include "net.h"

namespace c4::netbench {

struct CollectiveOptions {
  std::size_t slice_bytes = 1 << 20;
  int window = 8;
};

// In place: data (count words) becomes the element-wise sum over ranks. `scratch` >= count/N+1.
Status ringAllreduce(Net& net, int rank, int world, std::uint32_t* data, std::size_t count,
                     std::vector<std::uint32_t>& scratch, const CollectiveOptions& o);

// send holds `world` blocks of `block` words; block p goes to rank p; recv block p comes from p.
Status allToAll(Net& net, int rank, int world, const std::uint32_t* send, std::uint32_t* recv,
                std::size_t block, const CollectiveOptions& o);

// Ring pump: every rank sends `bytes` to the next rank and receives `bytes` from the previous one,
// cut into slices like the collectives, with nothing computed: the data movement a ring
// allreduce cannot beat over the same transport (the "physical limit" of a ring on it).
Status ringPump(Net& net, int rank, int world, char* send, char* recv, std::size_t bytes,
                const CollectiveOptions& o);

// Deterministic test data and their expected results.
std::uint32_t allreduceInput(int rank, std::size_t i);
// The value element i has after `k` >= 1 allreduces of allreduceInput over `world` ranks.
std::uint32_t allreduceExpected(int world, std::size_t i, int k);
std::uint32_t allToAllInput(int src, int dst, std::size_t i);

}  // namespace c4::netbench
