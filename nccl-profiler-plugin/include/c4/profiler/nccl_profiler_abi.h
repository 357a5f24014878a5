/* The NCCL profiler plugin ABI, versions 1 to 6, as NCCL 2.23 ... 2.30 load it.
 *
 * Our own declarations, written from NVIDIA/nccl tag v2.30.7-1:
 *   src/include/plugin/nccl_profiler.h          l.11-28 (event bits), l.30-81 (states)
 *   src/include/plugin/profiler/profiler_v1.h   l.11-107
 *   src/include/plugin/profiler/profiler_v2.h   l.11-104
 *   src/include/plugin/profiler/profiler_v3.h   l.11-112
 *   src/include/plugin/profiler/profiler_v4.h   l.11-124
 *   src/include/plugin/profiler/profiler_v5.h   l.11-152
 *   src/include/plugin/profiler/profiler_v6.h   l.14-147
 * Each layout is unchanged since the tag that introduced it (v2.23.4-1 ... v2.29.2-1) except for
 * `pid_t` -> `ncclPid_t`, which is `pid_t` on Linux (src/include/os/linux.h l.34). Names carry a
 * `C4Nccl` prefix so this header never clashes with NCCL's; the layouts (member order and types)
 * are the ABI, and the static_asserts at the end pin every offset the plugin reads on x86-64 and
 * aarch64 (LP64). The values were cross-checked by compiling NCCL's own headers (see
 * nccl-profiler-plugin/README.md "ABI check").
 *
 * Plain C11 so the C conformance test can include it.
 */
#ifndef C4_PROFILER_NCCL_PROFILER_ABI_H_
#define C4_PROFILER_NCCL_PROFILER_ABI_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ncclResult_t (nccl.h): the values a profiler returns. */
typedef enum {
  C4_NCCL_PROF_SUCCESS = 0,
  C4_NCCL_PROF_SYSTEM_ERROR = 2,
  C4_NCCL_PROF_INTERNAL_ERROR = 3,
  C4_NCCL_PROF_INVALID_ARGUMENT = 4,
  C4_NCCL_PROF_INVALID_USAGE = 5
} C4NcclProfResult;

/* ncclDebugLogger_t (src/include/nccl_common.h l.46); levels: WARN 2, INFO 3. */
typedef void (*C4NcclProfLogFn)(int level, unsigned long flags, const char* file, int line,
                                const char* fmt, ...);

/* Event type bits (nccl_profiler.h l.11-28). v1..v4 carry them in a uint8_t, v5/v6 in a uint64_t.
 */
enum {
  C4_NCCL_PROFILE_GROUP = 1 << 0,
  C4_NCCL_PROFILE_COLL = 1 << 1,
  C4_NCCL_PROFILE_P2P = 1 << 2,
  C4_NCCL_PROFILE_PROXY_OP = 1 << 3,
  C4_NCCL_PROFILE_PROXY_STEP = 1 << 4,
  C4_NCCL_PROFILE_PROXY_CTRL = 1 << 5,
  C4_NCCL_PROFILE_KERNEL_CH = 1 << 6,      /* v3+ */
  C4_NCCL_PROFILE_NET_PLUGIN = 1 << 7,     /* v3+ */
  C4_NCCL_PROFILE_GROUP_API = 1 << 8,      /* v5+ */
  C4_NCCL_PROFILE_COLL_API = 1 << 9,       /* v5+ */
  C4_NCCL_PROFILE_P2P_API = 1 << 10,       /* v5+ */
  C4_NCCL_PROFILE_KERNEL_LAUNCH = 1 << 11, /* v5+ */
  C4_NCCL_PROFILE_CE_COLL = 1 << 12,       /* v6 */
  C4_NCCL_PROFILE_CE_SYNC = 1 << 13,       /* v6 */
  C4_NCCL_PROFILE_CE_BATCH = 1 << 14       /* v6 */
};

