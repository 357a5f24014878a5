// The informer caches of one manager, shared by all of its controllers (client-go's
// SharedInformerFactory, controller-runtime's cache): one Informer -- one list and one watch
// against the API server -- per (resource, namespace, label selector, field selector), however
// many controllers read that resource. Controllers ask for their informers, add their handlers
// and indexes, then the manager starts them all and waits for every cache to sync before any
// worker runs.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "c4/common/clock.h"
#include "kube/cache/informer.h"
#include "kube/client/kube_client.h"
#include "kube/client/random.h"

namespace c4::kube {

class SharedInformers {
 public:
  // `client` and `clock` must outlive this object.
  SharedInformers(KubeClient& client, Clock& clock);
  // Stops and joins every informer.
  ~SharedInformers();
  SharedInformers(const SharedInformers&) = delete;
  SharedInformers& operator=(const SharedInformers&) = delete;

  // The one Informer for (type, namespace, label selector, field selector): created on the
  // first call, the same object on later calls with the same arguments (`ns` is ignored for
  // cluster-scoped types). The reference stays valid until this object is destroyed; it is
  // owned here. Add handlers and indexes to it before start(). Thread-safe. Call it before
  // start(): an informer first asked for later runs only from the next start() call.
  Informer& informerFor(const ResourceType& type, const std::string& ns = "",
                        const std::string& label_selector = "",
                        const std::string& field_selector = "");
  // Watch calls of every informer (present and future) end after `s` seconds and resume from
  // the last resourceVersion. Before start().
  void setWatchTimeoutSeconds(int s);
  // Backoff jitter of every informer (present and future) draws from `random` (tests). Before
  // start().
  void setRandomSource(RandomSource random);

  // Starts every informer that is not running yet. Idempotent. Informers cannot be started
  // again after stop().
  void start();
  // Blocks until every informer has synced (true), or until `deadline` or a stop (false).
  bool waitForSync(MonoTime deadline);
  // Asks every informer to stop (open lists, watches and backoffs end at once), without
  // waiting for them.
  void requestStop();
  // Stops and joins every informer. Idempotent.
  void stop();
  // How many informers (distinct watches) there are.
  [[nodiscard]] std::size_t size() const;

 private:
  KubeClient& client_;
  Clock& clock_;
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<Informer>> informers_;
  int watch_timeout_s_ = 0;  // 0 = the informer's default
  RandomSource random_;
  bool stopped_ = false;
};

}  // namespace c4::kube
