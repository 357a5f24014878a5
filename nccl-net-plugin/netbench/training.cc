#include "training.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "c4/common/clock.h"
#include "c4/common/hash.h"
#include "c4/common/report.h"
#include "c4/common/unix_socket.h"
#include "c4/plugin/config.h"

namespace c4::netbench {
namespace {

namespace fs = std::filesystem;
constexpr std::uint32_t kMagic = 0x4b433443u;  // "C4CK"

struct CkptHeader {
  std::uint32_t magic;
  std::uint32_t version;
  std::int64_t step;
  std::uint64_t words;
  std::uint64_t checksum;
};

std::string ckptName(int rank, int step) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "ckpt-%08d.rank-%d.bin", step, rank);
  return buf;
}

Status writeFully(int fd, const void* p, std::size_t n) {
  const auto* b = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::write(fd, b, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return std::unexpected(errnoError("checkpoint write", errno));
    }
    b += w;
    n -= static_cast<std::size_t>(w);
  }
  return {};
}

std::uint32_t gradient(std::uint32_t x, int rank, int step) {
  std::uint32_t v = (x ^ (static_cast<std::uint32_t>(rank + 1) * 0x9E3779B9u)) *
                    (static_cast<std::uint32_t>(step) * 2u + 1u);
  return v + static_cast<std::uint32_t>(rank);
}

// Re-reads TrainingOptions::slowFile when its modification time or size changes.
class SlowControl {
 public:
  SlowControl(std::string path, std::string node)
      : path_(std::move(path)), node_(std::move(node)) {}

  double factor() {
    if (path_.empty()) return 1.0;
    struct stat st {};
    if (::stat(path_.c_str(), &st) != 0) {
      seen_ = false;
      factor_ = 1.0;
      return factor_;
    }
    const std::int64_t mtime =
        static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    if (seen_ && mtime == mtime_ && st.st_size == size_) return factor_;
    std::ifstream in(path_);
    std::stringstream content;
    content << in.rdbuf();
    auto f = parseSlowFile(content.str(), node_);
    if (!f) {
      std::fprintf(stderr, "c4-netbench: slow file %s: %s (factor stays %.2f)\n", path_.c_str(),
                   f.error().message.c_str(), factor_);
    } else if (*f != factor_) {
      std::fprintf(stderr, "c4-netbench: node %s: compute factor %.2f\n", node_.c_str(), *f);
      factor_ = *f;
    }
    seen_ = true;
    mtime_ = mtime;
    size_ = st.st_size;
    return factor_;
  }

 private:
  std::string path_, node_;
  bool seen_ = false;
  std::int64_t mtime_ = 0;
  off_t size_ = 0;
  double factor_ = 1.0;
};

}  // namespace

Result<double> parseSlowFile(const std::string& content, const std::string& node) {
  std::stringstream lines(content);
  std::string line;
  double factor = 1.0;
  int n = 0;
  while (std::getline(lines, line)) {
    ++n;
    std::stringstream fields(line);
    std::string name, value, extra;
    if (!(fields >> name)) continue;  // blank line
    if (!(fields >> value) || (fields >> extra)) {
      return makeError(ErrorCode::kInvalidArgument,
                       "line " + std::to_string(n) + ": want \"<node> <factor>\"");
    }
    char* end = nullptr;
    double f = std::strtod(value.c_str(), &end);
    if (end == value.c_str() || *end != '\0' || !(f >= 1.0) || f > 1000.0) {
      return makeError(ErrorCode::kInvalidArgument,
                       "line " + std::to_string(n) + ": factor '" + value + "' not in [1, 1000]");
    }
    if (name == node) factor = f;
  }
  return factor;
}

