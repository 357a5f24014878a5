// c4-notify end to end: the notice a trainer sends reaches a datagram socket with the identity
// from the operator's environment, decodes to what was asked, and bad input sends nothing.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "c4/common/report.h"
#include "c4/common/unix_socket.h"

namespace c4 {
namespace {

struct Outcome {
  int rc = -1;
  std::string out;
};

const std::string kIdentity =
    "C4_RANK=3 WORLD_SIZE=8 C4_JOB=train C4_NAMESPACE=ml C4_POD_NAME=train-3 "
    "C4_NODE_NAME=node-7 C4_RESTART_ATTEMPT=2 ";

Outcome run(const std::string& env, const std::string& args) {
  std::string cmd = "env -i " + env + " " + std::string(C4_NOTIFY) + " " + args + " 2>&1";
  Outcome r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 1024> buf{};
  while (std::fgets(buf.data(), buf.size(), p) != nullptr) r.out += buf.data();
  int status = ::pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

struct NotifyTest : ::testing::Test {
  void SetUp() override {
    path = "@c4-notify-test-" + std::to_string(::getpid());
    auto s = UnixDatagramServer::bind(path);
    ASSERT_TRUE(s.has_value());
    server.emplace(std::move(*s));
  }
  // The next datagram, decoded; nullopt when none arrives within 500 ms.
  std::optional<report::Message> next() {
    auto d = server->receive(std::chrono::milliseconds(500));
    if (!d || !*d) return std::nullopt;
    auto m = report::decodeMessageCbor((*d)->bytes);
    if (!m) return std::nullopt;
    return *m;
  }
  std::string path;
  std::optional<UnixDatagramServer> server;
};

TEST_F(NotifyTest, ProgressAndCheckpointCarryTheRankIdentity) {
  Outcome r = run(kIdentity + "C4_AGENT_SOCKET=" + path, "progress --step 41 --state evaluating");
  ASSERT_EQ(r.rc, 0) << r.out;
  auto m = next();
  ASSERT_TRUE(m.has_value());
  auto* p = std::get_if<report::ProgressNotice>(&*m);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->step, 41);
  EXPECT_EQ(p->state, report::ProgressState::kEvaluating);
  EXPECT_EQ(p->expected_seconds, 0u) << "no length announced";
  EXPECT_EQ(p->id.rank, 3);
  EXPECT_EQ(p->id.world_size, 8);
  EXPECT_EQ(p->id.job, "train");
  EXPECT_EQ(p->id.ns, "ml");
  EXPECT_EQ(p->id.pod, "train-3");
  EXPECT_EQ(p->id.node, "node-7");
  EXPECT_EQ(p->id.restart_attempt, 2u);
  EXPECT_GT(p->time_unix_ns, 1'600'000'000'000'000'000);

  r = run(kIdentity + "C4_AGENT_SOCKET=" + path, "checkpoint --step 40 --path /ckpt/step-40.pt");
  ASSERT_EQ(r.rc, 0) << r.out;
  m = next();
  ASSERT_TRUE(m.has_value());
  auto* c = std::get_if<report::CheckpointNotice>(&*m);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->step, 40);
  EXPECT_EQ(c->path, "/ckpt/step-40.pt");
  EXPECT_EQ(c->id.rank, 3);

  // A pause with its expected length.
  r = run(kIdentity + "C4_AGENT_SOCKET=" + path,
          "progress --step 42 --state checkpointing --expect-seconds 90");
  ASSERT_EQ(r.rc, 0) << r.out;
  m = next();
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(std::get<report::ProgressNotice>(*m).state, report::ProgressState::kCheckpointing);
  EXPECT_EQ(std::get<report::ProgressNotice>(*m).expected_seconds, 90u);

  // RANK is the fallback (torchrun sets it per process); --socket and --rank override.
  r = run("RANK=5 C4_JOB=train C4_NAMESPACE=ml", "progress --step 1 --socket " + path);
  ASSERT_EQ(r.rc, 0) << r.out;
  m = next();
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(std::get<report::ProgressNotice>(*m).id.rank, 5);
  EXPECT_EQ(std::get<report::ProgressNotice>(*m).state, report::ProgressState::kTraining);
}

// c4-notify exits right after its notice: it stays (at most half a second) until the node plugin
// has read it, since the node plugin attributes a datagram by its sender's live pid.
TEST_F(NotifyTest, StaysUntilItsNoticeIsRead) {
  std::atomic<bool> done{false};
  Outcome r;
  std::thread notify([&] {
    r = run(kIdentity + "C4_AGENT_SOCKET=" + path, "progress --step 7 --state finished");
    done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds{250});
  EXPECT_FALSE(done.load()) << "c4-notify exited with its notice unread";
  auto m = next();
  notify.join();
  EXPECT_EQ(r.rc, 0) << r.out;
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(std::get<report::ProgressNotice>(*m).state, report::ProgressState::kFinished);
}

TEST_F(NotifyTest, BadInputIsRefusedAndSendsNothing) {
  const std::string env = kIdentity + "C4_AGENT_SOCKET=" + path;
  struct Case {
    std::string args;
    std::string want;
  };
  for (const Case& k :
       {Case{"", "usage"}, Case{"pause --step 1", "unknown notice"},
        Case{"progress", "--step is required"}, Case{"progress --step -1", "non-negative"},
        Case{"progress --step 12x", "non-negative"},
        Case{"progress --step 1 --state sleeping", "--state must be"},
        Case{"checkpoint --step 1", "needs --path"},
        Case{"progress --step 1 --path /x", "for checkpoint notices"},
        Case{"progress --step 1 --bogus", "unknown or incomplete option"},
        Case{"progress --step 1 extra", "unexpected argument"},
        Case{"progress --step 1 --state checkpointing --expect-seconds 0", "[1, 86400]"},
        Case{"progress --step 1 --state idle --expect-seconds 86401", "[1, 86400]"},
        Case{"progress --step 1 --state idle --expect-seconds 5m", "[1, 86400]"},
        Case{"progress --step 1 --expect-seconds 30", "is for pauses"},
        Case{"checkpoint --step 1 --path /x --expect-seconds 30", "is for pauses"}}) {
    Outcome r = run(env, k.args);
    EXPECT_EQ(r.rc, 2) << k.args << ": " << r.out;
    EXPECT_NE(r.out.find(k.want), std::string::npos) << k.args << ": " << r.out;
  }
  Outcome r = run("C4_AGENT_SOCKET=" + path, "progress --step 1");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("no rank"), std::string::npos) << r.out;
  r = run("C4_RANK=0 C4_AGENT_SOCKET=" + path, "progress --step 1");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("C4_JOB"), std::string::npos) << r.out;
  EXPECT_FALSE(next().has_value()) << "a refused notice was sent";
}

TEST_F(NotifyTest, NoNodePluginIsExitThreeNotAnError) {
  Outcome r = run(kIdentity, "progress --step 1");
  EXPECT_EQ(r.rc, 3) << r.out;
  EXPECT_NE(r.out.find("C4_AGENT_SOCKET is unset"), std::string::npos) << r.out;
  r = run(kIdentity + "C4_AGENT_SOCKET=@c4-notify-test-nobody-listens", "progress --step 1");
  EXPECT_EQ(r.rc, 3) << r.out;
  EXPECT_NE(r.out.find("not delivered"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace c4
