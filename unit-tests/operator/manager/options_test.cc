// Operator options from flags and YAML.
#include "operator/manager/options.h"

#include <gtest/gtest.h>

namespace c4::op {
namespace {

TEST(OptionsTest, FlagsParseWithDefaults) {
  auto o = parseOperatorOptions({"--workers=8", "--kube-api-qps", "100", "--leader-elect=false",
                                 "--dry-run", "--namespace=team"});
  ASSERT_TRUE(o) << o.error().toString();
  EXPECT_EQ(o->workers, 8);
  EXPECT_DOUBLE_EQ(o->kube_api_qps, 100);
  EXPECT_FALSE(o->leader_elect);
  EXPECT_TRUE(o->node_actions.dry_run);
  EXPECT_EQ(o->watch_namespace, "team");
  EXPECT_EQ(o->metrics_port, 8080);
  EXPECT_FALSE(o->debug_reports) << "the report store is not served unless asked for";
  auto debug = parseOperatorOptions({"--debug-reports"});
  ASSERT_TRUE(debug) << debug.error().toString();
  EXPECT_TRUE(debug->debug_reports);
  EXPECT_EQ(o->node_actions.max_fault_records_per_window, 20);
  auto history = parseOperatorOptions({"--fault-history-max-per-hour=5"});
  ASSERT_TRUE(history) << history.error().toString();
  EXPECT_EQ(history->node_actions.max_fault_records_per_window, 5);
  EXPECT_FALSE(parseOperatorOptions({"--fault-history-max-per-hour=-1"}));
  EXPECT_EQ(o->node_actions.max_restarts_per_window, 20);
  auto restarts = parseOperatorOptions({"--restart-max-per-hour=0"});
  ASSERT_TRUE(restarts) << restarts.error().toString();
  EXPECT_EQ(restarts->node_actions.max_restarts_per_window, 0);
  EXPECT_FALSE(parseOperatorOptions({"--restart-max-per-hour=-3"}));
  EXPECT_FALSE(parseOperatorOptions({"--restart-max-per-hour=many"}));
}

TEST(OptionsTest, TrafficPlanningIsOffUnlessAskedFor) {
  auto defaults = parseOperatorOptions({});
  ASSERT_TRUE(defaults);
  EXPECT_FALSE(defaults->traffic_planning);
  EXPECT_EQ(defaults->fabric_name, "");
  EXPECT_DOUBLE_EQ(defaults->link_hold_seconds, 300);
  auto on = parseOperatorOptions({"--traffic-planning", "--fabric-name=dc1", "--link-hold", "0"});
  ASSERT_TRUE(on) << on.error().toString();
  EXPECT_TRUE(on->traffic_planning);
  EXPECT_EQ(on->fabric_name, "dc1");
  EXPECT_DOUBLE_EQ(on->link_hold_seconds, 0);
  auto bad = parseOperatorOptions({"--link-hold=-5"});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("link-hold"), std::string::npos);
  EXPECT_FALSE(parseOperatorOptions({"--traffic-planning=perhaps"}));
}

TEST(OptionsTest, BadFlagsGetClearErrors) {
  auto unknown = parseOperatorOptions({"--wrokers=2"});
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message.find("--wrokers"), std::string::npos);
  auto bad = parseOperatorOptions({"--workers=0"});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find(">= 1"), std::string::npos);
  EXPECT_FALSE(parseOperatorOptions({"--leader-elect=maybe"}));
  EXPECT_FALSE(parseOperatorOptions({"stray"}));
  EXPECT_FALSE(parseOperatorOptions({"--config=/no/such/file.yaml"}));
  auto batch = parseOperatorOptions({"--status-batch-period=inf"});
  ASSERT_FALSE(batch);
  EXPECT_NE(batch.error().message.find("at most 60"), std::string::npos);
  EXPECT_FALSE(parseOperatorOptions({"--status-batch-period=-1"}));
}

TEST(OptionsTest, LogFormatIsLogfmtOrJson) {
  auto defaults = parseOperatorOptions({});
  ASSERT_TRUE(defaults);
  EXPECT_EQ(defaults->log_format, "logfmt");
  auto json = parseOperatorOptions({"--log-format=json"});
  ASSERT_TRUE(json) << json.error().toString();
  EXPECT_EQ(json->log_format, "json");
  auto bad = parseOperatorOptions({"--log-format=text"});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("log-format"), std::string::npos) << bad.error().message;
  EXPECT_NE(bad.error().message.find("\"text\""), std::string::npos) << bad.error().message;
  EXPECT_NE(bad.error().message.find("logfmt or json"), std::string::npos) << bad.error().message;
}

