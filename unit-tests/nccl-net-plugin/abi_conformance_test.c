/* ABI conformance, in C, against the built libnccl-net-c4.so loaded like NCCL 2.28 loads it
 * (dlopen RTLD_NOW|RTLD_LOCAL, dlsym of the data symbols ncclNetPlugin_v11 ... v8).
 *
 * Checks for every exported table: member layout (offsets fixed by the ABI), name "C4", which
 * members are present, init/devices/getProperties, listen -> connect/accept driven as non-blocking
 * state machines on the same handle buffer, isend/irecv/test data integrity (v8 with int sizes),
 * grouped receives (v9+), iflush, regMr/deregMr, garbage handles, finalize (v11).
 *
 * Usage: nccl_net_abi_conformance_test <path to libnccl-net-c4.so>. Needs C4_SOCKET_IFNAME=lo.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <malloc.h>
#include <sched.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "c4/plugin/nccl_net_abi.h"

static int failures = 0;
#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      failures++;                                                              \
    }                                                                          \
  } while (0)
#define REQUIRE(cond)                                                            \
  do {                                                                           \
    if (!(cond)) {                                                               \
      fprintf(stderr, "%s:%d: REQUIRE failed: %s\n", __FILE__, __LINE__, #cond); \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)

static int logLines = 0;
static void testLogger(C4NcclLogLevel level, unsigned long flags, const char* file, int line,
                       const char* fmt, ...) {
  (void)flags;
  (void)file;
  (void)line;
  logLines++;
  if (level == C4_NCCL_LOG_WARN && getenv("ABI_TEST_VERBOSE")) {
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
  }
}

static double nowSec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Layout: members are pointers, in ABI order. */
#define P sizeof(void*)
static void checkLayouts(void) {
  CHECK(offsetof(C4NcclNetV11, init) == 1 * P);
  CHECK(offsetof(C4NcclNetV11, listen) == 4 * P);
  CHECK(offsetof(C4NcclNetV11, isend) == 10 * P);
  CHECK(offsetof(C4NcclNetV11, test) == 13 * P);
  CHECK(offsetof(C4NcclNetV11, makeVDevice) == 19 * P);
  CHECK(offsetof(C4NcclNetV11, finalize) == 20 * P);
  CHECK(offsetof(C4NcclNetV11, setNetAttr) == 21 * P);
  CHECK(sizeof(C4NcclNetV11) == 22 * P);
  CHECK(sizeof(C4NcclNetV10) == 20 * P);
  CHECK(offsetof(C4NcclNetV10, makeVDevice) == 19 * P);
  CHECK(sizeof(C4NcclNetV9) == 20 * P);
  CHECK(sizeof(C4NcclNetV8) == 19 * P);
  CHECK(offsetof(C4NcclNetV8, irecvConsumed) == 18 * P);
  /* Properties: v8 has no forceFlush; v9+ add vProps and size limits; v11 adds
   * maxMultiRequestSize. */
  CHECK(offsetof(C4NcclPropertiesV8, speed) == 32);
  CHECK(offsetof(C4NcclPropertiesV9, forceFlush) == 32);
  CHECK(offsetof(C4NcclPropertiesV9, speed) == 36);
  CHECK(offsetof(C4NcclPropertiesV9, vProps) == 64);
  CHECK(offsetof(C4NcclPropertiesV9, maxP2pBytes) == 88);
  CHECK(offsetof(C4NcclPropertiesV11, maxMultiRequestSize) == 104);
  CHECK(sizeof(C4NcclNetDeviceHandle) == 32);
}

/* Generic driver over the version-specific function pointers. */
typedef struct {
  const char* label;
  void* ctx; /* v11 only */
  C4NcclResult (*listen)(void* ctx, int dev, void* handle, void** lc);
  C4NcclResult (*connect)(void* ctx, int dev, void* handle, void** sc);
  C4NcclResult (*accept)(void* lc, void** rc, C4NcclNetDeviceHandle** dc);
  C4NcclResult (*isend)(void* sc, void* data, size_t size, int tag, void** req);
  C4NcclResult (*irecv)(void* rc, int n, void** data, size_t* sizes, int* tags, void** req);
  C4NcclResult (*test)(void* req, int* done, int* sizes);
  C4NcclResult (*closeSend)(void*);
  C4NcclResult (*closeRecv)(void*);
  C4NcclResult (*closeListen)(void*);
  C4NcclResult (*regMr)(void* comm, void* data, size_t size, int type, void** mh);
  C4NcclResult (*deregMr)(void* comm, void* mh);
  C4NcclResult (*iflush)(void* rc, int n, void** data, int* sizes, void** mh, void** req);
  int maxN;
} Driver;