Status writeCheckpoint(const std::string& dir, int rank, int step,
                       const std::vector<std::uint32_t>& state) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  std::string final = (fs::path(dir) / ckptName(rank, step)).string();
  std::string tmp = final + ".tmp-" + std::to_string(::getpid());
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd.valid()) return std::unexpected(errnoError("checkpoint open " + tmp, errno));
  CkptHeader h{kMagic, 1, step, state.size(), fnv1a64(state.data(), state.size() * 4)};
  C4_RETURN_IF_ERROR(writeFully(fd.get(), &h, sizeof(h)));
  C4_RETURN_IF_ERROR(writeFully(fd.get(), state.data(), state.size() * 4));
  if (::fsync(fd.get()) != 0) return std::unexpected(errnoError("checkpoint fsync", errno));
  fd.reset();
  if (::rename(tmp.c_str(), final.c_str()) != 0) {
    return std::unexpected(errnoError("checkpoint rename", errno));
  }
  UniqueFd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dfd.valid()) ::fsync(dfd.get());
  // Keep the two newest checkpoints of this rank.
  auto steps = listCheckpoints(dir, rank, state.size());
  for (std::size_t i = 0; i + 2 < steps.size(); ++i) {
    fs::remove(fs::path(dir) / ckptName(rank, steps[i]), ec);
  }
  return {};
}

Result<std::vector<std::uint32_t>> readCheckpoint(const std::string& dir, int rank, int step,
                                                  std::size_t words) {
  std::string path = (fs::path(dir) / ckptName(rank, step)).string();
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return std::unexpected(errnoError("checkpoint open " + path, errno));
  CkptHeader h{};
  std::vector<std::uint32_t> state(words);
  if (::read(fd.get(), &h, sizeof(h)) != sizeof(h) || h.magic != kMagic || h.version != 1 ||
      h.step != step || h.words != words) {
    return makeError(ErrorCode::kInvalidArgument, "checkpoint " + path + ": bad header");
  }
  std::size_t want = words * 4;
  std::size_t got = 0;
  while (got < want) {
    ssize_t n = ::read(fd.get(), reinterpret_cast<char*>(state.data()) + got, want - got);
    if (n <= 0) return makeError(ErrorCode::kInvalidArgument, "checkpoint " + path + ": short");
    got += static_cast<std::size_t>(n);
  }
  if (fnv1a64(state.data(), want) != h.checksum) {
    return makeError(ErrorCode::kInvalidArgument, "checkpoint " + path + ": checksum mismatch");
  }
  return state;
}

