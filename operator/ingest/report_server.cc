// The report endpoint's HTTPS server (see report_server.h).
#include "operator/ingest/report_server.h"

#include <httplib.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <thread>

namespace c4::op::ingest {
namespace {

struct PemPair {
  X509* cert = nullptr;
  EVP_PKEY* key = nullptr;
  STACK_OF(X509) * chain = nullptr;
  ~PemPair() {
    if (cert != nullptr) X509_free(cert);
    if (key != nullptr) EVP_PKEY_free(key);
    if (chain != nullptr) sk_X509_pop_free(chain, X509_free);
  }
};

struct FileCloser {
  void operator()(std::FILE* f) const {
    if (f != nullptr) std::fclose(f);
  }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

// What tells a changed file: modification time, inode (a rename or a Secret's symlink swap)
// and size; the mtime alone can stay the same for writes within one timestamp tick.
struct FileVersion {
  std::int64_t mtime_ns = -1;
  std::uint64_t inode = 0;
  std::int64_t size = -1;
  friend bool operator==(const FileVersion&, const FileVersion&) = default;
};

FileVersion fileVersion(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  return FileVersion{
      static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec,
      static_cast<std::uint64_t>(st.st_ino), static_cast<std::int64_t>(st.st_size)};
}

Result<std::shared_ptr<PemPair>> loadPairOnce(const std::string& cert_file,
                                              const std::string& key_file) {
  auto pair = std::make_shared<PemPair>();
  File cf(std::fopen(cert_file.c_str(), "r"));
  if (!cf)
    return makeError(ErrorCode::kInvalidArgument, "cannot open TLS certificate file " + cert_file);
  pair->cert = PEM_read_X509(cf.get(), nullptr, nullptr, nullptr);
  if (pair->cert == nullptr) {
    return makeError(ErrorCode::kInvalidArgument, "no PEM certificate in " + cert_file);
  }
  pair->chain = sk_X509_new_null();
  while (X509* extra = PEM_read_X509(cf.get(), nullptr, nullptr, nullptr)) {
    sk_X509_push(pair->chain, extra);
  }
  // The read that ended the chain left "no start line" on this thread's OpenSSL error queue.
  // A reload runs inside a handshake (the certificate callback), where a stale error would make
  // the server's SSL_get_error() fail this and later connections of the thread: clear it.
  ERR_clear_error();
  File kf(std::fopen(key_file.c_str(), "r"));
  if (!kf) return makeError(ErrorCode::kInvalidArgument, "cannot open TLS key file " + key_file);
  pair->key = PEM_read_PrivateKey(kf.get(), nullptr, nullptr, nullptr);
  if (pair->key == nullptr) {
    return makeError(ErrorCode::kInvalidArgument, "no PEM private key in " + key_file);
  }
  if (X509_check_private_key(pair->cert, pair->key) != 1) {
    return makeError(ErrorCode::kInvalidArgument,
                     "the key in " + key_file + " does not match the certificate in " + cert_file);
  }
  return pair;
}

// Loads the pair and leaves this thread's OpenSSL error queue empty whatever happened.
Result<std::shared_ptr<PemPair>> loadPair(const std::string& cert_file,
                                          const std::string& key_file) {
  auto pair = loadPairOnce(cert_file, key_file);
  ERR_clear_error();
  return pair;
}

}  // namespace

// The current certificate pair, re-read when the files change.
class CertificateSource {
 public:
  CertificateSource(std::string cert_file, std::string key_file, Duration period, Clock& clock)
      : cert_file_(std::move(cert_file)),
        key_file_(std::move(key_file)),
        period_(period),
        clock_(clock),
        log_("ingest") {}

  Status load() {
    FileVersion cm = fileVersion(cert_file_);
    FileVersion km = fileVersion(key_file_);
    C4_ASSIGN_OR_RETURN(auto pair, loadPair(cert_file_, key_file_));
    std::lock_guard lock(mu_);
    pair_ = std::move(pair);
    cert_version_ = cm;
    key_version_ = km;
    checked_ = clock_.monoNow();
    ++loads_;
    return okStatus();
  }

  std::shared_ptr<PemPair> current() {
    bool check = false;
    {
      std::lock_guard lock(mu_);
      MonoTime now = clock_.monoNow();
      if (now - checked_ >= period_) {
        checked_ = now;
        check = fileVersion(cert_file_) != cert_version_ || fileVersion(key_file_) != key_version_;
      }
    }
    if (check) {
      if (auto loaded = load(); !loaded) {
        log_.warn("Keeping the old TLS certificate", {{"error", loaded.error()}});
      } else {
        log_.info("Reloaded the TLS certificate", {{"certFile", cert_file_}});
      }
    }
    std::lock_guard lock(mu_);
    return pair_;
  }

  int loads() const {
    std::lock_guard lock(mu_);
    return loads_;
  }

