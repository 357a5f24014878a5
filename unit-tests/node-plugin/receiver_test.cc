#include "c4/node_plugin/receiver.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "test_util.h"

namespace c4::node {
namespace {

using testing::identityOf;
using testing::jobPod;
using testing::rankReport;
using testing::TempDir;
using testing::writeFile;

constexpr const char* kUid = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0";

// A real socket; this process is the sender, and the fake /proc puts it in pod team/job-1.
class ReceiverTest : public ::testing::Test {
 protected:
  ReceiverTest() : pods_(store_, nullptr) {
    StorePodDirectory::addIndexes(store_);
    store_.upsert(jobPod("team", "job-1", kUid, "node-a", "job", 0, 0, 2));
    writeFile(proc_ / (std::to_string(::getpid()) + "/cgroup"),
              "0::/kubepods/pod" + std::string(kUid) + "/ctr\n");
    attributor_ = std::make_unique<Attributor>(
        Attributor::Config{"node-a", AttributionMode::kCgroup, proc_.path()}, pods_);
  }

  std::unique_ptr<Receiver> make(bool accept = true) {
    Receiver::Config c;
    c.socket_path = dir_ / "sub/dir/agent.sock";
    auto r = Receiver::create(c, clock_, *attributor_, registry_,
                              [this, accept](report::Message&& m, const Attribution& a) {
                                if (!accept) return false;
                                got_.push_back(std::move(m));
                                paths_.push_back(a.path);
                                return true;
                              });
    EXPECT_TRUE(r.has_value()) << r.error().toString();
    return std::move(*r);
  }

  void send(Receiver& r, const std::vector<std::uint8_t>& bytes) {
    auto s = UnixDatagramSender::create(r.path());
    ASSERT_TRUE(s.has_value());
    ASSERT_EQ(s->send(bytes), SendOutcome::kSent);
    auto handled = r.pollOnce(std::chrono::seconds{5});
    ASSERT_TRUE(handled.has_value());
    ASSERT_TRUE(*handled);
  }
  void send(Receiver& r, const report::Message& m) {
    auto bytes = report::encodeCbor(m);
    ASSERT_TRUE(bytes.has_value());
    send(r, *bytes);
  }
  static report::RankIdentity good() { return identityOf("team", "job-1", "node-a", "job", 1, 0); }

