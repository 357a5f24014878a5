#include "c4/node_plugin/installer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <vector>

#include "c4/common/unix_socket.h"

namespace c4::node {
namespace {

Result<std::vector<char>> readAll(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return std::unexpected(errnoError("open " + path, errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return std::unexpected(errnoError("stat " + path, errno));
  if (!S_ISREG(st.st_mode)) {
    return makeError(ErrorCode::kInvalidArgument, path + " is not a regular file");
  }
  std::vector<char> data;
  data.reserve(static_cast<std::size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return std::unexpected(errnoError("read " + path, errno));
    }
    if (n == 0) break;
    data.insert(data.end(), buf, buf + n);
  }
  return data;
}

Status writeAll(int fd, const std::vector<char>& data, const std::string& path) {
  std::size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return std::unexpected(errnoError("write " + path, errno));
    }
    off += static_cast<std::size_t>(n);
  }
  return okStatus();
}

}  // namespace

Result<InstallOutcome> installPlugin(const std::string& source, const std::string& install_dir) {
  if (source.empty() || install_dir.empty()) {
    return makeError(ErrorCode::kInvalidArgument, "plugin install: empty source or directory");
  }
  C4_ASSIGN_OR_RETURN(auto bytes, readAll(source));
  if (bytes.empty()) return makeError(ErrorCode::kInvalidArgument, source + " is empty");
  std::error_code ec;
  std::filesystem::create_directories(install_dir, ec);
  if (ec) {
    return makeError(ErrorCode::kIo, "create directory " + install_dir + ": " + ec.message());
  }
  const std::string target =
      (std::filesystem::path(install_dir) / std::filesystem::path(source).filename()).string();
  if (auto existing = readAll(target); existing && *existing == bytes) {
    return InstallOutcome::kUnchanged;
  }
  std::string tmp = target + ".tmp.XXXXXX";
  UniqueFd fd(::mkostemp(tmp.data(), O_CLOEXEC));
  if (!fd.valid())
    return std::unexpected(errnoError("create temporary file in " + install_dir, errno));
  auto cleanup = [&] { ::unlink(tmp.c_str()); };
  if (auto s = writeAll(fd.get(), bytes, tmp); !s) {
    cleanup();
    return std::unexpected(s.error());
  }
  if (::fchmod(fd.get(), 0755) != 0 || ::fsync(fd.get()) != 0) {
    const int err = errno;
    cleanup();
    return std::unexpected(errnoError("chmod/fsync " + tmp, err));
  }
  fd.reset();
  if (::rename(tmp.c_str(), target.c_str()) != 0) {
    const int err = errno;
    cleanup();
    return std::unexpected(errnoError("rename " + tmp + " -> " + target, err));
  }
  UniqueFd dir(::open(install_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid() || ::fsync(dir.get()) != 0) {
    return std::unexpected(errnoError("fsync directory " + install_dir, errno));
  }
  return InstallOutcome::kInstalled;
}

}  // namespace c4::node
