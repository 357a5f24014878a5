#include "c4/node_plugin/shipper.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <deque>
#include <thread>

#include "test_util.h"

namespace c4::node {
namespace {

using testing::identityOf;
using testing::rankReport;
using testing::TempDir;
using testing::writeFile;

struct Posted {
  report::NodeReport report;
  std::string token;
};

// Answers POSTs from a script (then 200) and records what was sent. The shipper's logic is under
// test here; the real HTTPS path is tested below with an SSLServer.
class ScriptedTransport final : public ReportTransport {
 public:
  Result<HttpResponse> post(const std::vector<std::uint8_t>& body, const std::string& token,
                            Duration) override {
    std::lock_guard lock(mu_);
    auto decoded = report::decodeNodeReportCbor(body);
    EXPECT_TRUE(decoded.has_value()) << decoded.error().toString();
    if (decoded) posted.push_back({*decoded, token});
    if (script.empty()) return HttpResponse{200, "{\"accepted\":1}", {}, {}, ""};
    auto next = script.front();
    script.pop_front();
    return next;
  }
  std::size_t count() {
    std::lock_guard lock(mu_);
    return posted.size();
  }
  std::mutex mu_;
  std::deque<Result<HttpResponse>> script;
  std::vector<Posted> posted;
};

HttpResponse status(long s, std::optional<Duration> retry_after = {},
                    std::optional<std::uint64_t> last_seq = {}) {
  return HttpResponse{s, "{\"error\":\"x\"}", retry_after, last_seq, ""};
}

class ShipperTest : public ::testing::Test {
 protected:
  ShipperTest() {
    writeFile(dir_ / "token", "token-1\n");
    config_.node = "node-a";
  }
  std::unique_ptr<Shipper> make(double draw = 1.0) {
    tokens_ = std::make_unique<TokenSource>(dir_ / "token");
    return std::make_unique<Shipper>(config_, clock_, transport_, *tokens_, registry_,
                                     [draw] { return draw; });
  }
  static report::RankReport report(int rank, std::uint64_t seq) {
    return rankReport(identityOf("team", "job-1", "node-a", "job", rank, 0), seq);
  }
  static report::AnomalyNotice anomaly() {
    report::AnomalyNotice n;
    n.id = identityOf("team", "job-1", "node-a", "job", 0, 0);
    n.time_unix_ns = 1'764'673'209'000'000'000LL;
    n.detail = "stall";
    return n;
  }