static const C4NcclNetV11* v11;
static const C4NcclNetV10* v10;
static const C4NcclNetV9* v9;
static const C4NcclNetV8* v8;

static C4NcclResult l11(void* ctx, int d, void* h, void** lc) {
  return v11->listen(ctx, d, h, lc);
}
static C4NcclResult c11(void* ctx, int d, void* h, void** sc) {
  C4NcclNetDeviceHandle* dc = NULL;
  return v11->connect(ctx, d, h, sc, &dc);
}
static C4NcclResult s11(void* sc, void* data, size_t n, int tag, void** req) {
  return v11->isend(sc, data, n, tag, NULL, NULL, req);
}
static C4NcclResult r11(void* rc, int n, void** data, size_t* sizes, int* tags, void** req) {
  void* mh[8] = {0};
  void* ph[8] = {0};
  *req = (void*)(uintptr_t)C4_NCCL_NET_OPTIONAL_RECV_COMPLETION; /* as NCCL presets it */
  return v11->irecv(rc, n, data, sizes, tags, mh, ph, req);
}
static C4NcclResult l10(void* ctx, int d, void* h, void** lc) {
  (void)ctx;
  return v10->listen(d, h, lc);
}
static C4NcclResult c10(void* ctx, int d, void* h, void** sc) {
  C4NcclCommConfig cfg = {C4_NCCL_NET_TRAFFIC_CLASS_UNDEF};
  (void)ctx;
  return v10->connect(d, &cfg, h, sc, NULL);
}
static C4NcclResult s10(void* sc, void* data, size_t n, int tag, void** req) {
  return v10->isend(sc, data, n, tag, NULL, NULL, req);
}
static C4NcclResult r10(void* rc, int n, void** data, size_t* sizes, int* tags, void** req) {
  return v10->irecv(rc, n, data, sizes, tags, NULL, NULL, req);
}
static C4NcclResult l9(void* ctx, int d, void* h, void** lc) {
  (void)ctx;
  return v9->listen(d, h, lc);
}
static C4NcclResult c9(void* ctx, int d, void* h, void** sc) {
  (void)ctx;
  return v9->connect(d, h, sc, NULL);
}
static C4NcclResult s9(void* sc, void* data, size_t n, int tag, void** req) {
  return v9->isend(sc, data, n, tag, NULL, req);
}
static C4NcclResult r9(void* rc, int n, void** data, size_t* sizes, int* tags, void** req) {
  return v9->irecv(rc, n, data, sizes, tags, NULL, req);
}
static C4NcclResult l8(void* ctx, int d, void* h, void** lc) {
  (void)ctx;
  return v8->listen(d, h, lc);
}
static C4NcclResult c8(void* ctx, int d, void* h, void** sc) {
  (void)ctx;
  return v8->connect(d, h, sc, NULL);
}
static C4NcclResult s8(void* sc, void* data, size_t n, int tag, void** req) {
  return v8->isend(sc, data, (int)n, tag, NULL, req);
}
static C4NcclResult r8(void* rc, int n, void** data, size_t* sizes, int* tags, void** req) {
  int small[8];
  for (int i = 0; i < n; i++) small[i] = (int)sizes[i];
  return v8->irecv(rc, n, data, small, tags, NULL, req);
}

static void waitReq(const Driver* d, void* req, int* sizes) {
  int done = 0;
  double deadline = nowSec() + 30;
  while (!done) {
    C4NcclResult r = d->test(req, &done, sizes);
    REQUIRE(r == C4_NCCL_SUCCESS);
    REQUIRE(nowSec() < deadline);
    if (!done) sched_yield();
  }
}

static void fill(unsigned char* p, size_t n, unsigned seed) {
  unsigned x = seed * 2654435761u + 1u;
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    p[i] = (unsigned char)x;
  }
}