/* ncclProfilerEventState_t (nccl_profiler.h l.30-74): one enum shared by every version. */
typedef enum {
  C4_NCCL_PROF_PROXY_OP_SEND_POSTED = 0, /* 0..7: ProxyOp states, emitted before NCCL 2.27 */
  C4_NCCL_PROF_PROXY_OP_SEND_REM_FIFO_WAIT = 1,
  C4_NCCL_PROF_PROXY_OP_SEND_TRANSMITTED = 2,
  C4_NCCL_PROF_PROXY_OP_SEND_DONE = 3,
  C4_NCCL_PROF_PROXY_OP_RECV_POSTED = 4,
  C4_NCCL_PROF_PROXY_OP_RECV_RECEIVED = 5,
  C4_NCCL_PROF_PROXY_OP_RECV_TRANSMITTED = 6,
  C4_NCCL_PROF_PROXY_OP_RECV_DONE = 7,
  C4_NCCL_PROF_PROXY_STEP_SEND_GPU_WAIT = 8,
  C4_NCCL_PROF_PROXY_STEP_SEND_WAIT = 9,
  C4_NCCL_PROF_PROXY_STEP_RECV_WAIT = 10,
  C4_NCCL_PROF_PROXY_STEP_RECV_FLUSH_WAIT = 11,
  C4_NCCL_PROF_PROXY_STEP_RECV_GPU_WAIT = 12,
  C4_NCCL_PROF_PROXY_CTRL_IDLE = 13,
  C4_NCCL_PROF_PROXY_CTRL_ACTIVE = 14,
  C4_NCCL_PROF_PROXY_CTRL_SLEEP = 15,
  C4_NCCL_PROF_PROXY_CTRL_WAKEUP = 16,
  C4_NCCL_PROF_PROXY_CTRL_APPEND = 17,
  C4_NCCL_PROF_PROXY_CTRL_APPEND_END = 18,
  C4_NCCL_PROF_PROXY_OP_IN_PROGRESS_V4 = 19,
  C4_NCCL_PROF_PROXY_STEP_SEND_PEER_WAIT_V4 = 20,
  C4_NCCL_PROF_NET_PLUGIN_UPDATE = 21,
  C4_NCCL_PROF_KERNEL_CH_STOP = 22,
  C4_NCCL_PROF_GROUP_START_API_STOP = 23,
  C4_NCCL_PROF_GROUP_END_API_START = 24,
  C4_NCCL_PROF_CE_COLL_START = 25,
  C4_NCCL_PROF_CE_COLL_COMPLETE = 26,
  C4_NCCL_PROF_CE_SYNC_START = 27,
  C4_NCCL_PROF_CE_SYNC_COMPLETE = 28,
  C4_NCCL_PROF_CE_BATCH_START = 29,
  C4_NCCL_PROF_CE_BATCH_COMPLETE = 30
} C4NcclProfState;

/* Descriptor members that did not change between versions. */
typedef struct {
  pid_t pid; /* of the process that created the op (PXN: may be another process) */
  uint8_t channelId;
  int peer;
  int nSteps;
  int chunkSize;
  int isSend;
} C4NcclProfProxyOpDescr;

typedef struct {
  int step;
} C4NcclProfProxyStepDescr;

typedef struct {
  int64_t id;
  void* data;
} C4NcclProfNetPluginDescr;

/* ---- v1 (profiler_v1.h l.11-107): integer func/datatype/algo/proto, init(ctx, mask) ---- */
typedef struct {
  uint8_t type;
  void* parentObj;
  int rank;
  union {
    struct {
      const char* name;
      uint64_t commHash;
      uint64_t seqNumber;
      uint8_t func;
      const void* sendBuff;
      void* recvBuff;
      size_t count;
      int root;
      uint8_t datatype;
      uint32_t op;
      size_t trafficBytes;
      uint8_t nMaxChannels;
      uint8_t nWarps;
      uint8_t algo;
      uint8_t proto;
      int isCollnet;
      int isNvls;
    } coll;
    struct {
      const char* name;
      uint64_t commHash;
      uint8_t func;
      void* buff;
      uint8_t datatype;
      size_t count;
      int peer;
    } p2p;
    C4NcclProfProxyOpDescr proxyOp;
    C4NcclProfProxyStepDescr proxyStep;
  };
} C4NcclProfilerEventDescr_v1_t;

