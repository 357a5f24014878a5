// The exported NCCL ABI: ncclNetPlugin_v12 (native) and v11/v10/v9/v8 adapters over the same
// functions. Every entry point is an error firewall: noexcept, arguments checked, exceptions
// caught, c4::Error mapped once to ncclResult_t (README "Error codes": SystemError for network and
// OS failures, InternalError for misuse of the API by the caller, InvalidUsage for configuration
// and for user errors such as a message larger than its receive buffer).
// Only the five tables are visible outside the library (-fvisibility=hidden).
#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <memory>
#include <mutex>
#include <utility>

#include "c4/common/log.h"
#include "c4/common/plan.h"
#include "c4/plugin/nccl_net_abi.h"
#include "c4/plugin/transport.h"

#define C4_EXPORT __attribute__((visibility("default")))

#if C4_PLUGIN_STATIC_RUNTIME
// libstdc++'s own clean-up (what valgrind calls at exit): frees the emergency exception-handling
// arena. Our private, statically linked copy allocates one per load (~72 KiB), which nothing
// would free at dlclose.
namespace __gnu_cxx {
void __freeres() noexcept;
}
#endif

namespace c4::plugin {
namespace {

static_assert(kHandleBytes == C4_NCCL_NET_HANDLE_MAXSIZE);
static_assert(kMaxRequests == C4_NCCL_NET_MAX_REQUESTS);
static_assert(kPtrHost == C4_NCCL_PTR_HOST);
static_assert(kMaxMessageBytes <= C4_NCCL_MAX_NET_SIZE_BYTES);
static_assert(kPlaneUnknown == C4_NCCL_NET_ID_UNDEF);
static_assert(kMaxPlaneId <= INT16_MAX);

constexpr const char* kPluginName = "C4";

// Forwards c4::Logger records to the logger NCCL passed to init ("NET/C4 ..." lines).
class NcclLogSink final : public LogSink {
 public:
  void setFn(C4NcclLogFn fn) { fn_.store(fn); }
  void write(const LogRecord& record) noexcept override {
    C4NcclLogFn fn = fn_.load();
    try {
      std::string line = formatLogRecord(record);
      if (fn == nullptr) {
        if (record.level >= LogLevel::kWarn) std::fprintf(stderr, "NET/C4 %s\n", line.c_str());
        return;
      }
      C4NcclLogLevel level = record.level >= LogLevel::kWarn   ? C4_NCCL_LOG_WARN
                             : record.level >= LogLevel::kInfo ? C4_NCCL_LOG_INFO
                                                               : C4_NCCL_LOG_TRACE;
      unsigned long flags = level == C4_NCCL_LOG_WARN ? C4_NCCL_SUBSYS_ALL : C4_NCCL_SUBSYS_NET;
      fn(level, flags, __FILE__, __LINE__, "NET/C4 %s", line.c_str());
    } catch (...) {
    }
  }

