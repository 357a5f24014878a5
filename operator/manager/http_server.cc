// The metrics/health HTTP server (see http_server.h).
#include "operator/manager/http_server.h"

#include <httplib.h>

namespace c4::op {

HttpServer::HttpServer(int threads) : threads_(std::max(1, threads)) {}

HttpServer::~HttpServer() {
  stop();
}

void HttpServer::handle(const std::string& path, Handler handler) {
  handlers_[path] = std::move(handler);
}

void HttpServer::handle(const std::string& path, SimpleHandler handler) {
  handlers_[path] = [h = std::move(handler)](const HttpRequest&) { return h(); };
}

Result<int> HttpServer::start(const std::string& address, int port) {
  server_ = std::make_unique<httplib::Server>();
  httplib::Server& s = *server_;
  const int threads = threads_;
  s.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  s.set_keep_alive_max_count(1);
  s.set_read_timeout(5, 0);
  s.set_write_timeout(5, 0);
  s.set_payload_max_length(64 * 1024);
  for (const auto& [path, handler] : handlers_) {
    s.Get(path, [h = handler](const httplib::Request& req, httplib::Response& res) {
      HttpRequest in;
      in.path = req.path;
      for (const auto& [k, v] : req.params) in.query[k] = v;
      HttpReply out = h(in);
      res.status = out.status;
      res.set_content(out.body, out.content_type);
    });
    auto not_allowed = [](const httplib::Request&, httplib::Response& res) {
      res.status = 405;
      res.set_header("Allow", "GET");
      res.set_content("method not allowed\n", "text/plain");
    };
    s.Post(path, not_allowed);
    s.Put(path, not_allowed);
    s.Patch(path, not_allowed);
    s.Delete(path, not_allowed);
  }
  int bound = port == 0 ? s.bind_to_any_port(address) : (s.bind_to_port(address, port) ? port : -1);
  if (bound < 0) {
    return makeError(ErrorCode::kInvalidArgument,
                     "cannot listen on " + address + ":" + std::to_string(port));
  }
  done_ = false;
  thread_ = std::thread([this] {
    server_->listen_after_bind();
    done_ = true;
  });
  // stop() only stops a server that is running: wait until the thread got there.
  while (!server_->is_running() && !done_) std::this_thread::yield();
  return bound;
}

void HttpServer::stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace c4::op