/* v1..v3 state args (profiler_v1.h l.61-70, v2 l.58-67, v3 l.66-75). */
typedef union {
  struct {
    size_t transSize;
    int steps;
  } proxyOp;
  struct {
    int appendedProxyOps;
  } proxyCtrl;
} C4NcclProfilerEventStateArgs_v1_t;
typedef C4NcclProfilerEventStateArgs_v1_t C4NcclProfilerEventStateArgs_v2_t;
typedef C4NcclProfilerEventStateArgs_v1_t C4NcclProfilerEventStateArgs_v3_t;

/* ---- v2 (profiler_v2.h l.11-104): func/datatype/algo/proto become strings ---- */
typedef struct {
  uint8_t type;
  void* parentObj;
  int rank;
  union {
    struct {
      const char* name;
      uint64_t commHash;
      uint64_t seqNumber;
      const char* func;
      const void* sendBuff;
      void* recvBuff;
      size_t count;
      int root;
      const char* datatype;
      size_t trafficBytes;
      uint8_t nMaxChannels;
      uint8_t nWarps;
      const char* algo;
      const char* proto;
    } coll;
    struct {
      const char* name;
      uint64_t commHash;
      const char* func;
      void* buff;
      const char* datatype;
      size_t count;
      int peer;
    } p2p;
    C4NcclProfProxyOpDescr proxyOp;
    C4NcclProfProxyStepDescr proxyStep;
  };
} C4NcclProfilerEventDescr_v2_t;

/* ---- v3 (profiler_v3.h l.11-112): no trafficBytes; kernelCh, netPlugin ---- */
typedef struct {
  uint8_t type;
  void* parentObj;
  int rank;
  union {
    struct {
      const char* name;
      uint64_t commHash;
      uint64_t seqNumber;
      const char* func;
      const void* sendBuff;
      void* recvBuff;
      size_t count;
      int root;
      const char* datatype;
      uint8_t nMaxChannels;
      uint8_t nWarps;
      const char* algo;
      const char* proto;
    } coll;
    struct {
      const char* name;
      uint64_t commHash;
      const char* func;
      void* buff;
      const char* datatype;
      size_t count;
      int peer;
    } p2p;
    C4NcclProfProxyOpDescr proxyOp;
    C4NcclProfProxyStepDescr proxyStep;
    struct {
      uint8_t channelId;
    } kernelCh;
    C4NcclProfNetPluginDescr netPlugin;
  };
} C4NcclProfilerEventDescr_v3_t;

/* ---- v4 (profiler_v4.h l.11-124): name/commHash move to init; new state args ---- */
typedef struct {
  uint8_t type;
  void* parentObj;
  int rank;
  union {
    struct {
      uint64_t seqNumber;
      const char* func;
      const void* sendBuff;
      void* recvBuff;
      size_t count;
      int root;
      const char* datatype;
      uint8_t nChannels;
      uint8_t nWarps;
      const char* algo;
      const char* proto;
    } coll;
    struct {
      const char* func;
      void* buff;
      const char* datatype;
      size_t count;
      int peer;
      uint8_t nChannels;
    } p2p;
    C4NcclProfProxyOpDescr proxyOp;
    C4NcclProfProxyStepDescr proxyStep;
    struct {
      uint8_t channelId;
      uint64_t pTimer;
    } kernelCh;
    C4NcclProfNetPluginDescr netPlugin;
  };
} C4NcclProfilerEventDescr_v4_t;

/* v4..v6 state args (profiler_v4.h l.64-80, v5 l.92-108, v6 l.126). */
typedef union {
  struct {
    size_t transSize;
  } proxyStep;
  struct {
    int appendedProxyOps;
  } proxyCtrl;
  struct {
    void* data;
  } netPlugin;
  struct {
    uint64_t pTimer;
  } kernelCh;
} C4NcclProfilerEventStateArgs_v4_t;
typedef C4NcclProfilerEventStateArgs_v4_t C4NcclProfilerEventStateArgs_v5_t;
typedef C4NcclProfilerEventStateArgs_v4_t C4NcclProfilerEventStateArgs_v6_t;

