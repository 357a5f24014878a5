// A minimal HTTP/1.1 server for /metrics, /healthz and /readyz: one thread, poll(2), one
// request per connection, GET only. Enough for Prometheus scrapes and kubelet probes.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include "c4/common/error.h"

namespace c4::op {

struct HttpReply {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

class HttpServer {
 public:
  using Handler = std::function<HttpReply()>;
  HttpServer() = default;
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  void handle(const std::string& path, Handler handler) { handlers_[path] = std::move(handler); }
  // Binds `address:port` (port 0 = any) and starts serving. Returns the bound port.
  Result<int> start(const std::string& address, int port);
  void stop();

 private:
  void serve();
  void answer(int fd);

  std::map<std::string, Handler> handlers_;
  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};
  std::thread thread_;
};

}  // namespace c4::op
