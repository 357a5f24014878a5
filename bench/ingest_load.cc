// Ingest capacity of the operator's report endpoint (issue #10), through the real endpoint with
// TLS: a server process (ReportServer + ReportHandler + ReportStore, a throwaway certificate)
// and a load generator process (libcurl, one virtual node plugin per node) posting each node's
// batch (bench/ingest_batch.h) `--rate` times per second. The server runs in a forked child so
// that its CPU time (/proc/<pid>/stat) and memory (/proc/<pid>/status) are its own.
//
// Authentication: TokenReview answers are cached (60 s positive TTL), so at steady state one
// review per node per minute reaches the API server; the benchmark replaces the reviewer with a
// table of 2,048 tokens → ServiceAccount user bound to the token's node and measures the rest.
//
//   c4-ingest-bench [--nodes N] [--rate R] [--duration S] [--warmup S] [--client reuse|fresh]
//                   [--client-threads T] [--server-threads T] [--keep-alive-max-count N]
//                   [--keep-alive-timeout S] [--global-rate R --global-burst B]
//                   [--server-cpus LIST] [--client-cpus LIST]
//   c4-ingest-bench --handler-only ROUNDS [--nodes N]   (ReportHandler::handle() in-process)
//   c4-ingest-bench --serve-only SECONDS [--nodes N]    (only the endpoint, for a real node
//       plugin: prints its URL and CA file; token "token-<i>" is node i's, pod "<job>-<i>")
//
// --client reuse: one libcurl handle per node for the whole run (kept-alive connection when the
//   server keeps it, TLS session resumed when it reconnects). --client fresh: a new handle per
//   request, i.e. a full TCP + TLS handshake each time.
// --server-cpus / --client-cpus: pin the server process / the load generator to these CPUs
//   (comma-separated numbers), so one does not run on the other's core.
#include <curl/curl.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "bench/ingest_batch.h"
#include "c4/common/clock.h"
#include "c4/common/log.h"
#include "operator/ingest/report_handler.h"
#include "operator/ingest/report_server.h"
#include "operator/ingest/report_store.h"
#include "operator/trainingjob/api.h"

namespace {

using namespace c4;
using op::Json;
namespace fs = std::filesystem;

struct Options {
  bench::BatchShape shape;
  double rate = 1.0;  // batches per node per second
  int duration_s = 30;
  int warmup_s = 5;
  bool reuse = true;
  int client_threads = 32;
  int server_threads = 8;
  int keep_alive_max_count = 1;
  int keep_alive_timeout_s = 1;
  double global_rate = 0;  // 0: the handler's default limit
  double global_burst = 0;
  int handler_rounds = 0;        // --handler-only <rounds>
  int serve_seconds = 0;         // --serve-only <seconds>
  std::vector<int> server_cpus;  // empty: not pinned
  std::vector<int> client_cpus;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "c4-ingest-bench: %s (see the comment at the top of ingest_load.cc)\n", why);
  std::exit(2);
}

std::vector<int> parseCpus(const std::string& list) {
  std::vector<int> cpus;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    std::size_t used = 0;
    int cpu = -1;
    try {
      cpu = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || cpu < 0 || cpu >= CPU_SETSIZE) {
      usage(("bad CPU list '" + list + "' (comma-separated CPU numbers)").c_str());
    }
    cpus.push_back(cpu);
  }
  if (cpus.empty()) usage("empty CPU list");
  return cpus;
}

std::string cpuList(const std::vector<int>& cpus) {
  if (cpus.empty()) return "any";
  std::string out;
  for (int c : cpus) out += (out.empty() ? "" : ",") + std::to_string(c);
  return out;
}

