#include "c4/common/unix_socket.h"

#include <linux/sockios.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

namespace c4 {
namespace {

struct SockAddr {
  sockaddr_un addr{};
  socklen_t len = 0;
};

Result<SockAddr> makeAddress(const std::string& path) {
  SockAddr out;
  out.addr.sun_family = AF_UNIX;
  if (path.empty()) return makeError(ErrorCode::kInvalidArgument, "unix socket path is empty");
  const bool abstract = path.front() == '@';
  // sun_path holds 108 bytes; a filesystem path needs its NUL terminator.
  const std::size_t cap = sizeof(out.addr.sun_path) - (abstract ? 0 : 1);
  if (path.size() > cap) {
    return makeError(
        ErrorCode::kInvalidArgument,
        "unix socket path \"" + path + "\" is longer than " + std::to_string(cap) + " bytes");
  }
  if (path.find('\0') != std::string::npos) {
    return makeError(ErrorCode::kInvalidArgument, "unix socket path contains a NUL byte");
  }
  std::memcpy(out.addr.sun_path, path.data(), path.size());
  if (abstract) out.addr.sun_path[0] = '\0';
  out.len =
      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size() + (abstract ? 0 : 1));
  return out;
}

}  // namespace

UniqueFd& UniqueFd::operator=(UniqueFd&& o) noexcept {
  if (this != &o) reset(o.release());
  return *this;
}

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

// ---- Sender ------------------------------------------------------------------------------------

struct UnixDatagramSender::Impl {
  std::string path;
  SockAddr addr;
  UniqueFd fd;
  std::atomic<std::uint64_t> sent{0};
  std::atomic<std::uint64_t> dropped{0};
  std::atomic<int> last_error{0};
};

