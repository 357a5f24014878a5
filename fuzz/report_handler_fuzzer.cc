// The report endpoint's request handling (ReportHandler::handle, everything but HTTP) for an
// authenticated node plugin: the token always authenticates as node-a's plugin, so every body
// reaches the decoders, the node and clock checks, attribution and the store. A fresh handler per
// input keeps runs reproducible (no replay state across inputs).
//
// Input: [mode][body...]. mode & 3 picks the Content-Type (CBOR, JSON, CBOR with parameters, an
// unsupported one). Built with C4_FUZZ_TILED (target report_handler_tiled) the body is tiled:
// [prefix length: 2 bytes LE][prefix][unit], the unit repeated to kTiledBytes: the shape of a
// large body of tiny items, the DOM decoder's worst case (slow: a few runs a second).
//
// Memory per request is bounded: the heap may grow by at most kRequestMemoryBound while one
// handle() runs, so an unbounded expansion fails here (and against -malloc_limit_mb and
// -rss_limit_mb, set by run_fuzzer.sh). The DOM decoder's item limit (2 Mi values) holds the
// tiled seeds at 112-128 MiB; without it, an 8 MiB body of empty CBOR arrays took 448 MiB.
#include <sanitizer/allocator_interface.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>

#include "fuzz_check.h"
#include "operator/ingest/report_handler.h"
#include "unit-tests/operator/ingest/ingest_testing.h"

namespace {

using namespace c4;
using namespace c4::op::ingest;

#ifndef C4_FUZZ_TILED
#define C4_FUZZ_TILED 0
#endif
// Four times the DOM's item limit in one-byte items.
constexpr std::size_t kTiledBytes = std::size_t{8} << 20;
constexpr std::size_t kRequestMemoryBound = std::size_t{256} << 20;

// Heap bytes allocated minus freed since tracking started, and its peak (one thread).
std::atomic<bool> gTracking{false};
std::int64_t gLive = 0;
std::int64_t gPeak = 0;

void onMalloc(const volatile void*, std::size_t size) {
  if (!gTracking.load(std::memory_order_relaxed)) return;
  gLive += static_cast<std::int64_t>(size);
  gPeak = std::max(gPeak, gLive);
}
void onFree(const volatile void* ptr) {
  if (!gTracking.load(std::memory_order_relaxed) || ptr == nullptr) return;
  gLive -= static_cast<std::int64_t>(__sanitizer_get_allocated_size(const_cast<const void*>(ptr)));
}

class NodeAToken final : public TokenAuthenticator {
 public:
  Result<TokenUser> authenticate(std::string_view token) override {
    if (token != "tok-a") return makeError(ErrorCode::kUnauthenticated, "unknown token");
    TokenUser u;
    u.username = "system:serviceaccount:c4-system:c4-node-plugin";
    u.extra[kNodeNameExtra] = {"node-a"};
    u.audiences = {"c4-operator"};
    return u;
  }
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  __sanitizer_install_malloc_and_free_hooks(onMalloc, onFree);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::uint8_t mode = data[0];
  std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  if constexpr (C4_FUZZ_TILED != 0) {
    if (body.size() < 3) return 0;
    const std::size_t prefix_len = std::min<std::size_t>(
        static_cast<std::uint8_t>(body[0]) |
            (static_cast<std::size_t>(static_cast<std::uint8_t>(body[1])) << 8),
        body.size() - 2);
    const std::string prefix = body.substr(2, prefix_len);
    const std::string unit = body.substr(2 + prefix_len);
    if (unit.empty()) return 0;
    body = prefix;
    body.reserve(kTiledBytes);
    while (body.size() + unit.size() <= kTiledBytes) body += unit;
  }
  static const char* const kTypes[] = {"application/cbor", "application/json",
                                       "application/cbor; charset=binary", "text/plain"};

  SimulatedClock clock;  // the seeds' batches are stamped with its start
  NodeAToken auth;
  ReportStore store;
  std::map<std::string, JobInfo> jobs{{"ns1/job", JobInfo{JobFacts{"uid-1", 0, 4}, 2}}};
  std::map<std::string, Json> pods{
      {"ns1/job-0", testing::pod("ns1", "job-0", "job", "node-a", 0, 0)},
      {"ns1/job-1", testing::pod("ns1", "job-1", "job", "node-b", 1, 0)}};
  ClusterView view;
  view.job = [&](const std::string& ns, const std::string& name) -> std::optional<JobInfo> {
    auto it = jobs.find(ns + "/" + name);
    if (it == jobs.end()) return std::nullopt;
    return it->second;
  };
  view.pod = [&](const std::string& ns, const std::string& name) -> std::optional<Json> {
    auto it = pods.find(ns + "/" + name);
    if (it == pods.end()) return std::nullopt;
    return it->second;
  };
  view.serving = [] { return true; };
  ReportHandlerConfig config;
  config.global_limit = {1e6, 1e6};
  config.node_limit = {1e6, 1e6};
  ReportHandler handler(config, clock, auth, store, view, nullptr);

  IngestRequest request;
  request.authorization = "Bearer tok-a";
  request.content_type = kTypes[mode & 3];
  request.body = body;

  gLive = 0;
  gPeak = 0;
  gTracking.store(true);
  IngestResponse response = handler.handle(request);
  gTracking.store(false);
  const auto grown = static_cast<std::size_t>(gPeak);
  if (grown > kRequestMemoryBound) {
    std::fprintf(stderr, "one request of %zu bytes took %zu MiB of heap\n", body.size(),
                 grown >> 20);
  }
  C4_FUZZ_CHECK(grown <= kRequestMemoryBound);
  static const bool verbose = std::getenv("C4_FUZZ_VERBOSE") != nullptr;
  if (verbose) {
    std::fprintf(stderr, "%d %s, %zu MiB of heap: %s\n", response.status, response.reason.c_str(),
                 grown >> 20, response.body.c_str());
  }

  C4_FUZZ_CHECK(response.status >= 200 && response.status < 600);
  C4_FUZZ_CHECK(!response.reason.empty());
  C4_FUZZ_CHECK(!Json::parse(response.body, nullptr, false).is_discarded());
  if (response.status == 200) C4_FUZZ_CHECK(handler.lastSeq("node-a").has_value());
  if (response.status != 200) C4_FUZZ_CHECK(!handler.lastSeq("node-a").has_value());
  return 0;
}
