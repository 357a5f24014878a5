// Where the API server is and how to authenticate: kubeconfig files (client certificates and
// keys inline or as files, bearer tokens inline or as files, CA, tls-server-name,
// current-context; several files merged as client-go merges $KUBECONFIG) or the in-cluster
// service account (token file re-read by the client, CA file, KUBERNETES_SERVICE_HOST/PORT).
// Malformed input yields kInvalidArgument naming the field.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "c4/common/error.h"

namespace c4::kube {

// Decides, right before a request is sent, whether it may be: called by the client after the
// client-side throttle wait, for every attempt (Retry-After retries included) and for watches,
// with the HTTP method ("GET", "POST", "PUT", "PATCH", "DELETE") and the path with its query.
// An error is returned to the caller instead of sending. Called on the calling thread; must be
// thread-safe and must not block.
using RequestGate = std::function<Status(std::string_view method, std::string_view path)>;

struct KubeConfig {
  std::string server;  // "https://host:port"
  std::string ca_pem;  // CA bundle (PEM), empty = system trust store
  std::string client_cert_pem;
  std::string client_key_pem;
  std::string token;       // static bearer token
  std::string token_file;  // re-read periodically (projected service-account tokens rotate)
  bool insecure_skip_tls_verify = false;
  // The name the server's certificate is verified against (and sent as SNI) instead of the
  // host of `server`, which is still where the client connects (https only).
  std::string tls_server_name;
  std::string context_name;  // the context used (kubeconfig only)
  std::string default_namespace = "default";
  double qps = 50.0;  // client-side rate limit (kube-controller-manager's default)
  int burst = 100;
  std::chrono::milliseconds request_timeout{30'000};
  std::chrono::milliseconds connect_timeout{5'000};
  // Set by the program, never read from a file: see RequestGate. Empty = every request is sent.
  RequestGate before_send;
};

// Parses kubeconfig YAML. `base_dir` resolves relative file paths; `context` empty = the
// current-context. Reads the files named by *-file fields.
Result<KubeConfig> parseKubeconfig(std::string_view yaml, const std::string& base_dir,
                                   std::string_view context = "");
Result<KubeConfig> loadKubeconfigFile(const std::string& path, std::string_view context = "");
// Merges several kubeconfig files as client-go does for KUBECONFIG=a:b:c: the first file that
// defines a cluster, user or context name wins for that name (entries are not merged field by
// field); current-context comes from the first file that sets one; relative paths resolve
// against the directory of the file that holds them. Files that do not exist are skipped, but
// at least one must exist; a file that exists but cannot be read or parsed is an error.
Result<KubeConfig> loadKubeconfigFiles(const std::vector<std::string>& paths,
                                       std::string_view context = "");
// Splits a $KUBECONFIG value at ':' (empty entries and repeats dropped, order kept).
std::vector<std::string> splitKubeconfigPaths(std::string_view list);

// In-cluster configuration. `getenv` is injectable for tests; `sa_dir` holds token, ca.crt and
// namespace.
Result<KubeConfig> inClusterConfig(
    const std::function<std::optional<std::string>(const char*)>& getenv_fn,
    const std::string& sa_dir = "/var/run/secrets/kubernetes.io/serviceaccount");

// Resolution order of client-go: explicit path, $KUBECONFIG (every file, merged), in-cluster,
// ~/.kube/config.
Result<KubeConfig> loadDefaultKubeConfig(const std::string& explicit_path,
                                         std::string_view context = "");

// Standard base64 (kubeconfig *-data fields). kInvalidArgument on bad input.
Result<std::string> base64Decode(std::string_view text);
Result<std::string> readFileToString(const std::string& path);

}  // namespace c4::kube