 private:
  std::atomic<C4NcclLogFn> fn_{nullptr};
};

struct Globals {
  std::mutex mu;
  std::shared_ptr<NcclLogSink> sink = std::make_shared<NcclLogSink>();
  bool config_logged = false;
  std::optional<PluginConfig> config;
  std::optional<std::vector<NetInterface>> devices;
  int plane_id = kPlaneUnknown;     // of every device (v12), from the plan at the first init
  std::unique_ptr<Context> legacy;  // the one context of v8..v10 (process-wide init)
};

// Heap-allocated so no static destructor races a context thread still logging at process exit;
// freed by the library destructor (dlclose), when no plugin code can run any more.
Globals*& globalsPtr() {
  static Globals* g = new Globals();
  return g;
}
Globals& globals() {
  return *globalsPtr();
}

const Logger& log() {
  static const Logger l("nccl-net-c4");
  return l;
}

C4NcclResult toNccl(const Error& e, const char* what) {
  log().warn(std::string(what) + " failed", {{"error", e}});
  switch (e.code) {
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kInternal:
      return C4_NCCL_INTERNAL_ERROR;
    case ErrorCode::kFailedPrecondition:  // e.g. a message larger than its receive buffer
    case ErrorCode::kPermissionDenied:
    case ErrorCode::kUnauthenticated:
      return C4_NCCL_INVALID_USAGE;
    default:
      return C4_NCCL_SYSTEM_ERROR;
  }
}

template <typename F>
C4NcclResult guard(const char* what, F&& f) noexcept {
  try {
    return f();
  } catch (const std::exception& e) {
    log().warn(std::string(what) + ": exception", {{"error", e.what()}});
    return C4_NCCL_INTERNAL_ERROR;
  } catch (...) {
    log().warn(std::string(what) + ": unknown exception");
    return C4_NCCL_INTERNAL_ERROR;
  }
}

// The network plane NCCL should see for our devices (v12 planeId): the plan's plane of this node
// when the plan names one for every node of the job, else unknown (NCCL_NET_ID_UNDEF). Read once:
// NCCL builds its topology at init and would not see a later change.
int planeFromPlan(const PluginConfig& config) {
  std::string why = "C4_PLAN_FILE is not set";
  int plane = kPlaneUnknown;
  if (!config.plan_file.empty()) {
    auto plan = loadPlanFile(config.plan_file);
    if (!plan) {
      why = plan.error().toString();
    } else {
      plane = plan->planeOf(config.node, &why);
    }
  }
  if (plane == kPlaneUnknown) {
    log().info("planeId unknown (NCCL_NET_ID_UNDEF)", {{"reason", why}});
  } else {
    log().info("planeId from the plan", {{"node", config.node}, {"plane", plane}});
  }
  return plane;
}

// Loads the configuration and the device table once; installs NCCL's logger.
Result<std::pair<PluginConfig, std::vector<NetInterface>>> setup(C4NcclLogFn logFn) {
  Globals& g = globals();
  std::lock_guard lock(g.mu);
  if (logFn != nullptr) g.sink->setFn(logFn);
  if (!g.config) {
    setLogSink(g.sink);
    g.config = loadConfigFromEnvironment();
  }
  if (!g.devices) {
    C4_ASSIGN_OR_RETURN(auto devs, processDevices(*g.config));
    g.devices = std::move(devs);
  }
  if (!g.config_logged) {
    g.config_logged = true;
    g.plane_id = planeFromPlan(*g.config);
    for (const auto& w : g.config->warnings) log().warn("configuration", {{"problem", w}});
    for (const auto& line : g.config->describe()) log().info("config", {{"setting", line}});
    for (const auto& d : *g.devices) {
      log().info("device", {{"name", d.name},
                            {"address", formatAddress(d.addr)},
                            {"speed_mbps", d.speed_mbps},
                            {"pci", d.pci_path}});
    }
  }
  return std::make_pair(*g.config, *g.devices);
}

const std::vector<NetInterface>* deviceTable() {
  Globals& g = globals();
  std::lock_guard lock(g.mu);
  return g.devices ? &*g.devices : nullptr;
}

int planeId() {
  Globals& g = globals();
  std::lock_guard lock(g.mu);
  return g.plane_id;
}

C4NcclResult doInit(void** ctx, C4NcclLogFn logFn) {
  if (ctx == nullptr) return C4_NCCL_INTERNAL_ERROR;
  *ctx = nullptr;
  auto s = setup(logFn);
  if (!s) return toNccl(s.error(), "init");
  ContextOptions o;
  o.config = s->first;
  o.devices = s->second;
  auto c = Context::create(std::move(o));
  if (!c) return toNccl(c.error(), "init");
  *ctx = c->release();
  return C4_NCCL_SUCCESS;
}

// ---- v12 (native) ----------------------------------------------------------------------------

C4NcclResult initV12(void** ctx, std::uint64_t /*commId*/, C4NcclCommConfig* /*config*/,
                     C4NcclLogFn logFn, C4NcclProfilerFn /*profFn*/) noexcept {
  return guard("init", [&] { return doInit(ctx, logFn); });
}

C4NcclResult devices(int* ndev) noexcept {
  return guard("devices", [&] {
    if (ndev == nullptr) return C4_NCCL_INTERNAL_ERROR;
    auto s = setup(nullptr);
    if (!s) return toNccl(s.error(), "devices");
    *ndev = static_cast<int>(s->second.size());
    return C4_NCCL_SUCCESS;
  });
}

C4NcclResult getPropertiesV12(int dev, C4NcclPropertiesV12* props) noexcept {
  return guard("getProperties", [&] {
    if (props == nullptr) return C4_NCCL_INTERNAL_ERROR;
    if (auto s = setup(nullptr); !s) return toNccl(s.error(), "getProperties");
    const auto* table = deviceTable();
    if (table == nullptr || dev < 0 || dev >= static_cast<int>(table->size())) {
      log().warn("getProperties: no such device", {{"dev", dev}});
      return C4_NCCL_INTERNAL_ERROR;
    }
    const NetInterface& d = (*table)[static_cast<std::size_t>(dev)];
    *props = C4NcclPropertiesV12{};
    props->name = const_cast<char*>(d.name.c_str());
    props->pciPath = d.pci_path.empty() ? nullptr : const_cast<char*>(d.pci_path.c_str());
    props->guid = d.guid;
    props->ptrSupport = C4_NCCL_PTR_HOST;
    props->regIsGlobal = 0;
    props->forceFlush = 0;
    props->speed = d.speed_mbps;
    props->port = 0;
    props->latency = 0;  // NCCL's default
    props->maxComms = 65536;
    props->maxRecvs = kMaxRecvs;
    props->netDeviceType = C4_NCCL_NET_DEVICE_HOST;
    props->netDeviceVersion = C4_NCCL_NET_DEVICE_INVALID_VERSION;
    props->vProps.ndevs = 1;
    props->vProps.devs[0] = dev;
    props->maxP2pBytes = kMaxMessageBytes;
    props->maxCollBytes = kMaxMessageBytes;
    props->maxMultiRequestSize = 1;
    props->railId = C4_NCCL_NET_ID_UNDEF;  // rails are not modelled: one device per interface
    props->planeId = static_cast<std::int16_t>(planeId());
    return C4_NCCL_SUCCESS;
  });
}

C4NcclResult listenFn(void* ctx, int dev, void* handle, void** listenComm) noexcept {
  return guard("listen", [&] {
    if (ctx == nullptr || listenComm == nullptr) return C4_NCCL_INTERNAL_ERROR;
    *listenComm = nullptr;
    auto l = static_cast<Context*>(ctx)->listen(dev, handle);
    if (!l) return toNccl(l.error(), "listen");
    *listenComm = *l;
    return C4_NCCL_SUCCESS;
  });
}

C4NcclResult connectFn(void* ctx, int dev, void* handle, void** sendComm,
                       C4NcclNetDeviceHandle** /*sendDevComm*/) noexcept {
  return guard("connect", [&] {
    if (ctx == nullptr || sendComm == nullptr) return C4_NCCL_INTERNAL_ERROR;
    *sendComm = nullptr;
    auto c = static_cast<Context*>(ctx)->connect(dev, handle);
    if (!c) return toNccl(c.error(), "connect");
    *sendComm = *c;  // nullptr: in progress, NCCL calls again
    return C4_NCCL_SUCCESS;
  });
}

C4NcclResult acceptFn(void* listenComm, void** recvComm,
                      C4NcclNetDeviceHandle** /*recvDevComm*/) noexcept {
  return guard("accept", [&] {
    if (listenComm == nullptr || recvComm == nullptr) return C4_NCCL_INTERNAL_ERROR;
    *recvComm = nullptr;
    auto r = accept(static_cast<CommBase*>(listenComm));
    if (!r) return toNccl(r.error(), "accept");
    *recvComm = *r;
    return C4_NCCL_SUCCESS;
  });
}

C4NcclResult regMrFn(void* comm, void* data, std::size_t size, int type, void** mhandle) noexcept {
  return guard("regMr", [&] {
    if (comm == nullptr || mhandle == nullptr) return C4_NCCL_INTERNAL_ERROR;
    auto m = regMr(static_cast<CommBase*>(comm), data, size, type);
    if (!m) return toNccl(m.error(), "regMr");
    *mhandle = *m;
    return C4_NCCL_SUCCESS;
  });
}

C4NcclResult regMrDmaBufFn(void* /*comm*/, void* /*data*/, std::size_t /*size*/, int /*type*/,
                           std::uint64_t /*offset*/, int /*fd*/, void** mhandle) noexcept {
  return guard("regMrDmaBuf", [&] {
    if (mhandle != nullptr) *mhandle = nullptr;
    log().warn("regMrDmaBuf: DMA-BUF is not supported by the TCP transport (ptrSupport is HOST)");
    return C4_NCCL_INVALID_USAGE;
  });
}

C4NcclResult deregMrFn(void* comm, void* mhandle) noexcept {
  return guard("deregMr", [&] {
    if (comm == nullptr || mhandle == nullptr) return C4_NCCL_INTERNAL_ERROR;
    auto s = deregMr(static_cast<CommBase*>(comm), static_cast<MemRegion*>(mhandle));
    if (!s) return toNccl(s.error(), "deregMr");
    return C4_NCCL_SUCCESS;
  });
}

C4NcclResult isendFn(void* sendComm, void* data, std::size_t size, int tag, void* /*mhandle*/,
                     void* /*phandle*/, void** request) noexcept {
  return guard("isend", [&] {
    if (sendComm == nullptr || request == nullptr) return C4_NCCL_INTERNAL_ERROR;
    *request = nullptr;
    auto r = isend(static_cast<CommBase*>(sendComm), data, size, tag);
    if (!r) return toNccl(r.error(), "isend");
    *request = *r;
    return C4_NCCL_SUCCESS;
  });
}

C4NcclResult irecvFn(void* recvComm, int n, void** data, std::size_t* sizes, int* tags,
                     void** /*mhandles*/, void** /*phandles*/, void** request) noexcept {
  return guard("irecv", [&] {
    if (recvComm == nullptr || request == nullptr) return C4_NCCL_INTERNAL_ERROR;
    // NCCL may preset *request to NCCL_NET_OPTIONAL_RECV_COMPLETION; we always return a real
    // request (or NULL = retry).
    *request = nullptr;
    auto r = irecv(static_cast<CommBase*>(recvComm), n, data, sizes, tags);
    if (!r) return toNccl(r.error(), "irecv");
    *request = *r;
    return C4_NCCL_SUCCESS;
  });
}

// Host memory only: nothing to flush, the request completes at once.
C4NcclResult iflushFn(void* recvComm, int /*n*/, void** /*data*/, int* /*sizes*/,
                      void** /*mhandles*/, void** request) noexcept {
  return guard("iflush", [&] {
    if (recvComm == nullptr || request == nullptr) return C4_NCCL_INTERNAL_ERROR;
    *request = nullptr;
    auto r = iflush(static_cast<CommBase*>(recvComm));
    if (!r) return toNccl(r.error(), "iflush");
    *request = *r;
    return C4_NCCL_SUCCESS;
  });
}

C4NcclResult testFn(void* request, int* done, int* sizes) noexcept {
  return guard("test", [&] {
    if (request == nullptr || done == nullptr) return C4_NCCL_INTERNAL_ERROR;
    *done = 0;
    auto r = test(static_cast<Request*>(request), sizes);
    if (!r) return toNccl(r.error(), "test");
    *done = *r ? 1 : 0;
    return C4_NCCL_SUCCESS;
  });
}

C4NcclResult closeSendFn(void* sendComm) noexcept {
  return guard("closeSend", [&] {
    auto st = closeComm(static_cast<CommBase*>(sendComm), CommKind::kSend);
    return st ? C4_NCCL_SUCCESS : toNccl(st.error(), "closeSend");
  });
}

C4NcclResult closeRecvFn(void* recvComm) noexcept {
  return guard("closeRecv", [&] {
    auto st = closeComm(static_cast<CommBase*>(recvComm), CommKind::kRecv);
    return st ? C4_NCCL_SUCCESS : toNccl(st.error(), "closeRecv");
  });
}

C4NcclResult closeListenFn(void* listenComm) noexcept {
  return guard("closeListen", [&] {
    auto st = closeComm(static_cast<CommBase*>(listenComm), CommKind::kListen);
    return st ? C4_NCCL_SUCCESS : toNccl(st.error(), "closeListen");
  });
}

C4NcclResult finalizeFn(void* ctx) noexcept {
  return guard("finalize", [&] {
    // Called after a failed init too (ctx may be NULL). Joins every thread of the context.
    delete static_cast<Context*>(ctx);
    return C4_NCCL_SUCCESS;
  });
}

C4NcclResult setNetAttrFn(void* ctx, C4NcclNetAttr* attr) noexcept {
  return guard("setNetAttr", [&] {
    // A hint only; the TCP transport's subflow count comes from C4_SUBFLOWS and the plan.
    if (ctx == nullptr || attr == nullptr) return C4_NCCL_INTERNAL_ERROR;
    return C4_NCCL_SUCCESS;
  });
}

// ---- v11 adapter: v12 without railId/planeId and with 4 devices in vProps -------------------

C4NcclResult getPropertiesV11(int dev, C4NcclPropertiesV11* props) noexcept {
  if (props == nullptr) return C4_NCCL_INTERNAL_ERROR;
  C4NcclPropertiesV12 p{};
  C4NcclResult r = getPropertiesV12(dev, &p);
  if (r != C4_NCCL_SUCCESS) return r;
  C4NcclVDeviceProps v{};
  v.ndevs = std::min(p.vProps.ndevs, C4_NCCL_NET_MAX_DEVS_PER_NIC);
  for (int i = 0; i < v.ndevs; ++i) v.devs[i] = p.vProps.devs[i];
  *props = C4NcclPropertiesV11{p.name,
                               p.pciPath,
                               p.guid,
                               p.ptrSupport,
                               p.regIsGlobal,
                               p.forceFlush,
                               p.speed,
                               p.port,
                               p.latency,
                               p.maxComms,
                               p.maxRecvs,
                               p.netDeviceType,
                               p.netDeviceVersion,
                               v,
                               p.maxP2pBytes,
                               p.maxCollBytes,
                               p.maxMultiRequestSize};
  return C4_NCCL_SUCCESS;
}

// ---- v10 / v9 / v8 adapters: one process-wide context ----------------------------------------

C4NcclResult initLegacy(C4NcclLogFn logFn) noexcept {
  return guard("init", [&] {
    Globals& g = globals();
    {
      std::lock_guard lock(g.mu);
      if (g.legacy) {
        if (logFn != nullptr) g.sink->setFn(logFn);
        return C4_NCCL_SUCCESS;
      }
    }
    void* ctx = nullptr;
    C4NcclResult r = doInit(&ctx, logFn);
    if (r != C4_NCCL_SUCCESS) return r;
    std::lock_guard lock(g.mu);
    if (g.legacy) {
      delete static_cast<Context*>(ctx);  // another thread won the race
    } else {
      g.legacy.reset(static_cast<Context*>(ctx));
    }
    return C4_NCCL_SUCCESS;
  });
}

Context* legacyContext() {
  Globals& g = globals();
  std::lock_guard lock(g.mu);
  return g.legacy.get();
}

C4NcclResult initV10(C4NcclLogFn logFn, C4NcclProfilerFn /*profFn*/) noexcept {
  return initLegacy(logFn);
}
C4NcclResult initV8(C4NcclLogFn logFn) noexcept {
  return initLegacy(logFn);
}

C4NcclResult getPropertiesV9(int dev, C4NcclPropertiesV9* props) noexcept {
  if (props == nullptr) return C4_NCCL_INTERNAL_ERROR;
  C4NcclPropertiesV11 p{};
  C4NcclResult r = getPropertiesV11(dev, &p);
  if (r != C4_NCCL_SUCCESS) return r;
  *props = C4NcclPropertiesV9{p.name,
                              p.pciPath,
                              p.guid,
                              p.ptrSupport,
                              p.regIsGlobal,
                              p.forceFlush,
                              p.speed,
                              p.port,
                              p.latency,
                              p.maxComms,
                              p.maxRecvs,
                              p.netDeviceType,
                              p.netDeviceVersion,
                              p.vProps,
                              p.maxP2pBytes,
                              p.maxCollBytes};
  return C4_NCCL_SUCCESS;
}

C4NcclResult getPropertiesV8(int dev, C4NcclPropertiesV8* props) noexcept {
  if (props == nullptr) return C4_NCCL_INTERNAL_ERROR;
  C4NcclPropertiesV11 p{};
  C4NcclResult r = getPropertiesV11(dev, &p);
  if (r != C4_NCCL_SUCCESS) return r;
  *props = C4NcclPropertiesV8{p.name,        p.pciPath,  p.guid,          p.ptrSupport,
                              p.regIsGlobal, p.speed,    p.port,          p.latency,
                              p.maxComms,    p.maxRecvs, p.netDeviceType, p.netDeviceVersion};
  return C4_NCCL_SUCCESS;
}

C4NcclResult listenLegacy(int dev, void* handle, void** listenComm) noexcept {
  Context* c = legacyContext();
  if (c == nullptr) {
    log().warn("listen before init");
    return C4_NCCL_INTERNAL_ERROR;
  }
  return listenFn(c, dev, handle, listenComm);
}

C4NcclResult connectV10(int dev, C4NcclCommConfig* /*config*/, void* handle, void** sendComm,
                        C4NcclNetDeviceHandle** devComm) noexcept {
  Context* c = legacyContext();
  if (c == nullptr) return C4_NCCL_INTERNAL_ERROR;
  return connectFn(c, dev, handle, sendComm, devComm);
}

C4NcclResult connectV8(int dev, void* handle, void** sendComm,
                       C4NcclNetDeviceHandle** devComm) noexcept {
  Context* c = legacyContext();
  if (c == nullptr) return C4_NCCL_INTERNAL_ERROR;
  return connectFn(c, dev, handle, sendComm, devComm);
}

C4NcclResult isendV9(void* sendComm, void* data, std::size_t size, int tag, void* mhandle,
                     void** request) noexcept {
  return isendFn(sendComm, data, size, tag, mhandle, nullptr, request);
}

C4NcclResult irecvV9(void* recvComm, int n, void** data, std::size_t* sizes, int* tags,
                     void** mhandles, void** request) noexcept {
  return irecvFn(recvComm, n, data, sizes, tags, mhandles, nullptr, request);
}

C4NcclResult isendV8(void* sendComm, void* data, int size, int tag, void* mhandle,
                     void** request) noexcept {
  if (size < 0) return C4_NCCL_INTERNAL_ERROR;
  return isendFn(sendComm, data, static_cast<std::size_t>(size), tag, mhandle, nullptr, request);
}

C4NcclResult irecvV8(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles,
                     void** request) noexcept {
  if (n < 1 || n > kMaxRecvs || sizes == nullptr) {
    if (request != nullptr) *request = nullptr;
    return C4_NCCL_INTERNAL_ERROR;
  }
  std::size_t wide[kMaxRecvs];
  for (int i = 0; i < n; ++i) {
    if (sizes[i] < 0) return C4_NCCL_INTERNAL_ERROR;
    wide[i] = static_cast<std::size_t>(sizes[i]);
  }
  return irecvFn(recvComm, n, data, wide, tags, mhandles, nullptr, request);
}

__attribute__((destructor)) void unloadLegacyContext() {
  // dlclose of a v8..v10 user (no finalize in those ABIs): stop the threads before the code goes.
  Globals& g = globals();
  std::unique_ptr<Context> c;
  {
    std::lock_guard lock(g.mu);
    c = std::move(g.legacy);
  }
  c.reset();
  // At exit() with communicators NCCL never finalized (v11, v12: one context each): their last
  // reports go now, as the profiler plugin's does. Nothing is left at a dlclose after the last
  // finalize.
  Context::endOfProcess();
  // Nothing of the plugin may outlive dlclose: NCCL unloads it when its last communicator goes
  // and loads it again for the next one. The log configuration lives on in static storage of
  // this library; drop our sink from it.
  setLogSink(nullptr);
  delete std::exchange(globalsPtr(), nullptr);
#if C4_PLUGIN_STATIC_RUNTIME
  __gnu_cxx::__freeres();  // only our copy of libstdc++: nothing of this library runs after this
#endif
}

}  // namespace
}  // namespace c4::plugin

