#include "plugin_loader.h"

#include <dlfcn.h>

#include <cstdarg>
#include <cstdio>
#include <vector>

namespace c4::netbench {
namespace {

void netbenchLogger(C4NcclLogLevel level, unsigned long /*flags*/, const char* /*file*/,
                    int /*line*/, const char* fmt, ...) {
  if (level != C4_NCCL_LOG_WARN) return;  // INFO lines only with NCCL_DEBUG-like verbosity
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fputc('\n', stderr);
}

}  // namespace

Status LoadedPlugin::check(C4NcclResult r, const char* what) {
  if (r == C4_NCCL_SUCCESS) return {};
  return makeError(r == C4_NCCL_SYSTEM_ERROR ? ErrorCode::kUnavailable : ErrorCode::kInternal,
                   std::string("plugin ") + what + " returned ncclResult " + std::to_string(r));
}

Result<OpenedLibrary> openNcclPlugin(const std::string& name, const std::string& kind) {
  std::vector<std::string> candidates = {name};
  const bool looks_like_lib =
      name.rfind("lib", 0) == 0 && name.size() > 3 && name.compare(name.size() - 3, 3, ".so") == 0;
  if (!name.empty() && name.find('/') == std::string::npos && !looks_like_lib) {
    candidates.push_back("libnccl-" + kind + "-" + name + ".so");
  }
  std::string errors;
  for (const auto& c : candidates) {
    if (void* handle = ::dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL); handle != nullptr) {
      return OpenedLibrary{handle, c};
    }
    const char* e = ::dlerror();
    errors += (errors.empty() ? "" : "; ") + std::string(e != nullptr ? e : c);
  }
  return makeError(ErrorCode::kNotFound, "cannot load " + kind + " plugin: " + errors);
}