static void exercise(const Driver* d) {
  char handle[C4_NCCL_NET_HANDLE_MAXSIZE];
  void* lc = NULL;
  void* sc = NULL;
  void* rc = NULL;
  fprintf(stderr, "[%s] connect/transfer\n", d->label);
  REQUIRE(d->listen(d->ctx, 0, handle, &lc) == C4_NCCL_SUCCESS && lc != NULL);
  /* Non-blocking: NULL comm + success means "call again" with the same handle buffer. */
  double deadline = nowSec() + 10;
  int calls = 0;
  while ((sc == NULL || rc == NULL) && nowSec() < deadline) {
    if (sc == NULL) REQUIRE(d->connect(d->ctx, 0, handle, &sc) == C4_NCCL_SUCCESS);
    if (rc == NULL) REQUIRE(d->accept(lc, &rc, NULL) == C4_NCCL_SUCCESS);
    calls++;
  }
  REQUIRE(sc != NULL && rc != NULL);
  CHECK(calls >= 1);
  void* mhS = NULL;
  void* mhR = NULL;
  static unsigned char src[1 << 22], dst[1 << 22];
  CHECK(d->regMr(sc, src, sizeof(src), C4_NCCL_PTR_HOST, &mhS) == C4_NCCL_SUCCESS && mhS);
  CHECK(d->regMr(rc, dst, sizeof(dst), C4_NCCL_PTR_HOST, &mhR) == C4_NCCL_SUCCESS && mhR);
  CHECK(d->regMr(sc, src, sizeof(src), C4_NCCL_PTR_CUDA, &mhS) != C4_NCCL_SUCCESS);
  size_t sizes[] = {0, 1, 1000, 65536, 200001, sizeof(src)};
  for (unsigned k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
    size_t n = sizes[k];
    fill(src, n, k + 1);
    memset(dst, 0, sizeof(dst));
    void* rdata[1] = {dst};
    size_t rsize[1] = {sizeof(dst)};
    int tags[1] = {42};
    void* rreq = NULL;
    void* sreq = NULL;
    REQUIRE(d->irecv(rc, 1, rdata, rsize, tags, &rreq) == C4_NCCL_SUCCESS && rreq != NULL);
    REQUIRE(d->isend(sc, src, n, 42, &sreq) == C4_NCCL_SUCCESS && sreq != NULL);
    int ssz = -1;
    int rsz[64] = {0};
    waitReq(d, sreq, &ssz);
    waitReq(d, rreq, rsz);
    CHECK(ssz == (int)n);
    CHECK(rsz[0] == (int)n);
    CHECK(memcmp(src, dst, n) == 0);
    /* iflush: host memory, completes immediately; test accepts sizes == NULL. */
    void* freq = NULL;
    int fsz[1] = {(int)n};
    void* mh[1] = {mhR};
    REQUIRE(d->iflush(rc, 1, rdata, fsz, mh, &freq) == C4_NCCL_SUCCESS && freq != NULL);
    waitReq(d, freq, NULL);
  }
  if (d->maxN > 1) {
    /* Grouped receive: one request, three buffers, tags choose the buffer. */
    static unsigned char a[3][5000], b[3][5000];
    void* data[3] = {b[0], b[1], b[2]};
    size_t rs[3] = {5000, 5000, 5000};
    int tags[3] = {7, 8, 9};
    void* rreq = NULL;
    REQUIRE(d->irecv(rc, 3, data, rs, tags, &rreq) == C4_NCCL_SUCCESS && rreq != NULL);
    int order[3] = {9, 7, 8};
    for (int i = 0; i < 3; i++) {
      int t = order[i];
      fill(a[t - 7], (size_t)(1000 * (t - 6)), (unsigned)t);
      void* sreq = NULL;
      REQUIRE(d->isend(sc, a[t - 7], (size_t)(1000 * (t - 6)), t, &sreq) == C4_NCCL_SUCCESS);
      waitReq(d, sreq, NULL);
    }
    int got[64] = {0};
    waitReq(d, rreq, got);
    for (int i = 0; i < 3; i++) {
      CHECK(got[i] == 1000 * (i + 1));
      CHECK(memcmp(a[i], b[i], (size_t)(1000 * (i + 1))) == 0);
    }
  }
  CHECK(d->deregMr(sc, mhS) == C4_NCCL_SUCCESS);
  CHECK(d->deregMr(rc, mhR) == C4_NCCL_SUCCESS);
  CHECK(d->closeSend(sc) == C4_NCCL_SUCCESS);
  CHECK(d->closeRecv(rc) == C4_NCCL_SUCCESS);
  CHECK(d->closeListen(lc) == C4_NCCL_SUCCESS);

  /* Garbage handle: an error, never a crash or a hang. */
  memset(handle, 0xA5, sizeof(handle));
  sc = NULL;
  CHECK(d->connect(d->ctx, 0, handle, &sc) != C4_NCCL_SUCCESS);
  CHECK(sc == NULL);
}

