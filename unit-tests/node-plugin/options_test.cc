#include "c4/node_plugin/options.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include "c4/node_plugin/http_server.h"
#include "test_util.h"

namespace c4::node {
namespace {

using testing::TempDir;
using testing::writeFile;

GetEnv env(std::optional<std::string> node) {
  return [node](const char* name) -> std::optional<std::string> {
    if (std::string(name) == "NODE_NAME") return node;
    return std::nullopt;
  };
}

const std::vector<std::string> kRequired = {"--operator-url", "https://op:8443/v1/reports"};

std::vector<std::string> with(std::vector<std::string> extra) {
  std::vector<std::string> args = kRequired;
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

TEST(OptionsTest, DefaultsAndNodeNameFromEnv) {
  auto o = parseNodePluginOptions(kRequired, env("node-a"));
  ASSERT_TRUE(o.has_value()) << o.error().toString();
  EXPECT_EQ(o->node_name, "node-a");
  EXPECT_EQ(o->socket, "/var/run/c4/agent.sock");
  EXPECT_EQ(o->attribution, "auto");
  EXPECT_EQ(o->token_file, "/var/run/secrets/c4/token");
  EXPECT_EQ(o->plugin_source, "/usr/lib/c4/libnccl-net-c4.so");
  EXPECT_EQ(o->profiler_plugin_source, "/usr/lib/c4/libnccl-profiler-c4.so");
  EXPECT_EQ(o->plugin_install_dir, "/opt/c4/lib");
  EXPECT_EQ(o->metrics_bind_address, ":9400");
  EXPECT_EQ(o->interval_seconds, 1);
  EXPECT_EQ(o->last_words_seconds, 600);
  auto off = parseNodePluginOptions(with({"--last-words-seconds=0"}), env("node-a"));
  ASSERT_TRUE(off.has_value()) << off.error().toString();
  EXPECT_EQ(off->last_words_seconds, 0);
  auto flag = parseNodePluginOptions(with({"--node-name=node-b"}), env("node-a"));
  ASSERT_TRUE(flag.has_value());
  EXPECT_EQ(flag->node_name, "node-b");
}

// An http:// operator URL would carry the bearer token in plain text: refused, with an error
// that names the flag that permits it for tests (issue #27).
TEST(OptionsTest, AnHttpOperatorUrlNeedsTheInsecureFlag) {
  auto refused = parseNodePluginOptions({"--operator-url", "http://op:8443/v1/reports"}, env("n"));
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(refused.error().message.find("--allow-insecure-operator-url"), std::string::npos)
      << refused.error().message;
  auto allowed = parseNodePluginOptions(
      {"--operator-url", "http://op:8443/v1/reports", "--allow-insecure-operator-url"}, env("n"));
  ASSERT_TRUE(allowed.has_value()) << allowed.error().toString();
  EXPECT_TRUE(allowed->allow_insecure_operator_url);
  auto https = parseNodePluginOptions({"--operator-url", "https://op:8443/v1/reports"}, env("n"));
  ASSERT_TRUE(https.has_value());
  EXPECT_FALSE(https->allow_insecure_operator_url);
  EXPECT_FALSE(parseNodePluginOptions({"--operator-url", "http://op/v1/reports",
                                       "--allow-insecure-operator-url=maybe"},
                                      env("n"))
                   .has_value());
  // The flag never makes another scheme acceptable.
  EXPECT_FALSE(
      parseNodePluginOptions(
          {"--operator-url", "ftp://op/v1/reports", "--allow-insecure-operator-url"}, env("n"))
          .has_value());
}

TEST(OptionsTest, RequiredAndInvalidValues) {
  EXPECT_FALSE(parseNodePluginOptions(kRequired, env(std::nullopt)).has_value());
  EXPECT_FALSE(parseNodePluginOptions({}, env("n")).has_value());
  EXPECT_FALSE(
      parseNodePluginOptions({"--operator-url", "http://op/v1/reports"}, env("n")).has_value());
  for (const auto& bad :
       std::vector<std::vector<std::string>>{{"--attribution", "pid"},
                                             {"--interval", "0"},
                                             {"--interval", "x"},
                                             {"--interfaces", "("},
                                             {"--metrics-bind-address", "9400"},
                                             {"--metrics-bind-address", ":99999"},
                                             {"--log-level", "loud"},
                                             {"--log-format", "text"},
                                             {"--last-words-seconds", "-1"},
                                             {"--max-buffer-bytes", "-1"},
                                             {"--backoff-base", "10", "--backoff-cap", "1"},
                                             {"--unknown", "1"},
                                             {"--socket"},
                                             {"stray"}}) {
    auto r = parseNodePluginOptions(with(bad), env("n"));
    EXPECT_FALSE(r.has_value()) << bad[0];
  }
  auto r = parseNodePluginOptions(with({"--node-name", "Not_A_Node"}), env("n"));
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("node-name"), std::string::npos);
  // Either plugin library needs the directory the pods mount.
  auto no_dir =
      parseNodePluginOptions(with({"--plugin-source=", "--plugin-install-dir="}), env("n"));
  ASSERT_FALSE(no_dir.has_value());
  EXPECT_NE(no_dir.error().message.find("plugin-install-dir"), std::string::npos);
  EXPECT_TRUE(parseNodePluginOptions(
                  with({"--plugin-source=", "--profiler-plugin-source=", "--plugin-install-dir="}),
                  env("n"))
                  .has_value());
}

TEST(OptionsTest, LogFormat) {
  auto defaults = parseNodePluginOptions(kRequired, env("n"));
  ASSERT_TRUE(defaults.has_value()) << defaults.error().message;
  EXPECT_EQ(defaults->log_format, "logfmt");
  auto json = parseNodePluginOptions(with({"--log-format=json"}), env("n"));
  ASSERT_TRUE(json.has_value()) << json.error().message;
  EXPECT_EQ(json->log_format, "json");
  auto bad = parseNodePluginOptions(with({"--log-format", "text"}), env("n"));
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("log-format"), std::string::npos) << bad.error().message;
  EXPECT_NE(bad.error().message.find("logfmt or json"), std::string::npos) << bad.error().message;
}

TEST(OptionsTest, Namespace) {
  auto all = parseNodePluginOptions(kRequired, env("n"));
  ASSERT_TRUE(all.has_value());
  EXPECT_EQ(all->pod_namespace, "");
  auto one = parseNodePluginOptions(with({"--namespace=team-1"}), env("n"));
  ASSERT_TRUE(one.has_value()) << one.error().toString();
  EXPECT_EQ(one->pod_namespace, "team-1");
  for (const auto& bad : std::vector<std::string>{"Team", "a.b", "-a", std::string(64, 'a')}) {
    auto r = parseNodePluginOptions(with({"--namespace", bad}), env("n"));
    ASSERT_FALSE(r.has_value()) << bad;
    EXPECT_NE(r.error().message.find("namespace"), std::string::npos) << r.error().message;
  }
}

TEST(OptionsTest, ConfigFileWithFlagsWinning) {
  TempDir dir;
  writeFile(dir / "c.yaml",
            "operator-url: https://op:8443/v1/reports\n"
            "node-name: node-y\n"
            "attribution: cgroup\n"
            "interval: 2.5\n"
            "plugin-source: \"\"\n"
            "profiler-plugin-source: \"\"\n"
            "metrics-bind-address: \"0\"\n");
  auto o = parseNodePluginOptions({"--config", dir / "c.yaml", "--interval=3"}, env(std::nullopt));
  ASSERT_TRUE(o.has_value()) << o.error().toString();
  EXPECT_EQ(o->node_name, "node-y");
  EXPECT_EQ(o->attribution, "cgroup");
  EXPECT_EQ(o->interval_seconds, 3);
  EXPECT_EQ(o->plugin_source, "");
  EXPECT_EQ(o->profiler_plugin_source, "");
  EXPECT_EQ(o->metrics_bind_address, "0");
  writeFile(dir / "bad.yaml", "operator-url: https://x\nnot-a-key: 1\n");
  auto bad = parseNodePluginOptions({"--config", dir / "bad.yaml"}, env("n"));
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("not-a-key"), std::string::npos);
  writeFile(dir / "list.yaml", "interfaces: [a, b]\n");
  EXPECT_FALSE(parseNodePluginOptions({"--config", dir / "list.yaml"}, env("n")).has_value());
  EXPECT_FALSE(parseNodePluginOptions({"--config", dir / "missing.yaml"}, env("n")).has_value());
}

TEST(OptionsTest, BindAddress) {
  auto a = parseBindAddress(":9400");
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->first, "0.0.0.0");
  EXPECT_EQ(a->second, 9400);
  auto b = parseBindAddress("[::1]:80");
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->first, "::1");
  EXPECT_FALSE(parseBindAddress("host").has_value());
  EXPECT_FALSE(parseBindAddress("h:x").has_value());
}

TEST(HttpServerTest, ServesMetricsAndProbes) {
  metrics::Registry registry;
  registry.counter("c4_node_plugin_test_total", "t").get().inc(3);
  std::string ready_problem = "pod informer not synced";
  HttpServer server(
      registry, [] { return std::string(); }, [&] { return ready_problem; });
  ASSERT_TRUE(server.start("127.0.0.1", 0).has_value());
  httplib::Client client("127.0.0.1", server.port());
  auto m = client.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  EXPECT_NE(m->body.find("c4_node_plugin_test_total 3"), std::string::npos);
  auto h = client.Get("/healthz");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  auto r = client.Get("/readyz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_NE(r->body.find("not synced"), std::string::npos);
  ready_problem.clear();
  r = client.Get("/readyz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  server.stop();
}

}  // namespace
}  // namespace c4::node
