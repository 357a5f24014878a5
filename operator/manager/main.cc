// c4-operator: parses options, installs signal handling and failpoints, and runs the manager
// (manager.h), which wires everything else. No logic lives here.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <thread>

#include "c4/common/log.h"
#include "operator/manager/failpoints.h"
#include "operator/manager/manager.h"
#include "operator/manager/options.h"

namespace {

int runOperator(const c4::op::OperatorOptions& options) {
  using namespace c4;
  using namespace c4::op;
  auto level = parseLogLevel(options.log_level);
  if (!level) {
    std::fprintf(stderr, "c4-operator: %s\n", level.error().toString().c_str());
    return 2;
  }
  setLogLevel(*level);
  auto format = parseLogFormat(options.log_format);  // already checked by the option parser
  if (!format) {
    std::fprintf(stderr, "c4-operator: %s\n", format.error().toString().c_str());
    return 2;
  }
  setLogFormat(*format);
  Logger log("main");

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // inherited by every thread started below

  ManagerHooks hooks;
  // Lost the lease: stop writing at once by exiting (controller-runtime does the same); a fresh
  // process campaigns again. Nothing in flight is waited for.
  hooks.on_lease_lost = [&log] {
    log.error("Leader election lost; exiting");
    std::fflush(nullptr);
    std::_Exit(1);
  };
  Failpoints failpoints;
  if (const char* spec = std::getenv("C4_FAILPOINTS"); spec != nullptr) {
    auto parsed = Failpoints::parse(spec);
    if (!parsed) {
      std::fprintf(stderr, "c4-operator: %s\n", parsed.error().message.c_str());
      return 2;
    }
    failpoints = std::move(*parsed);
    log.warn("Failpoints are set (C4_FAILPOINTS); this process will crash on purpose",
             {{"failpoints", failpoints.describe()}});
    hooks.fault_hook = [&failpoints, &log](std::string_view point, const std::string& key) {
      if (failpoints.action(point) == FailpointAction::kKill) {
        log.warn("Failpoint reached, killing the process", {{"failpoint", point}, {"key", key}});
        ::raise(SIGKILL);
      }
      return true;
    };
  }

  auto manager = Manager::create(options, realClock(), hooks);
  if (!manager) {
    log.error("Cannot start", {{"error", manager.error()}});
    return 1;
  }
  std::thread signal_thread([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    log.info("Signal received, shutting down", {{"signal", sig}});
    (*manager)->stop();
  });
  signal_thread.detach();
  return (*manager)->run();
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
  // The downward API names the pod (the chart sets both); flags and the config file win.
  if (options->pod_name.empty()) {
    if (const char* v = std::getenv("POD_NAME")) options->pod_name = v;
  }
  if (options->pod_namespace.empty()) {
    if (const char* v = std::getenv("POD_NAMESPACE")) options->pod_namespace = v;
  }
  if (options->show_version) {
    std::puts("c4-operator " C4_VERSION);
    return 0;
  }
  return runOperator(*options);
}
