/* ABI conformance of libnccl-profiler-c4.so, in C, the way NCCL loads it (src/plugin/profiler.cc
 * l.73-92, src/os/linux.cc l.52 at v2.30.7-1): dlopen(RTLD_NOW|RTLD_LOCAL), find ncclProfiler_v6
 * ... v1 with name "c4", run init/events/finalize through the v6 and the v1 tables, dlclose, and
 * load it again.
 *   nccl_profiler_abi_conformance_test <path to libnccl-profiler-c4.so>
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "c4/profiler/nccl_profiler_abi.h"

static int failures = 0;
#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

static int runOnce(const char* path) {
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
    return 1;
  }
  const char* names[] = {"ncclProfiler_v1", "ncclProfiler_v2", "ncclProfiler_v3",
                         "ncclProfiler_v4", "ncclProfiler_v5", "ncclProfiler_v6"};
  for (int i = 0; i < 6; ++i) {
    /* Every table starts with `const char* name` and five function pointers. */
    C4NcclProfiler_v1_t* t = (C4NcclProfiler_v1_t*)dlsym(lib, names[i]);
    CHECK(t != NULL);
    if (t == NULL) continue;
    CHECK(t->name != NULL && strcmp(t->name, "c4") == 0);
    CHECK(t->init && t->startEvent && t->stopEvent && t->recordEventState && t->finalize);
  }
  CHECK(dlsym(lib, "ncclProfiler_v7") == NULL);
  CHECK(dlsym(lib, "ncclNetPlugin_v12") == NULL);

  /* v6: init, a collective, a proxy op with one step, finalize. */
  C4NcclProfiler_v6_t* v6 = (C4NcclProfiler_v6_t*)dlsym(lib, "ncclProfiler_v6");
  int mask = 0;
  void* ctx = NULL;
  if (v6 != NULL) {
    CHECK(v6->init(&ctx, 0x1234, &mask, "abi", 1, 2, 0, NULL) == C4_NCCL_PROF_SUCCESS);
    CHECK(ctx != NULL);
    CHECK(mask == (C4_NCCL_PROFILE_COLL | C4_NCCL_PROFILE_P2P | C4_NCCL_PROFILE_PROXY_OP |
                   C4_NCCL_PROFILE_PROXY_STEP));
    C4NcclProfilerEventDescr_v6_t d;
    memset(&d, 0, sizeof(d));
    d.type = C4_NCCL_PROFILE_COLL;
    d.coll.seqNumber = 1;
    void* coll = NULL;
    CHECK(v6->startEvent(ctx, &coll, &d) == C4_NCCL_PROF_SUCCESS);
    CHECK(coll != NULL);
    CHECK(v6->stopEvent(coll) == C4_NCCL_PROF_SUCCESS);
    memset(&d, 0, sizeof(d));
    d.type = C4_NCCL_PROFILE_PROXY_OP;
    d.parentObj = coll;
    d.proxyOp.pid = getpid();
    d.proxyOp.peer = 1;
    d.proxyOp.isSend = 1;
    void* op = NULL;
    CHECK(v6->startEvent(ctx, &op, &d) == C4_NCCL_PROF_SUCCESS);
    CHECK(op != NULL);
    memset(&d, 0, sizeof(d));
    d.type = C4_NCCL_PROFILE_PROXY_STEP;
    d.parentObj = op;
    void* step = NULL;
    CHECK(v6->startEvent(ctx, &step, &d) == C4_NCCL_PROF_SUCCESS);
    C4NcclProfilerEventStateArgs_v6_t a;
    memset(&a, 0, sizeof(a));
    a.proxyStep.transSize = 64;
    CHECK(v6->recordEventState(step, C4_NCCL_PROF_PROXY_STEP_SEND_WAIT, &a) ==
          C4_NCCL_PROF_SUCCESS);
    CHECK(v6->stopEvent(step) == C4_NCCL_PROF_SUCCESS);
    CHECK(v6->stopEvent(op) == C4_NCCL_PROF_SUCCESS);
    CHECK(v6->stopEvent(NULL) == C4_NCCL_PROF_SUCCESS);
    /* A failing init (rank outside the communicator) returns an error and no context. */
    void* bad = (void*)1;
    CHECK(v6->init(&bad, 1, &mask, NULL, 1, 2, 7, NULL) != C4_NCCL_PROF_SUCCESS);
    CHECK(bad == NULL);
  }

  /* v1: init(ctx, mask), a second communicator alongside the first. */
  C4NcclProfiler_v1_t* v1 = (C4NcclProfiler_v1_t*)dlsym(lib, "ncclProfiler_v1");
  void* ctx1 = NULL;
  if (v1 != NULL) {
    CHECK(v1->init(&ctx1, &mask) == C4_NCCL_PROF_SUCCESS);
    CHECK(ctx1 != NULL);
    C4NcclProfilerEventDescr_v1_t d;
    memset(&d, 0, sizeof(d));
    d.type = C4_NCCL_PROFILE_P2P;
    void* p2p = NULL;
    CHECK(v1->startEvent(ctx1, &p2p, &d) == C4_NCCL_PROF_SUCCESS);
    CHECK(v1->stopEvent(p2p) == C4_NCCL_PROF_SUCCESS);
    CHECK(v1->finalize(ctx1) == C4_NCCL_PROF_SUCCESS);
  }
  if (v6 != NULL) CHECK(v6->finalize(ctx) == C4_NCCL_PROF_SUCCESS);
  /* Nothing of ours runs after the last finalize: dlclose must be safe. */
  CHECK(dlclose(lib) == 0);
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s <libnccl-profiler-c4.so>\n", argv[0]);
    return 2;
  }
  /* NCCL loads the plugin again for a communicator created after the last one was destroyed. */
  for (int round = 0; round < 2; ++round) {
    if (runOnce(argv[1]) != 0) return 1;
  }
  if (failures == 0) printf("nccl profiler ABI conformance: ok\n");
  return failures == 0 ? 0 : 1;
}
