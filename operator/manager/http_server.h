// The plain-HTTP server of /metrics, /healthz, /readyz and /debug/*: cpp-httplib with a pool of
// worker threads, so one slow client (a stalled scrape) never holds up the kubelet's probes.
// GET only (other methods on a known path: 405; unknown paths: 404; a malformed request: 400).
// One request per connection.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "c4/common/error.h"

namespace httplib {
class Server;
}

namespace c4::op {

struct HttpRequest {
  std::string path;
  std::map<std::string, std::string> query;  // decoded query parameters (last value wins)

  [[nodiscard]] std::string param(const std::string& key) const {
    auto it = query.find(key);
    return it == query.end() ? std::string{} : it->second;
  }
};

struct HttpReply {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

class HttpServer {
 public:
  using Handler = std::function<HttpReply(const HttpRequest&)>;
  using SimpleHandler = std::function<HttpReply()>;

  // `threads`: the worker pool.
  explicit HttpServer(int threads = 4);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Before start().
  void handle(const std::string& path, Handler handler);
  void handle(const std::string& path, SimpleHandler handler);
  // Binds `address:port` (port 0 = any) and starts serving. Returns the bound port;
  // kInvalidArgument when the address cannot be bound.
  Result<int> start(const std::string& address, int port);
  // Stops serving and joins. Idempotent.
  void stop();

 private:
  int threads_;
  std::map<std::string, Handler> handlers_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::atomic<bool> done_{false};
};

}  // namespace c4::op
