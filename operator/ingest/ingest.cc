// Report ingest, wired (see ingest.h).
#include "operator/ingest/ingest.h"

#include "operator/trainingjob/api.h"

namespace c4::op::ingest {

Result<std::unique_ptr<Ingest>> Ingest::create(IngestConfig config, KubeClient& review_client,
                                               SharedInformers& informers, Clock& clock,
                                               metrics::Registry& registry,
                                               std::function<bool()> serving) {
  std::unique_ptr<Ingest> ingest(new Ingest());
  ingest->store_ = std::make_unique<ReportStore>(config.store, &registry);
  ingest->reviewer_ =
      std::make_unique<TokenReviewer>(review_client, clock, config.review, &registry);
  // The same informers as the TrainingJob controller's (shared: one watch each).
  Informer& jobs = informers.informerFor(resources::trainingJobs(), config.watch_namespace);
  Informer& pods =
      informers.informerFor(resources::pods(), config.watch_namespace, labels::kJobName);
  ReportStore* store = ingest->store_.get();
  jobs.addHandler([store](InformerEvent event, const Json*, const Json& job) {
    if (event == InformerEvent::kDelete) {
      store->dropJob(objectNamespace(job), objectName(job));
      return;
    }
    if (auto info = jobInfoOf(job))
      store->observeJob(objectNamespace(job), objectName(job), info->facts);
  });
  ClusterView view;
  view.job = [&jobs](const std::string& ns, const std::string& name) -> std::optional<JobInfo> {
    auto job = jobs.store().get(objectKey(ns, name));
    if (!job) return std::nullopt;
    return jobInfoOf(*job);
  };
  view.pod = [&pods](const std::string& ns, const std::string& name) {
    return pods.store().get(objectKey(ns, name));
  };
  view.serving = std::move(serving);
  ingest->handler_ = std::make_unique<ReportHandler>(config.handler, clock, *ingest->reviewer_,
                                                     *ingest->store_, std::move(view), &registry);
  C4_ASSIGN_OR_RETURN(ingest->server_,
                      ReportServer::create(config.server, *ingest->handler_, clock, &registry));
  return ingest;
}

Ingest::~Ingest() {
  stop();
}

Result<int> Ingest::start() {
  return server_->start();
}

void Ingest::stop() {
  if (server_) server_->stop();
}

}  // namespace c4::op::ingest
