// c4-netbench's own out-of-band bootstrap (what NCCL does with ncclUniqueId): rank 0 listens on
// MASTER_ADDR:MASTER_PORT, every rank connects, and allgather() exchanges one blob per rank
// (plugin handles, baseline addresses, checkpoint steps, timings). Blocking TCP, used only
// outside timed regions.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "c4/common/error.h"
#include "c4/common/unix_socket.h"

namespace c4::netbench {

class Bootstrap {
 public:
  // The numeric addresses a name stands for, in the order to try them (getaddrinfo's by default).
  using Resolver = std::function<Result<std::vector<std::string>>(const std::string& host)>;

  // Waits up to `timeoutMs` for all ranks (rank 0) or for rank 0 to accept (others). A rank other
  // than 0 resolves the master's name again on every try and tries each address: a restarted
  // job's master keeps its name but not its address, and while the old pod terminates a
  // resolver may still answer with the old address, or with both.
  static Result<Bootstrap> create(int rank, int worldSize, const std::string& masterAddr,
                                  int masterPort, int timeoutMs = 60000,
                                  const Resolver& resolver = {});

  [[nodiscard]] int rank() const { return rank_; }
  [[nodiscard]] int worldSize() const { return world_size_; }
  // The local address of the connection towards rank 0 (how peers can reach this host).
  [[nodiscard]] const std::string& localAddress() const { return local_address_; }

  Result<std::vector<std::string>> allgather(const std::string& mine);
  Status barrier();

 private:
  int rank_ = 0;
  int world_size_ = 1;
  std::string local_address_;
  std::vector<UniqueFd> peers_;  // rank 0: one per other rank (index = rank); others: [0] = root
};

}  // namespace c4::netbench
