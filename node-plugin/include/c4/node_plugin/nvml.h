// GPU health through NVML, loaded at run time: dlopen("libnvidia-ml.so.1") and dlsym of the few
// functions used, so the node plugin runs (GPUs unavailable) on nodes without the driver. XID
// events come from an NVML event set (nvmlEventSetCreate / nvmlDeviceRegisterEvents /
// nvmlEventSetWait_v2) drained at every reading when the driver supports it.
//
// A GPU is unhealthy when it has uncorrected volatile ECC errors, retired pages pending, or has
// reported a critical XID (48, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120); throttle reasons are
// reported as a bitmask and named in `detail` for hardware slowdowns but do not make it
// unhealthy.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "c4/common/error.h"
#include "c4/common/report.h"

namespace c4::node {

struct GpuReading {
  bool available = false;
  std::string reason;  // why unavailable
  std::vector<report::GpuHealth> gpus;
};

class GpuReader {
 public:
  virtual ~GpuReader() = default;
  virtual GpuReading read() = 0;
};

// Loads NVML from `library` (default libnvidia-ml.so.1). Never fails: without the library or
// when nvmlInit fails, every read() says unavailable with the reason.
std::unique_ptr<GpuReader> createNvmlGpuReader(const std::string& library = "libnvidia-ml.so.1");

// True for XIDs that mean the GPU needs attention (see above).
bool isCriticalXid(std::uint64_t xid) noexcept;

}  // namespace c4::node
