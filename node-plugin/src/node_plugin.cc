#include "c4/node_plugin/node_plugin.h"

#include "c4/common/log.h"
#include "c4/node_plugin/attribution.h"
#include "c4/node_plugin/health.h"
#include "c4/node_plugin/http_server.h"
#include "c4/node_plugin/installer.h"
#include "c4/node_plugin/nvml.h"
#include "c4/node_plugin/process_watch.h"
#include "c4/node_plugin/receiver.h"
#include "c4/node_plugin/shipper.h"
#include "kube/cache/informer.h"
#include "kube/client/curl_kube_client.h"
#include "kube/client/kube_config.h"

namespace c4::node {
namespace {

Duration seconds(double s) {
  return std::chrono::duration_cast<Duration>(std::chrono::duration<double>(s));
}

constexpr Duration kLivenessWindow = std::chrono::seconds{30};

}  // namespace

struct NodePlugin::Impl {
  NodePluginOptions options;
  Clock& clock;
  Logger log{"node-plugin"};
  metrics::Registry registry;
  std::unique_ptr<kube::KubeClient> client;
  std::unique_ptr<kube::Informer> informer;
  std::unique_ptr<StorePodDirectory> pods;
  std::unique_ptr<Attributor> attributor;
  std::unique_ptr<ReportTransport> transport;
  std::unique_ptr<TokenSource> tokens;
  std::unique_ptr<Shipper> shipper;
  std::unique_ptr<ProcessWatch> processes;
  std::unique_ptr<Receiver> receiver;
  std::unique_ptr<HealthMonitor> health;
  std::unique_ptr<HttpServer> http;
  std::atomic<bool> installed{false};
  std::atomic<bool> started{false};
  MonoTime start_time{};
  metrics::CollectHook hook;