Result<std::unique_ptr<LoadedPlugin>> LoadedPlugin::load(const std::string& name) {
  std::unique_ptr<LoadedPlugin> p(new LoadedPlugin());
  C4_ASSIGN_OR_RETURN(auto opened, openNcclPlugin(name.empty() ? "libnccl-net.so" : name, "net"));
  p->lib_ = opened.handle;
  p->path_ = opened.path;
  if ((p->v12_ = static_cast<const C4NcclNetV12*>(::dlsym(p->lib_, "ncclNetPlugin_v12")))) {
    p->version_ = 12;
  } else if ((p->v11_ = static_cast<const C4NcclNetV11*>(::dlsym(p->lib_, "ncclNetPlugin_v11")))) {
    p->version_ = 11;
  } else if ((p->v10_ = static_cast<const C4NcclNetV10*>(::dlsym(p->lib_, "ncclNetPlugin_v10")))) {
    p->version_ = 10;
  } else if ((p->v9_ = static_cast<const C4NcclNetV9*>(::dlsym(p->lib_, "ncclNetPlugin_v9")))) {
    p->version_ = 9;
  } else if ((p->v8_ = static_cast<const C4NcclNetV8*>(::dlsym(p->lib_, "ncclNetPlugin_v8")))) {
    p->version_ = 8;
  } else {
    return makeError(ErrorCode::kNotFound,
                     p->path_ + " exports no ncclNetPlugin_v12/v11/v10/v9/v8 (unsupported plugin)");
  }
  switch (p->version_) {
    case 12: {
      C4NcclCommConfig cfg{C4_NCCL_NET_TRAFFIC_CLASS_UNDEF};
      C4_RETURN_IF_ERROR(
          check(p->v12_->init(&p->ctx_, 0xC4, &cfg, netbenchLogger, nullptr), "init"));
      p->name_ = p->v12_->name;
      C4_RETURN_IF_ERROR(check(p->v12_->devices(&p->ndev_), "devices"));
      C4NcclPropertiesV12 props{};
      if (p->ndev_ > 0)
        C4_RETURN_IF_ERROR(check(p->v12_->getProperties(0, &props), "getProperties"));
      p->max_recvs_ = props.maxRecvs;
      p->max_p2p_bytes_ = props.maxP2pBytes;
      break;
    }
    case 11: {
      C4NcclCommConfig cfg{C4_NCCL_NET_TRAFFIC_CLASS_UNDEF};
      C4_RETURN_IF_ERROR(
          check(p->v11_->init(&p->ctx_, 0xC4, &cfg, netbenchLogger, nullptr), "init"));
      p->name_ = p->v11_->name;
      C4_RETURN_IF_ERROR(check(p->v11_->devices(&p->ndev_), "devices"));
      C4NcclPropertiesV11 props{};
      if (p->ndev_ > 0)
        C4_RETURN_IF_ERROR(check(p->v11_->getProperties(0, &props), "getProperties"));
      p->max_recvs_ = props.maxRecvs;
      p->max_p2p_bytes_ = props.maxP2pBytes;
      break;
    }
    case 10: {
      C4_RETURN_IF_ERROR(check(p->v10_->init(netbenchLogger, nullptr), "init"));
      p->name_ = p->v10_->name;
      C4_RETURN_IF_ERROR(check(p->v10_->devices(&p->ndev_), "devices"));
      C4NcclPropertiesV9 props{};
      if (p->ndev_ > 0)
        C4_RETURN_IF_ERROR(check(p->v10_->getProperties(0, &props), "getProperties"));
      p->max_recvs_ = props.maxRecvs;
      p->max_p2p_bytes_ = props.maxP2pBytes;
      break;
    }
    case 9: {
      C4_RETURN_IF_ERROR(check(p->v9_->init(netbenchLogger), "init"));
      p->name_ = p->v9_->name;
      C4_RETURN_IF_ERROR(check(p->v9_->devices(&p->ndev_), "devices"));
      C4NcclPropertiesV9 props{};
      if (p->ndev_ > 0)
        C4_RETURN_IF_ERROR(check(p->v9_->getProperties(0, &props), "getProperties"));
      p->max_recvs_ = props.maxRecvs;
      p->max_p2p_bytes_ = props.maxP2pBytes;
      break;
    }
    default: {
      C4_RETURN_IF_ERROR(check(p->v8_->init(netbenchLogger), "init"));
      p->name_ = p->v8_->name;
      C4_RETURN_IF_ERROR(check(p->v8_->devices(&p->ndev_), "devices"));
      C4NcclPropertiesV8 props{};
      if (p->ndev_ > 0)
        C4_RETURN_IF_ERROR(check(p->v8_->getProperties(0, &props), "getProperties"));
      p->max_recvs_ = props.maxRecvs;
      p->max_p2p_bytes_ = std::size_t{1} << 30;  // what NCCL assumes for v8
      break;
    }
  }
  if (p->ndev_ <= 0) return makeError(ErrorCode::kNotFound, "plugin reports no devices");
  if (p->max_p2p_bytes_ == 0 || p->max_p2p_bytes_ > (std::size_t{1} << 31) - 1) {
    p->max_p2p_bytes_ = (std::size_t{1} << 30);  // test() reports int sizes
  }
  return p;
}

LoadedPlugin::~LoadedPlugin() {
  if (version_ == 12 && v12_ != nullptr) v12_->finalize(ctx_);
  if (version_ == 11 && v11_ != nullptr) v11_->finalize(ctx_);
  if (lib_ != nullptr) ::dlclose(lib_);
}

// v12 and v11 have the same data-path signatures: `call11` is written against `n`, either table.
#define C4_DISPATCH(what, call11, call10, call9, call8) \
  switch (version_) {                                   \
    case 12: {                                          \
      const auto* n = v12_;                             \
      return check(call11, what);                       \
    }                                                   \
    case 11: {                                          \
      const auto* n = v11_;                             \
      return check(call11, what);                       \
    }                                                   \
    case 10:                                            \
      return check(call10, what);                       \
    case 9:                                             \
      return check(call9, what);                        \
    default:                                            \
      return check(call8, what);                        \
  }

Status LoadedPlugin::listen(int dev, void* handle, void** lc) {
  C4_DISPATCH("listen", n->listen(ctx_, dev, handle, lc), v10_->listen(dev, handle, lc),
              v9_->listen(dev, handle, lc), v8_->listen(dev, handle, lc));
}

