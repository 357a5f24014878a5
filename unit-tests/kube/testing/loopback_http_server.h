// A scripted HTTP/1.1 server on 127.0.0.1 for unit tests of the libcurl client's own mechanics
// (Retry-After retries, the request gate, cancellation of a blocked call). It is no stand-in for
// the API server: whatever the API server decides is tested against a real one in
// e2e/integration/operator. In blackhole mode it accepts TCP connections (the kernel completes
// them) and never answers, like a partitioned or wedged API server.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace c4::kube::testing {

class LoopbackHttpServer {
 public:
  struct Response {
    int status = 200;
    std::vector<std::string> headers;  // "Name: value"
    std::string body = "{}";
  };
  enum class Mode { kAnswer, kBlackhole };

  explicit LoopbackHttpServer(Mode mode = Mode::kAnswer) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listen_fd_ < 0) throw std::runtime_error("socket failed");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof addr;
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(listen_fd_, 64) != 0 ||
        ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      throw std::runtime_error("bind/listen failed");
    }
    port_ = ntohs(addr.sin_port);
    if (mode == Mode::kBlackhole) return;  // the backlog accepts; nobody reads or answers
    if (::pipe2(wake_, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
    thread_ = std::thread([this] { serve(); });
  }

  ~LoopbackHttpServer() {
    if (thread_.joinable()) {
      char c = 'x';
      (void)!::write(wake_[1], &c, 1);
      thread_.join();
      ::close(wake_[0]);
      ::close(wake_[1]);
    }
    ::close(listen_fd_);
  }
  LoopbackHttpServer(const LoopbackHttpServer&) = delete;
  LoopbackHttpServer& operator=(const LoopbackHttpServer&) = delete;

  [[nodiscard]] std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // Queues the answer to a future request; with none queued the server answers 200 "{}".
  void script(Response response) {
    std::lock_guard lock(mu_);
    script_.push_back(std::move(response));
  }
  // The request lines ("GET /path?query HTTP/1.1") received so far.
  std::vector<std::string> requests() {
    std::lock_guard lock(mu_);
    return requests_;
  }

 private:
  void serve() {
    std::map<int, std::string> connections;  // fd -> bytes not yet parsed
    for (;;) {
      std::vector<pollfd> fds{{wake_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
      for (const auto& [fd, buffer] : connections) fds.push_back({fd, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), -1) < 0) continue;
      if ((fds[0].revents & POLLIN) != 0) break;
      if ((fds[1].revents & POLLIN) != 0) {
        int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0) connections[fd];
      }
      for (std::size_t i = 2; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        int fd = fds[i].fd;
        char chunk[4096];
        ssize_t n = ::read(fd, chunk, sizeof chunk);
        if (n <= 0) {
          ::close(fd);
          connections.erase(fd);
          continue;
        }
        std::string& buffer = connections[fd];
        buffer.append(chunk, static_cast<std::size_t>(n));
        while (answerOne(fd, buffer)) {
        }
      }
    }
    for (const auto& [fd, buffer] : connections) ::close(fd);
  }

  // Answers one complete request at the front of `buffer`, if there is one.
  bool answerOne(int fd, std::string& buffer) {
    std::size_t end = buffer.find("\r\n\r\n");
    if (end == std::string::npos) return false;
    std::string head = buffer.substr(0, end);
    std::size_t body_length = 0;
    for (std::size_t pos = 0; pos < head.size();) {
      std::size_t eol = head.find("\r\n", pos);
      if (eol == std::string::npos) eol = head.size();
      std::string line = head.substr(pos, eol - pos);
      for (auto& c : line) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (line.rfind("content-length:", 0) == 0) {
        body_length = static_cast<std::size_t>(std::strtoul(line.c_str() + 15, nullptr, 10));
      }
      pos = eol + 2;
    }
    if (buffer.size() < end + 4 + body_length) return false;
    buffer.erase(0, end + 4 + body_length);
    Response response;
    {
      std::lock_guard lock(mu_);
      requests_.push_back(head.substr(0, head.find("\r\n")));
      if (!script_.empty()) {
        response = std::move(script_.front());
        script_.pop_front();
      }
    }
    std::string out = "HTTP/1.1 " + std::to_string(response.status) + " Scripted\r\n" +
                      "Content-Type: application/json\r\n" +
                      "Content-Length: " + std::to_string(response.body.size()) + "\r\n";
    for (const auto& h : response.headers) out += h + "\r\n";
    out += "\r\n" + response.body;
    for (std::size_t sent = 0; sent < out.size();) {
      ssize_t n = ::write(fd, out.data() + sent, out.size() - sent);
      if (n <= 0) break;
      sent += static_cast<std::size_t>(n);
    }
    return true;
  }

  int listen_fd_ = -1;
  int port_ = 0;
  int wake_[2] = {-1, -1};
  std::mutex mu_;
  std::deque<Response> script_;
  std::vector<std::string> requests_;
  std::thread thread_;
};

}  // namespace c4::kube::testing
