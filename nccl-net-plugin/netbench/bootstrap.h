// c4-netbench's own out-of-band bootstrap (what NCCL does with ncclUniqueId): rank 0 listens on
// MASTER_ADDR:MASTER_PORT, every rank connects, and allgather() exchanges one blob per rank
// (plugin handles, baseline addresses, checkpoint steps, timings). Blocking TCP, used only
// outside timed regions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "c4/common/error.h"
#include "c4/common/unix_socket.h"

namespace c4::netbench {

class Bootstrap {
 public:
  // Waits up to `timeoutMs` for all ranks (rank 0) or for rank 0 to accept (others).
  static Result<Bootstrap> create(int rank, int worldSize, const std::string& masterAddr,
                                  int masterPort, int timeoutMs = 60000);

  [[nodiscard]] int rank() const { return rank_; }
  [[nodiscard]] int worldSize() const { return worldSize_; }
  // The local address of the connection towards rank 0 (how peers can reach this host).
  [[nodiscard]] const std::string& localAddress() const { return localAddress_; }

  Result<std::vector<std::string>> allgather(const std::string& mine);
  Status barrier();

 private:
  int rank_ = 0;
  int worldSize_ = 1;
  std::string localAddress_;
  std::vector<UniqueFd> peers_;  // rank 0: one per other rank (index = rank); others: [0] = root
};

}  // namespace c4::netbench
