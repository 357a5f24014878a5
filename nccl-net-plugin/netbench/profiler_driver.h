// c4-netbench in NCCL's role towards an NCCL profiler plugin. NCCL reports its own transports'
// work to a profiler plugin (NCCL_PROFILER_PLUGIN); c4-netbench does the same for the transfers of
// whatever transport it runs (--baseline: plain TCP, the stand-in for NCCL's native transports), so
// C4's profiler plugin can be exercised end to end without a GPU.
//
// Loading follows NCCL 2.29+ (src/plugin/plugin_open.cc, src/plugin/profiler.cc at v2.30.7-1):
// dlopen(RTLD_NOW | RTLD_LOCAL) of NAME as given, then libnccl-profiler-NAME.so; the
// ncclProfiler_v6 table; one init per communicator (here: one communicator over the job's world).
// Events, as NCCL's proxy emits them for a net transport: a Coll per collective (stopped when the
// collective returns), and per message a ProxyOp (parent: the Coll) with one ProxyStep (parent: the
// op). A send step records SendWait when posted; a receive step records RecvWait when posted and
// RecvFlushWait with the size when the data arrived; step and op stop when the message completes.
// Only the event kinds the plugin's activation mask asks for are generated.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "c4/common/error.h"
#include "c4/profiler/nccl_profiler_abi.h"
#include "net.h"

namespace c4::netbench {

class ProfilerDriver {
 public:
  // `name`: a path or a name as NCCL_PROFILER_PLUGIN takes it. A plugin that fails to load or to
  // initialise is an error here; the caller goes on without it, as NCCL does.
  static Result<std::unique_ptr<ProfilerDriver>> load(const std::string& name, int rank,
                                                      int worldSize);
  ~ProfilerDriver();  // finalize, dlclose
  ProfilerDriver(const ProfilerDriver&) = delete;
  ProfilerDriver& operator=(const ProfilerDriver&) = delete;

  [[nodiscard]] const std::string& path() const { return path_; }
  [[nodiscard]] int activationMask() const { return mask_; }

  void collStart(const char* func, std::size_t count);
  void collStop();

  struct Op {
    void* op = nullptr;
    void* step = nullptr;
    bool send = false;
    std::size_t bytes = 0;
  };
  Op opStart(int peer, bool send, std::size_t bytes);
  void opStop(const Op& op);

 private:
  ProfilerDriver() = default;
  [[nodiscard]] bool wants(int bit) const { return (mask_ & bit) != 0; }

  void* lib_ = nullptr;
  std::string path_;
  const C4NcclProfiler_v6_t* table_ = nullptr;
  void* context_ = nullptr;
  int mask_ = 0;
  int rank_ = 0;
  std::uint64_t seq_ = 0;
  void* coll_ = nullptr;
};

// `inner` with every message reported to `driver` (collectiveStart/End become Coll events).
std::unique_ptr<Net> makeProfiledNet(std::unique_ptr<Net> inner,
                                     std::unique_ptr<ProfilerDriver> driver);

}  // namespace c4::netbench
