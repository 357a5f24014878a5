#include "c4/node_plugin/nvml.h"

#include <dlfcn.h>

#include <map>

namespace c4::node {
namespace {

// The NVML ABI subset used here (nvml.h, stable across driver releases).
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
using nvmlEventSet_t = struct nvmlEventSet_st*;
struct nvmlEventData_t {
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
constexpr nvmlReturn_t kSuccess = 0;
constexpr nvmlReturn_t kTimeout = 10;
constexpr int kMemoryErrorUncorrected = 1;
constexpr int kVolatileEcc = 0;
constexpr unsigned long long kEventXidCritical = 0x8;
constexpr unsigned long long kThrottleHwSlowdown = 0x8;
constexpr unsigned long long kThrottleHwThermal = 0x40;
constexpr unsigned long long kThrottleHwPowerBrake = 0x80;

struct LibraryCloser {
  void operator()(void* h) const {
    if (h != nullptr) ::dlclose(h);
  }
};

class NvmlGpuReader final : public GpuReader {
 public:
  explicit NvmlGpuReader(const std::string& library) {
    lib_.reset(::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL));
    if (!lib_) {
      const char* e = ::dlerror();
      reason_ = "cannot load " + library + ": " + (e != nullptr ? e : "unknown error");
      return;
    }
    bool ok = resolve(init_, "nvmlInit_v2") && resolve(shutdown_, "nvmlShutdown") &&
              resolve(count_, "nvmlDeviceGetCount_v2") &&
              resolve(handle_, "nvmlDeviceGetHandleByIndex_v2") &&
              resolve(uuid_, "nvmlDeviceGetUUID") && resolve(error_string_, "nvmlErrorString");
    if (!ok) return;
    // Optional: a driver without them reports zeros for the reading.
    resolve(ecc_, "nvmlDeviceGetTotalEccErrors", false);
    resolve(retired_pending_, "nvmlDeviceGetRetiredPagesPendingStatus", false);
    resolve(throttle_, "nvmlDeviceGetCurrentClocksThrottleReasons", false);
    resolve(event_create_, "nvmlEventSetCreate", false);
    resolve(event_register_, "nvmlDeviceRegisterEvents", false);
    resolve(event_wait_, "nvmlEventSetWait_v2", false);
    resolve(event_free_, "nvmlEventSetFree", false);
    const nvmlReturn_t rc = init_();
    if (rc != kSuccess) {
      reason_ = "nvmlInit failed: " + errorString(rc);
      return;
    }
    initialised_ = true;
    unsigned int n = 0;
    if (count_(&n) != kSuccess) n = 0;
    if (event_create_ && event_register_ && event_wait_ && event_free_ &&
        event_create_(&events_) != kSuccess) {
      events_ = nullptr;
    }
    for (unsigned int i = 0; i < n && i < report::kMaxDevicesPerNode; ++i) {
      nvmlDevice_t dev = nullptr;
      if (handle_(i, &dev) != kSuccess) continue;
      devices_.push_back(dev);
      if (events_ != nullptr) event_register_(dev, kEventXidCritical, events_);
    }
  }

  ~NvmlGpuReader() override {
    if (events_ != nullptr) event_free_(events_);
    if (initialised_) shutdown_();
  }

