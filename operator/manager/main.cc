// c4-operator: wires options, the Kubernetes client, the TrainingJob controller, leader election,
// the metrics/health server and signal handling together. No logic lives here.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <thread>

#include "c4/common/clock.h"
#include "c4/common/log.h"
#include "c4/common/metrics.h"
#include "operator/client/curl_kube_client.h"
#include "operator/client/kube_config.h"
#include "operator/manager/failpoints.h"
#include "operator/manager/http_server.h"
#include "operator/manager/leader_election.h"
#include "operator/manager/options.h"
#include "operator/trainingjob/reconciler.h"

namespace {

std::chrono::nanoseconds seconds(double s) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(s));
}

int runOperator(const c4::op::OperatorOptions& options) {
  using namespace c4;
  using namespace c4::op;
  Logger log("main");
  auto level = parseLogLevel(options.log_level);
  if (!level) {
    std::fprintf(stderr, "c4-operator: %s\n", level.error().toString().c_str());
    return 2;
  }
  setLogLevel(*level);

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // inherited by every thread started below

  Failpoints failpoints;
  if (const char* spec = std::getenv("C4_FAILPOINTS"); spec != nullptr) {
    auto parsed = Failpoints::parse(spec);
    if (!parsed) {
      std::fprintf(stderr, "c4-operator: %s\n", parsed.error().message.c_str());
      return 2;
    }
    failpoints = std::move(*parsed);
  }

  auto kube_config = loadDefaultKubeConfig(options.kubeconfig, options.context);
  if (!kube_config) {
    log.error("Cannot load the Kubernetes configuration", {{"error", kube_config.error()}});
    return 1;
  }
  kube_config->qps = options.kube_api_qps;
  kube_config->burst = options.kube_api_burst;
  Clock& clock = realClock();
  metrics::Registry registry;
  auto client = createCurlKubeClient(*kube_config, clock, &registry);
  if (!client) {
    log.error("Cannot create the Kubernetes client", {{"error", client.error()}});
    return 1;
  }
  // Events get their own client and rate limit, so they never delay pod creation.
  auto event_client = createCurlKubeClient(*kube_config, clock, nullptr);
  if (!event_client) {
    log.error("Cannot create the Kubernetes client", {{"error", event_client.error()}});
    return 1;
  }
  // Lease renewals get their own client too: a throttled burst of pod creations must never
  // delay a renewal past the renew deadline (leadership would be lost mid-restart).
  auto election_client = createCurlKubeClient(*kube_config, clock, nullptr);
  if (!election_client) {
    log.error("Cannot create the Kubernetes client", {{"error", election_client.error()}});
    return 1;
  }
  std::string identity = options.identity;
  if (identity.empty()) {
    char host[256] = {0};
    ::gethostname(host, sizeof(host) - 1);
    identity = std::string(host) + "_" + std::to_string(::getpid());
  }

  ControllerConfig controller_config;
  controller_config.watch_namespace = options.watch_namespace;
  controller_config.workers = options.workers;
  controller_config.pod_settings = options.pod;
  controller_config.identity = identity;
  controller_config.status_batch_period = seconds(options.status_batch_seconds);
  controller_config.event_client = event_client->get();
  if (!failpoints.empty()) {
    log.warn("Failpoints are set (C4_FAILPOINTS); this process will crash on purpose",
             {{"failpoints", failpoints.describe()}});
    controller_config.fault_hook = [&failpoints, &log](std::string_view point,
                                                       const std::string& key) {
      if (failpoints.action(point) == FailpointAction::kKill) {
        log.warn("Failpoint reached, killing the process", {{"failpoint", point}, {"job", key}});
        ::raise(SIGKILL);
      }
      return true;
    };
  }
  // Node actions (cordon + taint behind the circuit breaker) read nodes from the controller's
  // node cache and keep the breaker's state next to the lease. c4.dev/cordoned-by names the
  // operator ("c4-operator"), not this process, so a successor may undo what it did.
  TrainingJobController* controller_ptr = nullptr;
  EventRecorder node_events(**event_client, clock, "c4-operator", identity, &registry);
  NodeActionConfig node_actions = options.node_actions;
  node_actions.state_namespace = options.lease_namespace;
  NodeRemediator remediator(
      **client, clock, node_events, node_actions,
      [&](const std::string& name) { return controller_ptr->nodeInformer().store().get(name); },
      [&] { return controller_ptr->nodeInformer().store().list(); }, &registry);
  controller_config.remediator = &remediator;
  TrainingJobController controller(**client, clock, controller_config, registry);
  controller_ptr = &controller;

  LeaderElectionConfig election_config;
  election_config.lease_namespace = options.lease_namespace;
  election_config.lease_name = options.lease_name;
  election_config.identity = identity;
  election_config.lease_duration = seconds(options.lease_duration_seconds);
  election_config.renew_deadline = seconds(options.renew_deadline_seconds);
  election_config.retry_period = seconds(options.retry_period_seconds);
  LeaderElector elector(**election_client, clock, election_config);

  HttpServer server;
  server.handle("/metrics", [&] {
    return HttpReply{200, "text/plain; version=0.0.4; charset=utf-8", registry.expose()};
  });
  server.handle("/healthz", [] { return HttpReply{200, "text/plain", "ok\n"}; });
  server.handle("/readyz", [&] {
    bool standby = options.leader_elect && !elector.isLeader();
    if (standby || controller.ready()) return HttpReply{200, "text/plain", "ok\n"};
    return HttpReply{503, "text/plain", "caches not synced\n"};
  });
  auto port = server.start(options.metrics_address, options.metrics_port);
  if (!port) {
    log.error("Cannot start the metrics server", {{"error", port.error()}});
    return 1;
  }
  log.info("Starting", {{"version", C4_VERSION},
                        {"identity", identity},
                        {"server", kube_config->server},
                        {"metricsPort", *port},
                        {"leaderElect", options.leader_elect}});

  std::mutex mu;
  std::condition_variable_any cv;
  bool stopping = false;
  int exit_code = 0;
  auto requestStop = [&](int code) {
    std::lock_guard lock(mu);
    if (!stopping) exit_code = code;
    stopping = true;
    cv.notify_all();
    elector.stop();
  };
  std::thread signal_thread([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    log.info("Signal received, shutting down", {{"signal", sig}});
    requestStop(0);
  });
  signal_thread.detach();

  std::thread starter;
  auto startController = [&] {
    starter = std::thread([&] {
      if (auto started = controller.start(); !started) {
        log.error("Controller failed to start", {{"error", started.error()}});
        requestStop(1);
      }
    });
  };
  if (options.leader_elect) {
    bool voluntary = elector.run(startController, [&] {
      if (starter.joinable()) starter.join();
      controller.stop();
    });
    if (!voluntary) exit_code = 1;  // lost the lease: exit so a fresh process campaigns again
  } else {
    startController();
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return stopping; });
    lock.unlock();
    if (starter.joinable()) starter.join();
    controller.stop();
  }
  server.stop();
  log.info("Stopped", {{"exitCode", exit_code}});
  return exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  auto options = c4::op::parseOperatorOptions(args);
  if (!options) {
    std::fprintf(stderr, "c4-operator: %s\n%s", options.error().message.c_str(),
                 c4::op::operatorUsage().c_str());
    return 2;
  }
  if (options->show_help) {
    std::fputs(c4::op::operatorUsage().c_str(), stdout);
    return 0;
  }
  if (options->show_version) {
    std::puts("c4-operator " C4_VERSION);
    return 0;
  }
  return runOperator(*options);
}
