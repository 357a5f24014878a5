// c4-netbench end to end on localhost: collectives verify every byte (exit 3 on a wrong word), the
// baseline runs the same ring, and training resumes from checkpoints to the same final checksum.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap.h"
#include "c4/common/report.h"
#include "c4/common/unix_socket.h"
#include "training.h"

namespace c4::netbench {
namespace {

namespace fs = std::filesystem;

struct Outcome {
  int rc = -1;
  std::string out;
};

Outcome run(const std::string& args, const std::string& env = "") {
  std::string cmd =
      "C4_SOCKET_IFNAME=lo " + env + " " + std::string(C4_NETBENCH) + " " + args + " 2>&1";
  Outcome r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf{};
  while (std::fgets(buf.data(), buf.size(), p) != nullptr) r.out += buf.data();
  int status = ::pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string field(const std::string& out, const std::string& key) {
  auto pos = out.find(key + "=");
  if (pos == std::string::npos) return "";
  pos += key.size() + 1;
  return out.substr(pos, out.find_first_of(" \n", pos) - pos);
}

struct NetbenchTest : ::testing::Test {
  void SetUp() override {
    dir = fs::temp_directory_path() /
          ("c4-netbench-test-" + std::to_string(::getpid()) + "-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
  }
  void TearDown() override { fs::remove_all(dir); }
  fs::path dir;
};

TEST_F(NetbenchTest, AllreduceOverPluginAndBaselineVerifies) {
  for (const char* mode : {"", "--baseline", "--baseline --baseline-acked"}) {
    Outcome r = run(std::string("--launch 3 -b 4 -e 4M -f 4 -n 2 -w 1 ") + mode);
    EXPECT_EQ(r.rc, 0) << r.out;
    EXPECT_NE(r.out.find("4194304"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find(" 1\n"), std::string::npos) << "wrong words reported:\n" << r.out;
  }
}

// The ring is pipelined across its steps (a slice of step k goes out once the same slice of step
// k - 1 arrived, reduce-scatter buffers reused two steps later): many slices per step, odd chunk
// sizes and windows down to 1 must still give the verified sum.
TEST_F(NetbenchTest, AllreducePipelinedAcrossStepsVerifiesWithSmallSlicesAndWindows) {
  for (const char* opts : {"--launch 5 -b 4 -e 1M -f 7 --slice-bytes 4K --window 1",
                           "--launch 4 -b 12 -e 3M -f 9 --slice-bytes 64K --window 2",
                           "--launch 2 -b 4 -e 2M -f 8 --slice-bytes 4K --window 16 --baseline",
                           "--launch 3 -b 4 -e 2M -f 8 --slice-bytes 4K --window 16 --baseline "
                           "--baseline-acked"}) {
    Outcome r = run(std::string(opts) + " -n 2 -w 1");
    EXPECT_EQ(r.rc, 0) << opts << "\n" << r.out;
    // Every size's row ends with its count of wrong words: all must be 0.
    std::istringstream lines(r.out);
    int rows = 0;
    for (std::string line; std::getline(lines, line);) {
      if (line.empty() || line.find_first_not_of(" 0123456789.") != std::string::npos) continue;
      ++rows;
      EXPECT_EQ(line.substr(line.find_last_of(' ') + 1), "0") << opts << ": " << line;
    }
    EXPECT_GE(rows, 4) << opts << "\n" << r.out;
  }
}

TEST_F(NetbenchTest, AllToAllJson) {
  Outcome r = run("--launch 3 --op alltoall -b 12 -e 3M -f 16 -n 2 -w 1 --json");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("\"op\":\"alltoall\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"wrong\":0"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("\"wrong\":1"), std::string::npos) << r.out;
}

// The ring pump (the limit a ring allreduce is measured against) verifies what it moves over the
// plugin and over plain TCP, and every JSON line says where the time went.
TEST_F(NetbenchTest, PumpVerifiesAndReportsContextSwitchesAndCpu) {
  for (const char* mode : {"", "--baseline"}) {
    Outcome r = run(std::string("--launch 3 --op pump -b 1K -e 4M -f 64 -n 3 -w 1 --json ") + mode);
    EXPECT_EQ(r.rc, 0) << r.out;
    EXPECT_NE(r.out.find("\"op\":\"pump\""), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("\"size\":4194304"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("\"wrong\":1"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("\"cswPerOp\":"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("\"cpuUsPerOp\":"), std::string::npos) << r.out;
  }
}

TEST_F(NetbenchTest, TrainingResumesToTheSameChecksum) {
  std::string common = "--launch 2 --state-bytes 256K --checkpoint-every 3 ";
  Outcome straight = run(common + "--steps 12 --checkpoint-dir " + (dir / "a").string());
  ASSERT_EQ(straight.rc, 0) << straight.out;
  std::string sum = field(straight.out, "checksum");
  ASSERT_FALSE(sum.empty()) << straight.out;
  EXPECT_EQ(field(straight.out, "resumed_from"), "0");
  // Every rank prints its own result, and the ranks agree.
  EXPECT_NE(straight.out.find("rank=0 "), std::string::npos) << straight.out;
  EXPECT_NE(straight.out.find("rank=1 "), std::string::npos) << straight.out;
  auto count = [&](const std::string& what) {
    std::size_t n = 0;
    for (auto p = straight.out.find(what); p != std::string::npos;
         p = straight.out.find(what, p + 1)) {
      ++n;
    }
    return n;
  };
  EXPECT_EQ(count("checksum="), 2u) << straight.out;
  EXPECT_EQ(count("checksum=" + sum), 2u) << straight.out;
  // Stopped after step 7 (last checkpoint 6), then restarted with the full step count.
  Outcome first = run(common + "--steps 7 --checkpoint-dir " + (dir / "b").string());
  ASSERT_EQ(first.rc, 0) << first.out;
  Outcome resumed = run(common + "--steps 12 --checkpoint-dir " + (dir / "b").string());
  ASSERT_EQ(resumed.rc, 0) << resumed.out;
  EXPECT_EQ(field(resumed.out, "resumed_from"), "6");
  EXPECT_EQ(field(resumed.out, "checksum"), sum);
  // The same over the baseline transport.
  Outcome base = run(common + "--baseline --steps 12 --checkpoint-dir " + (dir / "c").string());
  ASSERT_EQ(base.rc, 0) << base.out;
  EXPECT_EQ(field(base.out, "checksum"), sum);
}

// --step-log: one "<unix seconds> <step>" line per step and rank, appended across a resume, so a
// timeline shows the job going back to its checkpoint.
TEST_F(NetbenchTest, TrainingStepLogRecordsEveryStepAcrossAResume) {
  std::string common = "--launch 2 --state-bytes 4K --checkpoint-every 3 --checkpoint-dir " +
                       (dir / "ckpt").string() + " --step-log " + (dir / "steps").string();
  ASSERT_EQ(run(common + " --steps 7").rc, 0);
  ASSERT_EQ(run(common + " --steps 9").rc, 0);
  for (int rank = 0; rank < 2; ++rank) {
    FILE* f =
        std::fopen((dir / "steps" / ("rank-" + std::to_string(rank) + ".steps")).c_str(), "r");
    ASSERT_NE(f, nullptr) << "rank " << rank;
    std::vector<int> steps;
    double t = 0, last = 0;
    int step = 0;
    while (std::fscanf(f, "%lf %d", &t, &step) == 2) {
      EXPECT_GE(t, last) << "time goes back at step " << step;
      EXPECT_GT(t, 1.6e9) << "not a unix time";
      last = t;
      steps.push_back(step);
    }
    std::fclose(f);
    // 1..7, then resumed from the checkpoint at 6: 7..9.
    EXPECT_EQ(steps, (std::vector<int>{1, 2, 3, 4, 5, 6, 7, 7, 8, 9})) << "rank " << rank;
  }
  // An unwritable directory is a clear error, not a silent run without a log.
  Outcome bad = run("--launch 1 --steps 2 --step-log /proc/c4-no-such-dir");
  EXPECT_NE(bad.rc, 0) << bad.out;
  EXPECT_NE(bad.out.find("step log"), std::string::npos) << bad.out;
}

TEST_F(NetbenchTest, TrainingSurvivesKill) {
  std::string ckpt = (dir / "k").string();
  std::string args =
      "--launch 2 --state-bytes 64K --checkpoint-every 2 --step-compute-ms 20 "
      "--steps 40 --checkpoint-dir " +
      ckpt;
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    ::setenv("C4_SOCKET_IFNAME", "lo", 1);
    std::string cmd = std::string(C4_NETBENCH) + " " + args + " >/dev/null 2>&1";
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::setpgid(pid, pid);
  // Wait (real time, bounded) until both ranks wrote checkpoint 4, then kill everything.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline &&
         !(listCheckpoints(ckpt, 0, 16384).size() >= 2 &&
           listCheckpoints(ckpt, 1, 16384).size() >= 2)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(-pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  Outcome resumed =
      run("--launch 2 --state-bytes 64K --checkpoint-every 2 --steps 40 "
          "--checkpoint-dir " +
          ckpt);
  ASSERT_EQ(resumed.rc, 0) << resumed.out;
  EXPECT_GE(std::stoi(field(resumed.out, "resumed_from")), 4);
  Outcome straight = run("--launch 2 --state-bytes 64K --steps 40");
  ASSERT_EQ(straight.rc, 0) << straight.out;
  EXPECT_EQ(field(resumed.out, "checksum"), field(straight.out, "checksum"));
}

// What a rank's RankReports said over a run: the largest cumulative bytes per (direction, peer).
struct Reported {
  int reports = 0;
  std::map<std::pair<int, std::pair<bool, int>>, std::uint64_t> bytes;  // (rank, (send, peer))
};

// Runs `run` while a node-plugin stand-in bound at `path` decodes every datagram and hands it to
// `onMessage` (on its own thread; the caller reads what it gathered after this returns). Datagram
// queues are short: the messages are drained while the ranks run, then 300 ms more for the last
// ones in flight.
void drainWhile(const std::string& path,
                const std::function<void(const report::Message&)>& onMessage,
                const std::function<void()>& run) {
  auto server = UnixDatagramServer::bind(path);
  ASSERT_TRUE(server.has_value()) << server.error().toString();
  std::atomic<bool> stop{false};
  std::thread reader([&] {
    for (;;) {
      // Once told to stop, it still reads what is queued: a reader starved of the CPU on a busy
      // machine must not miss what was sent before the run returned.
      const bool last = stop.load();
      auto d = server->receive(std::chrono::milliseconds(last ? 0 : 50));
      if (!d || !*d) {
        if (last) break;
        continue;
      }
      auto m = report::decodeMessageCbor((*d)->bytes);
      if (m) onMessage(*m);
    }
  });
  run();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // senders' threads finish
  stop = true;
  reader.join();
}

Reported collectReports(const std::string& path, const std::function<void()>& run) {
  Reported out;
  drainWhile(
      path,
      [&out](const report::Message& m) {
        const auto* r = std::get_if<report::RankReport>(&m);
        if (r == nullptr) return;
        out.reports++;
        for (const auto& c : r->connections) {
          auto& b = out.bytes[{r->id.rank, {c.direction == report::Direction::kSend, c.peer_rank}}];
          b = std::max(b, c.bytes);
        }
      },
      run);
  return out;
}

// On NCCL's own transports C4's telemetry comes from the profiler plugin: c4-netbench plays NCCL
// towards it over the plain-TCP baseline (no net plugin), and every rank reports the bytes it sent
// to and received from its peer, by the peer's rank. The control: the same run without the
// profiler reports nothing.
TEST_F(NetbenchTest, TheProfilerPluginTimesTheBaselineTransport) {
  // Reports go out every 20 ms; 400 iterations last several intervals.
  const std::string env = "C4_REPORT_INTERVAL_MS=20 C4_JOB=nb C4_NAMESPACE=default ";
  const std::string args = "--launch 2 --baseline --op allreduce -b 1M -e 1M -n 400 -w 1 ";
  Outcome r;
  Reported with = collectReports("@c4-netbench-prof-" + std::to_string(::getpid()), [&] {
    r = run(args + "--profiler " + std::string(C4_PROFILER_PLUGIN),
            env + "C4_AGENT_SOCKET=@c4-netbench-prof-" + std::to_string(::getpid()));
  });
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_GT(with.reports, 0);
  // A 2-rank ring allreduce of 1 MiB sends and receives 1 MiB per iteration on each rank; the
  // reports seen cover at least 20 of the 400 iterations.
  const std::uint64_t least = 20ull << 20;
  for (int rank = 0; rank < 2; ++rank) {
    for (bool send : {true, false}) {
      auto it = with.bytes.find({rank, {send, 1 - rank}});
      ASSERT_NE(it, with.bytes.end()) << "rank " << rank << (send ? " sent" : " received")
                                      << " nothing reported for peer " << 1 - rank;
      EXPECT_GE(it->second, least) << "rank " << rank << (send ? " send" : " recv");
    }
  }
  Outcome plain;
  Reported without = collectReports("@c4-netbench-noprof-" + std::to_string(::getpid()), [&] {
    plain = run(args + "--profiler ''",
                env + "C4_AGENT_SOCKET=@c4-netbench-noprof-" + std::to_string(::getpid()));
  });
  ASSERT_EQ(plain.rc, 0) << plain.out;
  EXPECT_EQ(without.reports, 0);
}

// A profiler plugin that cannot be loaded costs the run nothing: it says so and runs without it,
// as NCCL does.
TEST_F(NetbenchTest, AMissingProfilerPluginIsReportedAndTheRunGoesOn) {
  Outcome r = run("--launch 2 --baseline --op allreduce -b 64K -e 64K -n 2 -w 0",
                  "NCCL_PROFILER_PLUGIN=/nonexistent/libnccl-profiler-x.so");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("running without a profiler plugin: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cannot load profiler plugin"), std::string::npos) << r.out;
}

TEST_F(NetbenchTest, TrainingSendsProgressAndCheckpointNotices) {
  std::string path = "@c4-netbench-test-" + std::to_string(::getpid());
  int progress = 0, finished = 0, checkpoints = 0;
  std::vector<report::CheckpointNotice> ckpts;
  Outcome r;
  drainWhile(
      path,
      [&](const report::Message& m) {
        if (auto* p = std::get_if<report::ProgressNotice>(&m)) {
          (p->state == report::ProgressState::kFinished ? finished : progress)++;
        }
        if (auto* c = std::get_if<report::CheckpointNotice>(&m)) ckpts.push_back(*c);
      },
      [&] {
        r = run("--launch 2 --state-bytes 16K --steps 6 --checkpoint-every 3 --checkpoint-dir " +
                    (dir / "n").string(),
                "C4_AGENT_SOCKET=" + path + " C4_REPORT_INTERVAL_MS=3600000");
      });
  ASSERT_EQ(r.rc, 0) << r.out;
  for (const auto& c : ckpts) {
    checkpoints++;
    EXPECT_TRUE(c.step == 3 || c.step == 6);
    EXPECT_TRUE(fs::exists(c.path)) << c.path;
  }
  EXPECT_EQ(progress, 12);  // 6 steps x 2 ranks
  EXPECT_EQ(finished, 2);
  EXPECT_EQ(checkpoints, 4);
}

TEST_F(NetbenchTest, AnnouncedPauseIsCheckpointingThenTrainingAndKeepsTheChecksum) {
  std::string path = "@c4-netbench-pause-" + std::to_string(::getpid());
  std::vector<report::ProgressNotice> notices;
  std::string common = "--launch 2 --state-bytes 16K --steps 6 ";
  Outcome r;
  std::chrono::steady_clock::duration took{};
  drainWhile(
      path,
      [&notices](const report::Message& m) {
        if (auto* p = std::get_if<report::ProgressNotice>(&m)) notices.push_back(*p);
      },
      [&] {
        auto t0 = std::chrono::steady_clock::now();
        r = run(common + "--pause-at-step 3 --pause-ms 400 --pause-rank 1",
                "C4_AGENT_SOCKET=" + path + " C4_REPORT_INTERVAL_MS=3600000");
        took = std::chrono::steady_clock::now() - t0;
      });
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_GE(took, std::chrono::milliseconds(400));
  std::vector<report::ProgressState> rank1;
  for (const auto& n : notices) {
    if (n.id.rank == 1 && n.step == 3) rank1.push_back(n.state);
    if (n.id.rank == 0) {
      EXPECT_NE(n.state, report::ProgressState::kCheckpointing);
    }
  }
  EXPECT_EQ(rank1, (std::vector<report::ProgressState>{report::ProgressState::kTraining,
                                                       report::ProgressState::kCheckpointing,
                                                       report::ProgressState::kTraining}));
  Outcome plain = run(common);
  ASSERT_EQ(plain.rc, 0) << plain.out;
  EXPECT_EQ(field(r.out, "checksum"), field(plain.out, "checksum"));
}

TEST_F(NetbenchTest, SilentPauseSendsNoCheckpointingNotice) {
  std::string path = "@c4-netbench-silent-" + std::to_string(::getpid());
  int pausing = 0, total = 0;
  Outcome r;
  drainWhile(
      path,
      [&](const report::Message& m) {
        if (auto* p = std::get_if<report::ProgressNotice>(&m)) {
          ++total;
          if (p->state == report::ProgressState::kCheckpointing) ++pausing;
        }
      },
      [&] {
        r =
            run("--launch 2 --state-bytes 16K --steps 4 --pause-at-step 2 --pause-ms 200 "
                "--pause-silent",
                "C4_AGENT_SOCKET=" + path + " C4_REPORT_INTERVAL_MS=3600000");
      });
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(total, 10);  // 4 training notices and 1 finished per rank
  EXPECT_EQ(pausing, 0);
  EXPECT_NE(r.out.find("not announced"), std::string::npos) << r.out;
}

TEST_F(NetbenchTest, SlowFileMultipliesTheComputeOfTheNamedNode) {
  fs::create_directories(dir);
  std::string file = (dir / "slow").string();
  {
    std::FILE* f = std::fopen(file.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("other-node 50\nnode-x 5\n", f);
    std::fclose(f);
  }
  std::string args =
      "--launch 2 --state-bytes 16K --steps 10 --step-compute-ms 20 --slow-file " + file;
  auto t0 = std::chrono::steady_clock::now();
  Outcome slow = run(args, "C4_NODE_NAME=node-x");
  auto slow_took = std::chrono::steady_clock::now() - t0;
  ASSERT_EQ(slow.rc, 0) << slow.out;
  EXPECT_GE(slow_took, std::chrono::milliseconds(10 * 100));  // 10 steps x 20 ms x 5
  EXPECT_NE(slow.out.find("compute factor 5.00"), std::string::npos) << slow.out;
  Outcome other = run(args, "C4_NODE_NAME=node-y");
  ASSERT_EQ(other.rc, 0) << other.out;
  EXPECT_EQ(other.out.find("compute factor"), std::string::npos) << other.out;
  EXPECT_EQ(field(slow.out, "checksum"), field(other.out, "checksum"));
}

TEST(SlowFile, ParsesTheNodesFactorAndRejectsBadLines) {
  EXPECT_EQ(parseSlowFile("", "n1").value(), 1.0);
  EXPECT_EQ(parseSlowFile("n1 3\n", "n1").value(), 3.0);
  EXPECT_EQ(parseSlowFile("n2 3\n\n  n1   2.5  \n", "n1").value(), 2.5);
  EXPECT_EQ(parseSlowFile("n2 3\n", "n1").value(), 1.0);
  EXPECT_FALSE(parseSlowFile("n1\n", "n1").has_value());
  EXPECT_FALSE(parseSlowFile("n1 3 extra\n", "n1").has_value());
  EXPECT_FALSE(parseSlowFile("n1 0.5\n", "n1").has_value());
  EXPECT_FALSE(parseSlowFile("n1 x\n", "n1").has_value());
  EXPECT_FALSE(parseSlowFile("n2 nan\n", "n1").has_value());
}

TEST(Checkpoint, CorruptFilesAreIgnored) {
  auto d = (fs::temp_directory_path() / ("c4-ckpt-" + std::to_string(::getpid()))).string();
  std::vector<std::uint32_t> s(100, 7);
  ASSERT_TRUE(writeCheckpoint(d, 0, 5, s));
  ASSERT_TRUE(writeCheckpoint(d, 0, 10, s));
  EXPECT_EQ(listCheckpoints(d, 0, 100), (std::vector<int>{5, 10}));
  {
    FILE* f = std::fopen((fs::path(d) / "ckpt-00000010.rank-0.bin").c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    std::fseek(f, 40, SEEK_SET);
    std::fputc(0x55, f);
    std::fclose(f);
  }
  EXPECT_EQ(listCheckpoints(d, 0, 100), (std::vector<int>{5}));
  EXPECT_FALSE(readCheckpoint(d, 0, 10, 100).has_value());
  ASSERT_TRUE(writeCheckpoint(d, 0, 15, s));
  ASSERT_TRUE(writeCheckpoint(d, 0, 20, s));
  EXPECT_EQ(listCheckpoints(d, 0, 100), (std::vector<int>{15, 20}));  // two newest kept
  fs::remove_all(d);
}

}  // namespace
}  // namespace c4::netbench

namespace c4::netbench {
namespace {

// A master whose name does not resolve (yet) is retried until the bootstrap's deadline, then the
// error names it — a rank whose peers' records appear a moment later must not fail at once.
TEST(BootstrapTest, AnUnresolvableMasterIsRetriedUntilTheDeadline) {
  auto started = std::chrono::steady_clock::now();
  auto bs = Bootstrap::create(1, 2, "c4-no-such-host.invalid", 29999, 600);
  auto waited = std::chrono::steady_clock::now() - started;
  ASSERT_FALSE(bs);
  EXPECT_NE(bs.error().message.find("cannot resolve c4-no-such-host.invalid"), std::string::npos)
      << bs.error().message;
  EXPECT_GE(waited, std::chrono::milliseconds(500)) << "gave up before the deadline";
}

// A port nobody listens on right now (the kernel's pick; a tiny reuse window until the test binds).
int unusedPort() {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    return -1;
  }
  return ntohs(a.sin_port);
}

// A restarted job's master keeps its name (train-0.train) but gets a new address, and while its
// old pod terminates a resolver may still answer with the old one, alone or first. A rank resolves
// again on every try and tries every address, so it reaches the new master (a CI run saw a rank
// spend its whole minute knocking on the old address, resolved once).
TEST(BootstrapTest, ARankFollowsTheMastersNameToItsNewAddress) {
  const int port = unusedPort();
  ASSERT_GT(port, 0);
  std::thread master([port] {
    auto bs = Bootstrap::create(0, 2, "127.0.0.1", port, 10000);
    ASSERT_TRUE(bs) << bs.error().message;
    auto all = bs->allgather("zero");
    ASSERT_TRUE(all) << all.error().message;
    EXPECT_EQ(*all, (std::vector<std::string>{"zero", "one"}));
  });
  std::atomic<int> calls{0};
  auto resolver = [&calls](const std::string& host) -> Result<std::vector<std::string>> {
    EXPECT_EQ(host, "train-0.train");
    // 127.0.0.3 is the old address: local, and nothing listens on it (rank 0 binds 127.0.0.1).
    if (calls++ < 3) return std::vector<std::string>{"127.0.0.3"};
    return std::vector<std::string>{"127.0.0.3", "127.0.0.1"};
  };
  auto bs = Bootstrap::create(1, 2, "train-0.train", port, 10000, resolver);
  ASSERT_TRUE(bs) << bs.error().message;
  EXPECT_GE(calls.load(), 4) << "connected before the new address was ever answered";
  auto all = bs->allgather("one");
  ASSERT_TRUE(all) << all.error().message;
  EXPECT_EQ(*all, (std::vector<std::string>{"zero", "one"}));
  master.join();
}

// The control: a rank that is only ever told the old address fails at its deadline, and the
// error says where it knocked.
TEST(BootstrapTest, ARankToldOnlyAStaleAddressFailsNamingIt) {
  const int port = unusedPort();
  ASSERT_GT(port, 0);
  std::atomic<int> calls{0};
  auto stale = [&calls](const std::string&) -> Result<std::vector<std::string>> {
    ++calls;
    return std::vector<std::string>{"127.0.0.3"};
  };
  auto bs = Bootstrap::create(1, 2, "train-0.train", port, 400, stale);
  ASSERT_FALSE(bs);
  EXPECT_NE(bs.error().message.find("train-0.train:" + std::to_string(port) + " timed out"),
            std::string::npos)
      << bs.error().message;
  EXPECT_NE(bs.error().message.find("127.0.0.3"), std::string::npos) << bs.error().message;
  EXPECT_GE(calls.load(), 2) << "the name was resolved once only";
}

}  // namespace
}  // namespace c4::netbench
