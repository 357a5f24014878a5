#include "c4/node_plugin/health.h"

#include <gtest/gtest.h>

#include "c4/node_plugin/nvml.h"
#include "test_util.h"

namespace c4::node {
namespace {

using testing::TempDir;
using testing::writeFile;

// A NIC (with a device, as PCI, SR-IOV and IPoIB interfaces have), or a virtual interface.
void addNic(const TempDir& root, const std::string& name, const std::string& operstate,
            const std::string& carrier, int speed, int rx_errors, int carrier_changes = 1,
            bool device = true) {
  const std::string d = root / ("class/net/" + name);
  if (device) writeFile(d + "/device/vendor", "0x15b3\n");
  writeFile(d + "/operstate", operstate + "\n");
  if (!carrier.empty()) writeFile(d + "/carrier", carrier + "\n");
  writeFile(d + "/carrier_changes", std::to_string(carrier_changes) + "\n");
  writeFile(d + "/speed", std::to_string(speed) + "\n");
  writeFile(d + "/statistics/rx_errors", std::to_string(rx_errors) + "\n");
  writeFile(d + "/statistics/tx_errors", "2\n");
  writeFile(d + "/statistics/rx_dropped", "3\n");
  writeFile(d + "/statistics/tx_dropped", "4\n");
}

void addPort(const TempDir& root, const std::string& dev, int port, const std::string& state,
             const std::string& phys, const std::string& netdev) {
  const std::string p = root / ("class/infiniband/" + dev + "/ports/" + std::to_string(port));
  writeFile(p + "/state", state + "\n");
  writeFile(p + "/phys_state", phys + "\n");
  writeFile(p + "/rate", "400 Gb/sec (4X NDR)\n");
  writeFile(p + "/counters/symbol_error", "1\n");
  writeFile(p + "/counters/link_downed", "2\n");
  writeFile(p + "/counters/port_rcv_errors", "5\n");
  if (!netdev.empty()) writeFile(p + "/gid_attrs/ndevs/0", netdev + "\n");
}

TEST(SysfsTest, ReadsInterfacesAndRdmaPorts) {
  TempDir root;
  addNic(root, "lo", "unknown", "1", -1, 0);
  addNic(root, "eth0", "up", "1", 100000, 7, 3);
  addNic(root, "eth1", "down", "", -1, 0);  // carrier unreadable when down
  // Virtual interfaces (a pod's veth, a bridge): not NICs, not watched without a filter.
  addNic(root, "veth1a2b3c", "down", "", -1, 0, 5, false);
  addNic(root, "cni0", "up", "1", -1, 0, 1, false);
  addPort(root, "mlx5_0", 1, "4: ACTIVE", "5: LinkUp", "eth0");
  addPort(root, "mlx5_1", 1, "1: DOWN", "3: Disabled", "");
  auto s = readSysfs(root.path(), std::nullopt);
  ASSERT_TRUE(s.nics_available) << s.nics_reason;
  ASSERT_EQ(s.nics.size(), 2u);  // loopback is never watched, virtual interfaces not by default
  const auto& eth0 = s.nics[0];
  EXPECT_EQ(eth0.name, "eth0");
  EXPECT_TRUE(eth0.up);
  EXPECT_TRUE(eth0.carrier);
  EXPECT_TRUE(eth0.rdma);
  EXPECT_EQ(eth0.operstate, "up");
  EXPECT_EQ(eth0.speed_mbps, 100000u);
  EXPECT_EQ(eth0.carrier_changes, 3u);
  EXPECT_EQ(eth0.rx_errors, 7u);
  EXPECT_EQ(eth0.tx_errors, 2u);
  EXPECT_EQ(eth0.errors, 9u);
  EXPECT_EQ(eth0.rx_dropped, 3u);
  EXPECT_EQ(eth0.tx_dropped, 4u);
  const auto& eth1 = s.nics[1];
  EXPECT_FALSE(eth1.up);
  EXPECT_FALSE(eth1.carrier);
  EXPECT_EQ(eth1.speed_mbps, 0u);  // -1: unknown
  EXPECT_FALSE(eth1.rdma);

  ASSERT_TRUE(s.rdma_available);
  ASSERT_EQ(s.rdma_ports.size(), 2u);
  EXPECT_EQ(s.rdma_ports[0].device, "mlx5_0");
  EXPECT_EQ(s.rdma_ports[0].state, "ACTIVE");
  EXPECT_EQ(s.rdma_ports[0].phys_state, "LinkUp");
  EXPECT_TRUE(s.rdma_ports[0].active);
  EXPECT_EQ(s.rdma_ports[0].rate_mbps, 400000u);
  EXPECT_EQ(s.rdma_ports[0].netdev, "eth0");
  EXPECT_EQ(s.rdma_ports[0].symbol_errors, 1u);
  EXPECT_EQ(s.rdma_ports[0].link_downed, 2u);
  EXPECT_EQ(s.rdma_ports[0].rcv_errors, 5u);
  EXPECT_EQ(s.rdma_ports[0].xmit_discards, 0u);  // absent counter
  EXPECT_FALSE(s.rdma_ports[1].active);
  EXPECT_EQ(s.rdma_ports[1].state, "DOWN");

  auto only = readSysfs(root.path(), std::regex("eth1"));
  ASSERT_EQ(only.nics.size(), 1u);
  EXPECT_EQ(only.nics[0].name, "eth1");
  // A filter selects by name, virtual interfaces included (the test cluster's nodes have veths).
  auto virt = readSysfs(root.path(), std::regex("veth.*"));
  ASSERT_EQ(virt.nics.size(), 1u);
  EXPECT_EQ(virt.nics[0].name, "veth1a2b3c");
  auto none = readSysfs(root.path(), std::regex("ib.*"));
  EXPECT_FALSE(none.nics_available);
  EXPECT_FALSE(none.nics_reason.empty());
}

TEST(SysfsTest, AbsentHardwareIsUnavailable) {
  TempDir root;
  auto s = readSysfs(root.path(), std::nullopt);
  EXPECT_FALSE(s.nics_available);
  EXPECT_FALSE(s.rdma_available);
  EXPECT_TRUE(s.nics.empty());
  EXPECT_TRUE(s.rdma_ports.empty());
  EXPECT_NE(s.rdma_reason.find("infiniband"), std::string::npos);
  addNic(root, "lo", "unknown", "1", -1, 0);
  s = readSysfs(root.path(), std::nullopt);
  EXPECT_FALSE(s.nics_available);  // loopback only
  addNic(root, "veth0", "up", "1", -1, 0, 1, false);
  s = readSysfs(root.path(), std::nullopt);
  EXPECT_FALSE(s.nics_available) << "a virtual interface is not a NIC";
  EXPECT_NE(s.nics_reason.find("--interfaces"), std::string::npos) << s.nics_reason;
}

TEST(NvmlTest, NoLibraryMeansUnavailable) {
  auto reader = createNvmlGpuReader("libc4-no-such-nvml.so.1");
  auto r = reader->read();
  EXPECT_FALSE(r.available);
  EXPECT_TRUE(r.gpus.empty());
  EXPECT_NE(r.reason.find("libc4-no-such-nvml.so.1"), std::string::npos) << r.reason;
  // A library that is not NVML: unavailable, naming the missing function.
  auto notNvml = createNvmlGpuReader("libc.so.6")->read();
  EXPECT_FALSE(notNvml.available);
  EXPECT_NE(notNvml.reason.find("nvml"), std::string::npos) << notNvml.reason;
  EXPECT_TRUE(isCriticalXid(79));
  EXPECT_FALSE(isCriticalXid(13));
}

TEST(HealthAnomalyTest, TransitionsAreAnomalies) {
  report::NodeHealth a;
  a.nics.resize(1);
  a.nics[0].name = "eth0";
  a.nics[0].up = true;
  a.rdma_ports.resize(1);
  a.rdma_ports[0].device = "mlx5_0";
  a.rdma_ports[0].active = true;
  a.gpus.resize(1);
  a.gpus[0].uuid = "GPU-1";
  EXPECT_TRUE(healthAnomalies(a, a).empty());
  auto b = a;
  b.nics[0].up = false;
  EXPECT_EQ(healthAnomalies(a, b).size(), 1u);
  EXPECT_TRUE(healthAnomalies(b, a).empty());  // coming back up is not an anomaly
  b = a;
  b.nics[0].carrier_changes = 1;
  EXPECT_EQ(healthAnomalies(a, b).size(), 1u);
  b = a;
  b.rdma_ports[0].active = false;
  EXPECT_EQ(healthAnomalies(a, b).size(), 1u);
  b = a;
  b.gpus[0].last_xid = 79;
  b.gpus[0].healthy = false;
  EXPECT_EQ(healthAnomalies(a, b).size(), 2u);
  b = a;
  b.nics.clear();
  EXPECT_EQ(healthAnomalies(a, b).size(), 1u);
}

TEST(HealthMonitorTest, PublishesAndFlagsAnomalies) {
  TempDir root;
  addNic(root, "eth0", "up", "1", 1000, 0);
  SimulatedClock clock;
  metrics::Registry registry;
  std::vector<std::pair<report::NodeHealth, bool>> published;
  auto m = HealthMonitor::create(
      {root.path(), "", std::chrono::seconds{1}}, clock,
      createNvmlGpuReader("libc4-no-such-nvml.so.1"), registry,
      [&](const report::NodeHealth& h, bool a) { published.emplace_back(h, a); });
  ASSERT_TRUE(m.has_value());
  (*m)->pollOnce();
  addNic(root, "eth0", "down", "0", 1000, 0, 2);
  (*m)->pollOnce();
  ASSERT_EQ(published.size(), 2u);
  EXPECT_FALSE(published[0].second);
  EXPECT_TRUE(published[1].second);
  EXPECT_FALSE(published[1].first.gpus_available);
  EXPECT_FALSE(published[1].first.gpus_reason.empty());
  const std::string text = registry.expose();
  EXPECT_NE(text.find("c4_node_plugin_nic_up{interface=\"eth0\"} 0"), std::string::npos);
  EXPECT_NE(text.find("c4_node_plugin_hardware_available{class=\"gpus\"} 0"), std::string::npos);
  EXPECT_NE(text.find("c4_node_plugin_health_anomalies_total 1"), std::string::npos);
  // The reading encodes: it is a valid part of a NodeReport.
  report::NodeReport nr;
  nr.node = "n";
  nr.time_unix_ns = 1;
  nr.health = published[1].first;
  EXPECT_TRUE(report::encodeCbor(nr).has_value());
  EXPECT_FALSE(HealthMonitor::create({root.path(), "(", std::chrono::seconds{1}}, clock, nullptr,
                                     registry, nullptr)
                   .has_value());
}

}  // namespace
}  // namespace c4::node
