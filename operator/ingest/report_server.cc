// The report endpoint's HTTPS server (see report_server.h).
#include "operator/ingest/report_server.h"

#include <fcntl.h>
#include <httplib.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <map>
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

// Per-connection deadlines (see ReportServerConfig::read_timeout). A connection is armed when its
// TLS handshake starts (the info callback, before the first byte of the ClientHello is read) and
// disarmed when OpenSSL frees it; the handler re-arms it once the body is read, giving the answer
// a fresh budget. A watchdog thread, on the injected clock, shuts down the socket of a connection
// past its deadline: the worker's blocked read returns at once and cpp-httplib closes the
// connection. The SSL object lives (and so the fd stays open) until it is disarmed, both under
// `mu_`, so the watchdog never touches an fd number that was closed and reused.
class ConnectionDeadlines {
 public:
  ConnectionDeadlines(Clock& clock, Duration limit, metrics::Counter* timed_out)
      : clock_(clock),
        limit_(limit),
        timed_out_(timed_out),
        log_(clock, Logger("ingest"), "Suppressed slow report client logs", 5, limit) {}
  ~ConnectionDeadlines() { stop(); }

  void start() {
    std::lock_guard lock(mu_);
    if (thread_.joinable()) return;
    stopping_ = false;
    thread_ = std::thread([this] { run(); });
  }
  void stop() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
      wake_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  // Arms `ssl` (whose socket is `fd`) with a deadline `limit` from now, once per connection.
  void arm(const SSL* ssl, int fd) {
    if (fd < 0) return;
    {
      std::lock_guard lock(mu_);
      if (!armed_.emplace(ssl, Entry{fd, clock_.monoNow() + limit_}).second) return;
      wake_ = true;
    }
    cv_.notify_all();
  }
  // A fresh deadline for an armed connection.
  void rearm(const SSL* ssl) {
    std::lock_guard lock(mu_);
    if (auto it = armed_.find(ssl); it != armed_.end())
      it->second.deadline = clock_.monoNow() + limit_;
  }
  void disarm(const SSL* ssl) {
    std::lock_guard lock(mu_);
    armed_.erase(ssl);
  }
  [[nodiscard]] long timedOut() const {
    std::lock_guard lock(mu_);
    return timed_out_count_;
  }

 private:
  struct Entry {
    int fd;
    MonoTime deadline;
  };

  void run() {
    std::unique_lock lock(mu_);
    while (!stopping_) {
      MonoTime now = clock_.monoNow();
      MonoTime next = now + std::chrono::hours{1};
      for (auto it = armed_.begin(); it != armed_.end();) {
        if (it->second.deadline <= now) {
          // Reads and writes of the worker fail from now on; the fd stays open until the
          // worker closes it.
          ::shutdown(it->second.fd, SHUT_RDWR);
          ++timed_out_count_;
          if (timed_out_ != nullptr) timed_out_->inc();
          log_.warn("Disconnected a report client that was too slow",
                    {{"readTimeoutSeconds", std::chrono::duration<double>(limit_).count()}});
          it = armed_.erase(it);
        } else {
          next = std::min(next, it->second.deadline);
          ++it;
        }
      }
      wake_ = false;
      clock_.waitUntil(lock, cv_, next, [this] { return wake_; });
    }
  }

  Clock& clock_;
  Duration limit_;
  metrics::Counter* timed_out_;
  RateLimitedLog log_;
  mutable std::mutex mu_;
  std::condition_variable_any cv_;
  std::map<const SSL*, Entry> armed_;
  long timed_out_count_ = 0;
  bool stopping_ = false;
  bool wake_ = false;
  std::thread thread_;
};

// Connections accepted while max_queued_connections already waited for a worker: each is closed
// at once on the accept thread, counted and logged (rate-limited). Its socket is closed in the
// TLS info callback at the start of the handshake, before a byte of it is read (see
// BoundedThreadPool): the descriptor is replaced by one of /dev/null with dup2, so the client's
// connection ends there (reset: SO_LINGER 0 keeps no TIME_WAIT behind), the handshake reads
// end-of-file and fails at once, and the number cpp-httplib closes afterwards is still its own.
class ConnectionRejections {
 public:
  ConnectionRejections(Clock& clock, std::size_t max_queued, metrics::Counter* rejected)
      : max_queued_(max_queued),
        rejected_(rejected),
        log_(clock, Logger("ingest"), "Suppressed rejected report connection logs", 5,
             std::chrono::seconds{10}),
        dev_null_(::open("/dev/null", O_RDWR | O_CLOEXEC)) {}
  ~ConnectionRejections() {
    if (dev_null_ >= 0) ::close(dev_null_);
  }
  ConnectionRejections(const ConnectionRejections&) = delete;
  ConnectionRejections& operator=(const ConnectionRejections&) = delete;

