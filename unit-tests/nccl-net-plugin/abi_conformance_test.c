/* ABI conformance, in C, against the built libnccl-net-c4.so loaded like NCCL 2.30 loads it
 * (dlopen RTLD_NOW|RTLD_LOCAL, dlsym of the data symbols ncclNetPlugin_v12 ... v8).
 *
 * Checks for every exported table: member layout (offsets fixed by the ABI), name "C4", which
 * members are present, init/devices/getProperties (v12: railId, planeId from the plan), listen ->
 * connect/accept driven as non-blocking state machines on the same handle buffer,
 * isend/irecv/test data integrity (v8 with int sizes), grouped receives, sends of several tags in
 * any order on one connection (NCCL's shared comms), a message larger than its receive buffer
 * (ncclInvalidUsage), iflush, regMr/deregMr, garbage handles, finalize (v12/v11), an init that
 * fails (leaves nothing behind: NCCL >= 2.29.7 does not call finalize then), and repeated
 * load/init/finalize/dlclose cycles.
 *
 * Usage: nccl_net_abi_conformance_test <path to libnccl-net-c4.so>. Needs C4_SOCKET_IFNAME=lo and
 * C4_NODE_NAME=abi-test.
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
#include <unistd.h>

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
  CHECK(offsetof(C4NcclNetV12, init) == 1 * P);
  CHECK(offsetof(C4NcclNetV12, getProperties) == 3 * P);
  CHECK(offsetof(C4NcclNetV12, isend) == 10 * P);
  CHECK(offsetof(C4NcclNetV12, makeVDevice) == 19 * P);
  CHECK(offsetof(C4NcclNetV12, finalize) == 20 * P);
  CHECK(offsetof(C4NcclNetV12, setNetAttr) == 21 * P);
  CHECK(sizeof(C4NcclNetV12) == 22 * P);
  /* v12 properties: vProps holds 8 devices, railId/planeId (int16) follow maxMultiRequestSize. */
  CHECK(sizeof(C4NcclVDevicePropsV12) == 36);
  CHECK(offsetof(C4NcclPropertiesV12, vProps) == 64);
  CHECK(offsetof(C4NcclPropertiesV12, maxP2pBytes) == 104);
  CHECK(offsetof(C4NcclPropertiesV12, maxCollBytes) == 112);
  CHECK(offsetof(C4NcclPropertiesV12, maxMultiRequestSize) == 120);
  CHECK(offsetof(C4NcclPropertiesV12, railId) == 124);
  CHECK(offsetof(C4NcclPropertiesV12, planeId) == 126);
  CHECK(sizeof(C4NcclPropertiesV12) == 128);
  CHECK(sizeof(C4NcclPropertiesV11) == 112);
  CHECK(sizeof(C4NcclNetAttr) == 44);
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

static const C4NcclNetV12* v12;
static const C4NcclNetV11* v11;
static const C4NcclNetV10* v10;
static const C4NcclNetV9* v9;
static const C4NcclNetV8* v8;

static C4NcclResult l12(void* ctx, int d, void* h, void** lc) {
  return v12->listen(ctx, d, h, lc);
}
static C4NcclResult c12(void* ctx, int d, void* h, void** sc) {
  C4NcclNetDeviceHandle* dc = NULL;
  return v12->connect(ctx, d, h, sc, &dc);
}
static C4NcclResult s12(void* sc, void* data, size_t n, int tag, void** req) {
  return v12->isend(sc, data, n, tag, NULL, NULL, req);
}
static C4NcclResult r12(void* rc, int n, void** data, size_t* sizes, int* tags, void** req) {
  void* mh[8] = {0};
  void* ph[8] = {0};
  *req = (void*)(uintptr_t)C4_NCCL_NET_OPTIONAL_RECV_COMPLETION; /* as NCCL presets it */
  return v12->irecv(rc, n, data, sizes, tags, mh, ph, req);
}
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

/* listen -> connect/accept, driven as NCCL's proxy does. */
static void connectPair(const Driver* d, char* handle, void** lc, void** sc, void** rc) {
  *lc = *sc = *rc = NULL;
  REQUIRE(d->listen(d->ctx, 0, handle, lc) == C4_NCCL_SUCCESS && *lc != NULL);
  /* Non-blocking: NULL comm + success means "call again" with the same handle buffer. */
  double deadline = nowSec() + 10;
  while ((*sc == NULL || *rc == NULL) && nowSec() < deadline) {
    if (*sc == NULL) REQUIRE(d->connect(d->ctx, 0, handle, sc) == C4_NCCL_SUCCESS);
    if (*rc == NULL) REQUIRE(d->accept(*lc, rc, NULL) == C4_NCCL_SUCCESS);
  }
  REQUIRE(*sc != NULL && *rc != NULL);
}

