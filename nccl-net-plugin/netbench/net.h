// What the collectives need from a transport: point-to-point isend/irecv/test to every other rank
// in posting order, like NCCL's use of a net plugin. Two implementations: the plugin loaded with
// dlopen (PluginNet) and plain multi-stream TCP sockets (TcpNet, the --baseline).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "bootstrap.h"
#include "c4/common/error.h"

namespace c4::netbench {

class Net {
 public:
  virtual ~Net() = default;
  [[nodiscard]] virtual std::string describe() const = 0;
  // Connects to every other rank (handles/addresses exchanged through the bootstrap).
  virtual Status connectAll(Bootstrap& bootstrap) = 0;
  // nullptr: the transport cannot take another request now; try again after test().
  virtual Result<void*> isend(int peer, void* data, std::size_t size, int tag) = 0;
  virtual Result<void*> irecv(int peer, void* data, std::size_t size, int tag) = 0;
  // true once complete; the request is released then.
  virtual Result<bool> test(void* request) = 0;
  // Called when a pass over the outstanding requests completed nothing.
  virtual void idle() = 0;
  [[nodiscard]] virtual std::size_t maxMessageBytes() const = 0;
  // A collective's bounds (NCCL's Coll events): what it posts in between belongs to it.
  virtual void collectiveStart(const char* /*func*/, std::size_t /*count*/) {}
  virtual void collectiveEnd() {}
};

std::unique_ptr<Net> makePluginNet(const std::string& pluginName, int rank, int worldSize,
                                   std::string* error);
// spin: idle() yields the CPU (sched_yield, as NCCL's proxy and PluginNet do) instead of blocking
// in poll() until a socket is ready. acked: a send completes once the peer's TCP has acknowledged
// its bytes (SIOCOUTQ), as an RDMA write over InfiniBand/RoCE completes once the remote HCA has
// acknowledged it, rather than once they are written to the kernel: the send's time then follows
// the wire, as NCCL's SendWait does over its IB transport.
std::unique_ptr<Net> makeTcpNet(int rank, int worldSize, int streams, bool spin = false,
                                bool acked = false);

}  // namespace c4::netbench
