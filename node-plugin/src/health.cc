#include "c4/node_plugin/health.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "c4/node_plugin/nvml.h"

namespace c4::node {
namespace {

namespace fs = std::filesystem;

std::optional<std::string> readText(const fs::path& p) {
  std::ifstream in(p);
  if (!in) return std::nullopt;
  std::stringstream buf;
  buf << in.rdbuf();
  if (in.bad()) return std::nullopt;
  std::string s = buf.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

std::optional<std::int64_t> readInt(const fs::path& p) {
  auto s = readText(p);
  if (!s || s->empty()) return std::nullopt;
  std::int64_t v = 0;
  auto [ptr, ec] = std::from_chars(s->data(), s->data() + s->size(), v);
  if (ec != std::errc{} || ptr != s->data() + s->size()) return std::nullopt;
  return v;
}

std::uint64_t readCounter(const fs::path& p) {
  auto v = readInt(p);
  return v && *v > 0 ? static_cast<std::uint64_t>(*v) : 0;
}

std::vector<std::string> listDir(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    names.push_back(it->path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// "4: ACTIVE" -> "ACTIVE"
std::string afterColon(const std::string& s) {
  auto pos = s.find(':');
  std::string out = pos == std::string::npos ? s : s.substr(pos + 1);
  while (!out.empty() && out.front() == ' ') out.erase(out.begin());
  return out.substr(0, 32);
}

// "100 Gb/sec (4X EDR)" -> 100000; "2.5 Gb/sec (1X SDR)" -> 2500
std::uint64_t rateMbps(const std::string& s) {
  try {
    std::size_t used = 0;
    const double gb = std::stod(s, &used);
    if (gb <= 0) return 0;
    return static_cast<std::uint64_t>(gb * 1000.0 + 0.5);
  } catch (...) {
    return 0;
  }
}

}  // namespace

SysfsReadings readSysfs(const std::string& sysfs_root, const std::optional<std::regex>& filter) {
  SysfsReadings out;
  const fs::path root(sysfs_root);

  // RDMA first: which interfaces sit on an RDMA port.
  const fs::path ib = root / "class" / "infiniband";
  std::map<std::string, bool> rdma_netdevs;
  std::error_code ec;
  if (!fs::is_directory(ib, ec)) {
    out.rdma_reason = "no " + ib.string() + " (no RDMA driver loaded)";
  } else {
    for (const auto& dev : listDir(ib)) {
      for (const auto& port_name : listDir(ib / dev / "ports")) {
        const fs::path port = ib / dev / "ports" / port_name;
        report::RdmaPortHealth p;
        p.device = dev.substr(0, report::kMaxNameBytes);
        std::uint32_t num = 0;
        auto [ptr, perr] =
            std::from_chars(port_name.data(), port_name.data() + port_name.size(), num);
        if (perr != std::errc{} || num > 255) continue;
        p.port = num;
        p.state = afterColon(readText(port / "state").value_or(""));
        p.phys_state = afterColon(readText(port / "phys_state").value_or(""));
        p.rate_mbps = rateMbps(readText(port / "rate").value_or(""));
        p.active = p.state == "ACTIVE" && p.phys_state == "LinkUp";
        const fs::path c = port / "counters";
        p.symbol_errors = readCounter(c / "symbol_error");
        p.link_downed = readCounter(c / "link_downed");
        p.link_error_recovery = readCounter(c / "link_error_recovery");
        p.rcv_errors = readCounter(c / "port_rcv_errors");
        p.xmit_discards = readCounter(c / "port_xmit_discards");
        if (auto nd = readText(port / "gid_attrs" / "ndevs" / "0"); nd && !nd->empty()) {
          p.netdev = *nd;
        } else if (auto nets = listDir(ib / dev / "device" / "net"); !nets.empty()) {
          p.netdev = nets.front();
        }
        p.netdev = p.netdev.substr(0, report::kMaxNameBytes);
        if (!p.netdev.empty()) rdma_netdevs[p.netdev] = true;
        out.rdma_ports.push_back(std::move(p));
      }
    }
    if (out.rdma_ports.empty()) {
      out.rdma_reason = "no RDMA port under " + ib.string();
    } else {
      out.rdma_available = true;
      if (out.rdma_ports.size() > report::kMaxDevicesPerNode) {
        out.rdma_ports.resize(report::kMaxDevicesPerNode);
      }
    }
  }

  const fs::path net = root / "class" / "net";
  if (!fs::is_directory(net, ec)) {
    out.nics_reason = "no " + net.string();
    return out;
  }
  for (const auto& name : listDir(net)) {
    if (name == "lo" || name.empty() || name.size() > report::kMaxNameBytes) continue;
    const fs::path d = net / name;
    if (filter) {
      if (!std::regex_match(name, *filter)) continue;
    } else if (!fs::exists(d / "device", ec)) {
      // Without a filter, the node's NICs: an interface with a device (PCI, SR-IOV, IPoIB), not
      // the virtual ones (veths of every pod, bridges, tunnels, bonds) that come and go with
      // the pods and would crowd the NICs out of the report.
      continue;
    }
    report::NicHealth n;
    n.name = name;
    n.operstate = readText(d / "operstate").value_or("unknown").substr(0, 32);
    // Reading `carrier` of an interface that is administratively down fails (EINVAL): no carrier.
    n.carrier = readInt(d / "carrier").value_or(0) == 1;
    n.carrier_changes = readCounter(d / "carrier_changes");
    n.speed_mbps = readCounter(d / "speed");  // -1 (unknown) reads as 0
    n.rx_errors = readCounter(d / "statistics" / "rx_errors");
    n.tx_errors = readCounter(d / "statistics" / "tx_errors");
    n.rx_dropped = readCounter(d / "statistics" / "rx_dropped");
    n.tx_dropped = readCounter(d / "statistics" / "tx_dropped");
    n.errors = n.rx_errors + n.tx_errors;
    n.up = n.operstate == "up" && n.carrier;
    n.rdma = rdma_netdevs.contains(name);
    out.nics.push_back(std::move(n));
    if (out.nics.size() == report::kMaxDevicesPerNode) break;
  }
  if (out.nics.empty()) {
    out.nics_reason = filter ? "no interface matches the interface filter"
                             : "no network interface with a device (a NIC) under " + net.string() +
                                   " (--interfaces selects virtual ones)";
  } else {
    out.nics_available = true;
  }
  return out;
}

std::vector<std::string> healthAnomalies(const report::NodeHealth& before,
                                         const report::NodeHealth& after) {
  std::vector<std::string> out;
  std::map<std::string, const report::NicHealth*> nics;
  for (const auto& n : before.nics) nics[n.name] = &n;
  for (const auto& n : after.nics) {
    auto it = nics.find(n.name);
    if (it == nics.end()) {
      out.push_back("nic " + n.name + " appeared");
      continue;
    }
    const auto& b = *it->second;
    if (b.up && !n.up) out.push_back("nic " + n.name + " went down (" + n.operstate + ")");
    if (n.carrier_changes != b.carrier_changes) out.push_back("nic " + n.name + " carrier changed");
    nics.erase(it);
  }
  for (const auto& [name, _] : nics) out.push_back("nic " + name + " disappeared");

  std::map<std::pair<std::string, std::uint32_t>, const report::RdmaPortHealth*> ports;
  for (const auto& p : before.rdma_ports) ports[{p.device, p.port}] = &p;
  for (const auto& p : after.rdma_ports) {
    const std::string name = p.device + "/" + std::to_string(p.port);
    auto it = ports.find({p.device, p.port});
    if (it == ports.end()) {
      out.push_back("rdma port " + name + " appeared");
      continue;
    }
    if (it->second->active && !p.active) {
      out.push_back("rdma port " + name + " not active (" + p.state + ", " + p.phys_state + ")");
    }
    if (p.link_downed > it->second->link_downed)
      out.push_back("rdma port " + name + " link downed");
    ports.erase(it);
  }
  for (const auto& [key, _] : ports) {
    out.push_back("rdma port " + key.first + "/" + std::to_string(key.second) + " disappeared");
  }

  std::map<std::string, const report::GpuHealth*> gpus;
  for (const auto& g : before.gpus) gpus[g.uuid] = &g;
  for (const auto& g : after.gpus) {
    auto it = gpus.find(g.uuid);
    if (it == gpus.end()) {
      out.push_back("gpu " + g.uuid + " appeared");
      continue;
    }
    const auto& b = *it->second;
    if (b.healthy && !g.healthy) out.push_back("gpu " + g.uuid + " unhealthy: " + g.detail);
    if (g.last_xid != b.last_xid && g.last_xid != 0) {
      out.push_back("gpu " + g.uuid + " xid " + std::to_string(g.last_xid));
    }
    if (g.ecc_volatile_uncorrected > b.ecc_volatile_uncorrected) {
      out.push_back("gpu " + g.uuid + " uncorrected ECC errors");
    }
    gpus.erase(it);
  }
  for (const auto& [uuid, _] : gpus) out.push_back("gpu " + uuid + " disappeared");
  if (before.gpus_available != after.gpus_available ||
      before.nics_available != after.nics_available ||
      before.rdma_available != after.rdma_available) {
    out.push_back("hardware availability changed");
  }
  return out;
}

Result<std::unique_ptr<HealthMonitor>> HealthMonitor::create(Config config, Clock& clock,
                                                             std::unique_ptr<GpuReader> gpus,
                                                             metrics::Registry& registry,
                                                             Publish publish) {
  std::optional<std::regex> filter;
  if (!config.interface_regex.empty()) {
    try {
      filter.emplace(config.interface_regex, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      return makeError(ErrorCode::kInvalidArgument, "interfaces: bad regular expression '" +
                                                        config.interface_regex + "': " + e.what());
    }
  }
  return std::unique_ptr<HealthMonitor>(new HealthMonitor(
      std::move(config), clock, std::move(gpus), registry, std::move(publish), std::move(filter)));
}

HealthMonitor::HealthMonitor(Config config, Clock& clock, std::unique_ptr<GpuReader> gpus,
                             metrics::Registry& registry, Publish publish,
                             std::optional<std::regex> filter)
    : config_(std::move(config)),
      clock_(clock),
      gpus_(std::move(gpus)),
      publish_(std::move(publish)),
      filter_(std::move(filter)),
      log_("node-plugin.health"),
      nic_up_(registry.gauge("c4_node_plugin_nic_up", "1 when the interface is up with carrier.",
                             {"interface"})),
      nic_errors_(registry.gauge("c4_node_plugin_nic_errors",
                                 "Cumulative rx+tx errors of the interface.", {"interface"})),
      nic_carrier_changes_(registry.gauge("c4_node_plugin_nic_carrier_changes",
                                          "Cumulative carrier changes of the interface.",
                                          {"interface"})),
      rdma_active_(registry.gauge("c4_node_plugin_rdma_port_active",
                                  "1 when the RDMA port is ACTIVE and LinkUp.",
                                  {"device", "port"})),
      gpu_healthy_(registry.gauge("c4_node_plugin_gpu_healthy", "1 when the GPU is healthy.",
                                  {"gpu", "uuid"})),
      available_(registry.gauge("c4_node_plugin_hardware_available",
                                "1 when the class of hardware could be read.", {"class"})),
      anomalies_(registry
                     .counter("c4_node_plugin_health_anomalies_total",
                              "Health changes that triggered an immediate send.")
                     .get()) {
  last_loop_ns_.store(clock_.monoNow().time_since_epoch().count());
}

HealthMonitor::~HealthMonitor() {
  stop();
}

report::NodeHealth HealthMonitor::pollOnce() {
  SysfsReadings s = readSysfs(config_.sysfs_root, filter_);
  report::NodeHealth h;
  h.nics = std::move(s.nics);
  h.nics_available = s.nics_available;
  h.nics_reason = std::move(s.nics_reason);
  h.rdma_ports = std::move(s.rdma_ports);
  h.rdma_available = s.rdma_available;
  h.rdma_reason = std::move(s.rdma_reason);
  if (gpus_) {
    GpuReading g = gpus_->read();
    h.gpus = std::move(g.gpus);
    h.gpus_available = g.available;
    h.gpus_reason = std::move(g.reason);
  } else {
    h.gpus_reason = "GPU monitoring disabled";
  }
  for (const auto& n : h.nics) {
    nic_up_.labels({n.name}).set(n.up ? 1 : 0);
    nic_errors_.labels({n.name}).set(static_cast<double>(n.errors));
    nic_carrier_changes_.labels({n.name}).set(static_cast<double>(n.carrier_changes));
  }
  for (const auto& p : h.rdma_ports) {
    rdma_active_.labels({p.device, std::to_string(p.port)}).set(p.active ? 1 : 0);
  }
  for (const auto& g : h.gpus) {
    gpu_healthy_.labels({std::to_string(g.index), g.uuid}).set(g.healthy ? 1 : 0);
  }
  available_.labels({"nics"}).set(h.nics_available ? 1 : 0);
  available_.labels({"rdma"}).set(h.rdma_available ? 1 : 0);
  available_.labels({"gpus"}).set(h.gpus_available ? 1 : 0);
  bool anomaly = false;
  if (previous_) {
    auto changes = healthAnomalies(*previous_, h);
    anomaly = !changes.empty();
    for (const auto& c : changes) log_.warn("health anomaly", {{"change", c}});
    if (anomaly) anomalies_.inc();
  }
  previous_ = h;
  if (publish_) publish_(h, anomaly);
  return h;
}

void HealthMonitor::start() {
  thread_ = std::thread([this] {
    std::unique_lock lock(mu_);
    while (!stop_) {
      last_loop_ns_.store(clock_.monoNow().time_since_epoch().count());
      lock.unlock();
      pollOnce();
      lock.lock();
      clock_.waitFor(lock, cv_, config_.interval, [this] { return stop_; });
    }
  });
}

void HealthMonitor::stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

MonoTime HealthMonitor::lastLoop() const {
  return MonoTime{Duration{last_loop_ns_.load()}};
}

}  // namespace c4::node
