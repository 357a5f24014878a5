// c4-netbench: NCCL's calling pattern without a GPU. Loads a net plugin like NCCL 2.28 (or, with
// --baseline, uses plain TCP), runs ring allreduce / all-to-all among N processes with every byte
// verified, and prints an nccl-tests-like table or JSON. See nccl-net-plugin/README.md.
#include <arpa/inet.h>
#include <getopt.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "bootstrap.h"
#include "c4/common/clock.h"
#include "c4/common/unix_socket.h"
#include "collectives.h"
#include "net.h"
#include "profiler_driver.h"
#include "training.h"

#ifndef C4_DEFAULT_PLUGIN
#define C4_DEFAULT_PLUGIN "libnccl-net-c4.so"
#endif

namespace c4::netbench {
namespace {

struct Options {
  int rank = -1;
  int world = -1;
  std::string master_addr;
  int master_port = -1;
  std::string op = "allreduce";
  std::size_t min_bytes = 1024;
  std::size_t max_bytes = 256u << 20;
  std::size_t factor = 2;
  int iters = 20;
  int warmup = 2;
  bool baseline = false;
  bool spin = false;
  bool acked = false;  // --baseline-acked
  bool json = false;
  std::string plugin;
  std::optional<std::string> profiler;  // unset: $NCCL_PROFILER_PLUGIN
  int streams = 0;                      // baseline sockets per peer; 0 = C4_SUBFLOWS or 4
  int launch = 0;
  TrainingOptions training;
  CollectiveOptions co;
};

void usage() {
  std::fprintf(
      stderr,
      "usage: c4-netbench [options]\n"
      "  --rank R --world-size N --master-addr A --master-port P\n"
      "        (default: $RANK $WORLD_SIZE $MASTER_ADDR $MASTER_PORT)\n"
      "  --launch N            fork N local ranks on 127.0.0.1 (convenience)\n"
      "  --op allreduce|alltoall|pump  (default allreduce; pump: ring data movement\n"
      "                        only, no reduction: the limit of a ring on this transport)\n"
      "  -b/--min-bytes S  -e/--max-bytes S  -f/--step-factor F  (1K, 256M, 2)\n"
      "  -n/--iters N (20)  -w/--warmup N (2)  --slice-bytes S (1M)  --window N (8)\n"
      "  --baseline            plain TCP, no plugin (same ring, same streams)\n"
      "  --spin                baseline waits by sched_yield (like NCCL's proxy), not poll\n"
      "  --baseline-acked      baseline sends complete once the peer acknowledged their bytes\n"
      "                        (as an RDMA write completes), not once written to the kernel\n"
      "  --streams N           baseline sockets per peer (default $C4_SUBFLOWS or 4)\n"
      "  --plugin NAME|PATH    (default $NCCL_NET_PLUGIN or the built plugin)\n"
      "  --profiler NAME|PATH  NCCL profiler plugin told of every collective and message, as\n"
      "                        NCCL tells it (default $NCCL_PROFILER_PLUGIN; \"\" = none)\n"
      "  --json                JSON lines instead of the table\n"
      "  --steps N --step-compute-ms M --checkpoint-dir D --checkpoint-every K\n"
      "  --state-bytes S       training mode (final checksum printed)\n"
      "  --step-log DIR        training mode: each rank appends '<unix seconds> <step>' per\n"
      "                        step to DIR/rank-<r>.steps (for timelines)\n"
      "  --pause-at-step S --pause-ms M [--pause-rank R] [--pause-silent]\n"
      "                        training: rank R (default every rank) pauses M ms after step S,\n"
      "                        announced as checkpointing unless --pause-silent\n"
      "  --slow-file PATH      training: lines \"<node> <factor>\" in PATH (re-read when it\n"
      "                        changes) multiply the compute time of ranks on <node>\n");
}

bool parseSize(const char* s, std::size_t* out) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  if (end == s || v < 0) return false;
  std::size_t mult = 1;
  if (*end == 'K' || *end == 'k')
    mult = 1024, ++end;
  else if (*end == 'M' || *end == 'm')
    mult = 1024 * 1024, ++end;
  else if (*end == 'G' || *end == 'g')
    mult = 1024ull * 1024 * 1024, ++end;
  if (*end != '\0') return false;
  *out = static_cast<std::size_t>(v * static_cast<double>(mult));
  return true;
}

bool parseInt(const char* s, int* out) {
  char* end = nullptr;
  long v = std::strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < -1 || v > 1 << 30) return false;
  *out = static_cast<int>(v);
  return true;
}