  [[nodiscard]] std::size_t maxQueued() const { return max_queued_; }

  // One connection found the queue full.
  void rejected() {
    count_.fetch_add(1);
    if (rejected_ != nullptr) rejected_->inc();
    log_.warn("Closed a report connection: every worker busy and the queue full",
              {{"maxQueuedConnections", max_queued_}});
  }
  // Ends the connection on `fd` now (the descriptor stays open, on /dev/null, for its owner).
  void close(int fd) const {
    if (fd < 0) return;
    linger off{1, 0};
    (void)::setsockopt(fd, SOL_SOCKET, SO_LINGER, &off, sizeof off);
    if (dev_null_ < 0 || ::dup2(dev_null_, fd) < 0) (void)::shutdown(fd, SHUT_RDWR);
  }
  [[nodiscard]] long count() const { return count_.load(); }

 private:
  std::size_t max_queued_;
  metrics::Counter* rejected_;
  RateLimitedLog log_;
  int dev_null_;
  std::atomic<long> count_{0};
};

namespace {

// Set on the accept thread while it runs the task of a connection the queue had no room for.
thread_local const ConnectionRejections* t_rejecting = nullptr;

// cpp-httplib's ThreadPool (0.11, the Debian package; later versions take a max_queued_requests
// argument) queues accepted connections without limit. This pool queues at most
// rejections.maxQueued() of them; the task of a further connection runs at once on the accept
// thread with t_rejecting set, where the handshake's first callback closes its socket
// (infoCallback), so the task returns in microseconds and the accept loop goes on.
class BoundedThreadPool final : public httplib::TaskQueue {
 public:
  BoundedThreadPool(std::size_t threads, ConnectionRejections& rejections)
      : rejections_(rejections) {
    for (std::size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { work(); });
  }
  ~BoundedThreadPool() override { shutdown(); }
  BoundedThreadPool(const BoundedThreadPool&) = delete;
  BoundedThreadPool& operator=(const BoundedThreadPool&) = delete;

  void enqueue(std::function<void()> fn) override {
    {
      std::lock_guard lock(mu_);
      if (jobs_.size() < rejections_.maxQueued()) {
        jobs_.push_back(std::move(fn));
        cv_.notify_one();
        return;
      }
    }
    rejections_.rejected();
    t_rejecting = &rejections_;
    run(fn);
    t_rejecting = nullptr;
  }

  void shutdown() override {
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

 private:
  static void run(const std::function<void()>& fn) {
    try {
      fn();
    } catch (const std::exception& e) {
      Logger("ingest").error("Report connection task failed", {{"error", e.what()}});
    } catch (...) {
      Logger("ingest").error("Report connection task failed");
    }
  }

  void work() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
        if (jobs_.empty()) return;  // stopping, and every queued connection served
        fn = std::move(jobs_.front());
        jobs_.pop_front();
      }
      run(fn);
    }
  }

  ConnectionRejections& rejections_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

int certCallback(SSL* ssl, void* arg) {
  auto* source = static_cast<CertificateSource*>(arg);
  auto pair = source->current();
  if (!pair) return 0;
  return SSL_use_cert_and_key(ssl, pair->cert, pair->key, pair->chain, 1) == 1 ? 1 : 0;
}

// The ex_data slots that lead OpenSSL's callbacks to the deadlines: one on the server's SSL_CTX
// (for the info callback), one on each armed connection (freed with it: disarm).
void disarmOnFree(void* /*parent*/, void* ptr, CRYPTO_EX_DATA* /*ad*/, int idx, long /*argl*/,
                  void* /*argp*/);

int ctxIndex() {
  static const int index = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

int sslIndex() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, disarmOnFree);
  return index;
}

