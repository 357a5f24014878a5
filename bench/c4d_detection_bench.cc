// C4D detection window at scale (issue #24: <= 200 ms p99 on one core for a 16,384-rank job).
//
// One healthy job of `ranks` ranks, 8 per node, `rings` bidirectional rings (strides 1, 3, 5, 7:
// each rank has 2 x `rings` send and as many receive connections, 4 subflows each, peer node and
// pod named as the net plugin names them) and `procs` processes per pod (1: a pod per rank; 8: a
// pod per node; a TrainingJob has at most 16,384 replicas, so 131,072 ranks need 8). Per window,
// in simulated time:
//
//   ingest  the node plugins' batches (one NodeReport per node carrying its 8 ranks' RankReports,
//           counters advanced: every connection moves ~200 MB (+-30 %) in 20 ops) applied to a
//           real ingest::ReportStore, as the endpoint does (ReportStore::apply);
//   recent  ReportStore::recentReports (under the store's shared lock: pointers to the ranks'
//           stored reports, copies of their identities and of the nodes' records);
//   build   buildSnapshot with the sources the detector gives it: pods and Nodes read in place in
//           informer caches (kube::Store: N / procs Pods and N / 8 Nodes, some with a
//           c4.dev/fault-history annotation, parsed with the malformed-entry check);
//   tick    JobAnalyser::tick;
//   window  the real Detector::reconcile of the job (all of the above but ingest, in the
//           operator's code, with its own analyser), its API client counting calls: a healthy
//           window must make none;
//   copy    copying the JobSnapshot (the baseline, as in c4d_analyser_bench.cc).
//
// Counters: p50/p99 (ms) of each, window / copy (p50), API calls, and memory (glibc mallinfo2
// heap in use, bytes per rank): the store's job data (after the history filled, and after the
// warm-up: a deque's blocks are freed and taken as it turns), the informer caches, one window's
// RecentReports and JobSnapshot, the analysers' state (the warm-up's growth less the store's).
//
//   taskset -c 1 build/bench/c4-c4d-detection-bench --benchmark_filter='ranks:16384/'
#include <benchmark/benchmark.h>
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "c4/common/clock.h"
#include "c4/common/metrics.h"
#include "kube/cache/informer.h"
#include "kube/controller/events.h"
#include "operator/c4d/analyser.h"
#include "operator/detection/detector.h"
#include "operator/ingest/report_store.h"
#include "operator/remediation/node_actions.h"
#include "operator/trainingjob/api.h"

namespace {

using namespace c4;
using namespace c4::kube;
using Json = c4::kube::Json;

constexpr int kRanksPerNode = 8;
constexpr int kSubflows = 4;
constexpr int kHistoryWindows = 8;  // fills the store's history (ReportStoreConfig::history)
constexpr int kWarmupWindows = 5;   // analysed before measuring (the analyser's baselines)

// An API client that answers nothing and counts every call: the detector's calls during the
// healthy windows (there must be none).
class CountingClient final : public KubeClient {
 public:
  Result<Json> get(const ResourceType&, std::string_view, std::string_view,
                   const GetOptions&) override {
    ++reads;
    return none();
  }
  Result<Json> list(const ResourceType&, std::string_view, const ListOptions&) override {
    ++reads;
    return none();
  }
  Result<Json> create(const ResourceType&, std::string_view, const Json&,
                      const WriteOptions&) override {
    ++writes;
    return none();
  }
  Result<Json> update(const ResourceType&, std::string_view, const Json&,
                      const WriteOptions&) override {
    ++writes;
    return none();
  }
  Result<Json> patch(const ResourceType&, std::string_view, std::string_view, PatchType,
                     const Json&, const PatchOptions&) override {
    ++writes;
    return none();
  }
  Status remove(const ResourceType&, std::string_view, std::string_view,
                const DeleteOptions&) override {
    ++writes;
    return none();
  }
  Status watch(const ResourceType&, std::string_view, const WatchOptions&,
               const WatchHandler&) override {
    ++reads;
    return none();
  }
  std::atomic<int> reads{0};
  std::atomic<int> writes{0};

