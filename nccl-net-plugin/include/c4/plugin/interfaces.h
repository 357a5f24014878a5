// Network interface discovery and selection, like NCCL's socket transport (NCCL_SOCKET_IFNAME
// rules), plus the facts getProperties reports: speed, PCI path, GUID.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <vector>

#include "c4/common/error.h"

namespace c4::plugin {

struct NetInterface {
  std::string name;
  sockaddr_storage addr{};  // AF_INET or AF_INET6, port 0
  socklen_t addr_len = 0;
  bool loopback = false;
  int speed_mbps = 10000;  // from sysfs; 10000 when the kernel does not say (NCCL's default)
  std::string pci_path;    // realpath of <sysfs>/class/net/<if>/device; empty for virtual NICs
  std::uint64_t guid = 0;  // MAC address as an integer (interface index when no MAC)
};

struct RawInterface {
  std::string name;
  sockaddr_storage addr{};
  socklen_t addr_len = 0;
  bool up = false;
  bool loopback = false;
};

// Pure selection over a list (testable): NCCL_SOCKET_IFNAME syntax in `spec`: comma-separated
// prefixes; leading '^' excludes, leading '=' requires exact names. Empty spec: the first up
// non-loopback interface, else loopback. IPv4 addresses are preferred over IPv6 per interface.
std::vector<RawInterface> selectInterfaces(const std::vector<RawInterface>& all,
                                           const std::string& spec);

// getifaddrs + selection + sysfs facts (read under `sysfsRoot`, normally "/sys").
Result<std::vector<NetInterface>> discoverInterfaces(const std::string& spec,
                                                     const std::string& sysfsRoot = "/sys");

// Speed in Mbps from <sysfsRoot>/class/net/<name>/speed; `fallback` when absent or unknown (-1).
int readInterfaceSpeed(const std::string& sysfsRoot, const std::string& name, int fallback);

std::string formatAddress(const sockaddr_storage& addr);

}  // namespace c4::plugin