 private:
  std::string cert_file_;
  std::string key_file_;
  Duration period_;
  Clock& clock_;
  Logger log_;
  mutable std::mutex mu_;
  std::shared_ptr<PemPair> pair_;
  FileVersion cert_version_;
  FileVersion key_version_;
  MonoTime checked_{};
  int loads_ = 0;
};

namespace {

int certCallback(SSL* ssl, void* arg) {
  auto* source = static_cast<CertificateSource*>(arg);
  auto pair = source->current();
  if (!pair) return 0;
  return SSL_use_cert_and_key(ssl, pair->cert, pair->key, pair->chain, 1) == 1 ? 1 : 0;
}

}  // namespace

ReportServer::ReportServer(ReportServerConfig config, ReportHandler& handler, Clock& clock)
    : config_(std::move(config)), handler_(handler), clock_(clock) {}

ReportServer::~ReportServer() {
  stop();
}

int ReportServer::certificateLoads() const {
  return certs_->loads();
}

TlsSessionStats ReportServer::tlsSessionStats() const {
  SSL_CTX* ctx = server_->ssl_context();
  if (ctx == nullptr) return {};
  return TlsSessionStats{SSL_CTX_sess_accept_good(ctx), SSL_CTX_sess_hits(ctx)};
}

Result<std::unique_ptr<ReportServer>> ReportServer::create(ReportServerConfig config,
                                                           ReportHandler& handler, Clock& clock) {
  if (config.cert_file.empty() || config.key_file.empty()) {
    return makeError(ErrorCode::kInvalidArgument,
                     "the report server needs --tls-cert-file and --tls-key-file");
  }
  std::unique_ptr<ReportServer> server(new ReportServer(std::move(config), handler, clock));
  server->certs_ =
      std::make_shared<CertificateSource>(server->config_.cert_file, server->config_.key_file,
                                          server->config_.cert_check_period, clock);
  C4_RETURN_IF_ERROR(server->certs_->load());
  CertificateSource* source = server->certs_.get();
  server->server_ = std::make_unique<httplib::SSLServer>([source](SSL_CTX& ctx) {
    SSL_CTX_set_min_proto_version(&ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(&ctx,
                        SSL_OP_NO_COMPRESSION | SSL_OP_NO_SESSION_RESUMPTION_ON_RENEGOTIATION);
    SSL_CTX_set_cert_cb(&ctx, certCallback, source);
    // Resumption (the default, made explicit): TLS 1.2 session IDs from the server cache,
    // TLS 1.3 stateless tickets; one ticket per handshake is all a client keeps.
    SSL_CTX_set_session_cache_mode(&ctx, SSL_SESS_CACHE_SERVER);
    static constexpr unsigned char kSessionContext[] = "c4-report-server";
    SSL_CTX_set_session_id_context(&ctx, kSessionContext, sizeof kSessionContext - 1);
    SSL_CTX_set_num_tickets(&ctx, 1);
    return true;
  });
  if (!server->server_->is_valid()) {
    return makeError(ErrorCode::kInternal, "cannot set up the TLS context of the report server");
  }
  httplib::SSLServer& s = *server->server_;
  const int threads = std::max(1, server->config_.threads);
  s.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  // One byte over the handler's limit, so the handler sees (and counts) a too-large body that
  // came without a Content-Length; larger declared lengths httplib refuses itself (counted in
  // the logger below).
  s.set_payload_max_length(handler.config().max_body_bytes + 1);
  auto timeout = std::chrono::duration_cast<std::chrono::seconds>(server->config_.read_timeout);
  s.set_read_timeout(std::max<time_t>(1, static_cast<time_t>(timeout.count())), 0);
  s.set_keep_alive_max_count(
      static_cast<size_t>(std::max(1, server->config_.keep_alive_max_count)));
  auto idle = std::chrono::duration_cast<std::chrono::seconds>(server->config_.keep_alive_timeout);
  s.set_keep_alive_timeout(std::max<time_t>(0, static_cast<time_t>(idle.count())));
  ReportServer* self = server.get();
  s.set_socket_options([self](socket_t sock) {
    httplib::default_socket_options(sock);
    self->listen_fd_ = sock;  // the listening socket (start() raises its backlog)
  });
  ReportHandler* h = &handler;
  s.Post("/v1/reports", [h](const httplib::Request& req, httplib::Response& res) {
    IngestRequest in;
    in.authorization = req.get_header_value("Authorization");
    in.content_type = req.get_header_value("Content-Type");
    in.body = req.body;
    IngestResponse out = h->handle(in);
    res.status = out.status;
    if (out.retry_after_seconds)
      res.set_header("Retry-After", std::to_string(*out.retry_after_seconds));
    if (out.last_seq) res.set_header("C4-Last-Seq", std::to_string(*out.last_seq));
    res.set_header("C4-Reason", out.reason);
    res.set_content(out.body, "application/json");
  });
  s.set_logger([h](const httplib::Request& req, const httplib::Response& res) {
    // Refusals made by the library before the handler ran (413 on a declared length, 400 on
    // a bad request line) are counted here.
    if (req.path == "/v1/reports" && !res.has_header("C4-Reason") && res.status >= 400) {
      h->countRefusal(res.status, res.status == 413 ? "too_large" : "bad_request");
    }
  });
  return server;
}

Result<int> ReportServer::start() {
  int port = config_.port == 0
                 ? server_->bind_to_any_port(config_.address)
                 : (server_->bind_to_port(config_.address, config_.port) ? config_.port : -1);
  if (port < 0) {
    return makeError(
        ErrorCode::kInvalidArgument,
        "cannot bind the report server to " + config_.address + ":" + std::to_string(config_.port));
  }
  if (int fd = listen_fd_.load(); fd >= 0 && config_.listen_backlog > 0) {
    // Listening again on a listening socket only changes its backlog.
    (void)::listen(fd, config_.listen_backlog);
  }
  listening_done_ = false;
  thread_ = std::thread([this] {
    server_->listen_after_bind();
    listening_done_ = true;
  });
  // stop() only stops a server that is running: wait until the thread got there.
  while (!server_->is_running() && !listening_done_) std::this_thread::yield();
  return port;
}

void ReportServer::stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace c4::op::ingest