 private:
  static std::unexpected<Error> none() {
    return makeError(ErrorCode::kUnavailable, "benchmark: no API server");
  }
};

double heap() {
  return static_cast<double>(mallinfo2().uordblks);
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

double msSince(MonoTime t0, MonoTime t1) {
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

std::string nodeName(int n) {
  return "gpu-node-" + std::to_string(n);
}

// A Node as the API server sends it (managedFields stripped, as the informer does): labels,
// conditions, capacity, addresses, node info and a few images.
Json makeNode(int n, WallTime now) {
  const std::string name = nodeName(n);
  Json annotations = {{"node.alpha.kubernetes.io/ttl", "0"},
                      {"volumes.kubernetes.io/controller-managed-attach-detach", "true"}};
  // A fault history on some nodes: one recent entry on every 64th, two older than the
  // repeat-offender window on every 16th.
  auto entry = [](WallTime t, const char* cls) {
    return Json{{"time", formatRfc3339(t)}, {"class", cls}, {"job", "team/earlier-job"}};
  };
  if (n % 64 == 0) {
    annotations[op::kFaultHistoryAnnotation] =
        Json::array({entry(now - std::chrono::hours{3}, "nonCommHang")}).dump();
  } else if (n % 16 == 0) {
    annotations[op::kFaultHistoryAnnotation] =
        Json::array({entry(now - std::chrono::hours{24 * 9}, "commHang"),
                     entry(now - std::chrono::hours{24 * 4}, "crash")})
            .dump();
  }
  Json conditions = Json::array();
  for (const char* type : {"MemoryPressure", "DiskPressure", "PIDPressure"}) {
    conditions.push_back({{"type", type},
                          {"status", "False"},
                          {"lastHeartbeatTime", "2026-12-06T10:00:00Z"},
                          {"lastTransitionTime", "2026-11-01T08:00:00Z"},
                          {"reason", std::string("KubeletHas") + "No" + type},
                          {"message", "kubelet has no pressure"}});
  }
  conditions.push_back({{"type", "Ready"},
                        {"status", "True"},
                        {"lastHeartbeatTime", "2026-12-06T10:00:00Z"},
                        {"lastTransitionTime", "2026-11-01T08:00:00Z"},
                        {"reason", "KubeletReady"},
                        {"message", "kubelet is posting ready status"}});
  Json images = Json::array();
  for (int i = 0; i < 6; ++i) {
    images.push_back({{"names",
                       {"registry.example.com/train/image-" + std::to_string(i) +
                        "@sha256:" + std::string(64, static_cast<char>('a' + i))}},
                      {"sizeBytes", 9'000'000'000 + i}});
  }
  return {{"apiVersion", "v1"},
          {"kind", "Node"},
          {"metadata",
           {{"name", name},
            {"uid", "00000000-0000-0000-0000-" + std::to_string(100'000'000'000 + n)},
            {"resourceVersion", std::to_string(1000 + n)},
            {"creationTimestamp", "2026-11-01T08:00:00Z"},
            {"labels",
             {{"kubernetes.io/hostname", name},
              {"kubernetes.io/os", "linux"},
              {"kubernetes.io/arch", "amd64"},
              {"node.kubernetes.io/instance-type", "gpu-8x-h100"},
              {"topology.kubernetes.io/zone", "zone-a"},
              {"nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"},
              {"nvidia.com/gpu.count", "8"},
              {"c4.dev/leaf", "leaf-" + std::to_string(n / 32)}}},
            {"annotations", annotations}}},
          {"spec", {{"podCIDR", "10.64.0.0/24"}, {"providerID", "metal://" + name}}},
          {"status",
           {{"capacity",
             {{"cpu", "192"}, {"memory", "2113638Mi"}, {"nvidia.com/gpu", "8"}, {"pods", "110"}}},
            {"allocatable",
             {{"cpu", "190"}, {"memory", "2000000Mi"}, {"nvidia.com/gpu", "8"}, {"pods", "110"}}},
            {"conditions", conditions},
            {"addresses",
             {{{"type", "InternalIP"}, {"address", "10.0.0.1"}},
              {{"type", "Hostname"}, {"address", name}}}},
            {"nodeInfo",
             {{"kubeletVersion", "v1.30.4"},
              {"containerRuntimeVersion", "containerd://1.7.20"},
              {"kernelVersion", "6.8.0-45-generic"},
              {"osImage", "Ubuntu 24.04.1 LTS"},
              {"architecture", "amd64"},
              {"operatingSystem", "linux"}}},
            {"images", images}}}};
}

// A training pod as the TrainingJob controller creates it, Running.
Json makePod(int index, int node, int procs) {
  Json env = Json::array();
  for (const char* v :
       {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "NODE_RANK", "NPROC_PER_NODE", "C4_JOB",
        "C4_NAMESPACE", "C4_RESTART_ATTEMPT", "NCCL_NET_PLUGIN", "NCCL_PROFILER_PLUGIN"}) {
    env.push_back({{"name", v}, {"value", "value-of-" + std::string(v)}});
  }
  Json gpus = procs;
  return {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata",
       {{"name", "llm-" + std::to_string(index)},
        {"namespace", "team"},
        {"uid", "10000000-0000-0000-0000-" + std::to_string(100'000'000'000 + index)},
        {"resourceVersion", std::to_string(5000 + index)},
        {"creationTimestamp", "2026-12-06T09:00:00Z"},
        {"labels",
         {{op::labels::kJobName, "llm"},
          {op::labels::kReplicaIndex, std::to_string(index)},
          {op::labels::kRestartAttempt, "0"}}},
        {"ownerReferences",
         {{{"apiVersion", "c4.dev/v1alpha1"},
           {"kind", "TrainingJob"},
           {"name", "llm"},
           {"uid", "job-uid"},
           {"controller", true},
           {"blockOwnerDeletion", true}}}}}},
      {"spec",
       {{"nodeName", nodeName(node)},
        {"restartPolicy", "Never"},
        {"schedulerName", "default-scheduler"},
        {"serviceAccountName", "default"},
        {"containers",
         {{{"name", "trainer"},
           {"image", "registry.example.com/train/llm:2026.12"},
           {"command", {"torchrun"}},
           {"args", {"--nnodes", "$(WORLD_SIZE)", "train.py", "--config", "/etc/llm/config.yaml"}},
           {"env", env},
           {"resources",
            {{"limits", {{"nvidia.com/gpu", gpus}}}, {"requests", {{"nvidia.com/gpu", gpus}}}}},
           {"volumeMounts",
            {{{"name", "data"}, {"mountPath", "/data"}},
             {{"name", "checkpoints"}, {"mountPath", "/checkpoints"}},
             {{"name", "shm"}, {"mountPath", "/dev/shm"}}}}}}},
        {"volumes",
         {{{"name", "data"}, {"persistentVolumeClaim", {{"claimName", "data"}}}},
          {{"name", "checkpoints"}, {"persistentVolumeClaim", {{"claimName", "checkpoints"}}}},
          {{"name", "shm"}, {"emptyDir", {{"medium", "Memory"}}}}}},
        {"tolerations",
         {{{"key", "nvidia.com/gpu"}, {"operator", "Exists"}, {"effect", "NoSchedule"}}}}}},
      {"status",
       {{"phase", "Running"},
        {"hostIP", "10.0.0.1"},
        {"podIP", "10.64.0.10"},
        {"startTime", "2026-12-06T09:00:05Z"},
        {"conditions",
         {{{"type", "Initialized"}, {"status", "True"}},
          {{"type", "Ready"}, {"status", "True"}},
          {{"type", "ContainersReady"}, {"status", "True"}},
          {{"type", "PodScheduled"}, {"status", "True"}}}},
        {"containerStatuses",
         {{{"name", "trainer"},
           {"ready", true},
           {"restartCount", 0},
           {"image", "registry.example.com/train/llm:2026.12"},
           {"imageID", "registry.example.com/train/llm@sha256:" + std::string(64, 'f')},
           {"containerID", "containerd://" + std::string(64, 'e')},
           {"state", {{"running", {{"startedAt", "2026-12-06T09:00:10Z"}}}}}}}}}}};
}

// The operator's side of one job: the report store, the informer caches and the detector.
struct Cluster {
  int ranks;
  int procs;
  SimulatedClock clock;
  CountingClient client;
  metrics::Registry registry;
  EventRecorder events{client, clock, "c4-operator", "bench", nullptr};
  op::ingest::ReportStore store;
  Informer jobs{client, clock, resources::trainingJobs(), ""};
  Informer pods{client, clock, resources::pods(), ""};
  Informer nodes{client, clock, resources::nodes(), ""};
  op::NodeRemediator remediator{client,
                                clock,
                                events,
                                op::NodeActionConfig{},
                                [this](const std::string& n) { return nodes.store().get(n); },
                                [this] { return nodes.store().list(); },
                                nullptr};
  std::unique_ptr<op::Detector> detector;
  Json job;
  op::ingest::JobFacts facts;

  Cluster(int ranks_, int procs_) : ranks(ranks_), procs(procs_) {
    facts = {"job-uid", 0, ranks};
    job = {{"apiVersion", "c4.dev/v1alpha1"},
           {"kind", "TrainingJob"},
           {"metadata", {{"name", "llm"}, {"namespace", "team"}, {"uid", "job-uid"}}},
           {"spec",
            {{"replicas", ranks / procs},
             {"numProcPerNode", procs},
             {"template", {{"spec", {{"containers", {{{"name", "t"}, {"image", "i"}}}}}}}}}},
           {"status", {{"phase", "Running"}, {"attempt", 0}}}};
    jobs.store().upsert(job);
    store.observeJob("team", "llm", facts);
    detector = std::make_unique<op::Detector>(store, jobs, pods, nodes, remediator, events, clock,
                                              op::DetectorConfig{}, registry);
  }

  void fillCaches() {
    for (int n = 0; n < ranks / kRanksPerNode; ++n)
      nodes.store().upsert(makeNode(n, clock.wallNow()));
    for (int p = 0; p < ranks / procs; ++p)
      pods.store().upsert(makePod(p, p * procs / kRanksPerNode, procs));
  }

  // The sources Detector::analyse gives buildSnapshot: pods and Nodes read in place in the
  // informer caches (Detector::checkFaultHistory then looks at the history's `problem`).
  op::PodFactsCache pod_cache;  // as the detector keeps one per job
  op::SnapshotSources sources() {
    op::SnapshotSources s;
    s.pod = [this](const std::string& k) {
      std::optional<op::PodFacts> pod_facts;
      pods.store().read(k, [&](const Json& pod) { pod_facts = pod_cache.of(k, pod); });
      return pod_facts;
    };
    s.node_history = [this](const std::string& n) {
      std::optional<std::vector<op::NodeFaultRecord>> history;
      std::string problem;
      nodes.store().read(n,
                         [&](const Json& node) { history = op::faultHistoryOf(node, &problem); });
      benchmark::DoNotOptimize(problem);
      return history;
    };
    s.node_record = [this](const std::string& n) { return store.node(n); };
    return s;
  }
};

// The node plugins' batches of a healthy job, advanced one window at a time.
struct Telemetry {
  std::vector<report::NodeReport> batches;  // one per node
  std::mt19937_64 rng{42};
  std::uint64_t batch_seq = 0;

  Telemetry(int ranks, int rings) {
    const int node_count = ranks / kRanksPerNode;
    batches.resize(static_cast<std::size_t>(node_count));
    for (int n = 0; n < node_count; ++n) {
      report::NodeReport& b = batches[static_cast<std::size_t>(n)];
      b.node = nodeName(n);
      // Healthy hardware: 8 GPUs, 4 RDMA NICs with their ports.
      b.health.gpus_available = b.health.nics_available = b.health.rdma_available = true;
      for (int g = 0; g < 8; ++g) {
        report::GpuHealth gpu;
        gpu.index = g;
        gpu.uuid = "GPU-" + std::to_string(n) + "-" + std::to_string(g);
        b.health.gpus.push_back(gpu);
      }
      for (int i = 0; i < 4; ++i) {
        report::NicHealth nic;
        nic.name = "ens" + std::to_string(i);
        nic.up = nic.carrier = nic.rdma = true;
        nic.operstate = "up";
        nic.speed_mbps = 400'000;
        b.health.nics.push_back(nic);
        report::RdmaPortHealth port;
        port.device = "mlx5_" + std::to_string(i);
        port.netdev = nic.name;
        port.state = "ACTIVE";
        port.phys_state = "LinkUp";
        port.active = true;
        port.rate_mbps = 400'000;
        b.health.rdma_ports.push_back(port);
      }
      for (int k = 0; k < kRanksPerNode; ++k) {
        const int r = n * kRanksPerNode + k;
        report::RankReport rr;
        rr.id = {"team", "llm", "", b.node, r, ranks, 0, static_cast<std::uint32_t>(1000 + k)};
        std::uint64_t id = 1;
        for (int ring = 0; ring < rings; ++ring) {
          const int stride = 2 * ring + 1;
          for (int peer : {(r + stride) % ranks, (r - stride + ranks) % ranks}) {
            for (auto dir : {report::Direction::kSend, report::Direction::kRecv}) {
              report::ConnectionStats c;
              c.id = id++;
              c.direction = dir;
              c.peer_rank = peer;
              c.peer_node = nodeName(peer / kRanksPerNode);
              c.subflows.resize(kSubflows);
              for (int s = 0; s < kSubflows; ++s) {
                c.subflows[static_cast<std::size_t>(s)].index = static_cast<std::uint32_t>(s);
                c.subflows[static_cast<std::size_t>(s)].local_port =
                    static_cast<std::uint16_t>(40000 + s);
              }
              rr.connections.push_back(std::move(c));
            }
          }
        }
        b.reports.push_back(std::move(rr));
      }
    }
  }

  void setPods(int procs) {
    for (auto& b : batches) {
      for (auto& rr : b.reports) {
        rr.id.pod = "llm-" + std::to_string(rr.id.rank / procs);
        for (auto& c : rr.connections) c.peer_pod = "llm-" + std::to_string(c.peer_rank / procs);
      }
    }
  }

  // One healthy window: every connection moves ~200 MB (+-30 %) in 20 ops.
  void advance(WallTime now) {
    std::uniform_real_distribution<double> jit(0.7, 1.3);
    const std::int64_t ns = toUnixNanos(now);
    for (auto& b : batches) {
      b.seq = ++batch_seq;
      b.time_unix_ns = ns;
      for (auto& rr : b.reports) {
        ++rr.seq;
        rr.time_unix_ns = ns;
        for (auto& c : rr.connections) {
          const double bytes = 200e6 * jit(rng);
          const auto moved = static_cast<std::uint64_t>(bytes);
          c.bytes += moved;
          c.ops += 20;
          for (auto& sf : c.subflows) sf.bytes += moved / kSubflows;
          c.inflight = static_cast<std::uint32_t>(rng() % 3);
          c.oldest_inflight_us = c.inflight ? rng() % 50'000 : 0;
          c.wait.count = 20;
          c.wait.sum_us = static_cast<std::uint64_t>(100'000 * jit(rng));
          c.wait.p50_us = c.wait.sum_us / 20;
          c.wait.p99_us = c.wait.max_us = c.wait.sum_us / 10;
          c.transfer.count = 20;
          c.transfer.sum_us = static_cast<std::uint64_t>(bytes / 2e9 * 1e6 * jit(rng));
          c.transfer.p50_us = c.transfer.sum_us / 20;
          c.transfer.p99_us = c.transfer.max_us = c.transfer.sum_us / 10;
        }
      }
    }
  }
};

struct Window {
  double ingest = 0, recent = 0, build = 0, tick = 0, copy = 0, window = 0;
};

void BM_C4dDetectionWindow(benchmark::State& state) {
  const int ranks = static_cast<int>(state.range(0));
  const int rings = static_cast<int>(state.range(1));
  const int procs = static_cast<int>(state.range(2));
  Clock& real = realClock();

  const double h0 = heap();
  Telemetry telemetry(ranks, rings);
  telemetry.setPods(procs);
  Cluster cluster(ranks, procs);
  const double h1 = heap();
  cluster.fillCaches();
  const double h2 = heap();  // the informer caches

  const std::map<std::string, op::ingest::JobFacts> jobs{{"team/llm", cluster.facts}};
  auto ingest = [&]() {
    cluster.clock.advance(std::chrono::seconds{1});
    const WallTime now = cluster.clock.wallNow();
    telemetry.advance(now);
    const auto t0 = real.monoNow();
    for (const auto& b : telemetry.batches) cluster.store.apply(b, jobs, now, 0);
    return msSince(t0, real.monoNow());
  };
  for (int i = 0; i < kHistoryWindows; ++i) (void)ingest();
  const double h3 = heap();  // + the store's job data (full history)

  const op::SnapshotSources sources = cluster.sources();
  const op::DetectorConfig config;
  c4d::JobAnalyser analyser;
  op::ReportSampleCache samples;  // as the detector keeps one per job
  op::ingest::RecentReportsQuery query;
  query.reports = config.report_samples;
  double recent_bytes = 0, snapshot_bytes = 0;
  std::size_t edges = 0;
  bool healthy = true;
  std::string failure;

  auto analyse = [&](Window& w, bool measure_memory) {
    const WallTime now = cluster.clock.wallNow();
    const double m0 = measure_memory ? heap() : 0;
    const auto t0 = real.monoNow();
    auto reports = cluster.store.recentReports("team", "llm", query);
    const auto t1 = real.monoNow();
    const double m1 = measure_memory ? heap() : 0;
    if (!reports) {
      healthy = false;
      failure = "the store does not hold the job";
      return;
    }
    const Json job = *cluster.jobs.store().get("team/llm");
    const auto t2 = real.monoNow();
    c4d::JobSnapshot snap = op::buildSnapshot(job, *reports, sources, config, now, &samples);
    cluster.pod_cache.sweep();
    const auto t3 = real.monoNow();
    const double m2 = measure_memory ? heap() : 0;
    query.anomalies_after_seq = reports->anomaly_seq;
    const auto t4 = real.monoNow();
    auto result = analyser.tick(snap, now);
    const auto t5 = real.monoNow();
    if (!result) {
      healthy = false;
      failure = "tick failed: " + result.error().message;
      return;
    }
    if (!result->verdicts.empty() || !result->observations.empty()) {
      healthy = false;
      failure = "a verdict or an observation in a healthy job";
    }
    edges = result->stats.edges;
    const auto t6 = real.monoNow();
    c4d::JobSnapshot copy = snap;
    const auto t7 = real.monoNow();
    benchmark::DoNotOptimize(copy);
    const auto t8 = real.monoNow();
    auto reconciled = cluster.detector->reconcile("team/llm");
    const auto t9 = real.monoNow();
    if (!reconciled) {
      healthy = false;
      failure = "reconcile failed";
    }
    w.recent = msSince(t0, t1);
    w.build = msSince(t2, t3);
    w.tick = msSince(t4, t5);
    w.copy = msSince(t6, t7);
    w.window = msSince(t8, t9);
    if (measure_memory) {
      recent_bytes = m1 - m0;
      snapshot_bytes = m2 - m1;
    }
  };

  double warmup_store_bytes = 0;  // what the store grew by during the warm-up
  for (int i = 0; i < kWarmupWindows; ++i) {
    Window w;
    const double before = heap();
    (void)ingest();
    warmup_store_bytes += heap() - before;
    analyse(w, false);
  }
  const double h4 = heap();  // + both analysers' and the detector's state
  const int writes_before = cluster.client.writes.load();
  const int reads_before = cluster.client.reads.load();

  std::vector<Window> windows;
  for (auto _ : state) {
    Window w;
    w.ingest = ingest();
    analyse(w, windows.empty());
    if (!healthy) {
      state.SkipWithError(failure.c_str());
      return;
    }
    windows.push_back(w);
  }
  auto stat = [&](double Window::*field, double p) {
    std::vector<double> v;
    for (const auto& w : windows) v.push_back(w.*field);
    return percentile(std::move(v), p);
  };
  auto staged = [&](double p) {
    std::vector<double> v;
    for (const auto& w : windows) v.push_back(w.recent + w.build + w.tick);
    return percentile(std::move(v), p);
  };
  const double per_rank = 1.0 / ranks;
  for (auto [name, field] : {std::pair{"ingest", &Window::ingest},
                             {"recent", &Window::recent},
                             {"build", &Window::build},
                             {"tick", &Window::tick},
                             {"window", &Window::window},
                             {"copy", &Window::copy}}) {
    state.counters[std::string(name) + "_p50_ms"] = stat(field, 0.5);
    state.counters[std::string(name) + "_p99_ms"] = stat(field, 0.99);
  }
  state.counters["stages_p50_ms"] = staged(0.5);
  state.counters["stages_p99_ms"] = staged(0.99);
  state.counters["window_over_copy"] = stat(&Window::window, 0.5) / stat(&Window::copy, 0.5);
  state.counters["edges"] = static_cast<double>(edges);
  state.counters["api_writes"] = cluster.client.writes.load() - writes_before;
  state.counters["api_reads"] = cluster.client.reads.load() - reads_before;
  state.counters["batches_B_per_rank"] = (h1 - h0) * per_rank;
  state.counters["caches_B_per_rank"] = (h2 - h1) * per_rank;
  state.counters["store_B_per_rank"] = (h3 - h2) * per_rank;
  state.counters["recent_B_per_rank"] = recent_bytes * per_rank;
  state.counters["snapshot_B_per_rank"] = snapshot_bytes * per_rank;
  state.counters["store_warm_B_per_rank"] = (h3 - h2 + warmup_store_bytes) * per_rank;
  state.counters["analysers_B_per_rank"] = (h4 - h3 - warmup_store_bytes) * per_rank;
}

BENCHMARK(BM_C4dDetectionWindow)
    ->ArgNames({"ranks", "rings", "procs"})
    ->Args({1024, 1, 1})
    ->Args({4096, 1, 1})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(100);
BENCHMARK(BM_C4dDetectionWindow)
    ->ArgNames({"ranks", "rings", "procs"})
    ->Args({16384, 1, 1})
    ->Args({16384, 1, 8})
    ->Args({16384, 4, 1})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(60);
BENCHMARK(BM_C4dDetectionWindow)
    ->ArgNames({"ranks", "rings", "procs"})
    ->Args({131072, 1, 8})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(10);

}  // namespace

BENCHMARK_MAIN();