  SimulatedClock clock_;
  metrics::Registry registry_;
  ScriptedTransport transport_;
  TempDir dir_;
  ShipperConfig config_;
  std::unique_ptr<TokenSource> tokens_;
};

TEST_F(ShipperTest, BatchesEverythingIntoOneReportWithGrowingSeq) {
  auto s = make();
  const std::uint64_t seq0 = s->nextSeq();
  EXPECT_EQ(seq0, static_cast<std::uint64_t>(toUnixNanos(clock_.wallNow()) / 1000));
  report::NodeHealth h;
  h.gpus_reason = "no NVML";
  s->setHealth(h, false);
  s->setMessageCounters(3, 4);
  ASSERT_TRUE(s->add(report(0, 1)));
  ASSERT_TRUE(s->add(report(1, 1)));
  ASSERT_TRUE(s->add(anomaly()));
  EXPECT_EQ(s->sendNow(), SendOutcome::kAccepted);
  ASSERT_EQ(transport_.posted.size(), 1u);
  const auto& nr = transport_.posted[0].report;
  EXPECT_EQ(nr.node, "node-a");
  EXPECT_EQ(nr.seq, seq0);
  EXPECT_EQ(nr.reports.size(), 2u);
  EXPECT_EQ(nr.notices.size(), 1u);
  EXPECT_EQ(nr.health.gpus_reason, "no NVML");
  EXPECT_EQ(nr.dropped_messages, 3u);
  EXPECT_EQ(nr.rejected_messages, 4u);
  EXPECT_EQ(transport_.posted[0].token, "token-1");
  EXPECT_EQ(s->bufferedReports(), 0u);
  // An empty batch still carries health (a heartbeat) and the next seq.
  EXPECT_EQ(s->sendNow(), SendOutcome::kAccepted);
  EXPECT_EQ(transport_.posted[1].report.seq, seq0 + 1);
  EXPECT_TRUE(transport_.posted[1].report.reports.empty());
}

TEST_F(ShipperTest, BackoffGrowsWithinJitterBoundsUpToTheCap) {
  for (double draw : {0.0, 1.0, 0.5}) {
    auto s = make(draw);
    std::vector<double> waits;
    for (int i = 0; i < 10; ++i) {
      transport_.script.push_back(status(500));
      EXPECT_EQ(s->sendNow(), SendOutcome::kServerError);
      waits.push_back(std::chrono::duration<double>(s->lastBackoff()).count());
      EXPECT_EQ(s->notBefore(), clock_.monoNow() + s->lastBackoff());
    }
    for (std::size_t i = 0; i < 10; ++i) {
      const double d = std::min(30.0, 0.5 * std::pow(2.0, static_cast<double>(i)));
      EXPECT_GE(waits[i], d / 2 - 1e-9) << i;
      EXPECT_LE(waits[i], d + 1e-9) << i;
      EXPECT_NEAR(waits[i], d / 2 + d / 2 * draw, 1e-6) << i;
    }
    EXPECT_EQ(s->consecutiveFailures(), 10);
    EXPECT_TRUE(s->failingSince().has_value());
    EXPECT_EQ(s->sendNow(), SendOutcome::kAccepted);
    EXPECT_EQ(s->consecutiveFailures(), 0);
    EXPECT_FALSE(s->failingSince().has_value());
  }
}

TEST_F(ShipperTest, ConnectionErrorsKeepTheData) {
  auto s = make();
  s->add(report(0, 1));
  transport_.script.push_back(makeError(ErrorCode::kUnavailable, "refused"));
  EXPECT_EQ(s->sendNow(), SendOutcome::kConnectionError);
  EXPECT_EQ(s->bufferedReports(), 1u);
  EXPECT_EQ(s->sendNow(), SendOutcome::kAccepted);
  EXPECT_EQ(transport_.posted.back().report.reports.size(), 1u);
}

TEST_F(ShipperTest, RateLimitedCoalescesAndHonoursRetryAfter) {
  auto s = make();
  for (std::uint64_t seq = 1; seq <= 3; ++seq) {
    s->add(report(0, seq));
    s->add(report(1, seq));
  }
  s->add(anomaly());
  s->add(anomaly());
  transport_.script.push_back(status(429, std::chrono::seconds{7}));
  EXPECT_EQ(s->sendNow(), SendOutcome::kRateLimited);
  EXPECT_EQ(s->bufferedReports(), 2u);  // the latest per rank
  EXPECT_EQ(s->bufferedNotices(), 2u);  // notices are all kept
  EXPECT_EQ(s->notBefore(), clock_.monoNow() + std::chrono::seconds{7});
  transport_.script.push_back(status(503, std::chrono::seconds{3}));
  EXPECT_EQ(s->sendNow(), SendOutcome::kUnavailable);
  EXPECT_EQ(s->notBefore(), clock_.monoNow() + std::chrono::seconds{3});
  EXPECT_EQ(s->sendNow(), SendOutcome::kAccepted);
  const auto& nr = transport_.posted.back().report;
  ASSERT_EQ(nr.reports.size(), 2u);
  for (const auto& r : nr.reports) EXPECT_EQ(r.seq, 3u);
  EXPECT_EQ(nr.notices.size(), 2u);
}

TEST_F(ShipperTest, RunLoopWaitsForRetryAfter) {
  config_.interval = std::chrono::seconds{1};
  auto s = make();
  transport_.script.push_back(status(429, std::chrono::seconds{5}));
  s->start();
  ASSERT_TRUE(clock_.awaitWaiters(1));
  clock_.advance(std::chrono::seconds{1});
  for (int i = 0; i < 500 && transport_.count() < 1; ++i) ::usleep(2000);
  ASSERT_EQ(transport_.count(), 1u);
  // Interval ticks inside the Retry-After window send nothing.
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(clock_.awaitWaiters(1));
    clock_.advance(std::chrono::seconds{1});
  }
  ::usleep(20'000);
  EXPECT_EQ(transport_.count(), 1u);
  ASSERT_TRUE(clock_.awaitWaiters(1));
  clock_.advance(std::chrono::seconds{1});
  for (int i = 0; i < 500 && transport_.count() < 2; ++i) ::usleep(2000);
  EXPECT_EQ(transport_.count(), 2u);
  s->stop();
}

TEST_F(ShipperTest, ConflictJumpsSeqAndResendsOnce) {
  auto s = make();
  s->add(report(0, 1));
  const std::uint64_t own = s->nextSeq();
  transport_.script.push_back(status(409, {}, own + 1000));
  EXPECT_EQ(s->sendNow(), SendOutcome::kAccepted);
  ASSERT_EQ(transport_.posted.size(), 2u);
  EXPECT_EQ(transport_.posted[0].report.seq, own);
  EXPECT_EQ(transport_.posted[1].report.seq, own + 1001);
  EXPECT_EQ(transport_.posted[1].report.reports.size(), 1u);
  EXPECT_EQ(s->nextSeq(), own + 1002);
  // A second 409 for the resend drops the batch.
  s->add(report(0, 2));
  transport_.script.push_back(status(409, {}, 1));
  transport_.script.push_back(status(409));
  EXPECT_EQ(s->sendNow(), SendOutcome::kConflict);
  EXPECT_EQ(s->bufferedReports(), 0u);
  EXPECT_EQ(s->droppedItems(), 1u);
}

TEST_F(ShipperTest, UnauthorizedRereadsTheToken) {
  auto s = make();
  s->add(report(0, 1));
  ASSERT_EQ(s->sendNow(), SendOutcome::kAccepted);
  EXPECT_EQ(tokens_->reads(), 1u);
  s->add(report(0, 2));
  // The kubelet rotated the token; the operator refuses the old one.
  transport_.script.push_back(status(401));
  std::string next = dir_ / "token.new";
  writeFile(next, "token-2");
  ASSERT_EQ(::rename(next.c_str(), (dir_ / "token").c_str()), 0);
  EXPECT_EQ(s->sendNow(), SendOutcome::kUnauthorized);
  EXPECT_EQ(s->bufferedReports(), 1u);  // kept
  EXPECT_EQ(s->sendNow(), SendOutcome::kAccepted);
  EXPECT_EQ(transport_.posted.back().token, "token-2");
  EXPECT_EQ(transport_.posted.back().report.reports.size(), 1u);
  transport_.script.push_back(status(403));
  EXPECT_EQ(s->sendNow(), SendOutcome::kForbidden);
  EXPECT_EQ(s->consecutiveFailures(), 1);
}

TEST_F(ShipperTest, MissingTokenSendsNothing) {
  auto s = make();
  ::unlink((dir_ / "token").c_str());
  s->add(report(0, 1));
  EXPECT_EQ(s->sendNow(), SendOutcome::kNoToken);
  EXPECT_TRUE(transport_.posted.empty());
  EXPECT_EQ(s->bufferedReports(), 1u);
}

TEST_F(ShipperTest, TooLargeSplitsInHalves) {
  auto s = make();
  for (int r = 0; r < 4; ++r) s->add(report(r, 1));
  transport_.script.push_back(status(413));
  EXPECT_EQ(s->sendNow(), SendOutcome::kAccepted);
  ASSERT_EQ(transport_.posted.size(), 3u);
  EXPECT_EQ(transport_.posted[1].report.reports.size(), 2u);
  EXPECT_EQ(transport_.posted[2].report.reports.size(), 2u);
  EXPECT_EQ(transport_.posted[1].report.reports[0].id.rank, 0);
  EXPECT_EQ(transport_.posted[2].report.reports[0].id.rank, 2);
  // One item that is still too large is dropped.
  s->add(report(0, 2));
  transport_.script.push_back(status(413));
  EXPECT_EQ(s->sendNow(), SendOutcome::kTooLarge);
  EXPECT_EQ(s->bufferedReports(), 0u);
  EXPECT_EQ(s->droppedItems(), 1u);
}

TEST_F(ShipperTest, SplitHalfThatFailsKeepsBothHalvesInOrder) {
  auto s = make();
  for (int r = 0; r < 4; ++r) s->add(report(r, 1));
  transport_.script.push_back(status(413));
  transport_.script.push_back(status(500));
  EXPECT_EQ(s->sendNow(), SendOutcome::kServerError);
  EXPECT_EQ(s->bufferedReports(), 4u);
  EXPECT_EQ(s->sendNow(), SendOutcome::kAccepted);
  const auto& nr = transport_.posted.back().report;
  ASSERT_EQ(nr.reports.size(), 4u);
  for (std::size_t r = 0; r < 4; ++r) EXPECT_EQ(nr.reports[r].id.rank, static_cast<int>(r));
}

TEST_F(ShipperTest, BadRequestDropsTheBatch) {
  auto s = make();
  s->add(report(0, 1));
  transport_.script.push_back(status(400));
  EXPECT_EQ(s->sendNow(), SendOutcome::kBadRequest);
  EXPECT_EQ(s->bufferedReports(), 0u);
  EXPECT_EQ(s->droppedItems(), 1u);
  EXPECT_EQ(s->consecutiveFailures(), 0);
  EXPECT_NE(registry_.expose().find("c4_node_plugin_batches_total{outcome=\"bad_request\"} 1"),
            std::string::npos);
}

TEST_F(ShipperTest, BufferBoundDropsOldestFirst) {
  config_.max_buffer_bytes = 4000;
  auto s = make();
  for (std::uint64_t seq = 1; seq <= 40; ++seq) s->add(report(0, seq));
  EXPECT_LE(s->bufferedBytes(), 4000u);
  EXPECT_GT(s->droppedItems(), 0u);
  const std::size_t kept = s->bufferedReports();
  EXPECT_EQ(s->droppedItems() + kept, 40u);
  ASSERT_EQ(s->sendNow(), SendOutcome::kAccepted);
  const auto& nr = transport_.posted.back().report;
  ASSERT_EQ(nr.reports.size(), kept);
  EXPECT_EQ(nr.reports.front().seq, 40 - kept + 1);  // the newest survived
  EXPECT_EQ(nr.reports.back().seq, 40u);
}

TEST_F(ShipperTest, NoticeBound) {
  config_.max_notices = 3;
  auto s = make();
  for (int i = 0; i < 5; ++i) s->add(anomaly());
  EXPECT_EQ(s->bufferedNotices(), 3u);
  EXPECT_EQ(s->droppedItems(), 2u);
}

// While the operator is unreachable, one pod flooding the node plugin loses its own oldest items
// to the bounds; another pod's reports and notices, older than the flood, are all sent.
TEST_F(ShipperTest, OnePodFloodingLeavesTheOthersTheirItems) {
  config_.max_buffer_bytes = 20000;
  config_.max_notices = 8;
  transport_.script.push_back(makeError(ErrorCode::kUnavailable, "refused"));
  auto s = make();
  auto of = [](const std::string& pod, int rank, std::uint64_t seq) {
    return rankReport(identityOf("team", pod, "node-a", "job", rank, 0), seq);
  };
  auto noticeOf = [](const std::string& pod, const std::string& detail) {
    report::AnomalyNotice n;
    n.id = identityOf("team", pod, "node-a", "job", 0, 0);
    n.time_unix_ns = 1'764'673'209'000'000'000LL;
    n.detail = detail;
    return n;
  };
  for (int rank = 0; rank < 3; ++rank) ASSERT_TRUE(s->add(of("quiet", rank, 1)));
  ASSERT_TRUE(s->add(noticeOf("quiet", "quiet-1")));
  ASSERT_TRUE(s->add(noticeOf("quiet", "quiet-2")));
  EXPECT_EQ(s->sendNow(), SendOutcome::kConnectionError);  // all kept for the retry
  for (std::uint64_t seq = 1; seq <= 2000; ++seq) {
    s->add(of("flood", 0, seq));
    s->add(noticeOf("flood", "flood-" + std::to_string(seq)));
  }
  EXPECT_LE(s->bufferedBytes(), 20000u);
  EXPECT_EQ(s->bufferedNotices(), 8u);
  EXPECT_GT(s->droppedItems(), 3000u);
  std::vector<report::RankReport> reports;
  std::vector<std::string> details;
  while (s->bufferedReports() + s->bufferedNotices() > 0) {
    ASSERT_EQ(s->sendNow(), SendOutcome::kAccepted);
    const auto& nr = transport_.posted.back().report;
    reports.insert(reports.end(), nr.reports.begin(), nr.reports.end());
    for (const auto& n : nr.notices) details.push_back(std::get<report::AnomalyNotice>(n).detail);
  }
  std::size_t quiet = 0;
  std::uint64_t newest_flood = 0;
  for (const auto& r : reports) {
    if (r.id.pod == "quiet") ++quiet;
    if (r.id.pod == "flood") newest_flood = std::max(newest_flood, r.seq);
  }
  EXPECT_EQ(quiet, 3u);
  EXPECT_EQ(newest_flood, 2000u);  // the flood keeps its newest
  EXPECT_NE(std::find(details.begin(), details.end(), "quiet-1"), details.end());
  EXPECT_NE(std::find(details.begin(), details.end(), "quiet-2"), details.end());
  EXPECT_NE(std::find(details.begin(), details.end(), "flood-2000"), details.end());
}

TEST_F(ShipperTest, AnomalyAndHealthFlushAtOnce) {
  config_.interval = std::chrono::seconds{60};
  auto s = make();
  s->start();
  ASSERT_TRUE(clock_.awaitWaiters(1));
  s->add(report(0, 1));  // a plain report waits for the interval
  ::usleep(20'000);
  EXPECT_EQ(transport_.count(), 0u);
  s->add(anomaly());
  for (int i = 0; i < 500 && transport_.count() < 1; ++i) ::usleep(2000);
  ASSERT_EQ(transport_.count(), 1u);
  s->setHealth(report::NodeHealth{}, true);
  for (int i = 0; i < 500 && transport_.count() < 2; ++i) ::usleep(2000);
  EXPECT_EQ(transport_.count(), 2u);
  s->stop();
}

// The first report in which a receiving connection stalled (a receive waits >= 0.5 s and nothing
// arrived since the rank's previous report) goes out at once: C4P and C4D act on it. A stall
// that goes on, or one whose bytes still moved, waits for the interval; at most one early send
// per interval.
TEST_F(ShipperTest, ANewlyStalledConnectionShipsAtOnce) {
  config_.interval = std::chrono::seconds{60};
  auto s = make();
  s->start();
  ASSERT_TRUE(clock_.awaitWaiters(1));
  auto recv = [](int rank, std::uint64_t seq, std::uint64_t bytes, std::uint64_t oldest_us) {
    auto r = report(rank, seq);
    r.connections[0].direction = report::Direction::kRecv;
    r.connections[0].bytes = bytes;
    r.connections[0].inflight = oldest_us > 0 ? 1 : 0;
    r.connections[0].oldest_inflight_us = oldest_us;
    return r;
  };
  auto settle = [&](std::size_t want) {
    for (int i = 0; i < 500 && transport_.count() < want; ++i) ::usleep(2000);
    ::usleep(20'000);
    return transport_.count();
  };
  s->add(recv(0, 1, 100, 0));
  s->add(recv(0, 2, 200, 900'000));  // waited long, but bytes arrived: not stalled
  EXPECT_EQ(settle(0), 0u);
  s->add(recv(0, 3, 200, 1'900'000));  // nothing since the last report: stalled now
  ASSERT_EQ(settle(1), 1u);
  EXPECT_EQ(transport_.posted[0].report.reports.size(), 3u);
  s->add(recv(0, 4, 200, 2'900'000));  // the same stall: no early send
  s->add(recv(1, 1, 100, 0));
  s->add(recv(1, 2, 100, 600'000));  // another rank's new stall, within the interval
  EXPECT_EQ(settle(1), 1u);
  // An interval later the scheduled send takes them; a new stall then ships at once again.
  ASSERT_TRUE(clock_.awaitWaiters(1));
  clock_.advance(std::chrono::seconds{60});
  ASSERT_EQ(settle(2), 2u);
  s->add(recv(0, 5, 300, 100'000));
  s->add(recv(0, 6, 300, 1'100'000));
  EXPECT_EQ(settle(3), 3u);
  s->stop();
}

// An answer accepting the batch, from the operator process `instance`.
HttpResponse acceptedBy(const std::string& instance) {
  return HttpResponse{200, "{\"accepted\":1}", {}, {}, instance};
}

// Sends what `s` buffers to operator process "a", then has process "b" answer: the batch after that
// answer is the resend, if there is one.
const report::NodeReport& resentToANewInstance(Shipper& s, ScriptedTransport& transport) {
  transport.script.push_back(acceptedBy("a"));
  while (s.bufferedReports() + s.bufferedNotices() > 0) s.sendNow();
  transport.script.push_back(acceptedBy("b"));
  s.sendNow();
  s.sendNow();
  return transport.posted.back().report;
}

// What the node plugin heard of rank 1 before its process exited (its trainer's progress comes
// from another process: another pid), then the exit.
void rankOneLivesAndExits(Shipper& s) {
  auto id = identityOf("team", "job-1", "node-a", "job", 1, 0);
  s.add(rankReport(id, 1));
  report::ProgressNotice training;
  training.id = id;
  training.id.pid = 77;
  training.time_unix_ns = 1'764'673'209'000'000'000LL;
  training.state = report::ProgressState::kTraining;
  training.step = 40;
  s.add(training);
  report::AnomalyNotice closed;
  closed.id = id;
  closed.time_unix_ns = 1'764'673'209'500'000'000LL;
  closed.kind = report::AnomalyKind::kPeerClosed;
  closed.peer_rank = 2;
  closed.detail = "peer closed";
  s.add(closed);
  s.add(rankReport(id, 2));
  report::AnomalyNotice exited;
  exited.id = id;
  exited.time_unix_ns = 1'764'673'210'000'000'000LL;
  exited.kind = report::AnomalyKind::kProcessExited;
  exited.detail = "process 1 exited (seen by the node plugin)";
  s.add(exited);
}

// An operator killed between a rank's exit and its verdict takes the evidence with it: its
// successor starts with an empty store. The node plugin resends what each exited rank process
// said last, with its own stamps, in a batch marked `replay`, when an accepted answer names a new
// operator instance; never to the instance that took it (nor to the first one heard), never for
// a rank that still runs, not past last_words_ttl.
TEST_F(ShipperTest, AnExitedRanksLastWordsAreResentToANewOperatorInstance) {
  auto s = make();
  transport_.script.push_back(acceptedBy("a"));
  s->add(report(0, 1));  // rank 0 runs on
  rankOneLivesAndExits(*s);
  EXPECT_EQ(s->sendNow(), SendOutcome::kAccepted);
  EXPECT_EQ(s->operatorInstance(), "a");
  EXPECT_EQ(s->lastWordsKept(), 1u);
  ASSERT_EQ(transport_.posted.size(), 1u);
  EXPECT_FALSE(transport_.posted[0].report.replay);
  EXPECT_EQ(transport_.posted[0].report.reports.size(), 3u);
  EXPECT_EQ(transport_.posted[0].report.notices.size(), 3u);

  // The same instance: nothing to resend.
  transport_.script.push_back(acceptedBy("a"));
  s->add(report(0, 2));
  EXPECT_EQ(s->sendNow(), SendOutcome::kAccepted);
  EXPECT_FALSE(transport_.posted[1].report.replay);
  EXPECT_EQ(transport_.posted[1].report.reports.size(), 1u);

  // A new instance took the last batch: rank 1's last words go first, in a batch of their own.
  transport_.script.push_back(acceptedBy("b"));
  EXPECT_EQ(s->sendNow(), SendOutcome::kAccepted);
  s->add(report(0, 3));
  transport_.script.push_back(acceptedBy("b"));
  EXPECT_EQ(s->sendNow(), SendOutcome::kAccepted);
  ASSERT_EQ(transport_.posted.size(), 4u);
  const report::NodeReport& replay = transport_.posted[3].report;
  EXPECT_TRUE(replay.replay);
  ASSERT_EQ(replay.reports.size(), 1u);
  EXPECT_EQ(replay.reports[0].id.rank, 1);
  EXPECT_EQ(replay.reports[0].seq, 2u) << "the newest report, with its own stamp";
  EXPECT_EQ(replay.reports[0].time_unix_ns, rankReport(replay.reports[0].id, 2).time_unix_ns);
  ASSERT_EQ(replay.notices.size(), 3u);
  const auto* progress = std::get_if<report::ProgressNotice>(&replay.notices[0]);
  ASSERT_NE(progress, nullptr);
  EXPECT_EQ(progress->state, report::ProgressState::kTraining);
  EXPECT_EQ(progress->id.pid, 77u);
  const auto* closed = std::get_if<report::AnomalyNotice>(&replay.notices[1]);
  ASSERT_NE(closed, nullptr);
  EXPECT_EQ(closed->kind, report::AnomalyKind::kPeerClosed);
  const auto* exited = std::get_if<report::AnomalyNotice>(&replay.notices[2]);
  ASSERT_NE(exited, nullptr);
  EXPECT_EQ(exited->kind, report::AnomalyKind::kProcessExited);
  EXPECT_EQ(exited->time_unix_ns, 1'764'673'210'000'000'000LL);
  // Then the regular batch that waited behind it.
  EXPECT_EQ(s->sendNow(), SendOutcome::kAccepted);
  EXPECT_FALSE(transport_.posted[4].report.replay);
  ASSERT_EQ(transport_.posted[4].report.reports.size(), 1u);
  EXPECT_EQ(transport_.posted[4].report.reports[0].id.rank, 0);
  EXPECT_NE(registry_.expose().find("c4_node_plugin_replayed_items_total 4"), std::string::npos)
      << registry_.expose();

  // Kept after the resend (the new instance may die too), until last_words_ttl has passed.
  clock_.advance(config_.last_words_ttl - std::chrono::seconds{1});
  transport_.script.push_back(acceptedBy("c"));
  EXPECT_EQ(s->sendNow(), SendOutcome::kAccepted);
  EXPECT_EQ(s->sendNow(), SendOutcome::kAccepted);
  EXPECT_TRUE(transport_.posted[6].report.replay);
  clock_.advance(std::chrono::seconds{2});
  transport_.script.push_back(acceptedBy("d"));
  EXPECT_EQ(s->sendNow(), SendOutcome::kAccepted);
  EXPECT_EQ(s->lastWordsKept(), 0u);
  EXPECT_EQ(s->sendNow(), SendOutcome::kAccepted);
  EXPECT_FALSE(transport_.posted[8].report.replay);
  EXPECT_TRUE(transport_.posted[8].report.reports.empty());
}

// The kept words are bounded in bytes: a pod sending huge reports for many ranks loses its own
// running ranks' words first, and the exited rank's words of another pod stay to be resent.
TEST_F(ShipperTest, LastWordsAreBoundedInBytesAndAFloodingPodLosesItsOwn) {
  config_.max_last_words_bytes = 512 << 10;
  auto s = make();
  rankOneLivesAndExits(*s);
  const std::size_t exited = s->lastWordsBytes();
  ASSERT_GT(exited, 0u);
  for (int rank = 100; rank < 140; ++rank) {
    s->add(rankReport(identityOf("team", "flood", "node-a", "job", rank, 0), 1, 1024));
    EXPECT_LE(s->lastWordsBytes(), config_.max_last_words_bytes) << rank;
  }
  EXPECT_EQ(s->lastWordsKept(), 1u);
  EXPECT_GE(s->lastWordsBytes(), exited) << "the exited rank's words went";
  const report::NodeReport& replay = resentToANewInstance(*s, transport_);
  ASSERT_TRUE(replay.replay);
  ASSERT_EQ(replay.reports.size(), 1u);
  EXPECT_EQ(replay.reports[0].id.pod, "job-1");
}

// last_words_ttl 0 (--last-words-seconds=0) keeps none: a new instance gets nothing resent.
TEST_F(ShipperTest, NoLastWordsAreKeptWhenTheirTimeIsZero) {
  config_.last_words_ttl = Duration::zero();
  auto s = make();
  rankOneLivesAndExits(*s);
  EXPECT_EQ(s->lastWordsKept(), 0u);
  transport_.script.push_back(acceptedBy("a"));
  EXPECT_EQ(s->sendNow(), SendOutcome::kAccepted);
  transport_.script.push_back(acceptedBy("b"));
  EXPECT_EQ(s->sendNow(), SendOutcome::kAccepted);
  EXPECT_EQ(s->sendNow(), SendOutcome::kAccepted);
  ASSERT_EQ(transport_.posted.size(), 3u);
  EXPECT_FALSE(transport_.posted[2].report.replay);
  EXPECT_TRUE(transport_.posted[2].report.reports.empty());
}

// The last words of at most max_last_words exited processes are kept: the oldest exits go first.
TEST_F(ShipperTest, LastWordsAreBoundedInCount) {
  config_.max_last_words = 2;
  auto s = make();
  for (int rank = 0; rank < 3; ++rank) {
    auto id = identityOf("team", "job-1", "node-a", "job", rank, 0);
    s->add(rankReport(id, 1));
    report::AnomalyNotice exited;
    exited.id = id;
    exited.time_unix_ns = 1'764'673'210'000'000'000LL;
    exited.kind = report::AnomalyKind::kProcessExited;
    s->add(exited);
    clock_.advance(std::chrono::seconds{1});
  }
  EXPECT_EQ(s->lastWordsKept(), 2u);
  transport_.script.push_back(acceptedBy("a"));
  EXPECT_EQ(s->sendNow(), SendOutcome::kAccepted);
  transport_.script.push_back(acceptedBy("b"));
  EXPECT_EQ(s->sendNow(), SendOutcome::kAccepted);
  EXPECT_EQ(s->sendNow(), SendOutcome::kAccepted);
  const report::NodeReport& replay = transport_.posted[2].report;
  ASSERT_TRUE(replay.replay);
  ASSERT_EQ(replay.reports.size(), 2u);
  EXPECT_EQ(replay.reports[0].id.rank, 1);
  EXPECT_EQ(replay.reports[1].id.rank, 2);
}

// Words past their time go when the next exit is recorded (not only at a resend), so the kept
// exits never pile up between operator changes; a running rank's reports leave them as they are.
TEST_F(ShipperTest, AnExitRecordedLaterLetsTheExpiredWordsGo) {
  auto s = make();
  rankOneLivesAndExits(*s);
  clock_.advance(config_.last_words_ttl + std::chrono::seconds{1});
  s->add(report(0, 1));
  EXPECT_EQ(s->lastWordsKept(), 1u);
  auto id = identityOf("team", "job-2", "node-a", "job", 2, 0);
  report::AnomalyNotice exited;
  exited.id = id;
  exited.time_unix_ns = 1'764'673'211'000'000'000LL;
  exited.kind = report::AnomalyKind::kProcessExited;
  s->add(exited);
  EXPECT_EQ(s->lastWordsKept(), 1u) << "rank 1's words went when rank 2's exit came";
  const report::NodeReport& replay = resentToANewInstance(*s, transport_);
  ASSERT_TRUE(replay.replay);
  EXPECT_TRUE(replay.reports.empty());
  ASSERT_EQ(replay.notices.size(), 1u);
  const auto* exit = std::get_if<report::AnomalyNotice>(&replay.notices[0]);
  ASSERT_NE(exit, nullptr);
  EXPECT_EQ(exit->id.pod, "job-2");
}

TEST_F(ShipperTest, StopFlushesWhatItHolds) {
  config_.interval = std::chrono::seconds{60};
  auto s = make();
  s->start();
  ASSERT_TRUE(clock_.awaitWaiters(1));
  s->add(report(0, 1));
  s->add(report(1, 1));
  s->stop();
  ASSERT_EQ(transport_.count(), 1u);
  EXPECT_EQ(transport_.posted[0].report.reports.size(), 2u);
}

TEST_F(ShipperTest, StopGivesUpAtTheDeadline) {
  config_.interval = std::chrono::seconds{60};
  config_.shutdown_deadline = std::chrono::seconds{5};
  auto s = make();
  s->add(report(0, 1));
  transport_.script.push_back(status(503, std::chrono::seconds{30}));
  s->start();
  ASSERT_TRUE(clock_.awaitWaiters(1));
  std::thread stopper([&] { s->stop(); });
  stopper.join();  // Retry-After past the deadline: no second attempt, no wait
  EXPECT_EQ(transport_.count(), 1u);
  EXPECT_EQ(s->bufferedReports(), 1u);
}

// ---- Real HTTPS --------------------------------------------------------------------------------

class HttpsShipperTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(testing::makeTestCertificates(dir_.path()));
    server_ = std::make_unique<httplib::SSLServer>((dir_ / "srv.crt").c_str(),
                                                   (dir_ / "srv.key").c_str());
    ASSERT_TRUE(server_->is_valid());
    server_->Post("/v1/reports", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard lock(mu_);
      auth_.push_back(req.get_header_value("Authorization"));
      type_.push_back(req.get_header_value("Content-Type"));
      auto decoded = report::decodeNodeReportCbor(
          std::span(reinterpret_cast<const std::uint8_t*>(req.body.data()), req.body.size()));
      EXPECT_TRUE(decoded.has_value());
      if (decoded) seqs_.push_back(decoded->seq);
      const int step = calls_++;
      if (step == 0) {
        res.status = 503;
        res.set_header("Retry-After", "2");
        res.set_content("{\"error\":\"not leader\"}", "application/json");
      } else if (step == 1) {
        res.status = 409;
        res.set_header("C4-Last-Seq", std::to_string(last_seq_));
        res.set_content("{\"error\":\"replay\"}", "application/json");
      } else {
        res.status = 200;
        res.set_header("C4-Operator-Instance", "3f2a9c0e5b7d1468");
        res.set_content("{\"accepted\":1}", "application/json");
      }
    });
    port_ = server_->bind_to_any_port("127.0.0.1");
    ASSERT_GT(port_, 0);
    thread_ = std::thread([this] { server_->listen_after_bind(); });
    for (int i = 0; i < 500 && !server_->is_running(); ++i) ::usleep(2000);
    writeFile(dir_ / "token", "secret-token\n");
  }
  void TearDown() override {
    if (server_) server_->stop();
    if (thread_.joinable()) thread_.join();
  }

  TempDir dir_;
  std::unique_ptr<httplib::SSLServer> server_;
  std::thread thread_;
  int port_ = 0;
  std::mutex mu_;
  int calls_ = 0;
  std::uint64_t last_seq_ = 0;
  std::vector<std::string> auth_;
  std::vector<std::string> type_;
  std::vector<std::uint64_t> seqs_;
};

TEST_F(HttpsShipperTest, EndToEndOverTls) {
  auto transport = createCurlTransport(
      {"https://localhost:" + std::to_string(port_) + "/v1/reports", dir_ / "ca.crt"});
  ASSERT_TRUE(transport.has_value());
  SimulatedClock clock;
  metrics::Registry registry;
  TokenSource tokens(dir_ / "token");
  ShipperConfig config;
  config.node = "node-a";
  Shipper s(config, clock, **transport, tokens, registry, [] { return 0.5; });
  last_seq_ = s.nextSeq() + 500;
  s.add(rankReport(identityOf("team", "job-1", "node-a", "job", 0, 0), 1));

  EXPECT_EQ(s.sendNow(), SendOutcome::kUnavailable);
  EXPECT_EQ(s.lastBackoff(), std::chrono::seconds{2});  // Retry-After parsed
  EXPECT_EQ(s.bufferedReports(), 1u);
  EXPECT_EQ(s.sendNow(), SendOutcome::kAccepted);  // 409 with C4-Last-Seq, then resent: 200
  EXPECT_EQ(s.bufferedReports(), 0u);
  EXPECT_EQ(s.operatorInstance(), "3f2a9c0e5b7d1468");
  std::lock_guard lock(mu_);
  ASSERT_EQ(seqs_.size(), 3u);
  EXPECT_EQ(seqs_[2], last_seq_ + 1);
  for (const auto& a : auth_) EXPECT_EQ(a, "Bearer secret-token");
  for (const auto& t : type_) EXPECT_EQ(t, "application/cbor");
  EXPECT_NE(registry.expose().find("c4_node_plugin_sent_bytes_total"), std::string::npos);
}

TEST_F(HttpsShipperTest, UntrustedCertificateIsAConnectionError) {
  // No CA file: the system store does not trust the throwaway CA.
  writeFile(dir_ / "other.crt", "");
  auto transport =
      createCurlTransport({"https://localhost:" + std::to_string(port_) + "/v1/reports", ""});
  ASSERT_TRUE(transport.has_value());
  auto r = (*transport)->post({1, 2, 3}, "t", std::chrono::seconds{5});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  std::lock_guard lock(mu_);
  EXPECT_EQ(calls_, 0);
}

TEST(CurlTransportTest, RefusesNonHttpUrls) {
  EXPECT_FALSE(createCurlTransport({"ftp://x/v1/reports", ""}).has_value());
  // Plain http:// only when explicitly allowed (tests); the error names the flag.
  auto insecure = createCurlTransport({"http://127.0.0.1:1/v1/reports", ""});
  ASSERT_FALSE(insecure.has_value());
  EXPECT_NE(insecure.error().message.find("--allow-insecure-operator-url"), std::string::npos);
  EXPECT_TRUE(createCurlTransport(
                  {.url = "http://127.0.0.1:1/v1/reports", .ca_file = "", .allow_insecure = true})
                  .has_value());
  auto t = createCurlTransport({"https://127.0.0.1:1/v1/reports", ""});
  ASSERT_TRUE(t.has_value());
  auto r = (*t)->post({1}, "t", std::chrono::seconds{2});
  EXPECT_FALSE(r.has_value());
}

}  // namespace
}  // namespace c4::node
