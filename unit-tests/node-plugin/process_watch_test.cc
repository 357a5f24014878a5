#include "c4/node_plugin/process_watch.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

namespace c4::node {
namespace {

using std::chrono::milliseconds;

// A child process that lives until kill() (real processes: the pidfd is the thing under test).
class Child {
 public:
  Child() {
    pid_ = ::fork();
    if (pid_ == 0) {
      for (;;) ::pause();
    }
  }
  ~Child() { kill(); }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  [[nodiscard]] pid_t pid() const { return pid_; }
  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
};

report::RankIdentity rank(std::int32_t r, std::uint32_t attempt = 0) {
  report::RankIdentity id;
  id.ns = "team";
  id.job = "llm";
  id.pod = "llm-" + std::to_string(r);
  id.node = "node-1";
  id.rank = r;
  id.world_size = 8;
  id.restart_attempt = attempt;
  id.pid = 7;  // as the sender saw itself (its own pid namespace)
  return id;
}

struct Fixture {
  SimulatedClock clock;
  metrics::Registry registry;
  std::vector<report::AnomalyNotice> notices;
  bool accept = true;
  std::unique_ptr<ProcessWatch> watch;

  explicit Fixture(ProcessWatch::Config config = {}) {
    auto w = ProcessWatch::create(config, clock, registry, [this](report::AnomalyNotice&& n) {
      if (!accept) return false;
      notices.push_back(std::move(n));
      return true;
    });
    EXPECT_TRUE(w) << w.error().toString();
    watch = std::move(*w);
  }
  // Polls until `n` notices arrived or 5 s of real time passed.
  void pollFor(std::size_t n) {
    for (int i = 0; i < 50 && notices.size() < n; ++i) {
      auto r = watch->pollOnce(milliseconds{100});
      ASSERT_TRUE(r) << r.error().toString();
    }
  }
};

TEST(ProcessWatchTest, TheExitOfAWatchedRankIsAnAnomalyWithItsLastIdentity) {
  Fixture f;
  Child child;
  f.watch->observe(child.pid(), rank(3));
  f.watch->observe(child.pid(), rank(3, 1));  // the same process, a later identity
  EXPECT_EQ(f.watch->watched(), 1u);
  auto quiet = f.watch->pollOnce(milliseconds{50});
  ASSERT_TRUE(quiet);
  EXPECT_EQ(*quiet, 0) << "a live process is no exit";
  f.clock.advance(std::chrono::seconds{2});
  child.kill();
  f.pollFor(1);
  ASSERT_EQ(f.notices.size(), 1u);
  const report::AnomalyNotice& n = f.notices[0];
  EXPECT_EQ(n.kind, report::AnomalyKind::kProcessExited);
  EXPECT_EQ(n.id, rank(3, 1));
  EXPECT_EQ(n.time_unix_ns, toUnixNanos(f.clock.wallNow())) << "stamped on the node's clock";
  EXPECT_NE(n.detail.find("exited"), std::string::npos);
  EXPECT_EQ(f.watch->watched(), 0u);
  // Once: nothing more is reported for it.
  auto again = f.watch->pollOnce(milliseconds{50});
  ASSERT_TRUE(again);
  EXPECT_EQ(*again, 0);
  EXPECT_NE(f.registry.expose().find("c4_node_plugin_process_exits_total 1"), std::string::npos);
}

TEST(ProcessWatchTest, SendersWithoutAJobOrRankAndPidZeroAreNotWatched) {
  Fixture f;
  Child child;
  report::RankIdentity no_job = rank(1);
  no_job.job.clear();
  report::RankIdentity no_rank = rank(1);
  no_rank.rank = -1;
  f.watch->observe(child.pid(), no_job);
  f.watch->observe(child.pid(), no_rank);
  f.watch->observe(0, rank(1));
  EXPECT_EQ(f.watch->watched(), 0u);
  child.kill();
  auto r = f.watch->pollOnce(milliseconds{100});
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, 0);
  EXPECT_TRUE(f.notices.empty());
}

TEST(ProcessWatchTest, AProcessGoneBeforeItWasWatchedIsReportedAtTheNextPoll) {
  Fixture f;
  pid_t gone = 0;
  {
    Child child;
    gone = child.pid();
  }  // killed and reaped: no process has this pid now (until the kernel reuses it)
  f.watch->observe(gone, rank(5));
  f.pollFor(1);
  ASSERT_EQ(f.notices.size(), 1u);
  EXPECT_EQ(f.notices[0].id.rank, 5);
}

TEST(ProcessWatchTest, TheTableIsBoundedAndAFullSinkCountsTheExitAsDropped) {
  Fixture f(ProcessWatch::Config{.max_processes = 1});
  Child a, b;
  f.watch->observe(a.pid(), rank(0));
  f.watch->observe(b.pid(), rank(1));
  EXPECT_EQ(f.watch->watched(), 1u);
  EXPECT_NE(f.registry.expose().find("c4_node_plugin_processes_unwatched_total 1"),
            std::string::npos);
  f.accept = false;
  a.kill();
  b.kill();
  for (int i = 0; i < 50 && f.watch->watched() > 0; ++i)
    ASSERT_TRUE(f.watch->pollOnce(milliseconds{100}));
  EXPECT_EQ(f.watch->watched(), 0u);
  EXPECT_TRUE(f.notices.empty());
  EXPECT_NE(f.registry.expose().find("c4_node_plugin_process_exits_dropped_total 1"),
            std::string::npos);
  EXPECT_FALSE(ProcessWatch::create({.max_processes = 0}, f.clock, f.registry,
                                    [](report::AnomalyNotice&&) { return true; }));
}

TEST(ProcessWatchTest, TheThreadReportsExitsUntilStopped) {
  Fixture f;
  Child child;
  f.watch->observe(child.pid(), rank(2));
  f.watch->start();
  child.kill();
  for (int i = 0; i < 100; ++i) {
    if (f.registry.expose().find("c4_node_plugin_process_exits_total 1") != std::string::npos) {
      break;
    }
    ::usleep(50'000);
  }
  f.watch->stop();
  ASSERT_EQ(f.notices.size(), 1u);
  EXPECT_EQ(f.notices[0].id.rank, 2);
}

}  // namespace
}  // namespace c4::node
