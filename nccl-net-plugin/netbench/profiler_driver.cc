#include "profiler_driver.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>

#include "c4/common/hash.h"
#include "plugin_loader.h"

namespace c4::netbench {
namespace {

// NCCL's logger as the plugin sees it: warnings reach stderr, the rest is dropped.
void logToStderr(int level, unsigned long /*flags*/, const char* /*file*/, int /*line*/,
                 const char* fmt, ...) {
  if (level > 2) return;  // NCCL_LOG_WARN = 2
  std::va_list ap;
  va_start(ap, fmt);
  std::fputs("c4-netbench: profiler plugin: ", stderr);
  std::vfprintf(stderr, fmt, ap);
  std::fputc('\n', stderr);
  va_end(ap);
}

class ProfiledNet final : public Net {
 public:
  ProfiledNet(std::unique_ptr<Net> inner, std::unique_ptr<ProfilerDriver> driver)
      : inner_(std::move(inner)), driver_(std::move(driver)) {}

  std::string describe() const override {
    return inner_->describe() + ", timed by the profiler plugin " + driver_->path();
  }
  Status connectAll(Bootstrap& bs) override { return inner_->connectAll(bs); }
  Result<void*> isend(int peer, void* data, std::size_t size, int tag) override {
    return track(inner_->isend(peer, data, size, tag), peer, true, size);
  }
  Result<void*> irecv(int peer, void* data, std::size_t size, int tag) override {
    return track(inner_->irecv(peer, data, size, tag), peer, false, size);
  }
  Result<bool> test(void* request) override {
    auto* r = static_cast<Request*>(request);
    auto done = inner_->test(r->inner);
    if (!done || *done) {
      // Complete, or failed (the collective gives up on every request then).
      driver_->opStop(r->op);
      delete r;
    }
    return done;
  }
  void idle() override { inner_->idle(); }
  std::size_t maxMessageBytes() const override { return inner_->maxMessageBytes(); }
  void collectiveStart(const char* func, std::size_t count) override {
    driver_->collStart(func, count);
  }
  void collectiveEnd() override { driver_->collStop(); }

 private:
  struct Request {
    void* inner;
    ProfilerDriver::Op op;
  };
  Result<void*> track(Result<void*> posted, int peer, bool send, std::size_t size) {
    if (!posted || *posted == nullptr) return posted;
    return new Request{*posted, driver_->opStart(peer, send, size)};
  }

