// ncclProfiler_v1 ... v6 over one core (see shells.h). Which NCCL thread calls what:
// nccl-profiler-plugin/README.md "Threads".
#include "c4/profiler/shells.h"

#include <atomic>
#include <cstdio>
#include <mutex>

#include "context.h"

namespace c4::profiler {
namespace {

// The process-wide profiler: made by the first init, destroyed (reporter joined, last report
// sent) by the last finalize, so nothing of ours runs once NCCL may dlclose us (profiler.cc
// l.113-125); a process that leaves through exit() with communicators open destroys it with its
// static objects.
struct Process {
  std::mutex mu;
  std::unique_ptr<Profiler> profiler;
  std::size_t live = 0;
  std::optional<ProfilerOptions> test_options;
};
Process& process() {
  static Process p;
  return p;
}

C4NcclProfResult toNccl(const Error& e) {
  switch (e.code) {
    case ErrorCode::kInvalidArgument:
      return C4_NCCL_PROF_INVALID_ARGUMENT;
    case ErrorCode::kResourceExhausted:
    case ErrorCode::kIo:
      return C4_NCCL_PROF_SYSTEM_ERROR;
    default:
      return C4_NCCL_PROF_INTERNAL_ERROR;
  }
}

Result<Context*> openContext(const CommInfo& info) {
  Process& p = process();
  std::lock_guard lock(p.mu);
  refreshProcessId();
  if (!p.profiler) {
    ProfilerOptions options;
    if (p.test_options) {
      options = *p.test_options;
    } else {
      options.config = loadConfigFromEnvironment();
    }
    C4_ASSIGN_OR_RETURN(p.profiler, Profiler::create(std::move(options)));
  }
  auto ctx = p.profiler->addContext(info);
  if (!ctx) {
    if (p.live == 0) p.profiler.reset();  // a failed init leaves nothing behind
    return ctx;
  }
  ++p.live;
  return ctx;
}

C4NcclProfResult initCommon(void** context, int* mask, const CommInfo& info,
                            C4NcclProfLogFn logfn) noexcept {
  if (context == nullptr || mask == nullptr) return C4_NCCL_PROF_INVALID_ARGUMENT;
  *context = nullptr;
  Result<Context*> ctx = makeError(ErrorCode::kInternal, "init threw");
  try {
    ctx = openContext(info);
  } catch (const std::exception& e) {
    ctx = makeError(ErrorCode::kInternal, e.what());
  } catch (...) {
  }
  if (!ctx) {
    bool none;
    {
      std::lock_guard lock(process().mu);
      none = process().live == 0;
    }
    // The mask is one process-wide int (profiler.cc l.219): clear it only when no other
    // communicator of ours uses it, so NCCL <= 2.29, which keeps the table, generates nothing.
    if (none) std::atomic_ref<int>(*mask).store(0, std::memory_order_relaxed);
    if (logfn != nullptr) {
      logfn(3, ~0UL, __FILE__, __LINE__, "PROFILER/C4 init failed: %s",
            ctx.error().toString().c_str());
    }
    return toNccl(ctx.error());
  }
  std::atomic_ref<int>(*mask).store(kActivationMask, std::memory_order_relaxed);
  *context = *ctx;
  return C4_NCCL_PROF_SUCCESS;
}

C4NcclProfResult finalizeFn(void* context) noexcept {
  if (context == nullptr) return C4_NCCL_PROF_SUCCESS;
  try {
    Process& p = process();
    std::lock_guard lock(p.mu);
    if (!p.profiler || p.live == 0) return C4_NCCL_PROF_SUCCESS;
    auto* ctx = static_cast<Context*>(context);
    // The last communicator: its connections go into the last report before it is removed.
    if (p.live == 1 && p.profiler->holds(ctx)) p.profiler->finish();
    std::size_t before = p.profiler->contexts();
    p.profiler->removeContext(ctx);
    if (p.profiler->contexts() < before) --p.live;
    if (p.live == 0) p.profiler.reset();  // joins the reporter
  } catch (...) {
  }
  return C4_NCCL_PROF_SUCCESS;
}

// Event types and the members the core reads have the same names in every descriptor version.
template <typename Descr>
C4NcclProfResult startEventT(void* context, void** eHandle, Descr* d) noexcept {
  if (eHandle == nullptr) return C4_NCCL_PROF_SUCCESS;
  *eHandle = nullptr;  // the v4/v5 shims do not clear it (profiler_v4.cc l.17, profiler_v5.cc l.17)
  if (d == nullptr) return C4_NCCL_PROF_SUCCESS;
  auto* ctx = static_cast<Context*>(context);
  switch (static_cast<std::uint64_t>(d->type)) {
    case C4_NCCL_PROFILE_COLL:
      *eHandle = startTask(ctx, true, d->coll.seqNumber);
      break;
    case C4_NCCL_PROFILE_P2P:
      *eHandle = startTask(ctx, false, 0);
      break;
    case C4_NCCL_PROFILE_PROXY_OP: {
      ProxyOpInfo op;
      op.parent = d->parentObj;
      op.pid = d->proxyOp.pid;
      op.channel = d->proxyOp.channelId;
      op.peer = d->proxyOp.peer;
      op.n_steps = d->proxyOp.nSteps;
      op.is_send = d->proxyOp.isSend != 0;
      *eHandle = startProxyOp(ctx, op);
      break;
    }
    case C4_NCCL_PROFILE_PROXY_STEP:
      *eHandle = startProxyStep(d->parentObj, d->proxyStep.step);
      break;
    default:
      // Group, the API events, ProxyCtrl, KernelCh, NetPlugin, CE and unknown types: dropped
      // without touching `context` (ProxyCtrl may carry a finalized comm's, proxy.cc l.852).
      break;
  }
  return C4_NCCL_PROF_SUCCESS;
}

C4NcclProfResult stopEventFn(void* eHandle) noexcept {
  stopEvent(eHandle);
  return C4_NCCL_PROF_SUCCESS;
}

// v4..v6 state args: proxyStep.transSize for the step states (profiler.cc l.726).
C4NcclProfResult recordV4(void* eHandle, C4NcclProfState state,
                          C4NcclProfilerEventStateArgs_v4_t* args) noexcept {
  bool step = (state >= C4_NCCL_PROF_PROXY_STEP_SEND_GPU_WAIT &&
               state <= C4_NCCL_PROF_PROXY_STEP_RECV_GPU_WAIT) ||
              state == C4_NCCL_PROF_PROXY_STEP_SEND_PEER_WAIT_V4;
  // Other states' args may be NULL or uninitialised (profiler_v5.cc l.140): not read.
  recordState(eHandle, state, step && args != nullptr ? &args->proxyStep.transSize : nullptr);
  return C4_NCCL_PROF_SUCCESS;
}

// v1..v3 state args: proxyOp.transSize, cumulative per op, with the ProxyOp states 0..7 that NCCL
// recorded before 2.27 (v2.26.6-1 src/transport/net.cc l.1143-1499); steps get none (NULL args,
// v2.26.6-1 src/plugin/profiler.cc l.497; zeroed by the 2.30 shim, profiler_v3.cc).
C4NcclProfResult recordV1(void* eHandle, C4NcclProfState state,
                          C4NcclProfilerEventStateArgs_v1_t* args) noexcept {
  bool op = state >= C4_NCCL_PROF_PROXY_OP_SEND_POSTED && state <= C4_NCCL_PROF_PROXY_OP_RECV_DONE;
  recordState(eHandle, state, op && args != nullptr ? &args->proxyOp.transSize : nullptr);
  return C4_NCCL_PROF_SUCCESS;
}

C4NcclProfResult initV1(void** context, int* mask) noexcept {
  return initCommon(context, mask, CommInfo{}, nullptr);
}

C4NcclProfResult initV4(void** context, int* mask, const char* commName, std::uint64_t commHash,
                        int nNodes, int nranks, int rank, C4NcclProfLogFn logfn) noexcept {
  CommInfo info;
  try {
    info.comm_name = commName != nullptr ? commName : "";
  } catch (...) {
    return C4_NCCL_PROF_SYSTEM_ERROR;
  }
  info.comm_hash = commHash;
  info.n_nodes = nNodes;
  info.nranks = nranks;
  info.rank = rank;
  return initCommon(context, mask, info, logfn);
}

C4NcclProfResult initV5(void** context, std::uint64_t commId, int* mask, const char* commName,
                        int nNodes, int nranks, int rank, C4NcclProfLogFn logfn) noexcept {
  return initV4(context, mask, commName, commId, nNodes, nranks, rank, logfn);
}

template <typename D>
C4NcclProfResult startFn(void* c, void** h, D* d) noexcept {
  return startEventT(c, h, d);
}

const C4NcclProfiler_v1_t kV1 = {kPluginName, initV1,   startFn<C4NcclProfilerEventDescr_v1_t>,
                                 stopEventFn, recordV1, finalizeFn};
const C4NcclProfiler_v2_t kV2 = {kPluginName, initV1,   startFn<C4NcclProfilerEventDescr_v2_t>,
                                 stopEventFn, recordV1, finalizeFn};
const C4NcclProfiler_v3_t kV3 = {kPluginName, initV1,   startFn<C4NcclProfilerEventDescr_v3_t>,
                                 stopEventFn, recordV1, finalizeFn};
const C4NcclProfiler_v4_t kV4 = {kPluginName, initV4,   startFn<C4NcclProfilerEventDescr_v4_t>,
                                 stopEventFn, recordV4, finalizeFn};
const C4NcclProfiler_v5_t kV5 = {kPluginName, initV5,   startFn<C4NcclProfilerEventDescr_v5_t>,
                                 stopEventFn, recordV4, finalizeFn};
const C4NcclProfiler_v6_t kV6 = {kPluginName, initV5,   startFn<C4NcclProfilerEventDescr_v6_t>,
                                 stopEventFn, recordV4, finalizeFn};

}  // namespace

const C4NcclProfiler_v1_t& tableV1() {
  return kV1;
}
const C4NcclProfiler_v2_t& tableV2() {
  return kV2;
}
const C4NcclProfiler_v3_t& tableV3() {
  return kV3;
}
const C4NcclProfiler_v4_t& tableV4() {
  return kV4;
}
const C4NcclProfiler_v5_t& tableV5() {
  return kV5;
}
const C4NcclProfiler_v6_t& tableV6() {
  return kV6;
}

void setProcessOptionsForTest(std::optional<ProfilerOptions> options) {
  std::lock_guard lock(process().mu);
  process().test_options = std::move(options);
}

Profiler* processProfilerForTest() {
  std::lock_guard lock(process().mu);
  return process().profiler.get();
}

}  // namespace c4::profiler
