#include "c4/node_plugin/http_server.h"

#include <httplib.h>

#include <charconv>

namespace c4::node {

Result<std::pair<std::string, int>> parseBindAddress(const std::string& address) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos) {
    return makeError(ErrorCode::kInvalidArgument,
                     "bind address: expected [host]:port, got '" + address + "'");
  }
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty()) host = "0.0.0.0";
  int port = -1;
  const std::string p = address.substr(colon + 1);
  auto [ptr, ec] = std::from_chars(p.data(), p.data() + p.size(), port);
  if (ec != std::errc{} || ptr != p.data() + p.size() || port < 0 || port > 65535) {
    return makeError(ErrorCode::kInvalidArgument, "bind address: bad port in '" + address + "'");
  }
  return std::pair{host, port};
}

HttpServer::HttpServer(metrics::Registry& registry, HealthCheck live, HealthCheck ready)
    : server_(std::make_unique<httplib::Server>()) {
  server_->new_task_queue = [] { return new httplib::ThreadPool(2); };
  server_->Get("/metrics", [&registry](const httplib::Request&, httplib::Response& res) {
    res.set_content(registry.expose(), "text/plain; version=0.0.4; charset=utf-8");
  });
  auto probe = [](HealthCheck check) {
    return [check = std::move(check)](const httplib::Request&, httplib::Response& res) {
      const std::string problem = check ? check() : std::string();
      if (problem.empty()) {
        res.set_content("ok\n", "text/plain");
      } else {
        res.status = 503;
        res.set_content(problem + "\n", "text/plain");
      }
    };
  };
  server_->Get("/healthz", probe(std::move(live)));
  server_->Get("/readyz", probe(std::move(ready)));
}

HttpServer::~HttpServer() {
  stop();
}

Status HttpServer::start(const std::string& host, int port) {
  if (port == 0) {
    port_ = server_->bind_to_any_port(host);
  } else {
    port_ = server_->bind_to_port(host, port) ? port : -1;
  }
  if (port_ <= 0) {
    return makeError(ErrorCode::kUnavailable,
                     "cannot listen on " + host + ":" + std::to_string(port));
  }
  done_.store(false);
  thread_ = std::thread([this] {
    server_->listen_after_bind();
    done_.store(true);
  });
  return okStatus();
}

void HttpServer::stop() {
  if (!thread_.joinable()) return;
  // Server::stop() does nothing until the listening thread has started to accept: repeat it.
  while (!done_.load()) {
    server_->stop();
    std::this_thread::yield();
  }
  thread_.join();
}

}  // namespace c4::node
