#include "c4/plugin/interfaces.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

namespace c4::plugin {
namespace {

bool matches(const std::string& name, const std::string& spec) {
  std::string s = spec;
  bool exclude = false;
  bool exact = false;
  if (!s.empty() && s[0] == '^') {
    exclude = true;
    s = s.substr(1);
  }
  if (!s.empty() && s[0] == '=') {
    exact = true;
    s = s.substr(1);
  }
  bool any = false;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    if (exact ? name == item : name.rfind(item, 0) == 0) any = true;
  }
  return exclude ? !any : any;
}

std::string readLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (in) std::getline(in, line);
  return line;
}

}  // namespace

std::vector<RawInterface> selectInterfaces(const std::vector<RawInterface>& all,
                                           const std::string& spec) {
  // One entry per interface name (first IPv4 address, else first IPv6), in discovery order.
  std::vector<RawInterface> unique;
  for (const auto& i : all) {
    if (!i.up) continue;
    bool seen = false;
    for (auto& u : unique) {
      if (u.name == i.name) {
        seen = true;
        if (u.addr.ss_family != AF_INET && i.addr.ss_family == AF_INET) u = i;
      }
    }
    if (!seen) unique.push_back(i);
  }
  std::vector<RawInterface> out;
  if (!spec.empty()) {
    for (const auto& u : unique) {
      if (matches(u.name, spec)) out.push_back(u);
    }
    return out;
  }
  for (const auto& u : unique) {
    if (!u.loopback && u.name.rfind("docker", 0) != 0) return {u};
  }
  for (const auto& u : unique) {
    if (u.loopback) return {u};
  }
  return out;
}

int readInterfaceSpeed(const std::string& sysfsRoot, const std::string& name, int fallback) {
  std::string line = readLine(sysfsRoot + "/class/net/" + name + "/speed");
  if (line.empty()) return fallback;
  char* end = nullptr;
  long v = std::strtol(line.c_str(), &end, 10);
  if (end == line.c_str() || v <= 0 || v > INT_MAX) return fallback;
  return static_cast<int>(v);
}

std::string formatAddress(const sockaddr_storage& addr) {
  char buf[INET6_ADDRSTRLEN] = {};
  int port = 0;
  if (addr.ss_family == AF_INET) {
    sockaddr_in a{};
    std::memcpy(&a, &addr, sizeof(a));
    ::inet_ntop(AF_INET, &a.sin_addr, buf, sizeof(buf));
    port = ntohs(a.sin_port);
    return std::string(buf) + ":" + std::to_string(port);
  }
  if (addr.ss_family == AF_INET6) {
    sockaddr_in6 a{};
    std::memcpy(&a, &addr, sizeof(a));
    ::inet_ntop(AF_INET6, &a.sin6_addr, buf, sizeof(buf));
    port = ntohs(a.sin6_port);
    std::string out = "[";
    out += buf;
    out += "]:";
    out += std::to_string(port);
    return out;
  }
  return "<unknown family>";
}

Result<std::vector<NetInterface>> discoverInterfaces(const std::string& spec,
                                                     const std::string& sysfsRoot) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return std::unexpected(errnoError("getifaddrs", errno));
  std::unique_ptr<ifaddrs, decltype(&::freeifaddrs)> guard(list, &::freeifaddrs);
  std::vector<RawInterface> raw;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    int family = i->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    RawInterface r;
    r.name = i->ifa_name;
    r.up = (i->ifa_flags & IFF_UP) != 0 && (i->ifa_flags & IFF_RUNNING) != 0;
    r.loopback = (i->ifa_flags & IFF_LOOPBACK) != 0;
    r.addr_len = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    std::memcpy(&r.addr, i->ifa_addr, r.addr_len);
    if (family == AF_INET6) {
      sockaddr_in6 a{};
      std::memcpy(&a, &r.addr, sizeof(a));
      if (IN6_IS_ADDR_LINKLOCAL(&a.sin6_addr)) continue;  // needs a scope id; NCCL skips too
    }
    raw.push_back(r);
  }
  auto chosen = selectInterfaces(raw, spec);
  if (chosen.empty()) {
    return makeError(ErrorCode::kNotFound,
                     "no network interface is up" +
                         (spec.empty() ? std::string() : " matching C4_SOCKET_IFNAME=" + spec));
  }
  std::vector<NetInterface> out;
  for (const auto& c : chosen) {
    NetInterface n;
    n.name = c.name;
    n.addr = c.addr;
    n.addr_len = c.addr_len;
    n.loopback = c.loopback;
    n.speed_mbps = readInterfaceSpeed(sysfsRoot, c.name, 10000);
    std::string dev = sysfsRoot + "/class/net/" + c.name + "/device";
    if (char* real = ::realpath(dev.c_str(), nullptr)) {
      n.pci_path = real;
      std::free(real);
    }
    std::string mac = readLine(sysfsRoot + "/class/net/" + c.name + "/address");
    std::uint64_t guid = 0;
    for (char ch : mac) {
      if (std::isxdigit(static_cast<unsigned char>(ch))) {
        guid = (guid << 4) | static_cast<std::uint64_t>(std::stoi(std::string(1, ch), nullptr, 16));
      }
    }
    if (guid == 0) guid = ::if_nametoindex(c.name.c_str());
    n.guid = guid;
    out.push_back(std::move(n));
  }
  return out;
}

}  // namespace c4::plugin
