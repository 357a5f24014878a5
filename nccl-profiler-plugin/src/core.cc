// The event path: what each NCCL profiler event does to a communicator's aggregates.
// Every function here is noexcept, allocation-free and lock-free (README "Threads").
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <string_view>
#include <tuple>

#include "context.h"

namespace c4::profiler {
namespace {

std::atomic<pid_t> gPid{0};
std::atomic<std::uint64_t> gOrphanSteps{0};
std::atomic<std::uint64_t> gForeignOps{0};

constexpr std::uint64_t kAddrMask = (std::uint64_t{1} << 48) - 1;

std::size_t roundUpPow2(std::size_t v) {
  return std::bit_ceil(std::max<std::size_t>(v, 2));
}

std::uint64_t mix(std::uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return k;
}

// Finds the entry of `key`, or claims an empty one; nullptr when the table is full.
template <typename E>
E* findOrClaim(E* table, std::size_t cap, std::uint64_t key) noexcept {
  std::size_t i = mix(key) & (cap - 1);
  for (std::size_t n = 0; n < cap; ++n, i = (i + 1) & (cap - 1)) {
    std::uint64_t k = table[i].key.load(std::memory_order_acquire);
    if (k == key) return &table[i];
    if (k == 0) {
      if (table[i].key.compare_exchange_strong(k, key, std::memory_order_acq_rel)) {
        return &table[i];
      }
      if (k == key) return &table[i];
    }
  }
  return nullptr;
}

void* encodeTask(TaskSlot* s, std::uint64_t gen) {
  return reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(s) | gen << 48);
}
TaskSlot* decodeTask(void* h, std::uint64_t* gen) {
  auto v = reinterpret_cast<std::uintptr_t>(h);
  *gen = v >> 48;
  return reinterpret_cast<TaskSlot*>(v & kAddrMask);
}
bool isTaskHandle(void* h) {
  return (reinterpret_cast<std::uintptr_t>(h) >> 48) != 0;
}

TaskSlot* allocTask(Context& c, std::int64_t now, std::uint64_t* genOut) noexcept {
  const std::size_t mask = kTaskPool - 1;
  std::uint64_t start = c.task_cursor.fetch_add(1, std::memory_order_relaxed);
  for (std::size_t n = 0; n < kTaskPool; ++n) {
    TaskSlot& s = c.tasks[(start + n) & mask];
    std::uint64_t w = s.word.load(std::memory_order_acquire);
    std::uint64_t st = TaskSlot::stateOf(w);
    bool reusable = st == TaskSlot::kFree ||
                    (st == TaskSlot::kDone &&
                     now - s.done_ns.load(std::memory_order_relaxed) > kTaskReuseGraceNs);
    if (!reusable) continue;
    std::uint64_t gen = TaskSlot::genOf(w) % 0xffff + 1;  // 1..65535, never 0
    if (s.word.compare_exchange_strong(w, TaskSlot::pack(TaskSlot::kClaim, gen, 1),
                                       std::memory_order_acq_rel)) {
      *genOut = gen;
      return &s;
    }
  }
  return nullptr;
}

void finishTask(TaskSlot& s, std::int64_t now) noexcept {
  s.done_ns.store(now, std::memory_order_relaxed);
  (s.is_coll ? s.ctx->coll_finished : s.ctx->p2p_finished).fetch_add(1, std::memory_order_relaxed);
}

// Takes a reference for a ProxyOp; reopens a task that looked finished. False: stale handle.
bool acquireTask(TaskSlot& s, std::uint64_t gen) noexcept {
  std::uint64_t w = s.word.load(std::memory_order_acquire);
  for (;;) {
    if (TaskSlot::genOf(w) != gen) return false;
    std::uint64_t st = TaskSlot::stateOf(w);
    std::uint64_t nw;
    if (st == TaskSlot::kActive) {
      nw = w + 1;
    } else if (st == TaskSlot::kDone) {
      nw = TaskSlot::pack(TaskSlot::kActive, gen, 1);
    } else {
      return false;
    }
    if (s.word.compare_exchange_weak(w, nw, std::memory_order_acq_rel)) {
      if (st == TaskSlot::kDone) {
        s.done_ns.store(kNever, std::memory_order_relaxed);
        (s.is_coll ? s.ctx->coll_finished : s.ctx->p2p_finished)
            .fetch_sub(1, std::memory_order_relaxed);
      }
      return true;
    }
  }
}

void releaseTask(TaskSlot& s, std::uint64_t gen) noexcept {
  std::uint64_t w = s.word.load(std::memory_order_acquire);
  for (;;) {
    if (TaskSlot::genOf(w) != gen || TaskSlot::stateOf(w) != TaskSlot::kActive ||
        TaskSlot::refsOf(w) == 0) {
      return;
    }
    std::uint64_t refs = TaskSlot::refsOf(w) - 1;
    std::uint64_t nw = refs == 0 ? TaskSlot::pack(TaskSlot::kDone, gen, 0) : w - 1;
    if (s.word.compare_exchange_weak(w, nw, std::memory_order_acq_rel)) {
      if (refs == 0) finishTask(s, s.ctx->nowNs());
      return;
    }
  }
}

OpSlot* allocOp(Context& c) noexcept {
  const std::size_t mask = kProxyOpPool - 1;
  std::uint64_t start = c.op_cursor.fetch_add(1, std::memory_order_relaxed);
  for (std::size_t n = 0; n < kProxyOpPool; ++n) {
    OpSlot& o = c.ops[(start + n) & mask];
    std::uint32_t expected = OpSlot::kFree;
    if (o.state.load(std::memory_order_relaxed) == OpSlot::kFree &&
        o.state.compare_exchange_strong(expected, OpSlot::kClaim, std::memory_order_acquire)) {
      return &o;
    }
  }
  return nullptr;
}

StepSlot::Phase phaseOf(int state) {
  switch (state) {
    case 8:   // SendGPUWait: waiting for the GPU to produce the data
    case 11:  // RecvFlushWait: data received, flushing to the GPU
    case 12:  // RecvGPUWait: waiting for the GPU to consume it
      return StepSlot::kGpu;
    case 20:  // SendPeerWait_v4: data ready, no credit from the receiver yet
    case 10:  // RecvWait: irecv posted, data not in yet
      return StepSlot::kNet;
    case 9:  // SendWait: isend posted, network completion pending
      return StepSlot::kTransfer;
    default:
      return StepSlot::kNone;
  }
}

void stopStep(StepSlot& s) noexcept {
  OpSlot& op = *s.op;
  Context& c = *op.ctx;
  if (s.phase != StepSlot::kNone) s.phase_ticks[s.phase] += c.stepTicks() - s.phase_start;
  std::uint64_t bytes = s.trans_size;
  op.step_bytes += bytes;
  LinkEntry* link = op.link.load(std::memory_order_relaxed);
  if (link != nullptr) {
    bump(link->bytes, bytes);
    bump(link->steps, 1);
    auto us = [&](int p) {
      return static_cast<std::uint64_t>(std::max<std::int64_t>(0, c.ticksToNs(s.phase_ticks[p]))) /
             1000;
    };
    if (s.seen & (1u << StepSlot::kNet)) link->net_wait.record(us(StepSlot::kNet));
    if (s.seen & (1u << StepSlot::kTransfer)) link->transfer.record(us(StepSlot::kTransfer));
    if (s.seen & (1u << StepSlot::kGpu)) link->gpu_wait.record(us(StepSlot::kGpu));
    ChannelEntry& ch = *op.chan;
    bump(ch.bytes, bytes);
    bump(ch.steps, 1);
    bump(ch.net_wait_us, us(StepSlot::kNet));
    bump(ch.transfer_us, us(StepSlot::kTransfer));
    bump(ch.gpu_wait_us, us(StepSlot::kGpu));
  }
  s.busy = false;
}

void stopOp(OpSlot& op) noexcept {
  for (auto& s : op.steps) {
    if (s.busy) stopStep(s);  // NCCL stops every step first; this only guards the pool
  }
  LinkEntry* link = op.link.load(std::memory_order_relaxed);
  if (link != nullptr) {
    // Before NCCL 2.27 (v1..v3 native) the bytes came with the ProxyOp states only.
    std::uint64_t extra = op.op_bytes > op.step_bytes ? op.op_bytes - op.step_bytes : 0;
    bump(link->bytes, extra);
    bump(link->ops_done, 1);
    bump(op.chan->bytes, extra);
    bump(op.chan->ops_done, 1);
  }
  if (op.task != nullptr) releaseTask(*op.task, op.task_gen);
  op.task = nullptr;
  op.link.store(nullptr, std::memory_order_relaxed);
  op.state.store(OpSlot::kFree, std::memory_order_release);
}

}  // namespace