Status LoadedPlugin::connect(int dev, void* handle, void** sc) {
  C4NcclNetDeviceHandle* dh = nullptr;
  C4NcclCommConfig cfg{C4_NCCL_NET_TRAFFIC_CLASS_UNDEF};
  C4_DISPATCH("connect", n->connect(ctx_, dev, handle, sc, &dh),
              v10_->connect(dev, &cfg, handle, sc, &dh), v9_->connect(dev, handle, sc, &dh),
              v8_->connect(dev, handle, sc, &dh));
}

Status LoadedPlugin::accept(void* lc, void** rc) {
  C4NcclNetDeviceHandle* dh = nullptr;
  C4_DISPATCH("accept", n->accept(lc, rc, &dh), v10_->accept(lc, rc, &dh), v9_->accept(lc, rc, &dh),
              v8_->accept(lc, rc, &dh));
}

Status LoadedPlugin::regMr(void* comm, void* data, std::size_t size, void** mh) {
  C4_DISPATCH("regMr", n->regMr(comm, data, size, C4_NCCL_PTR_HOST, mh),
              v10_->regMr(comm, data, size, C4_NCCL_PTR_HOST, mh),
              v9_->regMr(comm, data, size, C4_NCCL_PTR_HOST, mh),
              v8_->regMr(comm, data, size, C4_NCCL_PTR_HOST, mh));
}

Status LoadedPlugin::deregMr(void* comm, void* mh) {
  C4_DISPATCH("deregMr", n->deregMr(comm, mh), v10_->deregMr(comm, mh), v9_->deregMr(comm, mh),
              v8_->deregMr(comm, mh));
}

Status LoadedPlugin::isend(void* sc, void* data, std::size_t size, int tag, void* mh, void** req) {
  C4_DISPATCH("isend", n->isend(sc, data, size, tag, mh, nullptr, req),
              v10_->isend(sc, data, size, tag, mh, nullptr, req),
              v9_->isend(sc, data, size, tag, mh, req),
              v8_->isend(sc, data, static_cast<int>(size), tag, mh, req));
}

Status LoadedPlugin::irecv(void* rc, void* data, std::size_t size, int tag, void* mh, void** req) {
  void* d[1] = {data};
  std::size_t s[1] = {size};
  int small[1] = {static_cast<int>(size)};
  int t[1] = {tag};
  void* m[1] = {mh};
  void* ph[1] = {nullptr};
  C4_DISPATCH("irecv", n->irecv(rc, 1, d, s, t, m, ph, req),
              v10_->irecv(rc, 1, d, s, t, m, ph, req), v9_->irecv(rc, 1, d, s, t, m, req),
              v8_->irecv(rc, 1, d, small, t, m, req));
}

Status LoadedPlugin::test(void* req, bool* done, int* size) {
  int d = 0;
  int sizes[64] = {};
  Status s;
  switch (version_) {
    case 12:
      s = check(v12_->test(req, &d, sizes), "test");
      break;
    case 11:
      s = check(v11_->test(req, &d, sizes), "test");
      break;
    case 10:
      s = check(v10_->test(req, &d, sizes), "test");
      break;
    case 9:
      s = check(v9_->test(req, &d, sizes), "test");
      break;
    default:
      s = check(v8_->test(req, &d, sizes), "test");
  }
  *done = d != 0;
  if (size != nullptr) *size = sizes[0];
  return s;
}

Status LoadedPlugin::closeSend(void* c) {
  C4_DISPATCH("closeSend", n->closeSend(c), v10_->closeSend(c), v9_->closeSend(c),
              v8_->closeSend(c));
}
Status LoadedPlugin::closeRecv(void* c) {
  C4_DISPATCH("closeRecv", n->closeRecv(c), v10_->closeRecv(c), v9_->closeRecv(c),
              v8_->closeRecv(c));
}
Status LoadedPlugin::closeListen(void* c) {
  C4_DISPATCH("closeListen", n->closeListen(c), v10_->closeListen(c), v9_->closeListen(c),
              v8_->closeListen(c));
}

}  // namespace c4::netbench