// Pins the calling process (its threads created from now on inherit it).
void pinTo(const std::vector<int>& cpus, const char* who) {
  if (cpus.empty()) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(static_cast<std::size_t>(c), &set);
  if (::sched_setaffinity(0, sizeof set, &set) != 0) {
    std::fprintf(stderr, "c4-ingest-bench: cannot pin the %s: %s\n", who, std::strerror(errno));
    std::exit(2);
  }
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value of " + a).c_str());
      return argv[++i];
    };
    if (a == "--nodes") {
      o.shape.nodes = std::stoi(value());
    } else if (a == "--rate") {
      o.rate = std::stod(value());
    } else if (a == "--duration") {
      o.duration_s = std::stoi(value());
    } else if (a == "--warmup") {
      o.warmup_s = std::stoi(value());
    } else if (a == "--client") {
      std::string v = value();
      if (v != "reuse" && v != "fresh") usage("--client is reuse or fresh");
      o.reuse = v == "reuse";
    } else if (a == "--client-threads") {
      o.client_threads = std::stoi(value());
    } else if (a == "--server-threads") {
      o.server_threads = std::stoi(value());
    } else if (a == "--keep-alive-max-count") {
      o.keep_alive_max_count = std::stoi(value());
    } else if (a == "--serve-only") {
      o.serve_seconds = std::stoi(value());
    } else if (a == "--handler-only") {
      o.handler_rounds = std::stoi(value());
    } else if (a == "--global-rate") {
      o.global_rate = std::stod(value());
    } else if (a == "--global-burst") {
      o.global_burst = std::stod(value());
    } else if (a == "--keep-alive-timeout") {
      o.keep_alive_timeout_s = std::stoi(value());
    } else if (a == "--server-cpus") {
      o.server_cpus = parseCpus(value());
    } else if (a == "--client-cpus") {
      o.client_cpus = parseCpus(value());
    } else {
      usage(("unknown flag " + a).c_str());
    }
  }
  if (o.shape.nodes < 1 || o.rate <= 0 || o.duration_s < 1 || o.client_threads < 1) {
    usage("bad values");
  }
  return o;
}

// The cached TokenReview answers: token "token-<i>" is node i's node plugin.
class TokenTable final : public op::ingest::TokenAuthenticator {
 public:
  explicit TokenTable(const bench::BatchShape& shape) {
    for (int i = 0; i < shape.nodes; ++i) {
      op::ingest::TokenUser u;
      u.username = "system:serviceaccount:c4-system:c4-node-plugin";
      u.uid = "uid-" + std::to_string(i);
      u.extra[op::ingest::kNodeNameExtra] = {bench::nodeName(shape, i)};
      u.audiences = {"c4-operator"};
      users_.emplace("token-" + std::to_string(i), std::move(u));
    }
  }
  Result<op::ingest::TokenUser> authenticate(std::string_view token) override {
    auto it = users_.find(std::string(token));
    if (it == users_.end()) return makeError(ErrorCode::kUnauthenticated, "unknown token");
    return it->second;
  }

 private:
  std::unordered_map<std::string, op::ingest::TokenUser> users_;
};

bool writeAll(int fd, const std::string& s) {
  std::size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n <= 0) return false;
    off += static_cast<std::size_t>(n);
  }
  return true;
}

std::string readAll(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n = 0;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  return out;
}

