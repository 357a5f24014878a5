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
  Duration cert_check_period = std::chrono::seconds{10};
  Duration read_timeout = std::chrono::seconds{10};
};

class CertificateSource;

class ReportServer {
 public:
  // Loads the certificate and key (kInvalidArgument naming the file when it is missing or not
  // a matching PEM pair) and prepares the server. `handler` and `clock` must outlive it.
  static Result<std::unique_ptr<ReportServer>> create(ReportServerConfig config,
                                                      ReportHandler& handler, Clock& clock);
  ~ReportServer();
  ReportServer(const ReportServer&) = delete;
  ReportServer& operator=(const ReportServer&) = delete;

  // Binds and starts serving on a thread of its own; returns the bound port.
  Result<int> start();
  // Stops serving and joins. Idempotent.
  void stop();
  // Certificate reloads so far (tests).
  [[nodiscard]] int certificateLoads() const;

 private:
  ReportServer(ReportServerConfig config, ReportHandler& handler, Clock& clock);

  ReportServerConfig config_;
  ReportHandler& handler_;
  Clock& clock_;
  std::shared_ptr<CertificateSource> certs_;
  std::unique_ptr<httplib::SSLServer> server_;
  std::thread thread_;
  std::atomic<bool> listening_done_{false};
};

}  // namespace c4::op::ingest
