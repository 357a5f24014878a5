// The libcurl implementation of KubeClient:
//  - TLS with client certificates or bearer tokens, verified against tls-server-name when the
//    configuration names one (it is sent as SNI; the connection still goes to the server URL's
//    host); HTTP/2 where libcurl has it (ALPN, else HTTP/1.1); connections reused through a
//    pool of handles;
//  - a client-side QPS/burst token bucket; request timeouts (per call where the options set
//    one); cancellation of get, list and watch through a CancelToken;
//  - Retry-After: 429 and 5xx answers that carry it are retried after that many seconds on the
//    clock, at most 10 times (client-go's maxRetries);
//  - a request gate asked right before each request is sent (KubeConfig::before_send);
//  - chunked watch streams;
//  - metrics: c4_operator_api_request_duration_seconds{verb},
//    c4_operator_api_requests_total{verb,code}, c4_operator_api_retries_total{verb,code},
//    c4_operator_api_responses_by_protocol_total{protocol} (protocol "HTTP/2", "HTTP/1.1").
#pragma once

#include <memory>

#include "c4/common/clock.h"
#include "c4/common/metrics.h"
#include "kube/client/kube_client.h"
#include "kube/client/kube_config.h"

namespace c4::kube {

// Creates the client. `registry` may be null (no metrics). Caller owns the result; clock and
// registry must outlive it.
Result<std::unique_ptr<KubeClient>> createCurlKubeClient(KubeConfig config, Clock& clock,
                                                         metrics::Registry* registry);

}  // namespace c4::kube
