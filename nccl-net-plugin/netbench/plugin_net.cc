#include <sched.h>

#include <array>
#include <cstring>
#include <vector>

#include "c4/common/clock.h"
#include "net.h"
#include "plugin_loader.h"

namespace c4::netbench {
namespace {

class PluginNet final : public Net {
 public:
  PluginNet(std::unique_ptr<LoadedPlugin> p, int rank, int worldSize)
      : plugin_(std::move(p)),
        rank_(rank),
        world_(worldSize),
        send_(static_cast<std::size_t>(worldSize), nullptr),
        recv_(static_cast<std::size_t>(worldSize), nullptr) {}

  ~PluginNet() override {
    for (void* c : send_) {
      if (c != nullptr) (void)plugin_->closeSend(c);
    }
    for (void* c : recv_) {
      if (c != nullptr) (void)plugin_->closeRecv(c);
    }
  }

  std::string describe() const override {
    return "plugin " + plugin_->name() + " (" + plugin_->path() + ", ncclNetPlugin_v" +
           std::to_string(plugin_->version()) + ")";
  }

  Status connectAll(Bootstrap& bs) override {
    using Handle = std::array<char, 128>;
    std::vector<Handle> mine(static_cast<std::size_t>(world_));
    std::vector<void*> listens(static_cast<std::size_t>(world_), nullptr);
    for (int p = 0; p < world_; ++p) {
      if (p == rank_) continue;
      C4_RETURN_IF_ERROR(plugin_->listen(0, mine[static_cast<std::size_t>(p)].data(),
                                         &listens[static_cast<std::size_t>(p)]));
    }
    std::string blob(reinterpret_cast<const char*>(mine.data()), mine.size() * sizeof(Handle));
    C4_ASSIGN_OR_RETURN(auto all, bs.allgather(blob));
    // NCCL passes the same handle buffer on every connect retry: keep them in place.
    std::vector<Handle> theirs(static_cast<std::size_t>(world_));
    for (int p = 0; p < world_; ++p) {
      if (p == rank_) continue;
      const std::string& b = all[static_cast<std::size_t>(p)];
      if (b.size() != mine.size() * sizeof(Handle)) {
        return makeError(ErrorCode::kInvalidArgument, "bootstrap: bad handle blob");
      }
      std::memcpy(theirs[static_cast<std::size_t>(p)].data(),
                  b.data() + static_cast<std::size_t>(rank_) * sizeof(Handle), sizeof(Handle));
    }
    Clock& clock = realClock();
    auto deadline = clock.monoNow() + std::chrono::seconds(60);
    for (;;) {
      bool all_done = true;
      for (int p = 0; p < world_; ++p) {
        if (p == rank_) continue;
        auto up = static_cast<std::size_t>(p);
        if (send_[up] == nullptr) {
          C4_RETURN_IF_ERROR(plugin_->connect(0, theirs[up].data(), &send_[up]));
        }
        if (recv_[up] == nullptr) C4_RETURN_IF_ERROR(plugin_->accept(listens[up], &recv_[up]));
        all_done = all_done && send_[up] != nullptr && recv_[up] != nullptr;
      }
      if (all_done) break;
      if (clock.monoNow() > deadline) {
        return makeError(ErrorCode::kDeadlineExceeded, "plugin connect/accept timed out");
      }
      ::sched_yield();
    }
    for (void* l : listens) {
      if (l != nullptr) C4_RETURN_IF_ERROR(plugin_->closeListen(l));  // as NCCL does
    }
    return {};
  }

  Result<void*> isend(int peer, void* data, std::size_t size, int tag) override {
    void* req = nullptr;
    C4_RETURN_IF_ERROR(
        plugin_->isend(send_[static_cast<std::size_t>(peer)], data, size, tag, nullptr, &req));
    return req;
  }
  Result<void*> irecv(int peer, void* data, std::size_t size, int tag) override {
    void* req = nullptr;
    C4_RETURN_IF_ERROR(
        plugin_->irecv(recv_[static_cast<std::size_t>(peer)], data, size, tag, nullptr, &req));
    return req;
  }
  Result<bool> test(void* req) override {
    bool done = false;
    C4_RETURN_IF_ERROR(plugin_->test(req, &done, nullptr));
    return done;
  }
  void idle() override { ::sched_yield(); }
  std::size_t maxMessageBytes() const override { return plugin_->maxP2pBytes(); }

 private:
  std::unique_ptr<LoadedPlugin> plugin_;
  int rank_;
  int world_;
  std::vector<void*> send_;
  std::vector<void*> recv_;
};

}  // namespace

std::unique_ptr<Net> makePluginNet(const std::string& pluginName, int rank, int worldSize,
                                   std::string* error) {
  auto p = LoadedPlugin::load(pluginName);
  if (!p) {
    *error = p.error().toString();
    return nullptr;
  }
  return std::make_unique<PluginNet>(std::move(*p), rank, worldSize);
}

}  // namespace c4::netbench