void disarmOnFree(void* parent, void* ptr, CRYPTO_EX_DATA* /*ad*/, int /*idx*/, long /*argl*/,
                  void* /*argp*/) {
  if (ptr != nullptr) static_cast<ConnectionDeadlines*>(ptr)->disarm(static_cast<SSL*>(parent));
}

void infoCallback(const SSL* ssl, int where, int /*ret*/) {
  if ((where & SSL_CB_HANDSHAKE_START) == 0) return;
  if (t_rejecting != nullptr) {  // no room in the queue: not a byte of it read
    t_rejecting->close(SSL_get_fd(ssl));
    return;
  }
  auto* deadlines =
      static_cast<ConnectionDeadlines*>(SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), ctxIndex()));
  if (deadlines == nullptr) return;
  auto* mutable_ssl = const_cast<SSL*>(ssl);  // OpenSSL's callback type; ex_data needs non-const
  if (SSL_get_ex_data(mutable_ssl, sslIndex()) == nullptr) {
    SSL_set_ex_data(mutable_ssl, sslIndex(), deadlines);
  }
  deadlines->arm(ssl, SSL_get_fd(ssl));
}

// The declared Content-Length: nullopt when absent; `bad` when it is not a plain number.
std::optional<std::uint64_t> contentLength(const httplib::Request& req, bool& bad) {
  bad = false;
  if (!req.has_header("Content-Length")) return std::nullopt;
  std::string text = req.get_header_value("Content-Length");
  std::uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size()) {
    bad = true;
    return std::nullopt;
  }
  return value;
}

