// A KubeClient that forwards every call to another one: the base of decorators that change or
// observe a few calls (count writes, delay, cut off, record) and leave the rest alone. The
// target must outlive the decorator.
#pragma once

#include "kube/client/kube_client.h"

namespace c4::kube {

class ForwardingKubeClient : public KubeClient {
 public:
  explicit ForwardingKubeClient(KubeClient& target) : target_(target) {}

  // Interface
  Result<Json> get(const ResourceType& type, std::string_view ns, std::string_view name,
                   const GetOptions& options) override {
    return target_.get(type, ns, name, options);
  }
  Result<Json> list(const ResourceType& type, std::string_view ns,
                    const ListOptions& options) override {
    return target_.list(type, ns, options);
  }
  Result<Json> create(const ResourceType& type, std::string_view ns, const Json& object,
                      const WriteOptions& options) override {
    return target_.create(type, ns, object, options);
  }
  Result<Json> update(const ResourceType& type, std::string_view ns, const Json& object,
                      const WriteOptions& options) override {
    return target_.update(type, ns, object, options);
  }
  Result<Json> patch(const ResourceType& type, std::string_view ns, std::string_view name,
                     PatchType patch_type, const Json& body, const PatchOptions& options) override {
    return target_.patch(type, ns, name, patch_type, body, options);
  }
  Status remove(const ResourceType& type, std::string_view ns, std::string_view name,
                const DeleteOptions& options) override {
    return target_.remove(type, ns, name, options);
  }
  Status watch(const ResourceType& type, std::string_view ns, const WatchOptions& options,
               const WatchHandler& handler) override {
    return target_.watch(type, ns, options, handler);
  }

 protected:
  KubeClient& target() { return target_; }

 private:
  KubeClient& target_;
};

}  // namespace c4::kube
