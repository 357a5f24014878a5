// The HTTPS server of the report endpoint: cpp-httplib's SSLServer with a bounded thread pool,
// POST /v1/reports handed to ReportHandler (report_handler.h), everything else 404/405.
//
// The serving certificate and key come from PEM files (a Secret mounted into the pod). They
// are loaded at create() (an error names the file) and re-read when either file's modification
// time changes, checked at most every `cert_check_period` at a TLS handshake: a new handshake
// gets the new pair, a pair that fails to load or whose key does not match is logged and the
// old one kept.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "c4/common/clock.h"
#include "c4/common/error.h"
#include "c4/common/metrics.h"
#include "operator/ingest/report_handler.h"

namespace httplib {
class SSLServer;
}

namespace c4::op::ingest {

struct ReportServerConfig {
  std::string address = "0.0.0.0";
  int port = 8443;  // 0 = any free port
  std::string cert_file;
  std::string key_file;
  int threads = 8;
  // Accepted connections that may wait for a worker while every worker is busy. Each holds a
  // file descriptor, so an unbounded queue lets a flood of connections exhaust the operator's
  // descriptors; one accepted beyond the bound is closed at once (before its TLS handshake is
  // read), counted (c4_ingest_connections_rejected_total) and logged, rate-limited. At least 1.
  int max_queued_connections = 1024;
  Duration cert_check_period = std::chrono::seconds{10};
  // The most a connection may take from the start of its TLS handshake until the last byte of
  // its request body (handshake, headers and body together, however slowly they trickle in);
  // past it the connection is cut off and its worker freed. Once the body is in, the answer gets
  // a fresh read_timeout. Also each single read's timeout (cpp-httplib's).
  Duration read_timeout = std::chrono::seconds{10};
  // Connection policy. cpp-httplib serves a kept-alive connection on one pool thread until it
  // has been idle for keep_alive_timeout (whole seconds), so a few thousand node plugins posting
  // once a second over kept-alive connections would pin every thread while the other
  // connections wait in the queue. The default serves one request per connection (the response
  // says "Connection: close") and frees the thread at once; a reconnecting client resumes its TLS
  // session (session cache and tickets are on), which spares the certificate work of a full
  // handshake. keep_alive_timeout also bounds how long a new connection may hold a thread before
  // its first request. Measured in docs/benchmarks.md ("Report ingest").
  int keep_alive_max_count = 1;
  Duration keep_alive_timeout = std::chrono::seconds{1};
  // Pending connections the kernel queues before accept (capped by net.core.somaxconn).
  // cpp-httplib 0.11 listens with a backlog of 5: with a connection per request, a second's worth
  // of node plugins arriving together overflows it and each dropped SYN costs its client a 1 s
  // retransmission, so start() raises it.
  int listen_backlog = 4096;
};

// TLS handshakes the server completed, and how many of them resumed a session.
struct TlsSessionStats {
  long handshakes = 0;
  long resumed = 0;
};

class CertificateSource;
class ConnectionDeadlines;
class ConnectionRejections;

class ReportServer {
 public:
  // Loads the certificate and key (kInvalidArgument naming the file when it is missing or not
  // a matching PEM pair) and prepares the server. `handler` and `clock` must outlive it.
  // `registry` (may be null) gets c4_ingest_connections_timed_out_total and
  // c4_ingest_connections_rejected_total.
  static Result<std::unique_ptr<ReportServer>> create(ReportServerConfig config,
                                                      ReportHandler& handler, Clock& clock,
                                                      metrics::Registry* registry = nullptr);
  ~ReportServer();
  ReportServer(const ReportServer&) = delete;
  ReportServer& operator=(const ReportServer&) = delete;

  // Binds and starts serving on a thread of its own; returns the bound port.
  Result<int> start();
  // Stops serving and joins. Idempotent.
  void stop();
  // Certificate reloads so far (tests).
  [[nodiscard]] int certificateLoads() const;
  // Connections cut off at their read deadline so far.
  [[nodiscard]] long connectionsTimedOut() const;
  // Connections closed at once because max_queued_connections were already waiting.
  [[nodiscard]] long connectionsRejected() const;
  // OpenSSL's counters of the server context (benchmarks, tests).
  [[nodiscard]] TlsSessionStats tlsSessionStats() const;

 private:
  ReportServer(ReportServerConfig config, ReportHandler& handler, Clock& clock);

  ReportServerConfig config_;
  ReportHandler& handler_;
  Clock& clock_;
  std::shared_ptr<CertificateSource> certs_;
  // Declared before server_: the server (and with it every connection) goes first.
  std::unique_ptr<ConnectionDeadlines> deadlines_;
  std::unique_ptr<ConnectionRejections> rejections_;
  std::unique_ptr<httplib::SSLServer> server_;
  std::thread thread_;
  std::atomic<bool> listening_done_{false};
  std::atomic<int> listen_fd_{-1};
};

}  // namespace c4::op::ingest