int parseArgs(int argc, char** argv, Options& o) {
  enum {
    kRank = 1000,
    kWorld,
    kAddr,
    kPort,
    kOp,
    kBaseline,
    kSpin,
    kAcked,
    kJson,
    kPlugin,
    kStreams,
    kLaunch,
    kSteps,
    kCompute,
    kCkptDir,
    kCkptEvery,
    kState,
    kStepLog,
    kSlice,
    kWindow,
    kPauseStep,
    kPauseMs,
    kPauseRank,
    kPauseSilent,
    kSlowFile,
    kProfiler
  };
  static const option longs[] = {{"rank", required_argument, nullptr, kRank},
                                 {"world-size", required_argument, nullptr, kWorld},
                                 {"master-addr", required_argument, nullptr, kAddr},
                                 {"master-port", required_argument, nullptr, kPort},
                                 {"op", required_argument, nullptr, kOp},
                                 {"min-bytes", required_argument, nullptr, 'b'},
                                 {"max-bytes", required_argument, nullptr, 'e'},
                                 {"step-factor", required_argument, nullptr, 'f'},
                                 {"iters", required_argument, nullptr, 'n'},
                                 {"warmup", required_argument, nullptr, 'w'},
                                 {"baseline", no_argument, nullptr, kBaseline},
                                 {"spin", no_argument, nullptr, kSpin},
                                 {"baseline-acked", no_argument, nullptr, kAcked},
                                 {"json", no_argument, nullptr, kJson},
                                 {"plugin", required_argument, nullptr, kPlugin},
                                 {"profiler", required_argument, nullptr, kProfiler},
                                 {"streams", required_argument, nullptr, kStreams},
                                 {"launch", required_argument, nullptr, kLaunch},
                                 {"steps", required_argument, nullptr, kSteps},
                                 {"step-compute-ms", required_argument, nullptr, kCompute},
                                 {"checkpoint-dir", required_argument, nullptr, kCkptDir},
                                 {"checkpoint-every", required_argument, nullptr, kCkptEvery},
                                 {"state-bytes", required_argument, nullptr, kState},
                                 {"step-log", required_argument, nullptr, kStepLog},
                                 {"slice-bytes", required_argument, nullptr, kSlice},
                                 {"window", required_argument, nullptr, kWindow},
                                 {"pause-at-step", required_argument, nullptr, kPauseStep},
                                 {"pause-ms", required_argument, nullptr, kPauseMs},
                                 {"pause-rank", required_argument, nullptr, kPauseRank},
                                 {"pause-silent", no_argument, nullptr, kPauseSilent},
                                 {"slow-file", required_argument, nullptr, kSlowFile},
                                 {"help", no_argument, nullptr, 'h'},
                                 {nullptr, 0, nullptr, 0}};
  int c;
  bool ok = true;
  while ((c = ::getopt_long(argc, argv, "b:e:f:n:w:h", longs, nullptr)) != -1) {
    std::size_t sz = 0;
    switch (c) {
      case kRank:
        ok = ok && parseInt(optarg, &o.rank);
        break;
      case kWorld:
        ok = ok && parseInt(optarg, &o.world);
        break;
      case kAddr:
        o.master_addr = optarg;
        break;
      case kPort:
        ok = ok && parseInt(optarg, &o.master_port);
        break;
      case kOp:
        o.op = optarg;
        break;
      case 'b':
        ok = ok && parseSize(optarg, &o.min_bytes);
        break;
      case 'e':
        ok = ok && parseSize(optarg, &o.max_bytes);
        break;
      case 'f':
        ok = ok && parseSize(optarg, &o.factor) && o.factor >= 2;
        break;
      case 'n':
        ok = ok && parseInt(optarg, &o.iters) && o.iters >= 1;
        break;
      case 'w':
        ok = ok && parseInt(optarg, &o.warmup) && o.warmup >= 0;
        break;
      case kBaseline:
        o.baseline = true;
        break;
      case kSpin:
        o.spin = true;
        break;
      case kAcked:
        o.acked = true;
        break;
      case kJson:
        o.json = true;
        break;
      case kPlugin:
        o.plugin = optarg;
        break;
      case kProfiler:
        o.profiler = optarg;
        break;
      case kStreams:
        ok = ok && parseInt(optarg, &o.streams);
        break;
      case kLaunch:
        ok = ok && parseInt(optarg, &o.launch) && o.launch >= 1;
        break;
      case kSteps:
        ok = ok && parseInt(optarg, &o.training.steps);
        break;
      case kCompute:
        ok = ok && parseInt(optarg, &o.training.step_compute_ms);
        break;
      case kCkptDir:
        o.training.checkpoint_dir = optarg;
        break;
      case kCkptEvery:
        ok = ok && parseInt(optarg, &o.training.checkpoint_every);
        break;
      case kState:
        ok = ok && parseSize(optarg, &o.training.state_bytes);
        break;
      case kStepLog:
        o.training.step_log_dir = optarg;
        break;
      case kSlice:
        ok = ok && parseSize(optarg, &sz) && sz >= 4;
        o.co.slice_bytes = sz;
        break;
      case kWindow:
        ok = ok && parseInt(optarg, &o.co.window) && o.co.window >= 1;
        break;
      case kPauseStep:
        ok = ok && parseInt(optarg, &o.training.pause_at_step) && o.training.pause_at_step >= 0;
        break;
      case kPauseMs:
        ok = ok && parseInt(optarg, &o.training.pause_ms) && o.training.pause_ms >= 0;
        break;
      case kPauseRank:
        ok = ok && parseInt(optarg, &o.training.pause_rank);
        break;
      case kPauseSilent:
        o.training.pause_silent = true;
        break;
      case kSlowFile:
        o.training.slow_file = optarg;
        break;
      case 'h':
        usage();
        return 0;
      default:
        ok = false;
    }
  }
  if (!ok || optind != argc || (o.op != "allreduce" && o.op != "alltoall" && o.op != "pump")) {
    usage();
    return 2;
  }
  return -1;
}

