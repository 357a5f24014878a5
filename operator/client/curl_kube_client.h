// The libcurl implementation of KubeClient: TLS with client certificates or bearer tokens,
// connection reuse through a pool of handles, a client-side QPS/burst token bucket, request
// timeouts (per call where the options set one), cancellation of get, list and watch through a
// CancelToken, chunked watch streams, and API latency metrics.
#pragma once

#include <memory>

#include "c4/common/clock.h"
#include "c4/common/metrics.h"
#include "operator/client/kube_client.h"
#include "operator/client/kube_config.h"

namespace c4::op {

// Creates the client. `registry` may be null (no metrics). Caller owns the result; clock and
// registry must outlive it.
Result<std::unique_ptr<KubeClient>> createCurlKubeClient(KubeConfig config, Clock& clock,
                                                         metrics::Registry* registry);

}  // namespace c4::op