  GpuReading read() override {
    GpuReading out;
    if (!initialised_) {
      out.reason = reason_;
      return out;
    }
    if (devices_.empty()) {
      out.reason = "NVML reports no GPU";
      return out;
    }
    drainXids();
    out.available = true;
    for (std::size_t i = 0; i < devices_.size(); ++i) {
      nvmlDevice_t dev = devices_[i];
      report::GpuHealth g;
      g.index = static_cast<std::int32_t>(i);
      char uuid[96] = {};
      if (uuid_(dev, uuid, sizeof uuid) == kSuccess) g.uuid = uuid;
      unsigned long long count = 0;
      if (ecc_ && ecc_(dev, kMemoryErrorUncorrected, kVolatileEcc, &count) == kSuccess) {
        g.ecc_volatile_uncorrected = count;
      }
      int pending = 0;
      if (retired_pending_ && retired_pending_(dev, &pending) == kSuccess) {
        g.retired_pages_pending = pending != 0;
      }
      unsigned long long reasons = 0;
      if (throttle_ && throttle_(dev, &reasons) == kSuccess) g.throttle_reasons = reasons;
      if (auto it = xids_.find(dev); it != xids_.end()) g.last_xid = it->second;
      std::string detail;
      auto note = [&](const std::string& s) { detail += (detail.empty() ? "" : "; ") + s; };
      if (g.ecc_volatile_uncorrected > 0) {
        note(std::to_string(g.ecc_volatile_uncorrected) + " uncorrected ECC errors");
      }
      if (g.retired_pages_pending) note("retired pages pending");
      if (auto it = critical_.find(dev); it != critical_.end()) {
        note("critical XID " + std::to_string(it->second));
      }
      g.healthy = detail.empty();
      if (g.throttle_reasons & (kThrottleHwSlowdown | kThrottleHwThermal | kThrottleHwPowerBrake)) {
        note("hardware slowdown");
      }
      g.detail = detail;
      out.gpus.push_back(std::move(g));
    }
    return out;
  }

 private:
  template <typename F>
  bool resolve(F*& fn, const char* name, bool required = true) {
    fn = reinterpret_cast<F*>(::dlsym(lib_.get(), name));
    if (fn == nullptr && required) {
      reason_ = std::string("NVML library lacks ") + name;
      return false;
    }
    return true;
  }
  std::string errorString(nvmlReturn_t rc) const {
    const char* s = error_string_ ? error_string_(rc) : nullptr;
    return s != nullptr ? s : "error " + std::to_string(rc);
  }
  void drainXids() {
    if (events_ == nullptr) return;
    for (int i = 0; i < 1024; ++i) {
      nvmlEventData_t data{};
      const nvmlReturn_t rc = event_wait_(events_, &data, 0);
      if (rc == kTimeout || rc != kSuccess) return;
      if (data.eventType != kEventXidCritical || data.device == nullptr) continue;
      xids_[data.device] = data.eventData;
      if (isCriticalXid(data.eventData)) critical_[data.device] = data.eventData;
    }
  }

  std::unique_ptr<void, LibraryCloser> lib_;
  std::string reason_;
  bool initialised_ = false;
  nvmlReturn_t (*init_)() = nullptr;
  nvmlReturn_t (*shutdown_)() = nullptr;
  nvmlReturn_t (*count_)(unsigned int*) = nullptr;
  nvmlReturn_t (*handle_)(unsigned int, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*uuid_)(nvmlDevice_t, char*, unsigned int) = nullptr;
  const char* (*error_string_)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*ecc_)(nvmlDevice_t, int, int, unsigned long long*) = nullptr;
  nvmlReturn_t (*retired_pending_)(nvmlDevice_t, int*) = nullptr;
  nvmlReturn_t (*throttle_)(nvmlDevice_t, unsigned long long*) = nullptr;
  nvmlReturn_t (*event_create_)(nvmlEventSet_t*) = nullptr;
  nvmlReturn_t (*event_register_)(nvmlDevice_t, unsigned long long, nvmlEventSet_t) = nullptr;
  nvmlReturn_t (*event_wait_)(nvmlEventSet_t, nvmlEventData_t*, unsigned int) = nullptr;
  nvmlReturn_t (*event_free_)(nvmlEventSet_t) = nullptr;
  nvmlEventSet_t events_ = nullptr;
  std::vector<nvmlDevice_t> devices_;
  std::map<nvmlDevice_t, std::uint64_t> xids_;
  std::map<nvmlDevice_t, std::uint64_t> critical_;
};

}  // namespace

bool isCriticalXid(std::uint64_t xid) noexcept {
  switch (xid) {
    case 48:
    case 62:
    case 63:
    case 64:
    case 74:
    case 79:
    case 92:
    case 94:
    case 95:
    case 119:
    case 120:
      return true;
    default:
      return false;
  }
}

std::unique_ptr<GpuReader> createNvmlGpuReader(const std::string& library) {
  return std::make_unique<NvmlGpuReader>(library);
}

}  // namespace c4::node
