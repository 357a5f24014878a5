// Report ingest, wired: the report store, the TokenReview authenticator, the endpoint's logic
// and its HTTPS server, connected to the manager's shared informer caches:
//
//   - the TrainingJob informer (namespace `watch_namespace`) tells the endpoint which jobs exist
//     (uid, attempt, world size) and the store when a job goes (dropJob) or moves to a new
//     attempt (observeJob);
//   - the pod informer of the TrainingJob controller (pods labelled c4.dev/job-name) tells the
//     endpoint which node each pod runs on.
//
// Build it before the informers start (it adds handlers to them); the manager then starts the
// server with the metrics server and stops it first.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "c4/common/clock.h"
#include "c4/common/metrics.h"
#include "kube/cache/shared_informers.h"
#include "kube/client/kube_client.h"
#include "operator/ingest/report_handler.h"
#include "operator/ingest/report_server.h"
#include "operator/ingest/report_store.h"
#include "operator/ingest/token_review.h"

namespace c4::op::ingest {
using namespace c4::kube;  // the operator is written against the Kubernetes library

struct IngestConfig {
  ReportServerConfig server;
  ReportHandlerConfig handler;
  TokenReviewConfig review;
  ReportStoreConfig store;
  std::string watch_namespace;  // "" = all namespaces (as the TrainingJob controller)
};

class Ingest {
 public:
  // `review_client` (TokenReviews; unfenced), `informers`, `clock` and `registry` must outlive
  // the object. `serving`: true while reports may be taken (leader with synced caches).
  // Errors: the TLS files (kInvalidArgument naming the file).
  static Result<std::unique_ptr<Ingest>> create(IngestConfig config, KubeClient& review_client,
                                                SharedInformers& informers, Clock& clock,
                                                metrics::Registry& registry,
                                                std::function<bool()> serving);
  ~Ingest();
  Ingest(const Ingest&) = delete;
  Ingest& operator=(const Ingest&) = delete;

  // Binds and serves; returns the bound port.
  Result<int> start();
  void stop();

  ReportStore& store() { return *store_; }
  ReportHandler& handler() { return *handler_; }
  TokenReviewer& reviewer() { return *reviewer_; }

 private:
  Ingest() = default;

  std::unique_ptr<ReportStore> store_;
  std::unique_ptr<TokenReviewer> reviewer_;
  std::unique_ptr<ReportHandler> handler_;
  std::unique_ptr<ReportServer> server_;
};

}  // namespace c4::op::ingest