static int threadCount(void) {
  int n = 0;
  DIR* d = opendir("/proc/self/task");
  REQUIRE(d != NULL);
  struct dirent* e;
  while ((e = readdir(d)) != NULL) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

/* NCCL unloads the plugin when its last communicator finalizes and loads it again for the next
 * one: load -> init -> devices -> finalize -> dlclose, over and over. Nothing may stay behind: no
 * thread, no heap (glibc's count of bytes in use; under AddressSanitizer, LeakSanitizer at exit).
 */
static void loadInitFinalizeUnloadCycles(const char* path) {
  enum { kWarmup = 10, kCycles = 40 };
  int threads = threadCount();
  size_t before = 0;
  for (int i = 0; i < kWarmup + kCycles; i++) {
    /* glibc keeps some bookkeeping of its own (dlopen, thread stacks) from the first few cycles. */
    if (i == kWarmup) before = mallinfo2().uordblks;
    void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    REQUIRE(lib != NULL);
    const C4NcclNetV11* n = (const C4NcclNetV11*)dlsym(lib, "ncclNetPlugin_v11");
    REQUIRE(n != NULL);
    C4NcclCommConfig cfg = {C4_NCCL_NET_TRAFFIC_CLASS_UNDEF};
    void* ctx = NULL;
    int ndev = 0;
    REQUIRE(n->init(&ctx, 0x4000u + (unsigned)i, &cfg, testLogger, NULL) == C4_NCCL_SUCCESS);
    REQUIRE(n->devices(&ndev) == C4_NCCL_SUCCESS && ndev >= 1);
    REQUIRE(n->finalize(ctx) == C4_NCCL_SUCCESS);
    REQUIRE(dlclose(lib) == 0);
  }
  long growth = (long)mallinfo2().uordblks - (long)before;
  fprintf(stderr, "load/init/finalize/dlclose x%d: heap in use grew by %ld bytes\n", kCycles,
          growth);
  CHECK(growth < kCycles * 16); /* was 112 bytes per cycle */
  CHECK(threadCount() == threads);
}

int main(int argc, char** argv) {
  REQUIRE(argc == 2);
  checkLayouts();
  /* Loaded exactly as NCCL loads it (no RTLD_NODELETE, also under AddressSanitizer): whatever the
   * plugin leaves on the heap after dlclose is reported by LeakSanitizer at exit. */
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  v11 = (const C4NcclNetV11*)dlsym(lib, "ncclNetPlugin_v11");
  v10 = (const C4NcclNetV10*)dlsym(lib, "ncclNetPlugin_v10");
  v9 = (const C4NcclNetV9*)dlsym(lib, "ncclNetPlugin_v9");
  v8 = (const C4NcclNetV8*)dlsym(lib, "ncclNetPlugin_v8");
  REQUIRE(v11 && v10 && v9 && v8);
  CHECK(dlsym(lib, "ncclNetPlugin_v7") == NULL);
  /* Nothing but the tables is exported (the core library's symbols are hidden). */
  CHECK(dlsym(lib, "_ZN2c46plugin4testEPNS0_7RequestEPi") == NULL);

  CHECK(strcmp(v11->name, "C4") == 0 && strcmp(v10->name, "C4") == 0);
  CHECK(strcmp(v9->name, "C4") == 0 && strcmp(v8->name, "C4") == 0);
  /* Present / deliberately absent members. */
  CHECK(v11->init && v11->devices && v11->getProperties && v11->listen && v11->connect &&
        v11->accept && v11->regMr && v11->regMrDmaBuf && v11->deregMr && v11->isend && v11->irecv &&
        v11->iflush && v11->test && v11->closeSend && v11->closeRecv && v11->closeListen &&
        v11->finalize && v11->setNetAttr);
  CHECK(v11->getDeviceMr == NULL && v11->irecvConsumed == NULL && v11->makeVDevice == NULL);
  CHECK(v10->makeVDevice == NULL && v9->makeVDevice == NULL && v8->irecvConsumed == NULL);

  /* v11: per-communicator init, two contexts at once. */
  void* ctx1 = NULL;
  void* ctx2 = NULL;
  C4NcclCommConfig cfg = {C4_NCCL_NET_TRAFFIC_CLASS_UNDEF};
  REQUIRE(v11->init(&ctx1, 0x1234, &cfg, testLogger, NULL) == C4_NCCL_SUCCESS && ctx1);
  REQUIRE(v11->init(&ctx2, 0x5678, &cfg, testLogger, NULL) == C4_NCCL_SUCCESS && ctx2);
  CHECK(ctx1 != ctx2);
  CHECK(logLines > 0); /* logs go through NCCL's logger */
  int ndev = 0;
  REQUIRE(v11->devices(&ndev) == C4_NCCL_SUCCESS && ndev >= 1);
  C4NcclPropertiesV11 p11;
  memset(&p11, 0xFF, sizeof(p11));
  REQUIRE(v11->getProperties(0, &p11) == C4_NCCL_SUCCESS);
  CHECK(strcmp(p11.name, "lo") == 0);
  CHECK(p11.ptrSupport == C4_NCCL_PTR_HOST);
  CHECK(p11.speed > 0);
  CHECK(p11.maxComms > 0 && p11.maxRecvs == 8);
  CHECK(p11.netDeviceType == C4_NCCL_NET_DEVICE_HOST);
  CHECK(p11.vProps.ndevs == 1 && p11.vProps.devs[0] == 0);
  CHECK(p11.maxP2pBytes > 0 && p11.maxP2pBytes <= C4_NCCL_MAX_NET_SIZE_BYTES);
  CHECK(p11.maxMultiRequestSize == 1);
  CHECK(v11->getProperties(ndev, &p11) != C4_NCCL_SUCCESS);
  C4NcclPropertiesV9 p9;
  REQUIRE(v10->getProperties(0, &p9) == C4_NCCL_SUCCESS);
  CHECK(strcmp(p9.name, "lo") == 0 && p9.speed == p11.speed && p9.maxRecvs == 8 &&
        p9.maxP2pBytes == p11.maxP2pBytes && p9.forceFlush == 0);
  C4NcclPropertiesV8 p8;
  REQUIRE(v8->getProperties(0, &p8) == C4_NCCL_SUCCESS);
  CHECK(strcmp(p8.name, "lo") == 0 && p8.speed == p11.speed && p8.maxRecvs == 8 &&
        p8.ptrSupport == C4_NCCL_PTR_HOST);
  C4NcclNetAttr attr;
  memset(&attr, 0xFF, sizeof(attr));
  CHECK(v11->setNetAttr(ctx1, &attr) == C4_NCCL_SUCCESS);
  void* mh = (void*)1;
  CHECK(v11->regMrDmaBuf(NULL, NULL, 0, C4_NCCL_PTR_CUDA, 0, -1, &mh) != C4_NCCL_SUCCESS);
  CHECK(v11->listen(NULL, 0, NULL, NULL) != C4_NCCL_SUCCESS);
  CHECK(v11->test(NULL, NULL, NULL) != C4_NCCL_SUCCESS);

  Driver d11 = {"v11",
                ctx1,
                l11,
                c11,
                v11->accept,
                s11,
                r11,
                v11->test,
                v11->closeSend,
                v11->closeRecv,
                v11->closeListen,
                v11->regMr,
                v11->deregMr,
                v11->iflush,
                8};
  exercise(&d11);
  d11.ctx = ctx2;
  d11.label = "v11-ctx2";
  exercise(&d11);

  /* Legacy tables share one process-wide context. */
  REQUIRE(v10->init(testLogger, NULL) == C4_NCCL_SUCCESS);
  REQUIRE(v9->init(testLogger) == C4_NCCL_SUCCESS);
  REQUIRE(v8->init(testLogger) == C4_NCCL_SUCCESS);
  Driver d10 = {"v10",
                NULL,
                l10,
                c10,
                v10->accept,
                s10,
                r10,
                v10->test,
                v10->closeSend,
                v10->closeRecv,
                v10->closeListen,
                v10->regMr,
                v10->deregMr,
                v10->iflush,
                8};
  exercise(&d10);
  Driver d9 = {"v9",
               NULL,
               l9,
               c9,
               v9->accept,
               s9,
               r9,
               v9->test,
               v9->closeSend,
               v9->closeRecv,
               v9->closeListen,
               v9->regMr,
               v9->deregMr,
               v9->iflush,
               8};
  exercise(&d9);
  Driver d8 = {"v8",
               NULL,
               l8,
               c8,
               v8->accept,
               s8,
               r8,
               v8->test,
               v8->closeSend,
               v8->closeRecv,
               v8->closeListen,
               v8->regMr,
               v8->deregMr,
               v8->iflush,
               8};
  exercise(&d8);

  /* finalize joins the context's threads; finalize(NULL) (after a failed init) is tolerated. */
  CHECK(v11->finalize(ctx1) == C4_NCCL_SUCCESS);
  CHECK(v11->finalize(ctx2) == C4_NCCL_SUCCESS);
  CHECK(v11->finalize(NULL) == C4_NCCL_SUCCESS);
  /* NCCL dlcloses the plugin after the last finalize: nothing may still run in it. */
  CHECK(dlclose(lib) == 0);
  loadInitFinalizeUnloadCycles(argv[1]);
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  fprintf(stderr, "ABI conformance: all checks passed\n");
  return 0;
}