// The operator side of the endpoint: the store, the cached token answers, the job and its pods
// as the informers would have them, and the handler.
struct Endpoint {
  Endpoint(const Options& o, Clock& clock) : shape(o.shape), tokens(o.shape) {
    for (int i = 0; i < shape.nodes; ++i) {
      pods.emplace(bench::podName(shape, i),
                   Json{{"metadata",
                         {{"name", bench::podName(shape, i)},
                          {"namespace", shape.ns},
                          {"labels",
                           {{op::labels::kJobName, shape.job},
                            {op::labels::kReplicaIndex, std::to_string(i)},
                            {op::labels::kRestartAttempt, "0"}}}}},
                        {"spec", {{"nodeName", bench::nodeName(shape, i)}}}});
    }
    job.facts.uid = "job-uid";
    job.facts.attempt = 0;
    job.facts.world_size = shape.nodes * shape.ranks_per_node;
    job.procs_per_pod = shape.ranks_per_node;
    op::ingest::ClusterView cluster;
    cluster.job = [this](const std::string& ns,
                         const std::string& name) -> std::optional<op::ingest::JobInfo> {
      if (ns == shape.ns && name == shape.job) return job;
      return std::nullopt;
    };
    cluster.pod = [this](const std::string& ns, const std::string& name) -> std::optional<Json> {
      if (ns != shape.ns) return std::nullopt;
      auto it = pods.find(name);
      if (it == pods.end()) return std::nullopt;
      return it->second;
    };
    cluster.serving = [] { return true; };
    op::ingest::ReportHandlerConfig hc;
    if (o.global_rate > 0) hc.global_limit = {o.global_rate, std::max(o.global_burst, 1.0)};
    handler = std::make_unique<op::ingest::ReportHandler>(hc, clock, tokens, store,
                                                          std::move(cluster), &registry);
  }

  bench::BatchShape shape;
  op::ingest::ReportStore store;
  TokenTable tokens;
  std::unordered_map<std::string, Json> pods;
  op::ingest::JobInfo job;
  metrics::Registry registry;
  std::unique_ptr<op::ingest::ReportHandler> handler;
};

// The server process: serves until `stop_fd` reaches EOF, then writes its statistics to `out_fd`.
[[noreturn]] void serve(const Options& o, const fs::path& dir, int out_fd, int stop_fd) {
  setLogLevel(LogLevel::kWarn);
  Clock& clock = realClock();
  Endpoint ep(o, clock);
  op::ingest::ReportHandler& handler = *ep.handler;
  op::ingest::ReportStore& store = ep.store;
  op::ingest::ReportServerConfig sc;
  sc.address = "127.0.0.1";
  sc.port = 0;
  sc.cert_file = (dir / "server.crt").string();
  sc.key_file = (dir / "server.key").string();
  sc.threads = o.server_threads;
  sc.keep_alive_max_count = o.keep_alive_max_count;
  sc.keep_alive_timeout = std::chrono::seconds{o.keep_alive_timeout_s};
  auto server = op::ingest::ReportServer::create(sc, handler, clock);
  if (!server) {
    std::fprintf(stderr, "server: %s\n", server.error().toString().c_str());
    ::_exit(1);
  }
  auto port = (*server)->start();
  if (!port) {
    std::fprintf(stderr, "server: %s\n", port.error().toString().c_str());
    ::_exit(1);
  }
  writeAll(out_fd, std::to_string(*port) + "\n");
  (void)readAll(stop_fd);
  auto tls = (*server)->tlsSessionStats();
  (*server)->stop();
  auto st = store.stats();
  std::ostringstream s;
  s << "tls_handshakes=" << tls.handshakes << " tls_resumed=" << tls.resumed
    << " store_jobs=" << st.jobs << " store_ranks=" << st.ranks
    << " store_connections=" << st.connections << " store_samples=" << st.samples
    << " store_nodes=" << st.nodes << "\n";
  writeAll(out_fd, s.str());
  ::_exit(0);
}

struct ProcSample {
  double cpu_s = 0;
  long rss_kib = 0;
  long hwm_kib = 0;
};

ProcSample sample(pid_t pid) {
  ProcSample out;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  // Fields after the command name (which may hold spaces): state is field 3; utime 14, stime 15.
  auto rp = line.rfind(')');
  if (rp != std::string::npos) {
    std::istringstream in(line.substr(rp + 2));
    std::string f;
    unsigned long utime = 0;
    unsigned long stime = 0;
    for (int field = 3; field <= 15 && (in >> f); ++field) {
      if (field == 14) utime = std::stoul(f);
      if (field == 15) stime = std::stoul(f);
    }
    out.cpu_s = static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
  }
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  while (std::getline(status, line)) {
    if (line.starts_with("VmRSS:")) out.rss_kib = std::stol(line.substr(6));
    if (line.starts_with("VmHWM:")) out.hwm_kib = std::stol(line.substr(6));
  }
  return out;
}

