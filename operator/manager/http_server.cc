// Minimal HTTP server.
#include "operator/manager/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace c4::op {

HttpServer::~HttpServer() {
  stop();
}

Result<int> HttpServer::start(const std::string& address, int port) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) return std::unexpected(errnoError("socket", errno));
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::inet_pton(AF_INET, address.c_str(), &addr.sin_addr) != 1) {
    return makeError(ErrorCode::kInvalidArgument, "bad listen address '" + address + "'");
  }
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return std::unexpected(errnoError("bind " + address + ":" + std::to_string(port), errno));
  }
  if (::listen(listen_fd_, 64) != 0) return std::unexpected(errnoError("listen", errno));
  socklen_t len = sizeof(addr);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  if (::pipe2(wake_pipe_, O_CLOEXEC) != 0) return std::unexpected(errnoError("pipe", errno));
  thread_ = std::thread([this] { serve(); });
  return static_cast<int>(ntohs(addr.sin_port));
}

void HttpServer::stop() {
  if (thread_.joinable()) {
    char c = 'x';
    [[maybe_unused]] auto n = ::write(wake_pipe_[1], &c, 1);
    thread_.join();
  }
  for (int* fd : {&listen_fd_, &wake_pipe_[0], &wake_pipe_[1]}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
}

void HttpServer::serve() {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_pipe_[0], POLLIN, 0}};
    int n = ::poll(fds, 2, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || (fds[1].revents & POLLIN) != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    answer(fd);
    ::close(fd);
  }
}

void HttpServer::answer(int fd) {
  timeval tv{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  std::string request;
  char buf[2048];
  while (request.find("\r\n\r\n") == std::string::npos && request.size() < 16384) {
    ssize_t got = ::recv(fd, buf, sizeof(buf), 0);
    if (got <= 0) break;
    request.append(buf, static_cast<std::size_t>(got));
  }
  HttpReply reply{404, "text/plain; charset=utf-8", "not found\n"};
  std::size_t sp1 = request.find(' ');
  std::size_t sp2 = sp1 == std::string::npos ? sp1 : request.find(' ', sp1 + 1);
  if (sp2 == std::string::npos) {
    reply = {400, "text/plain; charset=utf-8", "bad request\n"};
  } else {
    std::string method = request.substr(0, sp1);
    std::string path = request.substr(sp1 + 1, sp2 - sp1 - 1);
    path = path.substr(0, path.find('?'));
    auto it = handlers_.find(path);
    if (method != "GET" && method != "HEAD") {
      reply = {405, "text/plain; charset=utf-8", "method not allowed\n"};
    } else if (it != handlers_.end()) {
      try {
        reply = it->second();
      } catch (const std::exception& e) {
        reply = {500, "text/plain; charset=utf-8", std::string(e.what()) + "\n"};
      }
    }
  }
  const char* text = reply.status == 200   ? "OK"
                     : reply.status == 404 ? "Not Found"
                     : reply.status == 503 ? "Service Unavailable"
                                           : "Error";
  std::string out = "HTTP/1.1 " + std::to_string(reply.status) + " " + text +
                    "\r\nContent-Type: " + reply.content_type +
                    "\r\nContent-Length: " + std::to_string(reply.body.size()) +
                    "\r\nConnection: close\r\n\r\n" + reply.body;
  std::size_t sent = 0;
  while (sent < out.size()) {
    ssize_t n = ::send(fd, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<std::size_t>(n);
  }
}

}  // namespace c4::op