using namespace c4::plugin;  // NOLINT: the tables below name many functions

extern "C" {

C4_EXPORT C4NcclNetV12 ncclNetPlugin_v12 = {
    kPluginName, initV12, devices,       getPropertiesV12, listenFn,      connectFn,
    acceptFn,    regMrFn, regMrDmaBufFn, deregMrFn,        isendFn,       irecvFn,
    iflushFn,    testFn,  closeSendFn,   closeRecvFn,      closeListenFn, nullptr,
    nullptr,     nullptr, finalizeFn,    setNetAttrFn,
};

C4_EXPORT C4NcclNetV11 ncclNetPlugin_v11 = {
    kPluginName, initV12, devices,       getPropertiesV11, listenFn,      connectFn,
    acceptFn,    regMrFn, regMrDmaBufFn, deregMrFn,        isendFn,       irecvFn,
    iflushFn,    testFn,  closeSendFn,   closeRecvFn,      closeListenFn, nullptr,
    nullptr,     nullptr, finalizeFn,    setNetAttrFn,
};

C4_EXPORT C4NcclNetV10 ncclNetPlugin_v10 = {
    kPluginName, initV10,       devices,       getPropertiesV9, listenLegacy, connectV10, acceptFn,
    regMrFn,     regMrDmaBufFn, deregMrFn,     isendFn,         irecvFn,      iflushFn,   testFn,
    closeSendFn, closeRecvFn,   closeListenFn, nullptr,         nullptr,      nullptr,
};

C4_EXPORT C4NcclNetV9 ncclNetPlugin_v9 = {
    kPluginName, initV8,        devices,       getPropertiesV9, listenLegacy, connectV8, acceptFn,
    regMrFn,     regMrDmaBufFn, deregMrFn,     isendV9,         irecvV9,      iflushFn,  testFn,
    closeSendFn, closeRecvFn,   closeListenFn, nullptr,         nullptr,      nullptr,
};

C4_EXPORT C4NcclNetV8 ncclNetPlugin_v8 = {
    kPluginName, initV8,        devices,       getPropertiesV8, listenLegacy, connectV8, acceptFn,
    regMrFn,     regMrDmaBufFn, deregMrFn,     isendV8,         irecvV8,      iflushFn,  testFn,
    closeSendFn, closeRecvFn,   closeListenFn, nullptr,         nullptr,
};

}  // extern "C"