UnixDatagramSender::UnixDatagramSender(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
UnixDatagramSender::UnixDatagramSender(UnixDatagramSender&&) noexcept = default;
UnixDatagramSender& UnixDatagramSender::operator=(UnixDatagramSender&&) noexcept = default;
UnixDatagramSender::~UnixDatagramSender() = default;

Result<UnixDatagramSender> UnixDatagramSender::create(std::string path) {
  C4_ASSIGN_OR_RETURN(SockAddr addr, makeAddress(path));
  int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::unexpected(errnoError("socket(AF_UNIX, SOCK_DGRAM)", errno));
  auto impl = std::make_unique<Impl>();
  impl->path = std::move(path);
  impl->addr = addr;
  impl->fd.reset(fd);
  return UnixDatagramSender(std::move(impl));
}

SendOutcome UnixDatagramSender::send(std::span<const std::uint8_t> bytes) noexcept {
  const ssize_t n =
      ::sendto(impl_->fd.get(), bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL,
               reinterpret_cast<const sockaddr*>(&impl_->addr.addr), impl_->addr.len);
  if (n == static_cast<ssize_t>(bytes.size())) {
    impl_->sent.fetch_add(1, std::memory_order_relaxed);
    return SendOutcome::kSent;
  }
  impl_->last_error.store(n < 0 ? errno : EMSGSIZE, std::memory_order_relaxed);
  impl_->dropped.fetch_add(1, std::memory_order_relaxed);
  return SendOutcome::kDropped;
}

// Real time by nature: the wait is on another process reading the kernel's queue, which no
// injected clock moves (a simulated one would never let it end).
bool UnixDatagramSender::awaitRead(std::chrono::milliseconds timeout) const noexcept {
  const auto deadline = std::chrono::steady_clock::now() + timeout;  // c4-allow-real-time
  for (;;) {
    int unread = 0;
    if (::ioctl(impl_->fd.get(), SIOCOUTQ, &unread) != 0) return false;
    if (unread == 0) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;  // c4-allow-real-time
    ::usleep(1000);                                                  // c4-allow-real-time
  }
}

std::uint64_t UnixDatagramSender::sent() const noexcept {
  return impl_->sent.load();
}
std::uint64_t UnixDatagramSender::dropped() const noexcept {
  return impl_->dropped.load();
}
int UnixDatagramSender::lastError() const noexcept {
  return impl_->last_error.load();
}
const std::string& UnixDatagramSender::path() const {
  return impl_->path;
}

// ---- Server ------------------------------------------------------------------------------------

struct UnixDatagramServer::Impl {
  std::string path;
  UniqueFd fd;
  std::vector<std::uint8_t> buffer;
  bool owns_file = false;

  ~Impl() {
    if (owns_file) ::unlink(path.c_str());
  }
};

UnixDatagramServer::UnixDatagramServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
UnixDatagramServer::UnixDatagramServer(UnixDatagramServer&&) noexcept = default;
UnixDatagramServer& UnixDatagramServer::operator=(UnixDatagramServer&&) noexcept = default;
UnixDatagramServer::~UnixDatagramServer() = default;

Result<UnixDatagramServer> UnixDatagramServer::bind(std::string path, unsigned mode,
                                                    std::size_t max_datagram) {
  C4_ASSIGN_OR_RETURN(SockAddr addr, makeAddress(path));
  if (max_datagram == 0) return makeError(ErrorCode::kInvalidArgument, "max_datagram must be > 0");
  const bool abstract = path.front() == '@';
  if (!abstract) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0) {
      if (!S_ISSOCK(st.st_mode)) {
        return makeError(ErrorCode::kAlreadyExists,
                         "\"" + path + "\" exists and is not a socket; refusing to replace it");
      }
      ::unlink(path.c_str());  // stale socket from an earlier run
    }
  }
  UniqueFd fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return std::unexpected(errnoError("socket(AF_UNIX, SOCK_DGRAM)", errno));
  int one = 1;
  if (::setsockopt(fd.get(), SOL_SOCKET, SO_PASSCRED, &one, sizeof one) != 0) {
    return std::unexpected(errnoError("setsockopt(SO_PASSCRED)", errno));
  }
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr.addr), addr.len) != 0) {
    return std::unexpected(errnoError("bind(\"" + path + "\")", errno));
  }
  auto impl = std::make_unique<Impl>();
  impl->path = std::move(path);
  impl->owns_file = !abstract;
  if (!abstract && ::chmod(impl->path.c_str(), static_cast<mode_t>(mode)) != 0) {
    return std::unexpected(errnoError("chmod(\"" + impl->path + "\")", errno));
  }
  impl->fd = std::move(fd);
  impl->buffer.resize(max_datagram);
  return UnixDatagramServer(std::move(impl));
}

Result<std::optional<Datagram>> UnixDatagramServer::receive(std::chrono::milliseconds timeout) {
  pollfd pfd{impl_->fd.get(), POLLIN, 0};
  const int timeout_ms = static_cast<int>(std::max<std::int64_t>(0, timeout.count()));
  const int pr = ::poll(&pfd, 1, timeout_ms);
  if (pr < 0) {
    if (errno == EINTR) return std::optional<Datagram>{};
    return std::unexpected(errnoError("poll(unix datagram socket)", errno));
  }
  if (pr == 0) return std::optional<Datagram>{};

  iovec iov{impl_->buffer.data(), impl_->buffer.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(ucred))];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  const ssize_t n = ::recvmsg(impl_->fd.get(), &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (n < 0) {
    if (errno == EAGAIN || errno == EINTR) return std::optional<Datagram>{};
    return std::unexpected(errnoError("recvmsg(unix datagram socket)", errno));
  }
  Datagram d;
  d.truncated = (msg.msg_flags & MSG_TRUNC) != 0;
  d.bytes.assign(impl_->buffer.begin(), impl_->buffer.begin() + n);
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS &&
        c->cmsg_len >= CMSG_LEN(sizeof(ucred))) {
      ucred cred{};
      std::memcpy(&cred, CMSG_DATA(c), sizeof cred);
      d.credentials = PeerCredentials{cred.pid, cred.uid, cred.gid};
    }
  }
  return std::optional<Datagram>{std::move(d)};
}

int UnixDatagramServer::fd() const {
  return impl_->fd.get();
}
const std::string& UnixDatagramServer::path() const {
  return impl_->path;
}

}  // namespace c4
