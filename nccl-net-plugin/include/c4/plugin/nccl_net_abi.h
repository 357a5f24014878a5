/* The NCCL net plugin ABI, versions 8 to 12, as NCCL 2.20 ... 2.32 load it.
 *
 * Our own declarations, checked member by member against NVIDIA/nccl
 * `ext-net/example/nccl/net_v8.h ... net_v11.h`, `src/include/plugin/net/net_v11.h` (tags
 * v2.28.7/v2.28.9) and `plugins/net/example/nccl/net_v12.h`, `src/include/plugin/net/net_v12.h`
 * (tag v2.30.7). Names carry a `C4Nccl` prefix so this header never clashes with an installed
 * nccl.h; the layouts (member order, types) are the ABI.
 *
 * Plain C11 so the C conformance test can include it.
 */
#ifndef C4_PLUGIN_NCCL_NET_ABI_H_
#define C4_PLUGIN_NCCL_NET_ABI_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ncclResult_t values (nccl.h). */
typedef enum {
  C4_NCCL_SUCCESS = 0,
  C4_NCCL_UNHANDLED_CUDA_ERROR = 1,
  C4_NCCL_SYSTEM_ERROR = 2,
  C4_NCCL_INTERNAL_ERROR = 3,
  C4_NCCL_INVALID_ARGUMENT = 4,
  C4_NCCL_INVALID_USAGE = 5,
  C4_NCCL_REMOTE_ERROR = 6,
  C4_NCCL_IN_PROGRESS = 7
} C4NcclResult;

/* ncclDebugLogLevel */
typedef enum {
  C4_NCCL_LOG_NONE = 0,
  C4_NCCL_LOG_VERSION = 1,
  C4_NCCL_LOG_WARN = 2,
  C4_NCCL_LOG_INFO = 3,
  C4_NCCL_LOG_ABORT = 4,
  C4_NCCL_LOG_TRACE = 5
} C4NcclLogLevel;

/* ncclDebugLogSubSys bits used by the plugin. */
#define C4_NCCL_SUBSYS_INIT 0x1UL
#define C4_NCCL_SUBSYS_NET 0x10UL
#define C4_NCCL_SUBSYS_ALL (~0UL)

/* ncclDebugLogger_t */
typedef void (*C4NcclLogFn)(C4NcclLogLevel level, unsigned long flags, const char* file, int line,
                            const char* fmt, ...);
/* ncclProfilerCallback_t */
typedef C4NcclResult (*C4NcclProfilerFn)(void** eHandle, int type, void* pHandle, int64_t pluginId,
                                         void* extData);

#define C4_NCCL_NET_HANDLE_MAXSIZE 128
#define C4_NCCL_NET_MAX_REQUESTS 32
#define C4_NCCL_PTR_HOST 0x1
#define C4_NCCL_PTR_CUDA 0x2
#define C4_NCCL_PTR_DMABUF 0x4
#define C4_NCCL_NET_OPTIONAL_RECV_COMPLETION 0x1
#define C4_NCCL_MAX_NET_SIZE_BYTES (1ULL << 40)
#define C4_NCCL_NET_MAX_DEVS_PER_NIC 4 /* v9 ... v11 */
#define C4_NCCL_NET_MAX_DEVS_PER_NIC_V12 8
#define C4_NCCL_NET_ID_UNDEF (-1) /* railId / planeId not known (v12) */
#define C4_NCCL_NET_TRAFFIC_CLASS_UNDEF (-1)
#define C4_NCCL_NET_DEVICE_HOST 0
#define C4_NCCL_NET_DEVICE_INVALID_VERSION 0

/* ncclNetDeviceHandle_v7..v12_t */
typedef struct {
  int netDeviceType; /* enum, int-sized */
  int netDeviceVersion;
  void* handle;
  size_t size;
  int needsProxyProgress;
} C4NcclNetDeviceHandle;

/* ncclNetVDeviceProps_v9..v11_t */
typedef struct {
  int ndevs;
  int devs[C4_NCCL_NET_MAX_DEVS_PER_NIC];
} C4NcclVDeviceProps;

/* ncclNetVDeviceProps_v12_t */
typedef struct {
  int ndevs;
  int devs[C4_NCCL_NET_MAX_DEVS_PER_NIC_V12];
} C4NcclVDevicePropsV12;

/* ncclNetCommConfig_v10/v11/v12_t */
typedef struct {
  int trafficClass;
} C4NcclCommConfig;

/* ncclNetCommAttr_v11/v12_t / ncclNetAttr_v11/v12_t (undefined fields are -1 / 0xFFFFFFFF) */
typedef struct {
  int32_t maxConcurrentPeers;
  int32_t minConcurrentPeers;
  int32_t maxFlowsPerPeer;
  int32_t minFlowsPerPeer;
} C4NcclCommAttr;