/* ---- v5 (profiler_v5.h l.11-152): uint64_t type, API events, parentGroup ---- */
#define C4_NCCL_PROF_V5_UNION_MEMBERS \
  struct {                            \
    bool graphCaptured;               \
    int groupDepth;                   \
  } groupApi;                         \
  struct {                            \
    const char* func;                 \
    size_t count;                     \
    const char* datatype;             \
    int root;                         \
    void* stream;                     \
    bool graphCaptured;               \
  } collApi;                          \
  struct {                            \
    const char* func;                 \
    size_t count;                     \
    const char* datatype;             \
    void* stream;                     \
    bool graphCaptured;               \
  } p2pApi;                           \
  struct {                            \
    void* stream;                     \
  } kernelLaunch;                     \
  struct {                            \
    uint64_t seqNumber;               \
    const char* func;                 \
    const void* sendBuff;             \
    void* recvBuff;                   \
    size_t count;                     \
    int root;                         \
    const char* datatype;             \
    uint8_t nChannels;                \
    uint8_t nWarps;                   \
    const char* algo;                 \
    const char* proto;                \
    void* parentGroup;                \
  } coll;                             \
  struct {                            \
    const char* func;                 \
    void* buff;                       \
    const char* datatype;             \
    size_t count;                     \
    int peer;                         \
    uint8_t nChannels;                \
    void* parentGroup;                \
  } p2p;                              \
  C4NcclProfProxyOpDescr proxyOp;     \
  C4NcclProfProxyStepDescr proxyStep; \
  struct {                            \
    uint8_t channelId;                \
    uint64_t pTimer;                  \
  } kernelCh;                         \
  C4NcclProfNetPluginDescr netPlugin;

typedef struct {
  uint64_t type;
  void* parentObj;
  int rank;
  union {
    C4_NCCL_PROF_V5_UNION_MEMBERS
  };
} C4NcclProfilerEventDescr_v5_t;

/* ---- v6 (profiler_v6.h l.14-122): v5 + copy-engine events ---- */
typedef struct {
  uint64_t type;
  void* parentObj;
  int rank;
  union {
    C4_NCCL_PROF_V5_UNION_MEMBERS
    struct {
      uint64_t seqNumber;
      const char* func;
      const void* sendBuff;
      void* recvBuff;
      size_t count;
      int root;
      const char* datatype;
      const char* syncStrategy;
      bool intraBatchSync;
      uint32_t batchSize;
      uint32_t numBatches;
      uint32_t ceSeqNum;
      void* stream;
    } ceColl;
    struct {
      bool isComplete;
      int nRanks;
    } ceCollSync;
    struct {
      int numOps;
      size_t totalBytes;
      bool useIntraSync;
    } ceCollBatch;
  };
} C4NcclProfilerEventDescr_v6_t;