TEST(OptionsTest, StatusBatchPeriodDefaultsToOneSecondAndZeroDisablesIt) {
  auto defaults = parseOperatorOptions({});
  ASSERT_TRUE(defaults);
  EXPECT_DOUBLE_EQ(defaults->status_batch_seconds, 1.0);
  auto off = parseOperatorOptions({"--status-batch-period=0"});
  ASSERT_TRUE(off) << off.error().toString();
  EXPECT_DOUBLE_EQ(off->status_batch_seconds, 0.0);
}

TEST(OptionsTest, YamlAppliesSameKeysAndRejectsUnknown) {
  OperatorOptions o;
  ASSERT_TRUE(applyOptionsYaml(o, "workers: 3\nlease-name: x\ncordon-max-fraction: 0.25\n"));
  EXPECT_EQ(o.workers, 3);
  EXPECT_EQ(o.lease_name, "x");
  EXPECT_DOUBLE_EQ(o.node_actions.max_fraction, 0.25);
  auto unknown = applyOptionsYaml(o, "wrokers: 3\n");
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message.find("wrokers"), std::string::npos);
  EXPECT_FALSE(applyOptionsYaml(o, "workers: [1]\n"));
  EXPECT_FALSE(applyOptionsYaml(o, "workers: {\n"));
}

TEST(OptionsTest, LeaderElectionTimesMustNest) {
  auto bad = parseOperatorOptions({"--lease-duration=5", "--renew-deadline=5"});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("renew-deadline must be shorter"), std::string::npos);
  bad = parseOperatorOptions({"--renew-deadline=2", "--retry-period=2"});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("retry-period must be shorter"), std::string::npos);
  EXPECT_TRUE(parseOperatorOptions({"--leader-elect=false", "--renew-deadline=20"}))
      << "irrelevant without leader election";
}

TEST(OptionsTest, ReportEndpointOptions) {
  auto defaults = parseOperatorOptions({});
  ASSERT_TRUE(defaults) << defaults.error().toString();
  EXPECT_EQ(defaults->report_bind_address, ":8443");
  EXPECT_EQ(defaults->report_audience, "c4-operator");
  EXPECT_EQ(defaults->report_service_account, "c4-system/c4-node-plugin");
  EXPECT_EQ(defaults->report_max_queued_connections, 1024);
  auto o = parseOperatorOptions(
      {"--report-bind-address=127.0.0.1:9443", "--tls-cert-file=/c", "--tls-key-file=/k",
       "--report-audience=aud", "--report-serviceaccount=ops/agent", "--report-node-qps=2",
       "--report-max-body-mib=1", "--report-history=4", "--report-max-queued-connections=16"});
  ASSERT_TRUE(o) << o.error().toString();
  EXPECT_EQ(o->tls_cert_file, "/c");
  EXPECT_EQ(o->report_service_account, "ops/agent");
  EXPECT_DOUBLE_EQ(o->report_node_qps, 2);
  EXPECT_EQ(o->report_history, 4);
  EXPECT_EQ(o->report_max_queued_connections, 16);

  auto bind = parseBindAddress(":8443");
  ASSERT_TRUE(bind && *bind);
  EXPECT_EQ((*bind)->host, "0.0.0.0");
  EXPECT_EQ((*bind)->port, 8443);
  auto v6 = parseBindAddress("[::1]:0");
  ASSERT_TRUE(v6 && *v6);
  EXPECT_EQ((*v6)->host, "::1");
  auto off = parseBindAddress("0");
  ASSERT_TRUE(off);
  EXPECT_FALSE(*off);

  for (const char* bad :
       {"--report-bind-address=8443", "--report-bind-address=:x", "--report-bind-address=:70000",
        "--report-serviceaccount=agent", "--report-serviceaccount=a/b/c",
        "--report-max-body-mib=65", "--report-history=0", "--report-max-queued-connections=0",
        "--report-max-queued-connections=x"}) {
    auto r = parseOperatorOptions({bad});
    EXPECT_FALSE(r) << bad;
  }
  auto half = parseOperatorOptions({"--tls-cert-file=/c"});
  ASSERT_FALSE(half);
  EXPECT_NE(half.error().message.find("go together"), std::string::npos);
}

}  // namespace
}  // namespace c4::op