static void closePair(const Driver* d, void* lc, void* sc, void* rc) {
  CHECK(d->closeSend(sc) == C4_NCCL_SUCCESS);
  CHECK(d->closeRecv(rc) == C4_NCCL_SUCCESS);
  CHECK(d->closeListen(lc) == C4_NCCL_SUCCESS);
}

/* NCCL shares one connection among senders that progress on their own (NCCL_NET_SHARED_COMMS=1,
 * PXN; tag = sender's rank) and groups their receives: irecv(n=2, {11, 22}) twice, then the sends
 * 11, 11, 22, 22 on the one sendComm. Then single receives A, B with B sent first. Every send lands
 * in the receive of its tag, in each tag's order. */
static void sharedConnectionTagOrder(const Driver* d) {
  char handle[C4_NCCL_NET_HANDLE_MAXSIZE];
  void *lc, *sc, *rc;
  static unsigned char src[4][3000], dst[4][4096];
  fprintf(stderr, "[%s] shared connection, tags in any order\n", d->label);
  connectPair(d, handle, &lc, &sc, &rc);
  void* rreq[2] = {NULL, NULL};
  for (int r = 0; r < 2; r++) {
    void* data[2] = {dst[2 * r], dst[2 * r + 1]};
    size_t rs[2] = {sizeof(dst[0]), sizeof(dst[0])};
    int tags[2] = {11, 22};
    REQUIRE(d->irecv(rc, 2, data, rs, tags, &rreq[r]) == C4_NCCL_SUCCESS && rreq[r] != NULL);
  }
  const int sendTags[4] = {11, 11, 22, 22};
  void* sreq[4];
  for (int i = 0; i < 4; i++) {
    fill(src[i], 1000 + 100 * (size_t)i, 50u + (unsigned)i);
    REQUIRE(d->isend(sc, src[i], 1000 + 100 * (size_t)i, sendTags[i], &sreq[i]) ==
                C4_NCCL_SUCCESS &&
            sreq[i] != NULL);
  }
  for (int i = 0; i < 4; i++) waitReq(d, sreq[i], NULL);
  int got0[64] = {0}, got1[64] = {0};
  waitReq(d, rreq[0], got0);
  waitReq(d, rreq[1], got1);
  /* First receive: first 11 (src[0]) and first 22 (src[2]); second: src[1] and src[3]. */
  CHECK(got0[0] == 1000 && got0[1] == 1200 && got1[0] == 1100 && got1[1] == 1300);
  CHECK(memcmp(dst[0], src[0], 1000) == 0 && memcmp(dst[1], src[2], 1200) == 0);
  CHECK(memcmp(dst[2], src[1], 1100) == 0 && memcmp(dst[3], src[3], 1300) == 0);

  int tagA = 5, tagB = 6;
  void* da[1] = {dst[0]};
  void* db[1] = {dst[1]};
  size_t cap[1] = {sizeof(dst[0])};
  void *ra = NULL, *rb = NULL, *sa = NULL, *sb = NULL;
  REQUIRE(d->irecv(rc, 1, da, cap, &tagA, &ra) == C4_NCCL_SUCCESS && ra != NULL);
  REQUIRE(d->irecv(rc, 1, db, cap, &tagB, &rb) == C4_NCCL_SUCCESS && rb != NULL);
  REQUIRE(d->isend(sc, src[1], 700, tagB, &sb) == C4_NCCL_SUCCESS && sb != NULL);
  REQUIRE(d->isend(sc, src[0], 600, tagA, &sa) == C4_NCCL_SUCCESS && sa != NULL);
  waitReq(d, sb, NULL);
  waitReq(d, sa, NULL);
  int ga[64] = {0}, gb[64] = {0};
  waitReq(d, rb, gb);
  waitReq(d, ra, ga);
  CHECK(ga[0] == 600 && gb[0] == 700);
  CHECK(memcmp(dst[0], src[0], 600) == 0 && memcmp(dst[1], src[1], 700) == 0);
  closePair(d, lc, sc, rc);
}

/* A send larger than the matching receive buffer is the caller's error: ncclInvalidUsage from the
 * receive's test (as NCCL's socket transport does), never ncclSystemError. */
