// Kubernetes Events (core/v1, so `kubectl describe` shows them) for TrainingJobs and Nodes.
// Recording never fails the caller: a failed write is logged and counted.
#pragma once

#include <atomic>
#include <string>

#include "c4/common/clock.h"
#include "c4/common/log.h"
#include "c4/common/metrics.h"
#include "operator/client/kube_client.h"

namespace c4::op {

class EventRecorder {
 public:
  EventRecorder(KubeClient& client, Clock& clock, std::string component, std::string instance,
                metrics::Registry* registry);

  // `regarding` is the object (needs apiVersion/kind/metadata). type: Normal | Warning.
  void record(const Json& regarding, const std::string& type, const std::string& reason,
              const std::string& message);
  // The Event object record() would write (exposed for tests).
  Json buildEvent(const Json& regarding, const std::string& type, const std::string& reason,
                  const std::string& message);

 private:
  KubeClient& client_;
  Clock& clock_;
  std::string component_;
  std::string instance_;
  Logger log_;
  std::atomic<std::uint64_t> sequence_{0};
  metrics::Family<metrics::Counter>* events_ = nullptr;
};

}  // namespace c4::op