// ---- Context
// -------------------------------------------------------------------------------------

Context::Context(const CommInfo& i, Clock& c, std::uint32_t contextId)
    : clock(&c),
      info(i),
      id(contextId),
      tasks(new TaskSlot[kTaskPool]),
      ops(new OpSlot[kProxyOpPool]),
      // Peers are ranks of this communicator: 2 directions x nranks entries at most.
      link_cap(
          std::min(kMaxLinks,
                   roundUpPow2(info.nranks > 0 ? 4 * static_cast<std::size_t>(info.nranks) : 256))),
      links(new LinkEntry[link_cap]),
      chan_cap(std::min(kMaxChannels, link_cap * 8)),
      chans(new ChannelEntry[chan_cap]) {
  // The TSC only with the real clock: a test's injected clock times the steps too.
  if (clock == &realClock()) {
    const StepClock& sc = processStepClock();
    step_tsc = sc.tsc;
    step_ns_per_tick = sc.ns_per_tick;
  }
  for (std::size_t i2 = 0; i2 < kTaskPool; ++i2) tasks[i2].ctx = this;
  for (std::size_t o = 0; o < kProxyOpPool; ++o) {
    ops[o].ctx = this;
    for (auto& s : ops[o].steps) s.op = &ops[o];
  }
}