// One node's encoded batch, with the offsets of the top-level seq and timeUnixNs values (8-byte
// CBOR unsigned integers, patched in place for every send).
struct NodeBody {
  std::vector<std::uint8_t> bytes;
  std::size_t seq_at = 0;
  std::size_t time_at = 0;
  std::uint64_t seq = 0;
  std::string auth;
};

std::size_t valueOffset(const std::vector<std::uint8_t>& b, std::string_view key) {
  std::vector<std::uint8_t> pat{static_cast<std::uint8_t>(0x60 + key.size())};
  pat.insert(pat.end(), key.begin(), key.end());
  auto it = std::find_end(b.begin(), b.end(), pat.begin(), pat.end());
  if (it == b.end()) return 0;
  auto at = static_cast<std::size_t>(it - b.begin()) + pat.size();
  return at + 9 <= b.size() && b[at] == 0x1B ? at + 1 : 0;
}

void putU64(std::vector<std::uint8_t>& b, std::size_t at, std::uint64_t v) {
  for (int i = 7; i >= 0; --i) {
    b[at + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(v);
    v >>= 8;
  }
}

struct Sent {
  bool retry_after = false;  // the response carried Retry-After
  double latency_us;
  double late_us;  // how far after its scheduled time the request started
  int status;
  bool in_window;  // completed within the measurement window
};

std::size_t discard(char*, std::size_t size, std::size_t n, void*) {
  return size * n;
}

std::size_t onHeader(char* data, std::size_t size, std::size_t n, void* user) {
  std::string_view line(data, size * n);
  constexpr std::string_view kName = "retry-after:";
  if (line.size() > kName.size()) {
    bool match = true;
    for (std::size_t i = 0; i < kName.size() && match; ++i) {
      match = std::tolower(static_cast<unsigned char>(line[i])) == kName[i];
    }
    if (match) *static_cast<bool*>(user) = true;
  }
  return size * n;
}

struct CurlFree {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  auto i = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1));
  return v[i];
}

std::vector<NodeBody> makeBodies(const Options& o, Clock& clock) {
  const std::uint64_t seq_base = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(clock.wallNow().time_since_epoch())
          .count());
  std::vector<NodeBody> bodies(static_cast<std::size_t>(o.shape.nodes));
  for (int i = 0; i < o.shape.nodes; ++i) {
    auto& nb = bodies[static_cast<std::size_t>(i)];
    auto batch = bench::makeNodeBatch(o.shape, i, seq_base, 1'764'673'210'000'000'000, 600);
    nb.bytes = *report::encodeCbor(batch);
    nb.seq_at = valueOffset(nb.bytes, "seq");
    nb.time_at = valueOffset(nb.bytes, "timeUnixNs");
    if (nb.seq_at == 0 || nb.time_at == 0) usage("cannot find seq/timeUnixNs in the batch");
    nb.seq = seq_base;
    nb.auth = "Authorization: Bearer token-" + std::to_string(i);
  }
  return bodies;
}

void stamp(NodeBody& nb, Clock& clock) {
  putU64(nb.bytes, nb.seq_at, ++nb.seq);
  putU64(nb.bytes, nb.time_at,
         static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        clock.wallNow().time_since_epoch())
                                        .count()));
}

double threadCpuSeconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// --handler-only: ReportHandler::handle() on every node's batch, `rounds` times, on this thread,
// without HTTP or TLS (global limit off: the calls come faster than 1 Hz); and the decode alone.
int handlerOnly(const Options& o, int rounds) {
  Clock& clock = realClock();
  std::vector<NodeBody> bodies = makeBodies(o, clock);
  Options unlimited = o;
  unlimited.global_rate = 0;
  Endpoint ep(unlimited, clock);
  std::map<int, long> statuses;
  const double c0 = threadCpuSeconds();
  for (int r = 0; r < rounds; ++r) {
    for (int i = 0; i < o.shape.nodes; ++i) {
      auto& nb = bodies[static_cast<std::size_t>(i)];
      stamp(nb, clock);
      op::ingest::IngestRequest req;
      req.authorization = nb.auth.substr(std::string_view("Authorization: ").size());
      req.content_type = "application/cbor";
      req.body = std::string_view(reinterpret_cast<const char*>(nb.bytes.data()), nb.bytes.size());
      ++statuses[ep.handler->handle(req).status];
    }
  }
  const double c1 = threadCpuSeconds();
  for (int r = 0; r < rounds; ++r) {
    for (const auto& nb : bodies) {
      auto d = report::decodeNodeReportCbor(nb.bytes);
      if (!d) usage("decode failed");
    }
  }
  const double c2 = threadCpuSeconds();
  const double calls = static_cast<double>(rounds) * o.shape.nodes;
  std::printf("handler_only nodes=%d rounds=%d batch_bytes=%zu handle_us=%.0f decode_us=%.0f",
              o.shape.nodes, rounds, bodies[0].bytes.size(), (c1 - c0) * 1e6 / calls,
              (c2 - c1) * 1e6 / calls);
  for (const auto& [st, n] : statuses) std::printf(" status_%d=%ld", st, n);
  auto stats = ep.store.stats();
  std::printf(" store_ranks=%zu store_connections=%zu\n", stats.ranks, stats.connections);
  return statuses.size() == 1 && statuses.begin()->first == 200 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  if (o.handler_rounds > 0) return handlerOnly(o, o.handler_rounds);
  const fs::path dir =
      fs::temp_directory_path() / ("c4-ingest-bench-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string cert = (dir / "server.crt").string();
  const std::string cmd =
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 "
      "-subj /CN=c4-ingest-bench -addext subjectAltName=IP:127.0.0.1 -keyout " +
      (dir / "server.key").string() + " -out " + cert + " >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) usage("the openssl CLI is needed for the certificate");

  if (o.serve_seconds > 0) {
    int ready[2];
    int stop[2];
    if (::pipe(ready) != 0 || ::pipe(stop) != 0) usage("pipe failed");
    const pid_t server = ::fork();
    if (server == 0) {
      ::close(ready[0]);
      ::close(stop[1]);
      pinTo(o.server_cpus, "server");
      serve(o, dir, ready[1], stop[0]);
    }
    ::close(ready[1]);
    ::close(stop[0]);
    std::string port;
    for (char ch = 0; ::read(ready[0], &ch, 1) == 1 && ch != '\n';) port += ch;
    std::printf("url=https://127.0.0.1:%s/v1/reports ca=%s pid=%d\n", port.c_str(), cert.c_str(),
                static_cast<int>(server));
    std::fflush(stdout);
    realClock().sleepFor(std::chrono::seconds{o.serve_seconds});
    ::close(stop[1]);
    std::printf("server %s", readAll(ready[0]).c_str());
    ::waitpid(server, nullptr, 0);
    fs::remove_all(dir);
    return 0;
  }
  int to_parent[2];
  int to_child[2];
  if (::pipe(to_parent) != 0 || ::pipe(to_child) != 0) usage("pipe failed");
  const pid_t child = ::fork();
  if (child < 0) usage("fork failed");
  if (child == 0) {
    ::close(to_parent[0]);
    ::close(to_child[1]);
    pinTo(o.server_cpus, "server");
    serve(o, dir, to_parent[1], to_child[0]);
  }
  pinTo(o.client_cpus, "load generator");
  ::close(to_parent[1]);
  ::close(to_child[0]);
  std::string port_line;
  for (char ch = 0; ::read(to_parent[0], &ch, 1) == 1 && ch != '\n';) port_line += ch;
  if (port_line.empty()) usage("the server did not start");
  const std::string url = "https://127.0.0.1:" + port_line + "/v1/reports";

  Clock& clock = realClock();
  std::vector<NodeBody> bodies = makeBodies(o, clock);

  curl_global_init(CURL_GLOBAL_DEFAULT);
  const Duration period =
      std::chrono::duration_cast<Duration>(std::chrono::duration<double>(1.0 / o.rate));
  const MonoTime start = clock.monoNow() + std::chrono::milliseconds{200};
  const MonoTime window_start = start + std::chrono::seconds{o.warmup_s};
  const MonoTime end = window_start + std::chrono::seconds{o.duration_s};
  std::vector<std::vector<Sent>> results(static_cast<std::size_t>(o.client_threads));
  std::atomic<long> errors{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < o.client_threads; ++w) {
    threads.emplace_back([&, w] {
      auto& out = results[static_cast<std::size_t>(w)];
      std::vector<int> mine;
      for (int i = w; i < o.shape.nodes; i += o.client_threads) mine.push_back(i);
      std::vector<std::unique_ptr<CURL, CurlFree>> handles(mine.size());
      std::vector<curl_slist*> headers(mine.size(), nullptr);
      for (std::size_t k = 0; k < mine.size(); ++k) {
        curl_slist* h = nullptr;
        h = curl_slist_append(h, "Content-Type: application/cbor");
        h = curl_slist_append(h, "Expect:");
        h = curl_slist_append(h, bodies[static_cast<std::size_t>(mine[k])].auth.c_str());
        headers[k] = h;
      }
      for (long round = 0;; ++round) {
        for (std::size_t k = 0; k < mine.size(); ++k) {
          const int node = mine[k];
          const MonoTime at = start + period * round +
                              std::chrono::duration_cast<Duration>(period * node / o.shape.nodes);
          // A generator that fell behind stops at the end of the window all the same.
          if (at >= end || clock.monoNow() >= end) goto done;
          clock.sleepUntil(at);
          auto& nb = bodies[static_cast<std::size_t>(node)];
          stamp(nb, clock);
          if (!handles[k] || !o.reuse) {
            handles[k].reset(curl_easy_init());
            CURL* c = handles[k].get();
            curl_easy_setopt(c, CURLOPT_URL, url.c_str());
            curl_easy_setopt(c, CURLOPT_POST, 1L);
            curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers[k]);
            curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
            curl_easy_setopt(c, CURLOPT_CAINFO, cert.c_str());
            curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L);
            curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L);
            curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 20000L);
            curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
            curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, onHeader);
          }
          bool retry_after = false;
          curl_easy_setopt(handles[k].get(), CURLOPT_HEADERDATA, &retry_after);
          CURL* c = handles[k].get();
          curl_easy_setopt(c, CURLOPT_POSTFIELDS, nb.bytes.data());
          curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE,
                           static_cast<curl_off_t>(nb.bytes.size()));
          const MonoTime t0 = clock.monoNow();
          CURLcode rc = curl_easy_perform(c);
          const MonoTime t1 = clock.monoNow();
          long status = 0;
          if (rc == CURLE_OK) {
            curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
          } else {
            ++errors;
            handles[k].reset();
          }
          out.push_back(Sent{retry_after,
                             std::chrono::duration<double, std::micro>(t1 - t0).count(),
                             std::chrono::duration<double, std::micro>(t0 - at).count(),
                             static_cast<int>(status), t1 >= window_start && t1 < end});
        }
      }
    done:
      handles.clear();
      for (auto* h : headers) curl_slist_free_all(h);
    });
  }

  clock.sleepUntil(window_start);
  rusage ru0{};
  ::getrusage(RUSAGE_SELF, &ru0);
  const ProcSample s0 = sample(child);
  long rss_max = s0.rss_kib;
  while (clock.monoNow() < end) {
    clock.sleepFor(std::chrono::seconds{1});
    rss_max = std::max(rss_max, sample(child).rss_kib);
  }
  const ProcSample s1 = sample(child);
  rusage ru1{};
  ::getrusage(RUSAGE_SELF, &ru1);
  for (auto& t : threads) t.join();
  ::close(to_child[1]);
  const std::string server_stats = readAll(to_parent[0]);
  int wstatus = 0;
  ::waitpid(child, &wstatus, 0);
  fs::remove_all(dir);

  std::map<int, long> statuses;
  long retry_after_429 = 0;
  std::vector<double> lat;
  std::vector<double> lat_ok;
  std::vector<double> late;
  for (const auto& v : results) {
    for (const auto& s : v) {
      if (!s.in_window) continue;
      ++statuses[s.status];
      if (s.status == 429 && s.retry_after) ++retry_after_429;
      lat.push_back(s.latency_us);
      if (s.status == 200) lat_ok.push_back(s.latency_us);
      late.push_back(s.late_us);
    }
  }
  auto tv = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
  };
  const double client_cpu =
      tv(ru1.ru_utime) + tv(ru1.ru_stime) - tv(ru0.ru_utime) - tv(ru0.ru_stime);
  double load[3] = {};
  ::getloadavg(load, 3);
  const double window = o.duration_s;
  std::printf(
      "nodes=%d ranks=%d rate=%.2f/node/s offered=%.0f/s window=%ds client=%s "
      "client_threads=%d server_threads=%d keep_alive_max_count=%d keep_alive_timeout=%ds "
      "global_limit=%s batch_bytes=%zu server_cpus=%s client_cpus=%s\n",
      o.shape.nodes, o.shape.nodes * o.shape.ranks_per_node, o.rate, o.rate * o.shape.nodes,
      o.duration_s, o.reuse ? "reuse" : "fresh", o.client_threads, o.server_threads,
      o.keep_alive_max_count, o.keep_alive_timeout_s,
      o.global_rate > 0 ? (std::to_string(static_cast<long>(o.global_rate)) + "/s").c_str()
                        : "default",
      bodies[0].bytes.size(), cpuList(o.server_cpus).c_str(), cpuList(o.client_cpus).c_str());
  std::printf("completed=%.0f/s", static_cast<double>(lat.size()) / window);
  for (const auto& [st, n] : statuses) {
    std::printf(" status_%d=%.1f/s", st, static_cast<double>(n) / window);
  }
  std::printf(" curl_errors=%ld 429_with_retry_after=%ld\n", errors.load(), retry_after_429);
  std::printf(
      "latency_us all p50=%.0f p99=%.0f max=%.0f; 200 p50=%.0f p99=%.0f; start lateness "
      "p50=%.0f p99=%.0f\n",
      percentile(lat, 0.5), percentile(lat, 0.99), percentile(lat, 1.0), percentile(lat_ok, 0.5),
      percentile(lat_ok, 0.99), percentile(late, 0.5), percentile(late, 0.99));
  std::printf(
      "server_cpu_cores=%.3f server_rss_mib=%.1f (max %.1f, hwm %.1f) client_cpu_cores=%.3f "
      "loadavg=%.2f/%.2f/%.2f\n",
      (s1.cpu_s - s0.cpu_s) / window, static_cast<double>(s1.rss_kib) / 1024,
      static_cast<double>(rss_max) / 1024, static_cast<double>(s1.hwm_kib) / 1024,
      client_cpu / window, load[0], load[1], load[2]);
  std::printf("server_cpu_us_per_request=%.0f server_cores_at_offered_rate=%.3f\n",
              lat.empty() ? 0.0 : (s1.cpu_s - s0.cpu_s) * 1e6 / static_cast<double>(lat.size()),
              lat.empty() ? 0.0
                          : (s1.cpu_s - s0.cpu_s) / static_cast<double>(lat.size()) * o.rate *
                                o.shape.nodes);
  std::printf("server %s", server_stats.c_str());
  curl_global_cleanup();
  return WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0 ? 0 : 1;
}
