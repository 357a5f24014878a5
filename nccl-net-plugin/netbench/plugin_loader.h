// Loads a NCCL net plugin the way NCCL 2.30+ does: dlopen with RTLD_NOW|RTLD_LOCAL, name resolution
// (as given, then libnccl-net-<name>.so), probing ncclNetPlugin_v12 -> v11 -> v10 -> v9 -> v8,
// then init and devices. One object per communicator-like use; v12/v11 get their own context,
// older versions share the plugin's process-wide state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "c4/common/error.h"
#include "c4/plugin/nccl_net_abi.h"

namespace c4::netbench {

// Opens an NCCL plugin library as NCCL's plugin_open.cc does: dlopen(RTLD_NOW | RTLD_LOCAL) of
// `name` as given, then, for a bare name (no '/', not already lib*.so), of
// libnccl-<kind>-<name>.so. `kind`: "net" or "profiler". The error lists every try.
struct OpenedLibrary {
  void* handle = nullptr;
  std::string path;  // the name that opened
};
Result<OpenedLibrary> openNcclPlugin(const std::string& name, const std::string& kind);

class LoadedPlugin {
 public:
  static Result<std::unique_ptr<LoadedPlugin>> load(const std::string& name);
  ~LoadedPlugin();  // finalize (v11) and dlclose
  LoadedPlugin(const LoadedPlugin&) = delete;
  LoadedPlugin& operator=(const LoadedPlugin&) = delete;

  [[nodiscard]] int version() const { return version_; }
  [[nodiscard]] const std::string& path() const { return path_; }
  [[nodiscard]] const std::string& name() const { return name_; }
  [[nodiscard]] int devices() const { return ndev_; }
  [[nodiscard]] int maxRecvs() const { return max_recvs_; }
  [[nodiscard]] std::size_t maxP2pBytes() const { return max_p2p_bytes_; }

  Status listen(int dev, void* handle, void** listenComm);
  Status connect(int dev, void* handle, void** sendComm);  // *sendComm may stay NULL: retry
  Status accept(void* listenComm, void** recvComm);        // *recvComm may stay NULL: retry
  Status regMr(void* comm, void* data, std::size_t size, void** mhandle);
  Status deregMr(void* comm, void* mhandle);
  Status isend(void* sendComm, void* data, std::size_t size, int tag, void* mhandle,
               void** request);
  Status irecv(void* recvComm, void* data, std::size_t size, int tag, void* mhandle,
               void** request);
  Status test(void* request, bool* done, int* size);
  Status closeSend(void* comm);
  Status closeRecv(void* comm);
  Status closeListen(void* comm);

 private:
  LoadedPlugin() = default;
  static Status check(C4NcclResult r, const char* what);

  void* lib_ = nullptr;
  std::string path_;
  std::string name_;
  int version_ = 0;
  const C4NcclNetV12* v12_ = nullptr;
  const C4NcclNetV11* v11_ = nullptr;
  const C4NcclNetV10* v10_ = nullptr;
  const C4NcclNetV9* v9_ = nullptr;
  const C4NcclNetV8* v8_ = nullptr;
  void* ctx_ = nullptr;
  int ndev_ = 0;
  int max_recvs_ = 1;
  std::size_t max_p2p_bytes_ = std::size_t{1} << 30;
};

}  // namespace c4::netbench