  SimulatedClock clock_;
  metrics::Registry registry_;
  kube::Store store_;
  StorePodDirectory pods_;
  TempDir proc_;
  TempDir dir_;
  std::unique_ptr<Attributor> attributor_;
  std::vector<report::Message> got_;
  std::vector<AttributionPath> paths_;
};

TEST_F(ReceiverTest, SocketIsCreatedWorldWritable) {
  auto r = make();
  struct stat st {};
  ASSERT_EQ(::stat(r->path().c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0666u);
  // A stale socket from a previous run is replaced.
  r.reset();
  auto again = make();
  EXPECT_EQ(again->path(), dir_ / "sub/dir/agent.sock");
}

TEST_F(ReceiverTest, AttributesMessagesFromThisProcess) {
  auto r = make();
  send(*r, report::Message{rankReport(good(), 1)});
  report::CheckpointNotice cp{good(), 1'764'673'209'000'000'000LL, 100, "/ckpt/100"};
  send(*r, report::Message{cp});
  ASSERT_EQ(got_.size(), 2u);
  EXPECT_EQ(std::get<report::RankReport>(got_[0]), rankReport(good(), 1));
  EXPECT_EQ(std::get<report::CheckpointNotice>(got_[1]), cp);
  EXPECT_EQ(paths_[0], AttributionPath::kCgroup);
  EXPECT_EQ(r->accepted(), 2u);
  EXPECT_NE(registry_.expose().find("c4_node_plugin_attributions_total{path=\"cgroup\"} 2"),
            std::string::npos);
}

TEST_F(ReceiverTest, DropsAreCountedByReason) {
  auto r = make();
  send(*r, std::vector<std::uint8_t>{1, 2, 3});
  auto forged = good();
  forged.rank = 5;  // pod holds ranks 0..1
  send(*r, report::Message{rankReport(forged, 1)});
  forged = good();
  forged.pod = "job-0";
  send(*r, report::Message{rankReport(forged, 2)});
  EXPECT_TRUE(got_.empty());
  EXPECT_EQ(r->dropped(DropReason::kDecode), 1u);
  EXPECT_EQ(r->dropped(DropReason::kRankOutOfRange), 1u);
  EXPECT_EQ(r->dropped(DropReason::kPodMismatch), 1u);
  const std::string text = registry_.expose();
  EXPECT_NE(text.find("c4_node_plugin_messages_dropped_total{reason=\"decode\"} 1"),
            std::string::npos);
  EXPECT_NE(text.find("c4_node_plugin_messages_dropped_total{reason=\"rank_out_of_range\"} 1"),
            std::string::npos);
}

TEST_F(ReceiverTest, SplitReportsAreMerged) {
  auto r = make();
  report::RankReport whole = rankReport(good(), 9, 4);
  for (std::uint16_t p = 0; p < 2; ++p) {
    report::RankReport part = whole;
    part.part = p;
    part.parts = 2;
    part.connections.assign(whole.connections.begin() + 2 * p,
                            whole.connections.begin() + 2 * (p + 1));
    send(*r, report::Message{part});
  }
  ASSERT_EQ(got_.size(), 1u);
  EXPECT_EQ(std::get<report::RankReport>(got_[0]), whole);
}

TEST_F(ReceiverTest, FullSinkCountsQueueFull) {
  auto r = make(false);
  send(*r, report::Message{rankReport(good(), 1)});
  EXPECT_EQ(r->dropped(DropReason::kQueueFull), 1u);
  EXPECT_EQ(r->overloadDrops(), 1u);
  EXPECT_EQ(r->accepted(), 0u);
}

TEST_F(ReceiverTest, ThreadReceivesUntilStopped) {
  auto r = make();
  r->start();
  auto s = UnixDatagramSender::create(r->path());
  ASSERT_TRUE(s.has_value());
  auto bytes = report::encodeCbor(report::Message{rankReport(good(), 1)});
  ASSERT_EQ(s->send(*bytes), SendOutcome::kSent);
  for (int i = 0; i < 500 && r->accepted() == 0; ++i) ::usleep(10'000);
  r->stop();
  EXPECT_EQ(r->accepted(), 1u);
}

// The real race: a process sends its last report and exits before the receiver reads it (the
// profiler plugin's last report as a rank leaves). Its /proc entry is gone by then; what its cgroup
// named at its previous datagram attributes it. Real /proc; this test's processes are in no pod
// cgroup, so they attribute by identity after the cgroup read (kAuto).
TEST(ReceiverExitTest, TheLastReportOfAnExitedProcessIsAccepted) {
  SimulatedClock clock;
  metrics::Registry registry;
  kube::Store store;
  StorePodDirectory pods(store, nullptr);
  StorePodDirectory::addIndexes(store);
  store.upsert(jobPod("team", "job-1", kUid, "node-a", "job", 0, 0, 2));
  Attributor attributor({"node-a", AttributionMode::kAuto, "/proc"}, pods, clock);
  TempDir dir;
  Receiver::Config c;
  c.socket_path = dir / "agent.sock";
  std::vector<report::RankReport> got;
  auto r = Receiver::create(c, clock, attributor, registry,
                            [&](report::Message&& m, const Attribution&) {
                              if (auto* rr = std::get_if<report::RankReport>(&m))
                                got.push_back(*rr);
                              return true;
                            });
  ASSERT_TRUE(r.has_value()) << r.error().toString();
  const auto id = identityOf("team", "job-1", "node-a", "job", 1, 0);
  auto first = report::encodeCbor(report::Message{rankReport(id, 1)});
  report::RankReport lastReport = rankReport(id, 2);
  lastReport.last = true;
  auto last = report::encodeCbor(report::Message{lastReport});
  ASSERT_TRUE(first.has_value() && last.has_value());
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto s = UnixDatagramSender::create((*r)->path());
    if (!s || s->send(*first) != SendOutcome::kSent) ::_exit(1);
    char byte = 0;
    if (::read(go[0], &byte, 1) != 1) ::_exit(2);
    ::_exit(s->send(*last) == SendOutcome::kSent ? 0 : 3);
  }
  ::close(go[0]);
  auto handled = (*r)->pollOnce(std::chrono::seconds{5});  // the child is alive
  ASSERT_TRUE(handled.has_value() && *handled);
  ASSERT_EQ(::write(go[1], "x", 1), 1);
  ::close(go[1]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);  // reaped: /proc/<child> is gone
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  ASSERT_FALSE(std::filesystem::exists("/proc/" + std::to_string(child)));
  handled = (*r)->pollOnce(std::chrono::seconds{5});
  ASSERT_TRUE(handled.has_value() && *handled);
  EXPECT_EQ((*r)->dropped(DropReason::kProcessGone), 0u);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_TRUE(got[1].last);
  EXPECT_NE(registry.expose().find("c4_node_plugin_attributions_after_exit_total 1"),
            std::string::npos);
}

TEST(RateLimitedLogTest, OneLinePerKeyPerInterval) {
  auto sink = std::make_shared<CaptureLogSink>();
  setLogSink(sink);
  SimulatedClock clock;
  RateLimitedLog log(clock, Logger("t"), std::chrono::seconds{10});
  for (int i = 0; i < 5; ++i) log.warn("a", "dropped", "x");
  log.warn("b", "dropped", "y");
  clock.advance(std::chrono::seconds{10});
  log.warn("a", "dropped", "z");
  setLogSink(nullptr);
  auto lines = sink->lines();
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NE(lines[2].find("suppressed=4"), std::string::npos) << lines[2];
}

}  // namespace
}  // namespace c4::node
