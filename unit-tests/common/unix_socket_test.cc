#include "c4/common/unix_socket.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "c4/common/report.h"

namespace c4 {
namespace {

using namespace std::chrono_literals;

std::string tempSocketPath(const char* tag) {
  return (std::filesystem::temp_directory_path() /
          ("c4-test-" + std::string(tag) + "-" + std::to_string(::getpid()) + ".sock"))
      .string();
}

TEST(UnixSocketTest, DeliversDatagramWithCredentials) {
  const std::string path = tempSocketPath("deliver");
  auto server = UnixDatagramServer::bind(path);
  ASSERT_TRUE(server.has_value()) << server.error().toString();
  auto sender = UnixDatagramSender::create(path);
  ASSERT_TRUE(sender.has_value());
  const std::vector<std::uint8_t> msg{1, 2, 3, 4};
  EXPECT_EQ(sender->send(msg), SendOutcome::kSent);
  auto got = server->receive(2s);
  ASSERT_TRUE(got.has_value()) << got.error().toString();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->bytes, msg);
  EXPECT_FALSE((*got)->truncated);
  ASSERT_TRUE((*got)->credentials.has_value());
  EXPECT_EQ((*got)->credentials->pid, ::getpid());
  EXPECT_EQ((*got)->credentials->uid, ::getuid());
  EXPECT_EQ(sender->sent(), 1u);
  EXPECT_EQ(sender->dropped(), 0u);
}

TEST(UnixSocketTest, MissingReceiverDropsWithoutBlocking) {
  auto sender = UnixDatagramSender::create(tempSocketPath("absent"));
  ASSERT_TRUE(sender.has_value());
  const std::vector<std::uint8_t> msg(100, 7);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(sender->send(msg), SendOutcome::kDropped);
  EXPECT_EQ(sender->dropped(), 1000u);
  EXPECT_EQ(sender->lastError(), ENOENT);
}

TEST(UnixSocketTest, FullReceiverDropsWithoutBlocking) {
  const std::string path = tempSocketPath("full");
  auto server = UnixDatagramServer::bind(path);
  ASSERT_TRUE(server.has_value());
  auto sender = UnixDatagramSender::create(path);
  ASSERT_TRUE(sender.has_value());
  const std::vector<std::uint8_t> msg(60000, 1);
  // Nobody reads: the queue fills, then sends must be dropped, not block.
  int sent = 0;
  int dropped = 0;
  for (int i = 0; i < 2000; ++i) {
    if (sender->send(msg) == SendOutcome::kSent) {
      ++sent;
    } else {
      ++dropped;
    }
  }
  EXPECT_GT(sent, 0);
  EXPECT_GT(dropped, 0);
  EXPECT_EQ(sender->lastError(), EAGAIN);
}

// A sender about to exit can wait until its datagrams are read (the kernel counts them unread).
TEST(UnixSocketTest, AwaitReadWaitsForTheReceiverToReadEverything) {
  const std::string path = tempSocketPath("await");
  auto server = UnixDatagramServer::bind(path);
  ASSERT_TRUE(server.has_value());
  auto sender = UnixDatagramSender::create(path);
  ASSERT_TRUE(sender.has_value());
  EXPECT_TRUE(sender->awaitRead(std::chrono::milliseconds{0}));  // nothing sent
  const std::vector<std::uint8_t> msg(100, 3);
  ASSERT_EQ(sender->send(msg), SendOutcome::kSent);
  ASSERT_EQ(sender->send(msg), SendOutcome::kSent);
  EXPECT_FALSE(sender->awaitRead(std::chrono::milliseconds{20}));  // unread
  auto first = server->receive(std::chrono::seconds{1});
  ASSERT_TRUE(first.has_value() && first->has_value());
  EXPECT_FALSE(sender->awaitRead(std::chrono::milliseconds{20}));  // one still unread
  std::thread reader([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds{50});
    (void)server->receive(std::chrono::seconds{1});
  });
  EXPECT_TRUE(sender->awaitRead(std::chrono::seconds{5}));
  reader.join();
  // Nobody listening: a dropped datagram is not waited for.
  auto absent = UnixDatagramSender::create(tempSocketPath("await-absent"));
  ASSERT_TRUE(absent.has_value());
  EXPECT_EQ(absent->send(msg), SendOutcome::kDropped);
  EXPECT_TRUE(absent->awaitRead(std::chrono::milliseconds{0}));
}