std::vector<int> listCheckpoints(const std::string& dir, int rank, std::size_t words) {
  std::vector<int> steps;
  std::error_code ec;
  std::string suffix = ".rank-" + std::to_string(rank) + ".bin";
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::string n = e.path().filename().string();
    if (n.rfind("ckpt-", 0) != 0 || n.size() <= suffix.size() ||
        n.compare(n.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    int step = std::atoi(n.substr(5, 8).c_str());
    if (readCheckpoint(dir, rank, step, words)) steps.push_back(step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

Result<TrainingResult> runTraining(Net& net, Bootstrap& bs, const TrainingOptions& o,
                                   const CollectiveOptions& co) {
  int rank = bs.rank();
  int world = bs.worldSize();
  std::size_t words = std::max<std::size_t>(1, o.state_bytes / 4);
  auto cfg = plugin::loadConfigFromEnvironment();
  report::RankIdentity id;
  id.ns = cfg.ns;
  id.job = cfg.job;
  id.pod = cfg.pod;
  id.node = cfg.node;
  id.rank = rank;
  id.world_size = world;
  id.restart_attempt = cfg.restart_attempt;
  id.pid = static_cast<std::uint32_t>(::getpid());
  std::optional<UnixDatagramSender> agent;
  if (!cfg.agent_socket.empty()) {
    auto s = UnixDatagramSender::create(cfg.agent_socket);
    if (s) agent.emplace(std::move(*s));
  }
  Clock& clock = realClock();
  auto notify = [&](const report::Message& m) {
    if (!agent) return;
    auto bytes = report::encodeCbor(m);
    if (bytes) agent->send(*bytes);
  };

  // Resume from the newest step that every rank has a valid checkpoint for.
  TrainingResult result;
  std::vector<std::uint32_t> state(words);
  for (std::size_t i = 0; i < words; ++i) state[i] = static_cast<std::uint32_t>(i);
  bool checkpointing = !o.checkpoint_dir.empty() && o.checkpoint_every > 0;
  std::string mine;
  if (checkpointing) {
    for (int s : listCheckpoints(o.checkpoint_dir, rank, words)) mine += std::to_string(s) + ",";
  }
  C4_ASSIGN_OR_RETURN(auto lists, bs.allgather(mine));
  std::set<int> common;
  for (std::size_t r = 0; r < lists.size(); ++r) {
    std::set<int> steps;
    std::stringstream ss(lists[r]);
    std::string item;
    while (std::getline(ss, item, ',')) {
      if (!item.empty()) steps.insert(std::atoi(item.c_str()));
    }
    if (r == 0) {
      common = steps;
    } else {
      std::set<int> both;
      for (int s : steps) {
        if (common.count(s)) both.insert(s);
      }
      common = both;
    }
  }
  if (!common.empty() && *common.rbegin() <= o.steps) {
    result.start_step = *common.rbegin();
    C4_ASSIGN_OR_RETURN(state, readCheckpoint(o.checkpoint_dir, rank, result.start_step, words));
  }
  UniqueFd stepLog;
  if (!o.step_log_dir.empty()) {
    std::error_code ec;
    fs::create_directories(o.step_log_dir, ec);
    std::string path = (fs::path(o.step_log_dir) / ("rank-" + std::to_string(rank) + ".steps"));
    stepLog = UniqueFd(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
    if (!stepLog.valid()) {
      return makeError(ErrorCode::kIo, "step log " + path + ": " + std::strerror(errno));
    }
  }
  std::vector<std::uint32_t> grad(words), scratch;
  SlowControl slow(o.slow_file, cfg.node);
  auto progress = [&](int step, report::ProgressState what, std::uint32_t expectSeconds = 0) {
    report::ProgressNotice p;
    p.id = id;
    p.time_unix_ns = toUnixNanos(clock.wallNow());
    p.step = step;
    p.state = what;
    p.expected_seconds = expectSeconds;
    notify(p);
  };
  for (int step = result.start_step + 1; step <= o.steps; ++step) {
    if (o.step_compute_ms > 0) {
      const double ms = o.step_compute_ms * slow.factor();
      clock.sleepFor(std::chrono::microseconds(static_cast<std::int64_t>(ms * 1000.0)));
    }
    for (std::size_t i = 0; i < words; ++i) grad[i] = gradient(state[i], rank, step);
    C4_RETURN_IF_ERROR(ringAllreduce(net, rank, world, grad.data(), words, scratch, co));
    for (std::size_t i = 0; i < words; ++i) state[i] = state[i] * 33u + grad[i];
    progress(step, report::ProgressState::kTraining);
    if (stepLog.valid()) {
      char line[64];
      int n = std::snprintf(line, sizeof(line), "%.3f %d\n",
                            static_cast<double>(toUnixNanos(clock.wallNow())) / 1e9, step);
      // One O_APPEND write per line: a reader never sees a torn line.
      if (::write(stepLog.get(), line, static_cast<std::size_t>(n)) != n) {
        return makeError(ErrorCode::kIo, "step log: " + std::string(std::strerror(errno)));
      }
    }
    if (checkpointing && step % o.checkpoint_every == 0) {
      C4_RETURN_IF_ERROR(writeCheckpoint(o.checkpoint_dir, rank, step, state));
      report::CheckpointNotice c;
      c.id = id;
      c.time_unix_ns = toUnixNanos(clock.wallNow());
      c.step = step;
      c.path = (fs::path(o.checkpoint_dir) / ckptName(rank, step)).string();
      notify(c);
    }
    if (step == o.pause_at_step && o.pause_ms > 0 && (o.pause_rank < 0 || o.pause_rank == rank)) {
      // Announced with its length (whole seconds, rounded up), as a trainer that knows how long
      // its checkpoint takes would.
      if (!o.pause_silent) {
        progress(step, report::ProgressState::kCheckpointing,
                 static_cast<std::uint32_t>((o.pause_ms + 999) / 1000));
      }
      std::fprintf(stderr, "c4-netbench rank %d: pause of %d ms after step %d (%s)\n", rank,
                   o.pause_ms, step, o.pause_silent ? "not announced" : "announced");
      clock.sleepFor(std::chrono::milliseconds(o.pause_ms));
      if (!o.pause_silent) progress(step, report::ProgressState::kTraining);
    }
  }
  report::ProgressNotice done;
  done.id = id;
  done.time_unix_ns = toUnixNanos(clock.wallNow());
  done.step = o.steps;
  done.state = report::ProgressState::kFinished;
  notify(done);
  result.final_step = o.steps;
  result.checksum = fnv1a64(state.data(), words * 4);
  return result;
}

}  // namespace c4::netbench
