#include "c4/node_plugin/installer.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "test_util.h"

namespace c4::node {
namespace {

using testing::readFile;
using testing::TempDir;
using testing::writeFile;

TEST(InstallerTest, InstallsThenSkipsIdentical) {
  TempDir dir;
  writeFile(dir / "src/libnccl-net-c4.so", "ELF-v1");
  auto r = installPlugin(dir / "src/libnccl-net-c4.so", dir / "host/lib");
  ASSERT_TRUE(r.has_value()) << r.error().toString();
  EXPECT_EQ(*r, InstallOutcome::kInstalled);
  EXPECT_EQ(readFile(dir / "host/lib/libnccl-net-c4.so"), "ELF-v1");
  struct stat st {};
  ASSERT_EQ(::stat((dir / "host/lib/libnccl-net-c4.so").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0755u);
  const auto ino = st.st_ino;
  r = installPlugin(dir / "src/libnccl-net-c4.so", dir / "host/lib");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(*r, InstallOutcome::kUnchanged);
  ASSERT_EQ(::stat((dir / "host/lib/libnccl-net-c4.so").c_str(), &st), 0);
  EXPECT_EQ(st.st_ino, ino);  // not rewritten
  writeFile(dir / "src/libnccl-net-c4.so", "ELF-v2");
  r = installPlugin(dir / "src/libnccl-net-c4.so", dir / "host/lib");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(*r, InstallOutcome::kInstalled);
  EXPECT_EQ(readFile(dir / "host/lib/libnccl-net-c4.so"), "ELF-v2");
  // No temporary file is left behind.
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir / "host/lib")) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1);
}

TEST(InstallerTest, ReaderNeverSeesAPartialFile) {
  TempDir dir;
  const std::string a(4 << 20, 'a');
  const std::string b(4 << 20, 'b');
  writeFile(dir / "a/libnccl-net-c4.so", a);
  writeFile(dir / "b/libnccl-net-c4.so", b);
  ASSERT_TRUE(installPlugin(dir / "a/libnccl-net-c4.so", dir / "lib").has_value());
  std::atomic<bool> done{false};
  std::atomic<int> bad{0};
  std::atomic<int> reads{0};
  std::thread reader([&] {
    while (!done.load()) {
      std::string got = readFile(dir / "lib/libnccl-net-c4.so");
      if (got != a && got != b) bad.fetch_add(1);
      reads.fetch_add(1);
    }
  });
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(installPlugin(dir / (i % 2 == 0 ? "b" : "a") + "/libnccl-net-c4.so", dir / "lib")
                    .has_value());
  }
  done.store(true);
  reader.join();
  EXPECT_GT(reads.load(), 0);
  EXPECT_EQ(bad.load(), 0);
}

TEST(InstallerTest, BadSourcesAreErrors) {
  TempDir dir;
  auto missing = installPlugin(dir / "nope.so", dir / "lib");
  ASSERT_FALSE(missing.has_value());
  EXPECT_NE(missing.error().message.find("nope.so"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir / "lib/nope.so"));
  writeFile(dir / "empty.so", "");
  EXPECT_FALSE(installPlugin(dir / "empty.so", dir / "lib").has_value());
  std::filesystem::create_directories(dir / "adir.so");
  EXPECT_FALSE(installPlugin(dir / "adir.so", dir / "lib").has_value());
  // An install directory that cannot be created.
  writeFile(dir / "file", "x");
  writeFile(dir / "ok.so", "x");
  EXPECT_FALSE(installPlugin(dir / "ok.so", dir / "file/lib").has_value());
  EXPECT_FALSE(installPlugin("", dir / "lib").has_value());
}

}  // namespace
}  // namespace c4::node
