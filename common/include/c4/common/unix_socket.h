// Unix datagram sockets: the plugin -> node-plugin report channel (docs/design.md §3.3).
//
// The sender never blocks its caller: every send is MSG_DONTWAIT, and a missing, slow or full
// receiver turns into a counted drop. The server learns each sender's pid/uid/gid from the kernel
// (SO_PASSCRED + SCM_CREDENTIALS, the datagram form of SO_PEERCRED), so it can attribute or drop
// what it cannot attribute.
//
// A path that starts with '@' names a socket in Linux's abstract namespace (no file).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "c4/common/error.h"

namespace c4 {

// Owns a file descriptor; closes it on destruction. Move-only.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  [[nodiscard]] int get() const { return fd_; }
  [[nodiscard]] bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

enum class SendOutcome { kSent, kDropped };

// Sends datagrams to a path without connecting, so a restarted receiver is picked up at once.
// Thread-safe; never blocks.
class UnixDatagramSender {
 public:
  // Fails only on a path that cannot be a Unix socket address or when no socket can be created.
  static Result<UnixDatagramSender> create(std::string path);

  UnixDatagramSender(UnixDatagramSender&&) noexcept;
  UnixDatagramSender& operator=(UnixDatagramSender&&) noexcept;
  ~UnixDatagramSender();

  // Sends one datagram. kDropped when the receiver is absent, its queue is full, or the message is
  // too large; the reason is kept in lastError().
  SendOutcome send(std::span<const std::uint8_t> bytes) noexcept;

  // Waits at most `timeout` until the receiver has read every datagram sent through this sender
  // (the kernel charges an unread datagram to its sender's socket: SIOCOUTQ); true when none is
  // left unread. The one call that blocks, for a process about to exit: the receiver attributes a
  // datagram by its sender's pid, best while that pid still names the sender.
  bool awaitRead(std::chrono::milliseconds timeout) const noexcept;

  [[nodiscard]] std::uint64_t sent() const noexcept;
  [[nodiscard]] std::uint64_t dropped() const noexcept;
  // errno of the last drop (0 if none).
  [[nodiscard]] int lastError() const noexcept;
  [[nodiscard]] const std::string& path() const;

 private:
  struct Impl;
  explicit UnixDatagramSender(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

struct Datagram {
  std::vector<std::uint8_t> bytes;
  std::optional<PeerCredentials> credentials;  // absent only if the kernel attached none
  bool truncated = false;                      // the datagram was larger than the buffer
};

// Receives datagrams on a bound path. Removes a stale socket file before binding and its own file
// on destruction. Single-reader (one thread calls receive()).
class UnixDatagramServer {
 public:
  // `mode` is applied to the socket file (ignored for abstract names). `max_datagram` sizes the
  // receive buffer of one message; larger datagrams are reported as truncated.
  static Result<UnixDatagramServer> bind(std::string path, unsigned mode = 0666,
                                         std::size_t max_datagram = 256 * 1024);

  UnixDatagramServer(UnixDatagramServer&&) noexcept;
  UnixDatagramServer& operator=(UnixDatagramServer&&) noexcept;
  ~UnixDatagramServer();

  // Waits up to `timeout` for one datagram; std::nullopt on timeout. EINTR counts as a timeout.
  Result<std::optional<Datagram>> receive(std::chrono::milliseconds timeout);

  [[nodiscard]] int fd() const;
  [[nodiscard]] const std::string& path() const;

 private:
  struct Impl;
  explicit UnixDatagramServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace c4
