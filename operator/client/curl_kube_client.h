// The libcurl implementation of KubeClient: TLS with client certificates or bearer tokens,
// connection reuse through a pool of handles, a client-side QPS/burst token bucket, request
// timeouts (per call where the options set one), cancellation of get, list and watch through a
// CancelToken, Retry-After (429 and 5xx answers that carry it are retried after that many
// seconds on the clock, at most 10 times, as client-go does), a request gate asked right before
// each request is sent (KubeConfig::before_send), chunked watch streams, and API
// metrics: c4_operator_api_request_duration_seconds{verb}, c4_operator_api_requests_total{verb,
// code} and c4_operator_api_retries_total{verb,code}.
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