typedef struct {
  C4NcclCommAttr sendCommAttr;
  C4NcclCommAttr recvCommAttr;
  uint32_t op;
  uint32_t algo;
  uint32_t proto;
} C4NcclNetAttr;

/* ncclNetProperties_v8_t */
typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int speed; /* Mbps */
  int port;
  float latency; /* microseconds */
  int maxComms;
  int maxRecvs;
  int netDeviceType;
  int netDeviceVersion;
} C4NcclPropertiesV8;

/* ncclNetProperties_v9_t and ncclNetProperties_v10_t (identical) */
typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  int netDeviceType;
  int netDeviceVersion;
  C4NcclVDeviceProps vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
} C4NcclPropertiesV9;

/* ncclNetProperties_v11_t */
typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  int netDeviceType;
  int netDeviceVersion;
  C4NcclVDeviceProps vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize;
} C4NcclPropertiesV11;

/* ncclNetProperties_v12_t: v11 with 8 devices in vProps, then railId and planeId. */
typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  int netDeviceType;
  int netDeviceVersion;
  C4NcclVDevicePropsV12 vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize;
  int16_t railId;  /* C4_NCCL_NET_ID_UNDEF when unknown */
  int16_t planeId; /* C4_NCCL_NET_ID_UNDEF when unknown */
} C4NcclPropertiesV12;

/* ncclNet_v12_t: symbol ncclNetPlugin_v12 (NCCL 2.30+; probed first). 22 members, the order of
 * v11; getProperties and makeVDevice take the v12 structs. */
