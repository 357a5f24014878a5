// NodePlugin: the whole DaemonSet process, wired from options. Start order: install the NCCL
// net plugin (a failure aborts start), start the pod informer (spec.nodeName=<node>), bind the
// agent socket, start the health monitor, the shipper and the HTTP server. stop() stops taking
// datagrams, then lets the shipper flush within --shutdown-timeout.
//
// Liveness (/healthz): the receiver, shipper and health threads each looped within the last 30 s.
// Readiness (/readyz): the socket is bound, the plugin installed (or installation disabled), the
// pod informer has synced, and POSTs have not been failing for longer than
// --ready-failure-seconds (a node plugin that never reached the operator since start counts as
// failing since its start).
#pragma once

#include <memory>
#include <string>

#include "c4/common/clock.h"
#include "c4/common/metrics.h"
#include "c4/node_plugin/options.h"
#include "kube/client/kube_client.h"

namespace c4::node {

class NodePlugin {
 public:
  // `client` may be null: one is built from the options' kubeconfig / in-cluster config.
  static Result<std::unique_ptr<NodePlugin>> create(const NodePluginOptions& options, Clock& clock,
                                                    std::unique_ptr<kube::KubeClient> client);
  ~NodePlugin();

  Status start();
  void stop();

  // "" when live / ready, else what is wrong.
  [[nodiscard]] std::string liveness() const;
  [[nodiscard]] std::string readiness() const;
  [[nodiscard]] int httpPort() const;
  metrics::Registry& registry();

 private:
  struct Impl;
  explicit NodePlugin(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace c4::node