// ---- Step clock
// ----------------------------------------------------------------------------------

namespace {

// The first line of `path` without its newline, or "" when it cannot be read.
std::string firstLine(const char* path) {
  std::FILE* f = std::fopen(path, "re");
  if (f == nullptr) return {};
  char buf[128] = {};
  std::string out = std::fgets(buf, sizeof buf, f) != nullptr ? buf : "";
  std::fclose(f);
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

// Whether the first "flags" line of a /proc/cpuinfo lists every one of `flags` (whole words).
bool cpuHasFlags(const char* path, std::initializer_list<std::string_view> flags) {
  std::FILE* f = std::fopen(path, "re");
  if (f == nullptr) return false;
  char* line = nullptr;
  std::size_t cap = 0;
  bool ok = false;
  while (::getline(&line, &cap, f) > 0) {
    std::string_view l(line);
    if (!l.starts_with("flags")) continue;
    const auto colon = l.find(':');
    if (colon == std::string_view::npos) break;
    l.remove_prefix(colon + 1);
    ok = true;
    for (std::string_view flag : flags) {
      bool found = false;
      for (std::size_t at = l.find(flag); at != std::string_view::npos && !found;
           at = l.find(flag, at + 1)) {
        const std::size_t end = at + flag.size();
        found =
            (at == 0 || l[at - 1] == ' ') && (end == l.size() || l[end] == ' ' || l[end] == '\n');
      }
      ok = ok && found;
    }
    break;
  }
  std::free(line);
  std::fclose(f);
  return ok;
}

}  // namespace

StepClock calibrateStepClock(const char* clocksource_path, const char* cpuinfo_path,
                             const char* env_value) {
#if defined(__x86_64__)
  if (env_value != nullptr && std::string_view(env_value) == "0") return {};
  if (firstLine(clocksource_path) != "tsc") return {};
  if (!cpuHasFlags(cpuinfo_path, {"constant_tsc", "nonstop_tsc"})) return {};
  // The hardware clock against the kernel's, over 2 ms (a read's jitter is ~25 ppm of that).
  // CLOCK_MONOTONIC directly: this measures the TSC, which only the real clock stands for.
  auto monoNs = [](std::int64_t* out) {
    timespec t{};
    if (::clock_gettime(CLOCK_MONOTONIC, &t) != 0) return false;
    *out = static_cast<std::int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
    return true;
  };
  std::int64_t a = 0, b = 0;
  if (!monoNs(&a)) return {};
  const std::uint64_t t0 = __rdtsc();
  b = a;
  while (b - a < 2'000'000) {
    if (!monoNs(&b)) return {};
  }
  const std::uint64_t t1 = __rdtsc();
  if (t1 <= t0) return {};
  const double ns_per_tick = static_cast<double>(b - a) / static_cast<double>(t1 - t0);
  if (!(ns_per_tick > 0.01 && ns_per_tick < 10.0)) return {};  // a TSC of 100 MHz..100 GHz
  return {true, ns_per_tick};
#else
  (void)clocksource_path;
  (void)cpuinfo_path;
  (void)env_value;
  return {};
#endif
}

const StepClock& processStepClock() {
  static const StepClock clock =
      calibrateStepClock("/sys/devices/system/clocksource/clocksource0/current_clocksource",
                         "/proc/cpuinfo", std::getenv("C4_PROFILER_TSC"));
  return clock;
}

bool stepsUseTsc(const Context& ctx) {
  return ctx.step_tsc;
}

// ---- Event path
// ----------------------------------------------------------------------------------

pid_t processId() noexcept {
  pid_t p = gPid.load(std::memory_order_relaxed);
  if (p == 0) {
    p = ::getpid();
    gPid.store(p, std::memory_order_relaxed);
  }
  return p;
}

void refreshProcessId() noexcept {
  gPid.store(::getpid(), std::memory_order_relaxed);
}

std::uint64_t orphanSteps() noexcept {
  return gOrphanSteps.load(std::memory_order_relaxed);
}
std::uint64_t foreignProxyOps() noexcept {
  return gForeignOps.load(std::memory_order_relaxed);
}

void* startTask(Context* ctx, bool isColl, std::uint64_t ncclSeqNumber) noexcept {
  if (ctx == nullptr || ctx->magic != kContextMagic) return nullptr;
  Context& c = *ctx;
  (isColl ? c.coll_entered : c.p2p_entered).fetch_add(1, std::memory_order_relaxed);
  if (isColl) c.last_coll_seq.store(ncclSeqNumber, std::memory_order_relaxed);
  std::int64_t now = c.nowNs();
  std::uint64_t gen = 0;
  TaskSlot* s = allocTask(c, now, &gen);
  if (s == nullptr) {
    // Entered and, for want of a slot, finished at once: entered - finished stays exact.
    c.tasks_dropped.fetch_add(1, std::memory_order_relaxed);
    (isColl ? c.coll_finished : c.p2p_finished).fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  s->is_coll = isColl;
  s->start_ns.store(now, std::memory_order_relaxed);
  s->done_ns.store(kNever, std::memory_order_relaxed);
  s->word.store(TaskSlot::pack(TaskSlot::kActive, gen, 1), std::memory_order_release);
  return encodeTask(s, gen);
}

void* startProxyOp(Context* ctx, const ProxyOpInfo& info) noexcept {
  // PXN (plugins/profiler/README.md l.479-488): an op created by another process carries that
  // process's context and parent pointers; touch neither.
  if (info.pid != processId()) {
    gForeignOps.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  if (ctx == nullptr || ctx->magic != kContextMagic) return nullptr;
  Context& c = *ctx;
  TaskSlot* task = nullptr;
  std::uint64_t gen = 0;
  if (info.parent != nullptr && isTaskHandle(info.parent)) {
    task = decodeTask(info.parent, &gen);
    if (task->ctx != &c || !acquireTask(*task, gen)) {
      c.stale_parents.fetch_add(1, std::memory_order_relaxed);
      task = nullptr;
    }
  }
  OpSlot* op = allocOp(c);
  if (op == nullptr) {
    c.ops_dropped.fetch_add(1, std::memory_order_relaxed);
    if (task != nullptr) releaseTask(*task, gen);
    return nullptr;
  }
  LinkEntry* link = findOrClaim(c.links.get(), c.link_cap, linkKey(info.peer, info.is_send));
  ChannelEntry* chan = nullptr;
  if (link != nullptr) {
    std::uint64_t ck = linkKey(info.peer, info.is_send) << 8 |
                       static_cast<std::uint64_t>(static_cast<std::uint8_t>(info.channel));
    chan = findOrClaim(c.chans.get(), c.chan_cap, ck);
  }
  if (link == nullptr || chan == nullptr) {
    c.links_dropped.fetch_add(1, std::memory_order_relaxed);
    link = nullptr;
  } else {
    bump(chan->ops_started, 1);
  }
  op->task = task;
  op->task_gen = gen;
  op->chan = chan;
  op->step_bytes = 0;
  op->op_bytes = 0;
  op->start_ns.store(c.nowNs(), std::memory_order_relaxed);
  op->link.store(link, std::memory_order_relaxed);
  op->state.store(OpSlot::kUsed, std::memory_order_release);
  return op;
}

void* startProxyStep(void* parentOp, int step) noexcept {
  if (parentOp == nullptr) {
    // The op was dropped (or came from another process): NCCL still starts and stops the
    // steps but records no state for them (profiler.cc l.605 vs l.722).
    gOrphanSteps.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  if (isTaskHandle(parentOp)) return nullptr;
  auto* op = static_cast<OpSlot*>(parentOp);
  if (op->magic != kOpMagic) return nullptr;
  StepSlot& s = op->steps[static_cast<unsigned>(step) % kStepsPerOp];
  if (s.busy) {
    op->ctx->steps_dropped.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  s.busy = true;
  s.phase = StepSlot::kNone;
  s.seen = 0;
  s.trans_size = 0;
  s.phase_ticks[1] = s.phase_ticks[2] = s.phase_ticks[3] = 0;
  return &s;
}

void stopEvent(void* handle) noexcept {
  if (handle == nullptr) return;  // reachable through the net plugin callback (profiler.cc l.797)
  if (isTaskHandle(handle)) {
    std::uint64_t gen = 0;
    TaskSlot* s = decodeTask(handle, &gen);
    releaseTask(*s, gen);  // NCCL's reference: the task is enqueued
    return;
  }
  std::uint32_t magic = *static_cast<const std::uint32_t*>(handle);
  if (magic == kStepMagic) {
    auto& s = *static_cast<StepSlot*>(handle);
    if (s.busy) stopStep(s);
  } else if (magic == kOpMagic) {
    auto& op = *static_cast<OpSlot*>(handle);
    if (op.state.load(std::memory_order_relaxed) == OpSlot::kUsed) stopOp(op);
  }
}

void recordState(void* handle, int state, const std::size_t* transSize) noexcept {
  if (handle == nullptr || isTaskHandle(handle)) return;
  std::uint32_t magic = *static_cast<const std::uint32_t*>(handle);
  if (magic == kStepMagic) {
    auto& s = *static_cast<StepSlot*>(handle);
    if (!s.busy) return;
    StepSlot::Phase p = phaseOf(state);
    if (p == StepSlot::kNone) return;
    if (transSize != nullptr) s.trans_size = *transSize;
    if (p == s.phase) return;  // SendPeerWait is recorded on every poll (net.cc l.1407)
    std::int64_t now = s.op->ctx->stepTicks();
    if (s.phase != StepSlot::kNone) s.phase_ticks[s.phase] += now - s.phase_start;
    s.phase = p;
    s.seen = static_cast<std::uint8_t>(s.seen | (1u << p));
    s.phase_start = now;
  } else if (magic == kOpMagic) {
    // ProxyOp states 0..7 (NCCL < 2.27): args.proxyOp.transSize is the op's cumulative size.
    auto& op = *static_cast<OpSlot*>(handle);
    if (state >= 0 && state <= 7 && transSize != nullptr) {
      op.op_bytes = std::max<std::uint64_t>(op.op_bytes, *transSize);
    }
  }
}

// ---- Introspection
// -------------------------------------------------------------------------------

std::vector<ChannelStats> channelStats(const Context& c) {
  std::vector<ChannelStats> out;
  for (std::size_t i = 0; i < c.chan_cap; ++i) {
    const ChannelEntry& e = c.chans[i];
    std::uint64_t k = e.key.load(std::memory_order_acquire);
    if (k == 0) continue;
    ChannelStats s;
    s.peer = linkPeer(k >> 8);
    s.is_send = linkIsSend(k >> 8);
    s.channel = static_cast<int>(k & 0xff);
    s.bytes = e.bytes.load(std::memory_order_relaxed);
    s.steps = e.steps.load(std::memory_order_relaxed);
    s.ops_started = e.ops_started.load(std::memory_order_relaxed);
    s.ops_done = e.ops_done.load(std::memory_order_relaxed);
    s.net_wait_us = e.net_wait_us.load(std::memory_order_relaxed);
    s.transfer_us = e.transfer_us.load(std::memory_order_relaxed);
    s.gpu_wait_us = e.gpu_wait_us.load(std::memory_order_relaxed);
    out.push_back(s);
  }
  std::sort(out.begin(), out.end(), [](const ChannelStats& a, const ChannelStats& b) {
    return std::tie(a.peer, a.is_send, a.channel) < std::tie(b.peer, b.is_send, b.channel);
  });
  return out;
}

std::vector<LinkStats> linkStats(const Context& c, std::int64_t nowNs) {
  std::vector<LinkStats> out;
  for (std::size_t i = 0; i < c.link_cap; ++i) {
    const LinkEntry& e = c.links[i];
    std::uint64_t k = e.key.load(std::memory_order_acquire);
    if (k == 0) continue;
    LinkStats s;
    s.peer = linkPeer(k);
    s.is_send = linkIsSend(k);
    s.bytes = e.bytes.load(std::memory_order_relaxed);
    s.steps = e.steps.load(std::memory_order_relaxed);
    s.ops_done = e.ops_done.load(std::memory_order_relaxed);
    s.net_wait = e.net_wait.snapshot();
    s.transfer = e.transfer.snapshot();
    s.gpu_wait = e.gpu_wait.snapshot();
    std::int64_t oldest = kNever;
    for (std::size_t o = 0; o < kProxyOpPool; ++o) {
      const OpSlot& op = c.ops[o];
      if (op.state.load(std::memory_order_acquire) != OpSlot::kUsed) continue;
      if (op.link.load(std::memory_order_relaxed) != &e) continue;
      ++s.inflight;
      oldest = std::min(oldest, op.start_ns.load(std::memory_order_relaxed));
    }
    if (s.inflight > 0 && nowNs > oldest) {
      s.oldest_inflight_us = static_cast<std::uint64_t>(nowNs - oldest) / 1000;
    }
    out.push_back(s);
  }
  std::sort(out.begin(), out.end(), [](const LinkStats& a, const LinkStats& b) {
    return std::tie(a.peer, a.is_send) < std::tie(b.peer, b.is_send);
  });
  return out;
}

CommProgress commProgress(const Context& c, std::int64_t nowNs) {
  CommProgress p;
  p.comm_hash = c.info.comm_hash;
  p.nranks = c.info.nranks;
  p.rank = c.info.rank;
  p.coll_entered = c.coll_entered.load(std::memory_order_relaxed);
  p.coll_finished = c.coll_finished.load(std::memory_order_relaxed);
  p.p2p_entered = c.p2p_entered.load(std::memory_order_relaxed);
  p.p2p_finished = c.p2p_finished.load(std::memory_order_relaxed);
  p.last_coll_seq = c.last_coll_seq.load(std::memory_order_relaxed);
  std::int64_t oldest = kNever;
  for (std::size_t i = 0; i < kTaskPool; ++i) {
    const TaskSlot& s = c.tasks[i];
    if (TaskSlot::stateOf(s.word.load(std::memory_order_acquire)) != TaskSlot::kActive) continue;
    oldest = std::min(oldest, s.start_ns.load(std::memory_order_relaxed));
  }
  if (oldest != kNever && nowNs > oldest) {
    p.oldest_unfinished_us = static_cast<std::uint64_t>(nowNs - oldest) / 1000;
  }
  return p;
}

ContextCounters counters(const Context& c) {
  ContextCounters k;
  k.tasks_dropped = c.tasks_dropped.load(std::memory_order_relaxed);
  k.ops_dropped = c.ops_dropped.load(std::memory_order_relaxed);
  k.links_dropped = c.links_dropped.load(std::memory_order_relaxed);
  k.stale_parents = c.stale_parents.load(std::memory_order_relaxed);
  k.steps_dropped = c.steps_dropped.load(std::memory_order_relaxed);
  return k;
}

const CommInfo& commInfo(const Context& c) {
  return c.info;
}

}  // namespace c4::profiler