typedef struct {
  const char* name;
  C4NcclResult (*init)(void** ctx, uint64_t commId, C4NcclCommConfig* config, C4NcclLogFn logFn,
                       C4NcclProfilerFn profFn);
  C4NcclResult (*devices)(int* ndev);
  C4NcclResult (*getProperties)(int dev, C4NcclPropertiesV12* props);
  C4NcclResult (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  C4NcclResult (*connect)(void* ctx, int dev, void* handle, void** sendComm,
                          C4NcclNetDeviceHandle** sendDevComm);
  C4NcclResult (*accept)(void* listenComm, void** recvComm, C4NcclNetDeviceHandle** recvDevComm);
  C4NcclResult (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  C4NcclResult (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  C4NcclResult (*deregMr)(void* comm, void* mhandle);
  C4NcclResult (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                        void* phandle, void** request);
  C4NcclResult (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags,
                        void** mhandles, void** phandles, void** request);
  C4NcclResult (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                         void** request);
  C4NcclResult (*test)(void* request, int* done, int* sizes);
  C4NcclResult (*closeSend)(void* sendComm);
  C4NcclResult (*closeRecv)(void* recvComm);
  C4NcclResult (*closeListen)(void* listenComm);
  C4NcclResult (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  C4NcclResult (*irecvConsumed)(void* recvComm, int n, void* request);
  C4NcclResult (*makeVDevice)(int* d, C4NcclVDevicePropsV12* props);
  C4NcclResult (*finalize)(void* ctx);
  C4NcclResult (*setNetAttr)(void* ctx, C4NcclNetAttr* netAttr);
} C4NcclNetV12;

/* ncclNet_v11_t: symbol ncclNetPlugin_v11 (NCCL 2.28, 2.29; still accepted by 2.30+). 22 members.
 */
typedef struct {
  const char* name;
  C4NcclResult (*init)(void** ctx, uint64_t commId, C4NcclCommConfig* config, C4NcclLogFn logFn,
                       C4NcclProfilerFn profFn);
  C4NcclResult (*devices)(int* ndev);
  C4NcclResult (*getProperties)(int dev, C4NcclPropertiesV11* props);
  C4NcclResult (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  C4NcclResult (*connect)(void* ctx, int dev, void* handle, void** sendComm,
                          C4NcclNetDeviceHandle** sendDevComm);
  C4NcclResult (*accept)(void* listenComm, void** recvComm, C4NcclNetDeviceHandle** recvDevComm);
  C4NcclResult (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  C4NcclResult (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  C4NcclResult (*deregMr)(void* comm, void* mhandle);
  C4NcclResult (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                        void* phandle, void** request);
  C4NcclResult (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags,
                        void** mhandles, void** phandles, void** request);
  C4NcclResult (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                         void** request);
  C4NcclResult (*test)(void* request, int* done, int* sizes);
  C4NcclResult (*closeSend)(void* sendComm);
  C4NcclResult (*closeRecv)(void* recvComm);
  C4NcclResult (*closeListen)(void* listenComm);
  C4NcclResult (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  C4NcclResult (*irecvConsumed)(void* recvComm, int n, void* request);
  C4NcclResult (*makeVDevice)(int* d, C4NcclVDeviceProps* props);
  C4NcclResult (*finalize)(void* ctx);
  C4NcclResult (*setNetAttr)(void* ctx, C4NcclNetAttr* netAttr);
} C4NcclNetV11;

/* ncclNet_v10_t: symbol ncclNetPlugin_v10 (NCCL 2.26, 2.27). 20 members. */
typedef struct {
  const char* name;
  C4NcclResult (*init)(C4NcclLogFn logFn, C4NcclProfilerFn profFn);
  C4NcclResult (*devices)(int* ndev);
  C4NcclResult (*getProperties)(int dev, C4NcclPropertiesV9* props);
  C4NcclResult (*listen)(int dev, void* handle, void** listenComm);
  C4NcclResult (*connect)(int dev, C4NcclCommConfig* config, void* handle, void** sendComm,
                          C4NcclNetDeviceHandle** sendDevComm);
  C4NcclResult (*accept)(void* listenComm, void** recvComm, C4NcclNetDeviceHandle** recvDevComm);
  C4NcclResult (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  C4NcclResult (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  C4NcclResult (*deregMr)(void* comm, void* mhandle);
  C4NcclResult (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                        void* phandle, void** request);
  C4NcclResult (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags,
                        void** mhandles, void** phandles, void** request);
  C4NcclResult (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                         void** request);
  C4NcclResult (*test)(void* request, int* done, int* sizes);
  C4NcclResult (*closeSend)(void* sendComm);
  C4NcclResult (*closeRecv)(void* recvComm);
  C4NcclResult (*closeListen)(void* listenComm);
  C4NcclResult (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  C4NcclResult (*irecvConsumed)(void* recvComm, int n, void* request);
  C4NcclResult (*makeVDevice)(int* d, C4NcclVDeviceProps* props);
} C4NcclNetV10;

/* ncclNet_v9_t: symbol ncclNetPlugin_v9 (NCCL 2.24, 2.25). 20 members. */
typedef struct {
  const char* name;
  C4NcclResult (*init)(C4NcclLogFn logFn);
  C4NcclResult (*devices)(int* ndev);
  C4NcclResult (*getProperties)(int dev, C4NcclPropertiesV9* props);
  C4NcclResult (*listen)(int dev, void* handle, void** listenComm);
  C4NcclResult (*connect)(int dev, void* handle, void** sendComm,
                          C4NcclNetDeviceHandle** sendDevComm);
  C4NcclResult (*accept)(void* listenComm, void** recvComm, C4NcclNetDeviceHandle** recvDevComm);
  C4NcclResult (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  C4NcclResult (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  C4NcclResult (*deregMr)(void* comm, void* mhandle);
  C4NcclResult (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                        void** request);
  C4NcclResult (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags,
                        void** mhandles, void** request);
  C4NcclResult (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                         void** request);
  C4NcclResult (*test)(void* request, int* done, int* sizes);
  C4NcclResult (*closeSend)(void* sendComm);
  C4NcclResult (*closeRecv)(void* recvComm);
  C4NcclResult (*closeListen)(void* listenComm);
  C4NcclResult (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  C4NcclResult (*irecvConsumed)(void* recvComm, int n, void* request);
  C4NcclResult (*makeVDevice)(int* d, C4NcclVDeviceProps* props);
} C4NcclNetV9;

/* ncclNet_v8_t: symbol ncclNetPlugin_v8 (NCCL 2.20 ... 2.23). 19 members. */
typedef struct {
  const char* name;
  C4NcclResult (*init)(C4NcclLogFn logFn);
  C4NcclResult (*devices)(int* ndev);
  C4NcclResult (*getProperties)(int dev, C4NcclPropertiesV8* props);
  C4NcclResult (*listen)(int dev, void* handle, void** listenComm);
  C4NcclResult (*connect)(int dev, void* handle, void** sendComm,
                          C4NcclNetDeviceHandle** sendDevComm);
  C4NcclResult (*accept)(void* listenComm, void** recvComm, C4NcclNetDeviceHandle** recvDevComm);
  C4NcclResult (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  C4NcclResult (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  C4NcclResult (*deregMr)(void* comm, void* mhandle);
  C4NcclResult (*isend)(void* sendComm, void* data, int size, int tag, void* mhandle,
                        void** request);
  C4NcclResult (*irecv)(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles,
                        void** request);
  C4NcclResult (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                         void** request);
  C4NcclResult (*test)(void* request, int* done, int* sizes);
  C4NcclResult (*closeSend)(void* sendComm);
  C4NcclResult (*closeRecv)(void* recvComm);
  C4NcclResult (*closeListen)(void* listenComm);
  C4NcclResult (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  C4NcclResult (*irecvConsumed)(void* recvComm, int n, void* request);
} C4NcclNetV8;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* C4_PLUGIN_NCCL_NET_ABI_H_ */
