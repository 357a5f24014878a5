// The node plugin's plain-HTTP endpoints (cpp-httplib): /metrics (the registry's Prometheus text
// exposition), /healthz (200 while every worker thread has looped recently) and /readyz (200
// while the readiness check passes; the body names what is not ready).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "c4/common/error.h"
#include "c4/common/metrics.h"

namespace httplib {
class Server;
}

namespace c4::node {

// A check returns "" when fine, else what is wrong.
using HealthCheck = std::function<std::string()>;

// Parses "[host]:port" (":9400" = every address). "0" is refused here (the caller disables).
Result<std::pair<std::string, int>> parseBindAddress(const std::string& address);

class HttpServer {
 public:
  HttpServer(metrics::Registry& registry, HealthCheck live, HealthCheck ready);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds (port 0 = any) and serves on a thread.
  Status start(const std::string& host, int port);
  void stop();
  [[nodiscard]] int port() const { return port_; }

 private:
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::atomic<bool> done_{true};
  int port_ = 0;
};

}  // namespace c4::node
