// Configuration table and interface selection.
#include "c4/plugin/config.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "c4/plugin/interfaces.h"

namespace c4::plugin {
namespace {

PluginConfig load(std::map<std::string, std::string> env) {
  return loadConfig([env](const char* name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  });
}

TEST(Config, DefaultsAndEnvironment) {
  auto d = load({});
  EXPECT_EQ(d.subflows, 4);
  EXPECT_EQ(d.report_interval_ms, 1000u);
  EXPECT_TRUE(d.warnings.empty());
  auto c = load({{"C4_SUBFLOWS", "8"},
                 {"RANK", "5"},
                 {"C4_NODE_NAME", "Node_A"},
                 {"C4_AGENT_SOCKET", "/run/c4.sock"},
                 {"C4_STALL_MS", "250"}});
  EXPECT_EQ(c.subflows, 8);
  EXPECT_EQ(c.rank, 5);
  EXPECT_EQ(c.node, "node-a");  // sanitized, with a warning
  EXPECT_EQ(c.agent_socket, "/run/c4.sock");
  EXPECT_EQ(c.stall_ms, 250u);
  EXPECT_EQ(c.warnings.size(), 1u);
  bool sawEnv = false;
  for (const auto& line : c.describe()) sawEnv = sawEnv || line == "C4_SUBFLOWS=8 (env)";
  EXPECT_TRUE(sawEnv);
  // C4_RANK wins over RANK.
  EXPECT_EQ(load({{"RANK", "5"}, {"C4_RANK", "6"}}).rank, 6);
}

TEST(Config, InvalidValuesKeepDefaultsWithWarnings) {
  auto c = load({{"C4_SUBFLOWS", "0"}, {"C4_REPORT_INTERVAL_MS", "abc"}, {"C4_STALL_MS", "-5"}});
  EXPECT_EQ(c.subflows, 4);
  EXPECT_EQ(c.report_interval_ms, 1000u);
  EXPECT_EQ(c.stall_ms, 10000u);
  EXPECT_EQ(c.warnings.size(), 3u);
}

TEST(Config, SanitizeName) {
  EXPECT_EQ(sanitizeName("Host_1.Example.COM"), "host-1.example.com");
  EXPECT_EQ(sanitizeName("--x--"), "x");
  EXPECT_EQ(sanitizeName("___"), "");
}

RawInterface iface(const char* name, const char* ip, bool up, bool lo) {
  RawInterface r;
  r.name = name;
  r.up = up;
  r.loopback = lo;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  ::inet_pton(AF_INET, ip, &a.sin_addr);
  std::memcpy(&r.addr, &a, sizeof(a));
  r.addr_len = sizeof(a);
  return r;
}

TEST(Interfaces, SelectionFollowsNcclRules) {
  std::vector<RawInterface> all = {
      iface("lo", "127.0.0.1", true, true), iface("docker0", "172.17.0.1", true, false),
      iface("eth0", "10.0.0.1", false, false), iface("eth1", "10.0.1.1", true, false),
      iface("ib0", "10.0.2.1", true, false)};
  auto names = [](const std::vector<RawInterface>& v) {
    std::vector<std::string> out;
    for (auto& i : v) out.push_back(i.name);
    return out;
  };
  EXPECT_EQ(names(selectInterfaces(all, "")), std::vector<std::string>{"eth1"});
  EXPECT_EQ(names(selectInterfaces(all, "eth,ib")), (std::vector<std::string>{"eth1", "ib0"}));
  EXPECT_EQ(names(selectInterfaces(all, "^eth,lo")), (std::vector<std::string>{"docker0", "ib0"}));
  EXPECT_EQ(names(selectInterfaces(all, "=eth")), std::vector<std::string>{});
  EXPECT_EQ(names(selectInterfaces(all, "=ib0")), std::vector<std::string>{"ib0"});
  std::vector<RawInterface> onlyLo = {iface("lo", "127.0.0.1", true, true)};
  EXPECT_EQ(names(selectInterfaces(onlyLo, "")), std::vector<std::string>{"lo"});
}

TEST(Interfaces, SpeedFromSysfsWithFallback) {
  EXPECT_EQ(readInterfaceSpeed("/nonexistent", "eth0", 10000), 10000);
  auto lo = discoverInterfaces("lo");
  ASSERT_TRUE(lo.has_value());
  ASSERT_EQ(lo->size(), 1u);
  EXPECT_EQ((*lo)[0].name, "lo");
  EXPECT_TRUE((*lo)[0].loopback);
  EXPECT_GT((*lo)[0].speed_mbps, 0);
  EXPECT_FALSE(discoverInterfaces("=no-such-interface").has_value());
}

}  // namespace
}  // namespace c4::plugin