const char* envOr(const char* name, const char* dflt) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : dflt;
}

// Forks N ranks of this program on localhost with the torchrun-style environment.
int launchLocal(int n, int argc, char** argv) {
  // A free port for rank 0's bootstrap: ask the kernel for one (tiny reuse window until bind).
  int port = 20000 + static_cast<int>(::getpid() % 20000);
  {
    UniqueFd probe(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (probe.valid() && ::bind(probe.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
        ::getsockname(probe.get(), reinterpret_cast<sockaddr*>(&a), &len) == 0) {
      port = ntohs(a.sin_port);
    }
  }
  std::vector<pid_t> pids;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--launch") {
      ++i;
      continue;
    }
    if (a.rfind("--launch=", 0) == 0) continue;
    args.push_back(argv[i]);
  }
  args.push_back(nullptr);
  for (int r = 0; r < n; ++r) {
    pid_t pid = ::fork();
    if (pid == 0) {
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(n).c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      ::execv("/proc/self/exe", args.data());
      ::_exit(127);
    }
    pids.push_back(pid);
  }
  int rc = 0;
  for (pid_t p : pids) {
    int status = 0;
    ::waitpid(p, &status, 0);
    if (rc == 0 && (!WIFEXITED(status) || WEXITSTATUS(status) != 0)) {
      rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
  }
  return rc;
}

int run(Options& o) {
  if (o.rank < 0) o.rank = std::atoi(envOr("RANK", "0"));
  if (o.world < 0) o.world = std::atoi(envOr("WORLD_SIZE", "1"));
  if (o.master_addr.empty()) o.master_addr = envOr("MASTER_ADDR", "127.0.0.1");
  if (o.master_port < 0) o.master_port = std::atoi(envOr("MASTER_PORT", "29500"));
  if (o.streams <= 0) o.streams = std::atoi(envOr("C4_SUBFLOWS", "4"));
  if (o.plugin.empty()) o.plugin = envOr("NCCL_NET_PLUGIN", C4_DEFAULT_PLUGIN);
  if (std::getenv("C4_RANK") == nullptr) ::setenv("C4_RANK", std::to_string(o.rank).c_str(), 1);
  auto bs = Bootstrap::create(o.rank, o.world, o.master_addr, o.master_port);
  if (!bs) {
    std::fprintf(stderr, "c4-netbench rank %d: %s\n", o.rank, bs.error().toString().c_str());
    return 1;
  }
  std::unique_ptr<Net> net;
  if (o.baseline) {
    net = makeTcpNet(o.rank, o.world, o.streams, o.spin, o.acked);
  } else {
    std::string err;
    net = makePluginNet(o.plugin, o.rank, o.world, &err);
    if (!net) {
      std::fprintf(stderr, "c4-netbench rank %d: %s\n", o.rank, err.c_str());
      return 1;
    }
  }
  if (!o.profiler) o.profiler = envOr("NCCL_PROFILER_PLUGIN", "");
  if (!o.profiler->empty()) {
    // As NCCL: a profiler plugin that cannot be loaded or initialised is reported, and the job
    // runs without it.
    auto driver = ProfilerDriver::load(*o.profiler, o.rank, o.world);
    if (driver) {
      net = makeProfiledNet(std::move(net), std::move(*driver));
    } else {
      std::fprintf(stderr, "c4-netbench rank %d: running without a profiler plugin: %s\n", o.rank,
                   driver.error().toString().c_str());
    }
  }
  if (auto s = net->connectAll(*bs); !s) {
    std::fprintf(stderr, "c4-netbench rank %d: connect: %s\n", o.rank,
                 s.error().toString().c_str());
    return 1;
  }
  bool lead = o.rank == 0;
  const char* transport = o.baseline ? "tcp-baseline" : "plugin";
  if (o.training.steps > 0) {
    auto r = runTraining(*net, *bs, o.training, o.co);
    if (!r) {
      std::fprintf(stderr, "c4-netbench rank %d: training: %s\n", o.rank,
                   r.error().toString().c_str());
      return 1;
    }
    // Every rank prints its result: the checksum of its own training state.
    if (o.json) {
      std::printf(
          "{\"mode\":\"training\",\"transport\":\"%s\",\"rank\":%d,\"ranks\":%d,"
          "\"resumedFrom\":%d,\"steps\":%d,\"checksum\":\"%016" PRIx64 "\"}\n",
          transport, o.rank, o.world, r->start_step, r->final_step, r->checksum);
    } else {
      std::printf("rank=%d resumed_from=%d steps=%d checksum=%016" PRIx64 "\n", o.rank,
                  r->start_step, r->final_step, r->checksum);
    }
    return 0;
  }
  if (lead && !o.json) {
    std::printf("# c4-netbench %s, %d ranks, %s\n", o.op.c_str(), o.world, net->describe().c_str());
    std::printf("# %12s %12s %10s %10s %10s %7s\n", "size(B)", "count", "time(us)", "algbw(GB/s)",
                "busbw(GB/s)", "#wrong");
  }
  Clock& clock = realClock();
  int failures = 0;
  std::vector<std::uint32_t> data, recv, scratch;
  for (std::size_t size = o.min_bytes; size <= o.max_bytes; size *= o.factor) {
    std::size_t count = std::max<std::size_t>(1, size / 4);
    std::size_t block = 0;
    if (o.op == "alltoall") {
      block = std::max<std::size_t>(1, count / static_cast<std::size_t>(o.world));
      count = block * static_cast<std::size_t>(o.world);
    }
    std::size_t bytes = count * 4;
    data.assign(count, 0);
    if (o.op == "allreduce") {
      for (std::size_t i = 0; i < count; ++i) data[i] = allreduceInput(o.rank, i);
    } else if (o.op == "pump") {
      recv.assign(count, 0);
      for (std::size_t i = 0; i < count; ++i) data[i] = allToAllInput(o.rank, 0, i);
    } else {
      recv.assign(count, 0);
      for (int p = 0; p < o.world; ++p) {
        for (std::size_t i = 0; i < block; ++i) {
          data[static_cast<std::size_t>(p) * block + i] = allToAllInput(o.rank, p, i);
        }
      }
    }
    auto once = [&]() -> Status {
      if (o.op == "allreduce") {
        return ringAllreduce(*net, o.rank, o.world, data.data(), count, scratch, o.co);
      }
      if (o.op == "pump") {
        return ringPump(*net, o.rank, o.world, reinterpret_cast<char*>(data.data()),
                        reinterpret_cast<char*>(recv.data()), bytes, o.co);
      }
      return allToAll(*net, o.rank, o.world, data.data(), recv.data(), block, o.co);
    };
    Status st;
    for (int i = 0; i < o.warmup && st; ++i) st = once();
    if (st) st = bs->barrier();
    rusage ru0{}, ru1{};
    ::getrusage(RUSAGE_SELF, &ru0);
    auto t0 = clock.monoNow();
    for (int i = 0; i < o.iters && st; ++i) st = once();
    double us = std::chrono::duration<double, std::micro>(clock.monoNow() - t0).count() / o.iters;
    ::getrusage(RUSAGE_SELF, &ru1);
    // Where the time goes, per operation and rank (all threads): context switches and CPU time.
    auto tvUs = [](const timeval& t) {
      return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_usec);
    };
    double csw =
        static_cast<double>((ru1.ru_nvcsw - ru0.ru_nvcsw) + (ru1.ru_nivcsw - ru0.ru_nivcsw)) /
        o.iters;
    double cpuUs =
        (tvUs(ru1.ru_utime) - tvUs(ru0.ru_utime) + tvUs(ru1.ru_stime) - tvUs(ru0.ru_stime)) /
        o.iters;
    if (!st) {
      std::fprintf(stderr, "c4-netbench rank %d: %s at %zu bytes\n", o.rank,
                   st.error().toString().c_str(), bytes);
      return 1;
    }
    // Verify every word (outside the timed region).
    std::uint64_t wrong = 0;
    if (o.op == "allreduce") {
      int k = o.warmup + o.iters;
      for (std::size_t i = 0; i < count; ++i) wrong += data[i] != allreduceExpected(o.world, i, k);
    } else if (o.op == "pump") {
      int prev = (o.rank + o.world - 1) % o.world;
      for (std::size_t i = 0; i < count; ++i) wrong += recv[i] != allToAllInput(prev, 0, i);
    } else {
      for (int p = 0; p < o.world; ++p) {
        for (std::size_t i = 0; i < block; ++i) {
          wrong += recv[static_cast<std::size_t>(p) * block + i] != allToAllInput(p, o.rank, i);
        }
      }
    }
    char mine[128];
    std::snprintf(mine, sizeof(mine), "%.3f %" PRIu64 " %.3f %.3f", us, wrong, csw, cpuUs);
    auto all = bs->allgather(mine);
    if (!all) return 1;
    double maxUs = 0, totalCsw = 0, totalCpuUs = 0;
    std::uint64_t totalWrong = 0;
    for (const auto& s : *all) {
      double u = 0, c = 0, cpu = 0;
      std::uint64_t w = 0;
      std::sscanf(s.c_str(), "%lf %" SCNu64 " %lf %lf", &u, &w, &c, &cpu);
      maxUs = std::max(maxUs, u);
      totalWrong += w;
      totalCsw += c;
      totalCpuUs += cpu;
    }
    double algbw = static_cast<double>(bytes) / (maxUs * 1e-6) / 1e9;
    double n = o.world;
    // busbw: what each rank sends per second. Ring allreduce moves 2(N-1)/N of the data per rank,
    // all-to-all (N-1)/N; the pump moves all of it.
    double busbw = o.op == "allreduce" ? algbw * 2 * (n - 1) / n
                   : o.op == "pump"    ? algbw
                                       : algbw * (n - 1) / n;
    if (totalWrong != 0) failures++;
    if (lead) {
      if (o.json) {
        std::printf(
            "{\"op\":\"%s\",\"transport\":\"%s\",\"ranks\":%d,\"size\":%zu,\"count\":%zu,"
            "\"timeUs\":%.3f,\"algbwGBs\":%.4f,\"busbwGBs\":%.4f,\"wrong\":%" PRIu64
            ",\"cswPerOp\":%.2f,\"cpuUsPerOp\":%.2f}\n",
            o.op.c_str(), transport, o.world, bytes, count, maxUs, algbw, busbw, totalWrong,
            totalCsw, totalCpuUs);
      } else {
        std::printf("  %12zu %12zu %10.1f %10.3f %10.3f %7" PRIu64 "\n", bytes, count, maxUs, algbw,
                    busbw, totalWrong);
      }
      std::fflush(stdout);
    }
  }
  (void)bs->barrier();
  net.reset();
  return failures == 0 ? 0 : 3;
}

}  // namespace
}  // namespace c4::netbench

int main(int argc, char** argv) {
  c4::netbench::Options o;
  int rc = c4::netbench::parseArgs(argc, argv, o);
  if (rc >= 0) return rc;
  if (o.launch > 0) return c4::netbench::launchLocal(o.launch, argc, argv);
  return c4::netbench::run(o);
}