  std::unique_ptr<Net> inner_;
  std::unique_ptr<ProfilerDriver> driver_;
};

}  // namespace

Result<std::unique_ptr<ProfilerDriver>> ProfilerDriver::load(const std::string& name, int rank,
                                                             int worldSize) {
  if (name.empty()) return makeError(ErrorCode::kInvalidArgument, "profiler plugin: empty name");
  std::unique_ptr<ProfilerDriver> d(new ProfilerDriver());
  d->rank_ = rank;
  C4_ASSIGN_OR_RETURN(auto opened, openNcclPlugin(name, "profiler"));
  d->lib_ = opened.handle;
  d->path_ = opened.path;
  d->table_ = static_cast<const C4NcclProfiler_v6_t*>(::dlsym(d->lib_, "ncclProfiler_v6"));
  if (d->table_ == nullptr || d->table_->init == nullptr || d->table_->startEvent == nullptr ||
      d->table_->stopEvent == nullptr || d->table_->recordEventState == nullptr ||
      d->table_->finalize == nullptr) {
    ::dlclose(d->lib_);
    d->lib_ = nullptr;
    return makeError(ErrorCode::kNotFound,
                     "profiler plugin " + d->path_ + " has no complete ncclProfiler_v6 table");
  }
  // One communicator over the whole job: every rank derives the same id, as ranks of one NCCL
  // communicator share its commHash.
  const std::string comm = "c4-netbench/" + std::to_string(worldSize);
  const std::uint64_t commId = fnv1a64(comm.data(), comm.size());
  C4NcclProfResult r = d->table_->init(&d->context_, commId, &d->mask_, "c4-netbench", worldSize,
                                       worldSize, rank, &logToStderr);
  if (r != C4_NCCL_PROF_SUCCESS) {
    ::dlclose(d->lib_);
    d->lib_ = nullptr;
    return makeError(ErrorCode::kUnavailable, "profiler plugin " + d->path_ +
                                                  ": init returned ncclResult " +
                                                  std::to_string(static_cast<int>(r)));
  }
  return d;
}

ProfilerDriver::~ProfilerDriver() {
  if (lib_ == nullptr) return;
  collStop();
  table_->finalize(context_);
  ::dlclose(lib_);
}

void ProfilerDriver::collStart(const char* func, std::size_t count) {
  collStop();  // a collective that did not end (an error path) ends before the next one starts
  if (!wants(C4_NCCL_PROFILE_COLL)) return;
  C4NcclProfilerEventDescr_v6_t d{};
  d.type = C4_NCCL_PROFILE_COLL;
  d.rank = rank_;
  d.coll.seqNumber = seq_++;
  d.coll.func = func;
  d.coll.count = count;
  d.coll.root = -1;
  d.coll.datatype = "ncclUint32";
  d.coll.nChannels = 1;
  d.coll.algo = "Ring";
  d.coll.proto = "Simple";
  if (table_->startEvent(context_, &coll_, &d) != C4_NCCL_PROF_SUCCESS) coll_ = nullptr;
}

void ProfilerDriver::collStop() {
  if (coll_ == nullptr) return;
  table_->stopEvent(coll_);
  coll_ = nullptr;
}

ProfilerDriver::Op ProfilerDriver::opStart(int peer, bool send, std::size_t bytes) {
  Op o;
  o.send = send;
  o.bytes = bytes;
  if (wants(C4_NCCL_PROFILE_PROXY_OP)) {
    C4NcclProfilerEventDescr_v6_t d{};
    d.type = C4_NCCL_PROFILE_PROXY_OP;
    d.parentObj = coll_;
    d.rank = rank_;
    d.proxyOp.pid = ::getpid();
    d.proxyOp.channelId = 0;
    d.proxyOp.peer = peer;
    d.proxyOp.nSteps = 1;
    d.proxyOp.chunkSize = static_cast<int>(std::min<std::size_t>(bytes, 1u << 30));
    d.proxyOp.isSend = send ? 1 : 0;
    if (table_->startEvent(context_, &o.op, &d) != C4_NCCL_PROF_SUCCESS) o.op = nullptr;
  }
  if (wants(C4_NCCL_PROFILE_PROXY_STEP)) {
    C4NcclProfilerEventDescr_v6_t d{};
    d.type = C4_NCCL_PROFILE_PROXY_STEP;
    d.parentObj = o.op;
    d.rank = rank_;
    d.proxyStep.step = 0;
    if (table_->startEvent(context_, &o.step, &d) != C4_NCCL_PROF_SUCCESS) o.step = nullptr;
    if (o.step != nullptr) {
      C4NcclProfilerEventStateArgs_v6_t args{};
      args.proxyStep.transSize = bytes;
      // A send is on the wire once posted (SendWait, sized); a receive waits for the network.
      table_->recordEventState(
          o.step, send ? C4_NCCL_PROF_PROXY_STEP_SEND_WAIT : C4_NCCL_PROF_PROXY_STEP_RECV_WAIT,
          &args);
    }
  }
  return o;
}

void ProfilerDriver::opStop(const Op& o) {
  if (o.step != nullptr) {
    if (!o.send) {
      C4NcclProfilerEventStateArgs_v6_t args{};
      args.proxyStep.transSize = o.bytes;
      table_->recordEventState(o.step, C4_NCCL_PROF_PROXY_STEP_RECV_FLUSH_WAIT, &args);
    }
    table_->stopEvent(o.step);
  }
  if (o.op != nullptr) table_->stopEvent(o.op);
}

std::unique_ptr<Net> makeProfiledNet(std::unique_ptr<Net> inner,
                                     std::unique_ptr<ProfilerDriver> driver) {
  return std::make_unique<ProfiledNet>(std::move(inner), std::move(driver));
}

}  // namespace c4::netbench
