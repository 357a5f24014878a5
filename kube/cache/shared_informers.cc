// Shared informer caches.
#include "kube/cache/shared_informers.h"

#include <vector>

namespace c4::kube {

namespace {
std::string informerKey(const ResourceType& type, const std::string& ns,
                        const std::string& label_selector, const std::string& field_selector) {
  // '\n' cannot occur in a resource name, a namespace or a selector the API server accepts.
  return type.group + "/" + type.version + "/" + type.resource + "\n" +
         (type.namespaced ? ns : std::string{}) + "\n" + label_selector + "\n" + field_selector;
}
}  // namespace

SharedInformers::SharedInformers(KubeClient& client, Clock& clock)
    : client_(client), clock_(clock) {}

SharedInformers::~SharedInformers() {
  stop();
}

Informer& SharedInformers::informerFor(const ResourceType& type, const std::string& ns,
                                       const std::string& label_selector,
                                       const std::string& field_selector) {
  std::lock_guard lock(mu_);
  auto& slot = informers_[informerKey(type, ns, label_selector, field_selector)];
  if (!slot) {
    slot = std::make_unique<Informer>(client_, clock_, type, type.namespaced ? ns : std::string{},
                                      label_selector, field_selector);
    if (watch_timeout_s_ > 0) slot->setWatchTimeoutSeconds(watch_timeout_s_);
    if (random_) slot->setRandomSource(random_);
  }
  return *slot;
}

void SharedInformers::setWatchTimeoutSeconds(int s) {
  std::lock_guard lock(mu_);
  watch_timeout_s_ = s;
  for (auto& [key, informer] : informers_) informer->setWatchTimeoutSeconds(s);
}

void SharedInformers::setRandomSource(RandomSource random) {
  std::lock_guard lock(mu_);
  random_ = std::move(random);
  for (auto& [key, informer] : informers_) informer->setRandomSource(random_);
}

void SharedInformers::start() {
  std::lock_guard lock(mu_);
  if (stopped_) return;
  for (auto& [key, informer] : informers_) informer->start();
}

bool SharedInformers::waitForSync(MonoTime deadline) {
  std::vector<Informer*> informers;
  {
    std::lock_guard lock(mu_);
    if (stopped_) return false;
    for (auto& [key, informer] : informers_) informers.push_back(informer.get());
  }
  for (Informer* informer : informers) {
    if (!informer->waitForSync(deadline)) return false;
  }
  return true;
}

void SharedInformers::requestStop() {
  std::lock_guard lock(mu_);
  stopped_ = true;
  for (auto& [key, informer] : informers_) informer->requestStop();
}

void SharedInformers::stop() {
  std::vector<Informer*> informers;
  {
    std::lock_guard lock(mu_);
    stopped_ = true;
    for (auto& [key, informer] : informers_) informers.push_back(informer.get());
  }
  // Joined outside the lock: a handler running on an informer thread may still ask for one.
  for (Informer* informer : informers) informer->stop();
}

std::size_t SharedInformers::size() const {
  std::lock_guard lock(mu_);
  return informers_.size();
}

}  // namespace c4::kube
