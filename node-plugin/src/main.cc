// c4-node-plugin entry point: flags/config, logging, signals. Everything else is NodePlugin.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "c4/common/clock.h"
#include "c4/common/log.h"
#include "c4/node_plugin/node_plugin.h"
#include "c4/node_plugin/options.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  auto options = c4::node::parseNodePluginOptions(args, [](const char* name) {
    const char* v = std::getenv(name);
    return v != nullptr ? std::optional<std::string>(v) : std::nullopt;
  });
  if (!options) {
    std::fprintf(stderr, "c4-node-plugin: %s\n%s", options.error().message.c_str(),
                 c4::node::nodePluginUsage().c_str());
    return 2;
  }
  if (options->show_help) {
    std::fputs(c4::node::nodePluginUsage().c_str(), stdout);
    return 0;
  }
  if (options->show_version) {
    std::puts("c4-node-plugin " C4_VERSION);
    return 0;
  }
  c4::setLogLevel(*c4::parseLogLevel(options->log_level));
  c4::setLogFormat(*c4::parseLogFormat(options->log_format));  // both checked when parsed
  c4::Logger log("node-plugin");

  // Signals are taken by sigwait on this thread; every thread started later inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  auto plugin = c4::node::NodePlugin::create(*options, c4::realClock(), nullptr);
  if (!plugin) {
    log.error("cannot create the node plugin", {{"error", plugin.error()}});
    return 1;
  }
  if (auto s = (*plugin)->start(); !s) {
    log.error("cannot start the node plugin", {{"error", s.error()}});
    (*plugin)->stop();
    return 1;
  }
  int sig = 0;
  sigwait(&signals, &sig);
  log.info("signal received; flushing and exiting", {{"signal", sig}});
  (*plugin)->stop();
  return 0;
}