/* ---- Function tables (the exported symbols ncclProfiler_v1 ... ncclProfiler_v6) ---- */
#define C4_NCCL_PROFILER_TABLE(V, INIT_ARGS)                                                \
  typedef struct {                                                                          \
    const char* name;                                                                       \
    C4NcclProfResult(*init) INIT_ARGS;                                                      \
    C4NcclProfResult (*startEvent)(void* context, void** eHandle,                           \
                                   C4NcclProfilerEventDescr_##V##_t* eDescr);               \
    C4NcclProfResult (*stopEvent)(void* eHandle);                                           \
    C4NcclProfResult (*recordEventState)(void* eHandle, C4NcclProfState eState,             \
                                         C4NcclProfilerEventStateArgs_##V##_t* eStateArgs); \
    C4NcclProfResult (*finalize)(void* context);                                            \
  } C4NcclProfiler_##V##_t

/* v1..v3: init(ctx, mask) (profiler_v1.h l.80, v2 l.77, v3 l.85). */
C4_NCCL_PROFILER_TABLE(v1, (void** context, int* eActivationMask));
C4_NCCL_PROFILER_TABLE(v2, (void** context, int* eActivationMask));
C4_NCCL_PROFILER_TABLE(v3, (void** context, int* eActivationMask));
/* v4: init(ctx, mask, commName, commHash, nNodes, nranks, rank, logfn) (profiler_v4.h l.96). */
C4_NCCL_PROFILER_TABLE(v4, (void** context, int* eActivationMask, const char* commName,
                            uint64_t commHash, int nNodes, int nranks, int rank,
                            C4NcclProfLogFn logfn));
/* v5/v6: commId moves to 2nd place (profiler_v5.h l.124, profiler_v6.h l.132). */
C4_NCCL_PROFILER_TABLE(v5,
                       (void** context, uint64_t commId, int* eActivationMask, const char* commName,
                        int nNodes, int nranks, int rank, C4NcclProfLogFn logfn));
C4_NCCL_PROFILER_TABLE(v6,
                       (void** context, uint64_t commId, int* eActivationMask, const char* commName,
                        int nNodes, int nranks, int rank, C4NcclProfLogFn logfn));

/* ---- Layout checks (LP64): derived from NCCL's headers, confirmed by compiling them ---- */
#ifdef __cplusplus
#define C4_PROF_STATIC_ASSERT(e, m) static_assert(e, m)
#else
#define C4_PROF_STATIC_ASSERT(e, m) _Static_assert(e, m)
#endif
#define C4_PROF_OFF(T, m, v) C4_PROF_STATIC_ASSERT(offsetof(T, m) == (v), #T "." #m)
#define C4_PROF_SIZE(T, v) C4_PROF_STATIC_ASSERT(sizeof(T) == (v), "sizeof " #T)

C4_PROF_SIZE(C4NcclProfProxyOpDescr, 24);
C4_PROF_SIZE(C4NcclProfilerEventStateArgs_v1_t, 16);
C4_PROF_SIZE(C4NcclProfilerEventStateArgs_v4_t, 8);

C4_PROF_SIZE(C4NcclProfilerEventDescr_v1_t, 120);
C4_PROF_OFF(C4NcclProfilerEventDescr_v1_t, parentObj, 8);
C4_PROF_OFF(C4NcclProfilerEventDescr_v1_t, rank, 16);
C4_PROF_OFF(C4NcclProfilerEventDescr_v1_t, coll.commHash, 32);
C4_PROF_OFF(C4NcclProfilerEventDescr_v1_t, coll.seqNumber, 40);
C4_PROF_OFF(C4NcclProfilerEventDescr_v1_t, coll.func, 48);
C4_PROF_OFF(C4NcclProfilerEventDescr_v1_t, coll.count, 72);
C4_PROF_OFF(C4NcclProfilerEventDescr_v1_t, coll.datatype, 84);
C4_PROF_OFF(C4NcclProfilerEventDescr_v1_t, coll.trafficBytes, 96);
C4_PROF_OFF(C4NcclProfilerEventDescr_v1_t, coll.isNvls, 112);
C4_PROF_OFF(C4NcclProfilerEventDescr_v1_t, p2p.func, 40);
C4_PROF_OFF(C4NcclProfilerEventDescr_v1_t, p2p.peer, 72);
C4_PROF_OFF(C4NcclProfilerEventDescr_v1_t, proxyOp.pid, 24);
C4_PROF_OFF(C4NcclProfilerEventDescr_v1_t, proxyOp.channelId, 28);
C4_PROF_OFF(C4NcclProfilerEventDescr_v1_t, proxyOp.peer, 32);
C4_PROF_OFF(C4NcclProfilerEventDescr_v1_t, proxyOp.isSend, 44);
C4_PROF_OFF(C4NcclProfilerEventDescr_v1_t, proxyStep.step, 24);

C4_PROF_SIZE(C4NcclProfilerEventDescr_v2_t, 128);
C4_PROF_OFF(C4NcclProfilerEventDescr_v2_t, coll.seqNumber, 40);
C4_PROF_OFF(C4NcclProfilerEventDescr_v2_t, coll.datatype, 88);
C4_PROF_OFF(C4NcclProfilerEventDescr_v2_t, coll.trafficBytes, 96);
C4_PROF_OFF(C4NcclProfilerEventDescr_v2_t, coll.proto, 120);
C4_PROF_OFF(C4NcclProfilerEventDescr_v2_t, p2p.peer, 72);

C4_PROF_SIZE(C4NcclProfilerEventDescr_v3_t, 120);
C4_PROF_OFF(C4NcclProfilerEventDescr_v3_t, coll.seqNumber, 40);
C4_PROF_OFF(C4NcclProfilerEventDescr_v3_t, coll.nMaxChannels, 96);
C4_PROF_OFF(C4NcclProfilerEventDescr_v3_t, coll.proto, 112);
C4_PROF_OFF(C4NcclProfilerEventDescr_v3_t, netPlugin.data, 32);

C4_PROF_SIZE(C4NcclProfilerEventDescr_v4_t, 104);
C4_PROF_OFF(C4NcclProfilerEventDescr_v4_t, coll.seqNumber, 24);
C4_PROF_OFF(C4NcclProfilerEventDescr_v4_t, coll.nChannels, 80);
C4_PROF_OFF(C4NcclProfilerEventDescr_v4_t, coll.proto, 96);
C4_PROF_OFF(C4NcclProfilerEventDescr_v4_t, p2p.peer, 56);
C4_PROF_OFF(C4NcclProfilerEventDescr_v4_t, p2p.nChannels, 60);
C4_PROF_OFF(C4NcclProfilerEventDescr_v4_t, kernelCh.pTimer, 32);

C4_PROF_SIZE(C4NcclProfilerEventDescr_v5_t, 112);
C4_PROF_OFF(C4NcclProfilerEventDescr_v5_t, parentObj, 8);
C4_PROF_OFF(C4NcclProfilerEventDescr_v5_t, rank, 16);
C4_PROF_OFF(C4NcclProfilerEventDescr_v5_t, groupApi.groupDepth, 28);
C4_PROF_OFF(C4NcclProfilerEventDescr_v5_t, collApi.graphCaptured, 64);
C4_PROF_OFF(C4NcclProfilerEventDescr_v5_t, coll.seqNumber, 24);
C4_PROF_OFF(C4NcclProfilerEventDescr_v5_t, coll.parentGroup, 104);
C4_PROF_OFF(C4NcclProfilerEventDescr_v5_t, p2p.peer, 56);
C4_PROF_OFF(C4NcclProfilerEventDescr_v5_t, p2p.parentGroup, 64);
C4_PROF_OFF(C4NcclProfilerEventDescr_v5_t, proxyOp.isSend, 44);

C4_PROF_SIZE(C4NcclProfilerEventDescr_v6_t, 112);
C4_PROF_OFF(C4NcclProfilerEventDescr_v6_t, coll.parentGroup, 104);
C4_PROF_OFF(C4NcclProfilerEventDescr_v6_t, ceColl.syncStrategy, 80);
C4_PROF_OFF(C4NcclProfilerEventDescr_v6_t, ceColl.ceSeqNum, 100);
C4_PROF_OFF(C4NcclProfilerEventDescr_v6_t, ceColl.stream, 104);
C4_PROF_OFF(C4NcclProfilerEventDescr_v6_t, ceCollBatch.useIntraSync, 40);

C4_PROF_SIZE(C4NcclProfiler_v1_t, 48);
C4_PROF_SIZE(C4NcclProfiler_v6_t, 48);
C4_PROF_OFF(C4NcclProfiler_v6_t, init, 8);
C4_PROF_OFF(C4NcclProfiler_v6_t, startEvent, 16);
C4_PROF_OFF(C4NcclProfiler_v6_t, stopEvent, 24);
C4_PROF_OFF(C4NcclProfiler_v6_t, recordEventState, 32);
C4_PROF_OFF(C4NcclProfiler_v6_t, finalize, 40);

#ifdef __cplusplus
}
#endif

#endif /* C4_PROFILER_NCCL_PROFILER_ABI_H_ */