TEST(UnixSocketTest, ReceiverRestartIsPickedUp) {
  const std::string path = tempSocketPath("restart");
  auto sender = UnixDatagramSender::create(path);
  ASSERT_TRUE(sender.has_value());
  {
    auto server = UnixDatagramServer::bind(path);
    ASSERT_TRUE(server.has_value());
    EXPECT_EQ(sender->send(std::vector<std::uint8_t>{1}), SendOutcome::kSent);
  }
  EXPECT_FALSE(std::filesystem::exists(path));  // the server removed its file
  EXPECT_EQ(sender->send(std::vector<std::uint8_t>{2}), SendOutcome::kDropped);
  auto server = UnixDatagramServer::bind(path);
  ASSERT_TRUE(server.has_value());
  EXPECT_EQ(sender->send(std::vector<std::uint8_t>{3}), SendOutcome::kSent);
  auto got = server->receive(1s);
  ASSERT_TRUE(got.has_value() && got->has_value());
  EXPECT_EQ((*got)->bytes, std::vector<std::uint8_t>{3});
}

TEST(UnixSocketTest, TimeoutReturnsEmpty) {
  auto server = UnixDatagramServer::bind("@c4-test-timeout-" + std::to_string(::getpid()));
  ASSERT_TRUE(server.has_value()) << server.error().toString();
  auto got = server->receive(10ms);
  ASSERT_TRUE(got.has_value());
  EXPECT_FALSE(got->has_value());
}

TEST(UnixSocketTest, OversizedDatagramIsMarkedTruncated) {
  const std::string path = "@c4-test-trunc-" + std::to_string(::getpid());
  auto server = UnixDatagramServer::bind(path, 0666, 16);
  ASSERT_TRUE(server.has_value());
  auto sender = UnixDatagramSender::create(path);
  ASSERT_TRUE(sender.has_value());
  EXPECT_EQ(sender->send(std::vector<std::uint8_t>(64, 9)), SendOutcome::kSent);
  auto got = server->receive(1s);
  ASSERT_TRUE(got.has_value() && got->has_value());
  EXPECT_TRUE((*got)->truncated);
  EXPECT_EQ((*got)->bytes.size(), 16u);
}

TEST(UnixSocketTest, RejectsBadPaths) {
  auto longPath = UnixDatagramSender::create("/tmp/" + std::string(200, 'x'));
  ASSERT_FALSE(longPath.has_value());
  EXPECT_EQ(longPath.error().code, ErrorCode::kInvalidArgument);
  EXPECT_FALSE(UnixDatagramServer::bind("").has_value());
  // A regular file at the path is not replaced.
  const std::string file = tempSocketPath("regular");
  {
    std::FILE* f = std::fopen(file.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fclose(f);
  }
  auto s = UnixDatagramServer::bind(file);
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().code, ErrorCode::kAlreadyExists);
  EXPECT_TRUE(std::filesystem::exists(file));
  std::filesystem::remove(file);
}

TEST(UnixSocketTest, CarriesAnEncodedReport) {
  const std::string path = "@c4-test-report-" + std::to_string(::getpid());
  auto server = UnixDatagramServer::bind(path);
  ASSERT_TRUE(server.has_value());
  auto sender = UnixDatagramSender::create(path);
  report::ProgressNotice n;
  n.id.rank = 0;
  n.time_unix_ns = 1;
  n.step = 10;
  auto bytes = report::encodeCbor(report::Message{n});
  ASSERT_TRUE(bytes.has_value());
  ASSERT_EQ(sender->send(*bytes), SendOutcome::kSent);
  auto got = server->receive(1s);
  ASSERT_TRUE(got.has_value() && got->has_value());
  auto decoded = report::decodeMessageCbor((*got)->bytes);
  ASSERT_TRUE(decoded.has_value()) << decoded.error().toString();
  EXPECT_EQ(std::get<report::ProgressNotice>(*decoded), n);
}

}  // namespace
}  // namespace c4
