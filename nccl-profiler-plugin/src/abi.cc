// The exported NCCL profiler ABI: ncclProfiler_v6 (native) and v5..v1 (adapters), the tables of
// src/shells.cc. NCCL probes v6, v5, ..., v1 and takes the first it finds (src/plugin/profiler.cc
// l.73-92 at v2.30.7-1); older NCCLs find the newest version they know. Only these six symbols are
// visible (-fvisibility=hidden and exports.map).
#include "c4/common/log.h"
#include "c4/profiler/shells.h"

#define C4_EXPORT __attribute__((visibility("default")))

#if C4_PLUGIN_STATIC_RUNTIME
// libstdc++'s own clean-up: frees the emergency exception-handling arena of our private,
// statically linked copy, which nothing else would free at dlclose.
namespace __gnu_cxx {
void __freeres() noexcept;
}
#endif

namespace c4::profiler {
namespace {

__attribute__((destructor)) void unloadProfiler() {
  // NCCL dlcloses the plugin when its last communicator is finalized (profiler.cc l.113-125);
  // the last finalize already joined the reporter. Drop anything the log configuration holds.
  setLogSink(nullptr);
#if C4_PLUGIN_STATIC_RUNTIME
  __gnu_cxx::__freeres();
#endif
}

}  // namespace
}  // namespace c4::profiler

extern "C" {

C4_EXPORT C4NcclProfiler_v6_t ncclProfiler_v6 = c4::profiler::tableV6();
C4_EXPORT C4NcclProfiler_v5_t ncclProfiler_v5 = c4::profiler::tableV5();
C4_EXPORT C4NcclProfiler_v4_t ncclProfiler_v4 = c4::profiler::tableV4();
C4_EXPORT C4NcclProfiler_v3_t ncclProfiler_v3 = c4::profiler::tableV3();
C4_EXPORT C4NcclProfiler_v2_t ncclProfiler_v2 = c4::profiler::tableV2();
C4_EXPORT C4NcclProfiler_v1_t ncclProfiler_v1 = c4::profiler::tableV1();

}  // extern "C"