static void sendLargerThanReceive(const Driver* d) {
  char handle[C4_NCCL_NET_HANDLE_MAXSIZE];
  void *lc, *sc, *rc;
  static unsigned char src[1000], dst[10];
  fprintf(stderr, "[%s] send larger than the receive buffer\n", d->label);
  connectPair(d, handle, &lc, &sc, &rc);
  void* data[1] = {dst};
  size_t cap[1] = {sizeof(dst)};
  int tag = 3;
  void *rreq = NULL, *sreq = NULL;
  REQUIRE(d->irecv(rc, 1, data, cap, &tag, &rreq) == C4_NCCL_SUCCESS && rreq != NULL);
  REQUIRE(d->isend(sc, src, sizeof(src), tag, &sreq) == C4_NCCL_SUCCESS && sreq != NULL);
  C4NcclResult r = C4_NCCL_SUCCESS;
  int done = 0;
  double deadline = nowSec() + 30;
  while (r == C4_NCCL_SUCCESS && !done && nowSec() < deadline) {
    int sizes[64];
    r = d->test(rreq, &done, sizes);
    if (r == C4_NCCL_SUCCESS && !done) sched_yield();
  }
  CHECK(r == C4_NCCL_INVALID_USAGE);
  CHECK(!done);
  closePair(d, lc, sc, rc);
}

static void exercise(const Driver* d) {
  char handle[C4_NCCL_NET_HANDLE_MAXSIZE];
  void* lc = NULL;
  void* sc = NULL;
  void* rc = NULL;
  fprintf(stderr, "[%s] connect/transfer\n", d->label);
  connectPair(d, handle, &lc, &sc, &rc);
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
  closePair(d, lc, sc, rc);
  sharedConnectionTagOrder(d);
  sendLargerThanReceive(d);

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

/* Whether a file whose path ends in `suffix` is mapped into this process. */
static int isMapped(const char* suffix) {
  FILE* f = fopen("/proc/self/maps", "r");
  REQUIRE(f != NULL);
  char line[4096];
  int found = 0;
  size_t n = strlen(suffix);
  while (!found && fgets(line, sizeof(line), f) != NULL) {
    size_t len = strcspn(line, "\n");
    line[len] = '\0';
    found = len >= n && strcmp(line + len - n, suffix) == 0;
  }
  fclose(f);
  return found;
}

static const char* baseName(const char* path) {
  const char* slash = strrchr(path, '/');
  return slash != NULL ? slash + 1 : path;
}

/* NCCL unloads the plugin when its last communicator finalizes and loads it again for the next
 * one: load -> init -> devices -> finalize -> dlclose, over and over. Nothing may stay behind: no
 * thread, no mapping, no heap (glibc's count of bytes in use; under AddressSanitizer,
 * LeakSanitizer at exit).
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
    const C4NcclNetV12* n = (const C4NcclNetV12*)dlsym(lib, "ncclNetPlugin_v12");
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
  CHECK(!isMapped(baseName(path))); /* really unloaded (no unique symbols, no NODELETE) */
}

/* Since NCCL 2.29.7 a failed init is not followed by finalize: the plugin cleans up itself. An
 * interface that does not exist makes init fail; nothing may be left running or allocated. */
static void failingInitLeavesNothing(const char* path) {
  fprintf(stderr, "[v12] failing init\n");
  const char* saved = getenv("C4_SOCKET_IFNAME");
  char keep[256];
  snprintf(keep, sizeof(keep), "%s", saved != NULL ? saved : "");
  setenv("C4_SOCKET_IFNAME", "=c4-no-such-if0", 1);
  enum { kWarmup = 10, kCycles = 10 };
  int threads = threadCount();
  size_t before = 0;
  for (int i = 0; i < kWarmup + kCycles; i++) {
    if (i == kWarmup) before = mallinfo2().uordblks;
    void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    REQUIRE(lib != NULL);
    const C4NcclNetV12* n = (const C4NcclNetV12*)dlsym(lib, "ncclNetPlugin_v12");
    REQUIRE(n != NULL);
    C4NcclCommConfig cfg = {C4_NCCL_NET_TRAFFIC_CLASS_UNDEF};
    void* ctx = (void*)0x1;
    CHECK(n->init(&ctx, 0x77, &cfg, testLogger, NULL) != C4_NCCL_SUCCESS);
    CHECK(ctx == NULL);
    CHECK(threadCount() == threads);
    REQUIRE(dlclose(lib) == 0);
  }
  long growth = (long)mallinfo2().uordblks - (long)before;
  fprintf(stderr, "failing init + dlclose x%d: heap in use grew by %ld bytes\n", kCycles, growth);
  CHECK(growth < kCycles * 16);
  if (saved != NULL) {
    setenv("C4_SOCKET_IFNAME", keep, 1);
  } else {
    unsetenv("C4_SOCKET_IFNAME");
  }
}

