// Node health readers. Network interfaces and RDMA ports come from sysfs under an injectable
// root (default /sys); GPUs from NVML (nvml.h). Absent hardware makes its class *unavailable*
// with a reason, never healthy or faulty.
//
//   /sys/class/net/<if>/{operstate,carrier,carrier_changes,speed}
//   /sys/class/net/<if>/statistics/{rx_errors,tx_errors,rx_dropped,tx_dropped}
//   /sys/class/infiniband/<dev>/ports/<n>/{state,phys_state,rate}
//   /sys/class/infiniband/<dev>/ports/<n>/counters/{symbol_error,link_downed,
//       link_error_recovery,port_rcv_errors,port_xmit_discards}
//   /sys/class/infiniband/<dev>/ports/<n>/gid_attrs/ndevs/0, else /sys/class/infiniband/<dev>/
//       device/net/<if>: the network interface of the port
//
// Loopback is never watched. Without a filter the interfaces with a device
// (/sys/class/net/<if>/device: PCI, SR-IOV, IPoIB) are watched, not the virtual ones (pods'
// veths, bridges, tunnels, bonds); a filter (ECMAScript, full match) selects by name instead,
// virtual ones included. At most report::kMaxDevicesPerNode of each kind are kept (sorted by name).
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "c4/common/clock.h"
#include "c4/common/log.h"
#include "c4/common/metrics.h"
#include "c4/common/report.h"

namespace c4::node {

class GpuReader;

struct SysfsReadings {
  bool nics_available = false;
  std::string nics_reason;
  std::vector<report::NicHealth> nics;
  bool rdma_available = false;
  std::string rdma_reason;
  std::vector<report::RdmaPortHealth> rdma_ports;
};

// Reads the NIC and RDMA state under `sysfs_root`.
SysfsReadings readSysfs(const std::string& sysfs_root, const std::optional<std::regex>& filter);

// What changed between two readings that deserves an immediate send: an interface that was up
// and is not, a carrier change, an RDMA port that was active and is not, a GPU that turned
// unhealthy or reported a new XID, new uncorrected ECC errors. Devices that appear or disappear
// are anomalies too. Returns one line per anomaly (empty: none).
std::vector<std::string> healthAnomalies(const report::NodeHealth& before,
                                         const report::NodeHealth& after);

// Polls sysfs and the GPUs every interval, publishes readings as gauges and hands each reading
// to a callback with the anomaly list.
class HealthMonitor {
 public:
  struct Config {
    std::string sysfs_root = "/sys";
    std::string interface_regex;  // "" = every non-loopback interface
    Duration interval = std::chrono::seconds{1};
  };
  using Publish = std::function<void(const report::NodeHealth&, bool anomaly)>;

  // `gpus` may be null (no GPU reading at all: GPUs unavailable, "GPU monitoring disabled").
  static Result<std::unique_ptr<HealthMonitor>> create(Config config, Clock& clock,
                                                       std::unique_ptr<GpuReader> gpus,
                                                       metrics::Registry& registry,
                                                       Publish publish);
  ~HealthMonitor();

  // One reading: reads, compares with the previous one, publishes. Returns the reading.
  report::NodeHealth pollOnce();
  void start();
  void stop();
  [[nodiscard]] MonoTime lastLoop() const;

 private:
  HealthMonitor(Config config, Clock& clock, std::unique_ptr<GpuReader> gpus,
                metrics::Registry& registry, Publish publish, std::optional<std::regex> filter);

  Config config_;
  Clock& clock_;
  std::unique_ptr<GpuReader> gpus_;
  Publish publish_;
  std::optional<std::regex> filter_;
  Logger log_;
  std::optional<report::NodeHealth> previous_;
  metrics::Family<metrics::Gauge>& nic_up_;
  metrics::Family<metrics::Gauge>& nic_errors_;
  metrics::Family<metrics::Gauge>& nic_carrier_changes_;
  metrics::Family<metrics::Gauge>& rdma_active_;
  metrics::Family<metrics::Gauge>& gpu_healthy_;
  metrics::Family<metrics::Gauge>& available_;
  metrics::Counter& anomalies_;
  std::mutex mu_;
  std::condition_variable_any cv_;
  bool stop_ = false;
  std::atomic<std::int64_t> last_loop_ns_{0};
  std::thread thread_;
};

}  // namespace c4::node