bool chunked(const httplib::Request& req) {
  std::string te = req.get_header_value("Transfer-Encoding");
  std::transform(te.begin(), te.end(), te.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return te.find("chunked") != std::string::npos;
}

void answer(const IngestResponse& out, httplib::Response& res) {
  res.status = out.status;
  if (out.retry_after_seconds)
    res.set_header("Retry-After", std::to_string(*out.retry_after_seconds));
  if (out.last_seq) res.set_header("C4-Last-Seq", std::to_string(*out.last_seq));
  if (!out.instance.empty()) res.set_header("C4-Operator-Instance", out.instance);
  res.set_header("C4-Reason", out.reason);
  res.set_content(out.body, "application/json");
}

// Set by the handler when it answers without reading (all of) the body; read by the logger, which
// cpp-httplib calls on the same worker thread once the answer is written.
thread_local bool t_close_unread = false;

// An answer given without reading (all of) the body: the connection carries nothing more.
void closeAfterAnswer(httplib::Response& res) {
  res.set_header("Connection", "close");
  t_close_unread = true;
}

// After such an answer: a bounded lingering close. Closing a socket whose receive queue holds
// unread bytes makes the kernel send a reset, which can destroy the answer before the client read
// it (a plugin with an expired token would see "connection reset", not its 401). So the answer is
// ended (TLS close_notify, then FIN), and what the client still sends is discarded unparsed
// until it closes, goes quiet for kLingerQuiet, or sent kLingerMaxBytes; the connection's read
// deadline also ends it. Then the read side is shut, so nothing that arrives later is taken for
// a request.
constexpr int kLingerQuietMs = 100;
constexpr std::size_t kLingerMaxBytes = 1 << 20;

void lingeringClose(const SSL* ssl) {
  if (ssl == nullptr) return;
  int fd = SSL_get_fd(ssl);
  if (fd < 0) return;
  (void)SSL_shutdown(
      const_cast<SSL*>(ssl));  // close_notify; cpp-httplib's own call is then a no-op
  ERR_clear_error();
  ::shutdown(fd, SHUT_WR);
  std::size_t discarded = 0;
  char buf[16384];
  while (discarded < kLingerMaxBytes) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, kLingerQuietMs) <= 0) break;  // quiet (or an error)
    ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n <= 0) break;  // the client closed (or the deadline cut the socket)
    discarded += static_cast<std::size_t>(n);
  }
  ::shutdown(fd, SHUT_RD);
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
                                                           ReportHandler& handler, Clock& clock,
                                                           metrics::Registry* registry) {
  if (config.cert_file.empty() || config.key_file.empty()) {
    return makeError(ErrorCode::kInvalidArgument,
                     "the report server needs --tls-cert-file and --tls-key-file");
  }
  std::unique_ptr<ReportServer> server(new ReportServer(std::move(config), handler, clock));
  server->certs_ =
      std::make_shared<CertificateSource>(server->config_.cert_file, server->config_.key_file,
                                          server->config_.cert_check_period, clock);
  C4_RETURN_IF_ERROR(server->certs_->load());
  metrics::Counter* timed_out = nullptr;
  if (registry != nullptr) {
    timed_out = &registry
                     ->counter("c4_ingest_connections_timed_out_total",
                               "Report connections cut off for taking longer than the read "
                               "timeout from their TLS handshake to their last body byte.")
                     .get();
  }
  server->deadlines_ =
      std::make_unique<ConnectionDeadlines>(clock, server->config_.read_timeout, timed_out);
  metrics::Counter* rejected = nullptr;
  if (registry != nullptr) {
    rejected = &registry
                    ->counter("c4_ingest_connections_rejected_total",
                              "Report connections closed at once because every worker was "
                              "busy and max queued connections already waited.")
                    .get();
  }
  server->rejections_ = std::make_unique<ConnectionRejections>(
      clock, static_cast<std::size_t>(std::max(1, server->config_.max_queued_connections)),
      rejected);
  CertificateSource* source = server->certs_.get();
  ConnectionDeadlines* deadlines = server->deadlines_.get();
  (void)sslIndex();  // registered before any connection
  server->server_ = std::make_unique<httplib::SSLServer>([source, deadlines](SSL_CTX& ctx) {
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
    SSL_CTX_set_ex_data(&ctx, ctxIndex(), deadlines);
    SSL_CTX_set_info_callback(&ctx, infoCallback);
    return true;
  });
  if (!server->server_->is_valid()) {
    return makeError(ErrorCode::kInternal, "cannot set up the TLS context of the report server");
  }
  httplib::SSLServer& s = *server->server_;
  const int threads = std::max(1, server->config_.threads);
  ConnectionRejections* rejections = server->rejections_.get();
  s.new_task_queue = [threads, rejections] {
    return new BoundedThreadPool(static_cast<std::size_t>(threads), *rejections);
  };
  // The handler refuses a declared length over its limit before reading, and stops a chunked
  // body at the limit itself; this is only a backstop one byte above it.
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
  // The ContentReader overload: the handler runs once the headers are read, and reads the body
  // only once the request was admitted (authenticated, within its limits).
  s.Post("/v1/reports", [h, deadlines](const httplib::Request& req, httplib::Response& res,
                                       const httplib::ContentReader& read) {
    t_close_unread = false;
    RequestHead head;
    head.authorization = req.get_header_value("Authorization");
    head.content_type = req.get_header_value("Content-Type");
    head.remote = req.remote_addr;
    const bool is_chunked = chunked(req);
    head.content_length = contentLength(req, head.malformed_length);
    auto admitted = h->admit(head);
    if (!admitted) {
      answer(admitted.error(), res);
      closeAfterAnswer(res);  // not a byte of the body read
      return;
    }
    std::string body;
    BodyRead how = BodyRead::kComplete;
    // A request without Content-Length or chunked encoding has no body (RFC 9112 §6.3).
    if (is_chunked || head.content_length.value_or(0) > 0) {
      const std::size_t max = h->config().max_body_bytes;
      body.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(
          head.content_length.value_or(0), static_cast<std::uint64_t>(max))));
      bool ok = read([&](const char* data, std::size_t n) {
        if (body.size() + n > max) {
          how = BodyRead::kTooLarge;
          return false;
        }
        body.append(data, n);
        return true;
      });
      if (!ok && how == BodyRead::kComplete) how = BodyRead::kIncomplete;
    }
    if (req.ssl != nullptr) deadlines->rearm(req.ssl);  // the body is in: a budget for the answer
    answer(h->accept(std::move(*admitted), body, how), res);
    if (how != BodyRead::kComplete) closeAfterAnswer(res);
  });
  s.set_logger([h](const httplib::Request& req, const httplib::Response& res) {
    if (t_close_unread) {
      t_close_unread = false;
      lingeringClose(req.ssl);
    }
    // Refusals made by the library before the handler ran (400 on a bad request line or
    // headers, 414) are counted here.
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
  deadlines_->start();
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
  if (deadlines_) deadlines_->stop();
}

long ReportServer::connectionsRejected() const {
  return rejections_->count();
}

long ReportServer::connectionsTimedOut() const {
  return deadlines_->timedOut();
}

}  // namespace c4::op::ingest