/* The traffic plan names a plane for every node of the job: v12 reports it as planeId. */
static char planPath[64];
static void writePlan(void) {
  snprintf(planPath, sizeof(planPath), "/tmp/c4-abi-plan-%d.json", (int)getpid());
  FILE* f = fopen(planPath, "w");
  REQUIRE(f != NULL);
  fputs("{\"version\": 5, \"planes\": {\"abi-test\": 3}}\n", f);
  fclose(f);
  setenv("C4_PLAN_FILE", planPath, 1);
}

static Driver makeDriver12(const char* label, void* ctx) {
  Driver d = {label,
              ctx,
              l12,
              c12,
              v12->accept,
              s12,
              r12,
              v12->test,
              v12->closeSend,
              v12->closeRecv,
              v12->closeListen,
              v12->regMr,
              v12->deregMr,
              v12->iflush,
              8};
  return d;
}

static Driver makeDriver11(const char* label, void* ctx) {
  Driver d = {label,
              ctx,
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
  return d;
}

int main(int argc, char** argv) {
  REQUIRE(argc == 2);
  checkLayouts();
  const char* node = getenv("C4_NODE_NAME");
  REQUIRE(node != NULL && strcmp(node, "abi-test") == 0);
  writePlan();
  /* Loaded exactly as NCCL loads it (no RTLD_NODELETE, also under AddressSanitizer): whatever the
   * plugin leaves on the heap after dlclose is reported by LeakSanitizer at exit. */
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  v12 = (const C4NcclNetV12*)dlsym(lib, "ncclNetPlugin_v12");
  v11 = (const C4NcclNetV11*)dlsym(lib, "ncclNetPlugin_v11");
  v10 = (const C4NcclNetV10*)dlsym(lib, "ncclNetPlugin_v10");
  v9 = (const C4NcclNetV9*)dlsym(lib, "ncclNetPlugin_v9");
  v8 = (const C4NcclNetV8*)dlsym(lib, "ncclNetPlugin_v8");
  REQUIRE(v12 && v11 && v10 && v9 && v8);
  CHECK(dlsym(lib, "ncclNetPlugin_v13") == NULL);
  CHECK(dlsym(lib, "ncclNetPlugin_v7") == NULL);
  /* Nothing but the tables is exported (the core library's symbols are hidden). */
  CHECK(dlsym(lib, "_ZN2c46plugin4testEPNS0_7RequestEPi") == NULL);

  CHECK(strcmp(v12->name, "C4") == 0 && strcmp(v11->name, "C4") == 0);
  CHECK(strcmp(v10->name, "C4") == 0);
  CHECK(strcmp(v9->name, "C4") == 0 && strcmp(v8->name, "C4") == 0);
  /* Present / deliberately absent members. */
  CHECK(v12->init && v12->devices && v12->getProperties && v12->listen && v12->connect &&
        v12->accept && v12->regMr && v12->regMrDmaBuf && v12->deregMr && v12->isend && v12->irecv &&
        v12->iflush && v12->test && v12->closeSend && v12->closeRecv && v12->closeListen &&
        v12->finalize && v12->setNetAttr);
  CHECK(v12->getDeviceMr == NULL && v12->irecvConsumed == NULL && v12->makeVDevice == NULL);
  CHECK(v11->init && v11->devices && v11->getProperties && v11->listen && v11->connect &&
        v11->accept && v11->regMr && v11->regMrDmaBuf && v11->deregMr && v11->isend && v11->irecv &&
        v11->iflush && v11->test && v11->closeSend && v11->closeRecv && v11->closeListen &&
        v11->finalize && v11->setNetAttr);
  CHECK(v11->getDeviceMr == NULL && v11->irecvConsumed == NULL && v11->makeVDevice == NULL);
  CHECK(v10->makeVDevice == NULL && v9->makeVDevice == NULL && v8->irecvConsumed == NULL);

  /* v12 and v11: per-communicator init, several contexts at once. */
  void* ctx1 = NULL;
  void* ctx2 = NULL;
  void* ctx3 = NULL;
  C4NcclCommConfig cfg = {C4_NCCL_NET_TRAFFIC_CLASS_UNDEF};
  REQUIRE(v12->init(&ctx1, 0x1234, &cfg, testLogger, NULL) == C4_NCCL_SUCCESS && ctx1);
  REQUIRE(v12->init(&ctx2, 0x5678, &cfg, testLogger, NULL) == C4_NCCL_SUCCESS && ctx2);
  REQUIRE(v11->init(&ctx3, 0x9abc, &cfg, testLogger, NULL) == C4_NCCL_SUCCESS && ctx3);
  CHECK(ctx1 != ctx2 && ctx2 != ctx3);
  CHECK(logLines > 0); /* logs go through NCCL's logger */
  int ndev = 0;
  REQUIRE(v12->devices(&ndev) == C4_NCCL_SUCCESS && ndev >= 1);
  C4NcclPropertiesV12 p12;
  memset(&p12, 0xFF, sizeof(p12));
  REQUIRE(v12->getProperties(0, &p12) == C4_NCCL_SUCCESS);
  CHECK(strcmp(p12.name, "lo") == 0);
  CHECK(p12.ptrSupport == C4_NCCL_PTR_HOST);
  CHECK(p12.regIsGlobal == 0 && p12.forceFlush == 0);
  CHECK(p12.speed > 0);
  CHECK(p12.latency == 0.0f);
  CHECK(p12.maxComms > 0 && p12.maxRecvs == 8);
  CHECK(p12.netDeviceType == C4_NCCL_NET_DEVICE_HOST);
  CHECK(p12.netDeviceVersion == C4_NCCL_NET_DEVICE_INVALID_VERSION);
  CHECK(p12.vProps.ndevs == 1 && p12.vProps.devs[0] == 0);
  CHECK(p12.maxP2pBytes > 0 && p12.maxP2pBytes <= C4_NCCL_MAX_NET_SIZE_BYTES);
  CHECK(p12.maxCollBytes > 0 && p12.maxCollBytes <= C4_NCCL_MAX_NET_SIZE_BYTES);
  CHECK(p12.maxMultiRequestSize == 1);
  CHECK(p12.railId == C4_NCCL_NET_ID_UNDEF);
  CHECK(p12.planeId == 3); /* the plan's plane of node abi-test */
  CHECK(v12->getProperties(ndev, &p12) != C4_NCCL_SUCCESS);
  C4NcclPropertiesV11 p11;
  memset(&p11, 0xFF, sizeof(p11));
  REQUIRE(v11->getProperties(0, &p11) == C4_NCCL_SUCCESS);
  CHECK(strcmp(p11.name, "lo") == 0 && p11.speed > 0 && p11.maxRecvs == 8);
  CHECK(p11.ptrSupport == C4_NCCL_PTR_HOST && p11.forceFlush == 0);
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
  CHECK(v12->setNetAttr(ctx1, &attr) == C4_NCCL_SUCCESS);
  CHECK(v11->setNetAttr(ctx3, &attr) == C4_NCCL_SUCCESS);
  void* mh = (void*)1;
  CHECK(v12->regMrDmaBuf(NULL, NULL, 0, C4_NCCL_PTR_CUDA, 0, -1, &mh) != C4_NCCL_SUCCESS);
  CHECK(v12->listen(NULL, 0, NULL, NULL) != C4_NCCL_SUCCESS);
  CHECK(v12->test(NULL, NULL, NULL) != C4_NCCL_SUCCESS);

  Driver d12 = makeDriver12("v12", ctx1);
  exercise(&d12);
  d12 = makeDriver12("v12-ctx2", ctx2);
  exercise(&d12);
  Driver d11 = makeDriver11("v11", ctx3);
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

  /* finalize joins the context's threads; finalize(NULL) is tolerated. */
  CHECK(v12->finalize(ctx1) == C4_NCCL_SUCCESS);
  CHECK(v12->finalize(ctx2) == C4_NCCL_SUCCESS);
  CHECK(v11->finalize(ctx3) == C4_NCCL_SUCCESS);
  CHECK(v12->finalize(NULL) == C4_NCCL_SUCCESS);
  /* NCCL dlcloses the plugin after the last finalize: nothing may still run in it. */
  CHECK(dlclose(lib) == 0);
  CHECK(!isMapped(baseName(argv[1])));
  unlink(planPath);
  unsetenv("C4_PLAN_FILE");
  failingInitLeavesNothing(argv[1]);
  loadInitFinalizeUnloadCycles(argv[1]);
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  fprintf(stderr, "ABI conformance: all checks passed\n");
  return 0;
}