  Impl(NodePluginOptions o, Clock& c) : options(std::move(o)), clock(c) {}
};

NodePlugin::NodePlugin(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

NodePlugin::~NodePlugin() {
  stop();
}

metrics::Registry& NodePlugin::registry() {
  return impl_->registry;
}

Result<std::unique_ptr<NodePlugin>> NodePlugin::create(const NodePluginOptions& options,
                                                       Clock& clock,
                                                       std::unique_ptr<kube::KubeClient> client) {
  auto impl = std::make_unique<Impl>(options, clock);
  if (!client) {
    C4_ASSIGN_OR_RETURN(auto config,
                        kube::loadDefaultKubeConfig(options.kubeconfig, options.context));
    C4_ASSIGN_OR_RETURN(client,
                        kube::createCurlKubeClient(std::move(config), clock, &impl->registry));
  }
  impl->client = std::move(client);
  impl->informer = std::make_unique<kube::Informer>(*impl->client, clock, kube::resources::pods(),
                                                    options.pod_namespace, "",
                                                    "spec.nodeName=" + options.node_name);
  StorePodDirectory::addIndexes(impl->informer->store());
  kube::Informer* informer = impl->informer.get();
  impl->pods = std::make_unique<StorePodDirectory>(impl->informer->store(),
                                                   [informer] { return informer->hasSynced(); });
  C4_ASSIGN_OR_RETURN(auto mode, parseAttributionMode(options.attribution));
  impl->attributor = std::make_unique<Attributor>(
      Attributor::Config{options.node_name, mode, options.proc_root}, *impl->pods, clock);
  C4_ASSIGN_OR_RETURN(impl->transport,
                      createCurlTransport({.url = options.operator_url,
                                           .ca_file = options.ca_file,
                                           .allow_insecure = options.allow_insecure_operator_url}));
  impl->tokens = std::make_unique<TokenSource>(options.token_file);
  ShipperConfig sc;
  sc.node = options.node_name;
  sc.interval = seconds(options.interval_seconds);
  sc.max_buffer_bytes = options.max_buffer_bytes;
  sc.max_notices = options.max_notices;
  sc.backoff_base = seconds(options.backoff_base_seconds);
  sc.backoff_cap = seconds(options.backoff_cap_seconds);
  sc.request_timeout = seconds(options.request_timeout_seconds);
  sc.shutdown_deadline = seconds(options.shutdown_timeout_seconds);
  sc.last_words_ttl = seconds(options.last_words_seconds);
  impl->shipper =
      std::make_unique<Shipper>(sc, clock, *impl->transport, *impl->tokens, impl->registry);
  return std::unique_ptr<NodePlugin>(new NodePlugin(std::move(impl)));
}

Status NodePlugin::start() {
  Impl& s = *impl_;
  s.start_time = s.clock.monoNow();
  // Both NCCL plugins go into the directory the pods mount: the profiler plugin (the default
  // telemetry source) and the net plugin (traffic planning's Enforce mode, or a job's choice).
  const std::pair<const std::string*, const char*> libraries[] = {
      {&s.options.plugin_source, "NCCL net plugin"},
      {&s.options.profiler_plugin_source, "NCCL profiler plugin"}};
  for (const auto& [source, what] : libraries) {
    if (source->empty()) continue;
    auto installed = installPlugin(*source, s.options.plugin_install_dir);
    if (!installed) {
      return std::unexpected(installed.error().withContext(std::string("installing the ") + what));
    }
    s.log.info(what,
               {{"source", *source},
                {"dir", s.options.plugin_install_dir},
                {"outcome", *installed == InstallOutcome::kInstalled ? "installed" : "unchanged"}});
  }
  s.installed = true;
  s.informer->start();

  Shipper* shipper = s.shipper.get();
  Receiver::Config rc;
  rc.socket_path = s.options.socket;
  rc.rcvbuf_bytes = static_cast<int>(
      std::min<std::size_t>(s.options.socket_receive_buffer, std::size_t{1} << 30));
  rc.reassembly.timeout = s.options.reassembly_timeout_seconds > 0
                              ? seconds(s.options.reassembly_timeout_seconds)
                              : 2 * seconds(s.options.interval_seconds);
  // Every rank process that speaks is watched for its exit (profiler telemetry has no other
  // sign of a rank killed while its pod stays up); the exit goes out as an anomaly notice.
  C4_ASSIGN_OR_RETURN(
      s.processes,
      ProcessWatch::create({}, s.clock, s.registry, [shipper](report::AnomalyNotice&& n) {
        return shipper->add(report::Message(std::move(n)));
      }));
  ProcessWatch* processes = s.processes.get();
  C4_ASSIGN_OR_RETURN(
      s.receiver,
      Receiver::create(rc, s.clock, *s.attributor, s.registry,
                       [shipper, processes](report::Message&& m, const Attribution& a) {
                         processes->observe(
                             a.pid,
                             std::visit([](const auto& x) -> const auto& { return x.id; }, m));
                         return shipper->add(std::move(m));
                       }));
  Receiver* receiver = s.receiver.get();
  s.hook = s.registry.onCollect([receiver, shipper] {
    std::uint64_t rejected = receiver->droppedTotal() - receiver->overloadDrops();
    shipper->setMessageCounters(receiver->overloadDrops(), rejected);
  });

  HealthMonitor::Config hc;
  hc.sysfs_root = s.options.sysfs_root;
  hc.interface_regex = s.options.interfaces;
  hc.interval = seconds(s.options.health_interval_seconds);
  std::unique_ptr<GpuReader> gpus;
  if (!s.options.nvml_library.empty()) gpus = createNvmlGpuReader(s.options.nvml_library);
  C4_ASSIGN_OR_RETURN(
      s.health, HealthMonitor::create(hc, s.clock, std::move(gpus), s.registry,
                                      [shipper, receiver](const report::NodeHealth& h, bool a) {
                                        shipper->setMessageCounters(
                                            receiver->overloadDrops(),
                                            receiver->droppedTotal() - receiver->overloadDrops());
                                        shipper->setHealth(h, a);
                                      }));
  s.health->pollOnce();  // the first batch already carries health
  s.receiver->start();
  s.processes->start();
  s.health->start();
  s.shipper->start();
  if (s.options.metrics_bind_address != "0") {
    C4_ASSIGN_OR_RETURN(auto hp, parseBindAddress(s.options.metrics_bind_address));
    s.http = std::make_unique<HttpServer>(
        s.registry, [this] { return liveness(); }, [this] { return readiness(); });
    C4_RETURN_IF_ERROR(s.http->start(hp.first, hp.second));
  }
  s.started = true;
  s.log.info("node plugin started", {{"node", s.options.node_name},
                                     {"socket", s.receiver->path()},
                                     {"operator", s.options.operator_url},
                                     {"attribution", s.options.attribution}});
  return okStatus();
}

void NodePlugin::stop() {
  if (!impl_) return;
  Impl& s = *impl_;
  if (s.receiver) s.receiver->stop();
  if (s.processes) s.processes->stop();
  if (s.health) s.health->stop();
  if (s.shipper) s.shipper->stop();  // flushes within the shutdown deadline
  if (s.informer) s.informer->stop();
  if (s.http) s.http->stop();
  s.hook.reset();
}

std::string NodePlugin::liveness() const {
  const Impl& s = *impl_;
  if (!s.started) return "";
  const MonoTime now = s.clock.monoNow();
  if (now - s.receiver->lastLoop() > kLivenessWindow) return "receiver thread stalled";
  if (now - s.shipper->lastLoop() > kLivenessWindow) return "shipper thread stalled";
  if (now - s.processes->lastLoop() > kLivenessWindow) return "process watch thread stalled";
  if (now - s.health->lastLoop() > kLivenessWindow) return "health thread stalled";
  return "";
}

std::string NodePlugin::readiness() const {
  const Impl& s = *impl_;
  if (!s.installed) return "plugin not installed";
  if (!s.receiver) return "socket not bound";
  if (!s.informer->hasSynced()) return "pod informer not synced";
  const MonoTime now = s.clock.monoNow();
  const auto limit = seconds(s.options.ready_failure_seconds);
  if (auto since = s.shipper->failingSince(); since && now - *since > limit) {
    return "POSTs to the operator failing for more than " +
           std::to_string(s.options.ready_failure_seconds) + " s";
  }
  if (!s.shipper->lastSuccess() && now - s.start_time > limit) {
    return "no batch accepted by the operator since start";
  }
  return "";
}

int NodePlugin::httpPort() const {
  return impl_->http ? impl_->http->port() : 0;
}

}  // namespace c4::node
