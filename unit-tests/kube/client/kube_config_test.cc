// kubeconfig / in-cluster parsing and the HTTP -> ErrorCode edge mapping.
#include "kube/client/kube_config.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "kube/client/kube_client.h"

namespace c4::kube {
namespace {

// "-----BEGIN CERT-----\n" etc. base64-encoded.
constexpr const char* kCertB64 = "LS0tLS1CRUdJTiBDRVJULS0tLS0K";  // "-----BEGIN CERT-----\n"
constexpr const char* kKeyB64 = "LS0tLS1CRUdJTiBLRVktLS0tLQo=";   // "-----BEGIN KEY-----\n"

std::string kubeconfig(const std::string& user_body, const std::string& current = "main") {
  return std::string(R"(apiVersion: v1
kind: Config
current-context: )") +
         current + R"(
clusters:
- name: c1
  cluster:
    server: https://127.0.0.1:6443/
    certificate-authority-data: )" +
         kCertB64 + R"(
contexts:
- name: main
  context: {cluster: c1, user: u1, namespace: team}
- name: other
  context: {cluster: c1, user: u2}
users:
- name: u1
  user:
)" + user_body +
         R"(
- name: u2
  user:
    token: other-token
)";
}

TEST(KubeConfigTest, InlineClientCertificateAndKey) {
  auto config = parseKubeconfig(kubeconfig(std::string("    client-certificate-data: ") + kCertB64 +
                                           "\n    client-key-data: " + kKeyB64),
                                "/nonexistent");
  ASSERT_TRUE(config) << config.error().toString();
  EXPECT_EQ(config->server, "https://127.0.0.1:6443");
  EXPECT_EQ(config->ca_pem, "-----BEGIN CERT-----\n");
  EXPECT_EQ(config->client_cert_pem, "-----BEGIN CERT-----\n");
  EXPECT_EQ(config->client_key_pem, "-----BEGIN KEY-----\n");
  EXPECT_EQ(config->default_namespace, "team");
  EXPECT_EQ(config->context_name, "main");
}

TEST(KubeConfigTest, FilesRelativeToTheKubeconfigAndTokens) {
  auto dir = std::filesystem::temp_directory_path() /
             ("c4-kubeconfig-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "client.crt") << "CERT";
  std::ofstream(dir / "client.key") << "KEY";
  std::ofstream(dir / "token") << "file-token\n";
  std::ofstream(dir / "config") << kubeconfig(
      "    client-certificate: client.crt\n    client-key: client.key\n    tokenFile: token");
  auto config = loadKubeconfigFile((dir / "config").string());
  ASSERT_TRUE(config) << config.error().toString();
  EXPECT_EQ(config->client_cert_pem, "CERT");
  EXPECT_EQ(config->client_key_pem, "KEY");
  EXPECT_EQ(config->token_file, (dir / "token").string());

  auto other = loadKubeconfigFile((dir / "config").string(), "other");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->token, "other-token");
  std::filesystem::remove_all(dir);
}

TEST(KubeConfigTest, ClearErrorsOnMalformedInput) {
  auto missing_context = parseKubeconfig(kubeconfig("    token: t", "nope"), "");
  ASSERT_FALSE(missing_context);
  EXPECT_EQ(missing_context.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(missing_context.error().message.find("nope"), std::string::npos);

  auto bad_yaml = parseKubeconfig("clusters: [unclosed", "");
  ASSERT_FALSE(bad_yaml);
  EXPECT_EQ(bad_yaml.error().code, ErrorCode::kInvalidArgument);

  auto bad_b64 =
      parseKubeconfig(kubeconfig("    client-certificate-data: '!!!'\n    client-key-data: x"), "");
  ASSERT_FALSE(bad_b64);
  EXPECT_NE(bad_b64.error().message.find("client-certificate-data"), std::string::npos);

  auto cert_without_key =
      parseKubeconfig(kubeconfig(std::string("    client-certificate-data: ") + kCertB64), "");
  ASSERT_FALSE(cert_without_key);
  EXPECT_NE(cert_without_key.error().message.find("without a key"), std::string::npos);

  auto missing_file =
      parseKubeconfig(kubeconfig("    client-certificate: /no/such\n    client-key: /no/such"), "");
  ASSERT_FALSE(missing_file);
  EXPECT_NE(missing_file.error().message.find("/no/such"), std::string::npos);

  EXPECT_FALSE(parseKubeconfig("[1, 2]", ""));
  EXPECT_FALSE(parseKubeconfig("current-context: x\n", ""));
}

TEST(KubeConfigTest, InClusterReadsServiceAccountFiles) {
  auto dir = std::filesystem::temp_directory_path() / "c4-sa-test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "token") << "sa-token\n";
  std::ofstream(dir / "ca.crt") << "CA";
  std::ofstream(dir / "namespace") << "c4-system";
  auto env = [](const char* name) -> std::optional<std::string> {
    if (std::string(name) == "KUBERNETES_SERVICE_HOST") return "10.0.0.1";
    if (std::string(name) == "KUBERNETES_SERVICE_PORT") return "443";
    return std::nullopt;
  };
  auto config = inClusterConfig(env, dir.string());
  ASSERT_TRUE(config) << config.error().toString();
  EXPECT_EQ(config->server, "https://10.0.0.1:443");
  EXPECT_EQ(config->token, "sa-token");
  EXPECT_EQ(config->token_file, (dir / "token").string()) << "re-read by the client";
  EXPECT_EQ(config->ca_pem, "CA");
  EXPECT_EQ(config->default_namespace, "c4-system");

  auto v6 = inClusterConfig(
      [](const char* name) -> std::optional<std::string> {
        return std::string(name) == "KUBERNETES_SERVICE_HOST" ? "fd00::1" : "443";
      },
      dir.string());
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->server, "https://[fd00::1]:443");

  auto outside = inClusterConfig([](const char*) { return std::optional<std::string>{}; });
  ASSERT_FALSE(outside);
  EXPECT_EQ(outside.error().code, ErrorCode::kNotFound);
  std::filesystem::remove_all(dir);
}

TEST(KubeConfigTest, TlsServerNameIsRead) {
  std::string yaml = kubeconfig("    token: t");
  yaml.replace(
      yaml.find("    server: https://127.0.0.1:6443/\n"),
      std::string("    server: https://127.0.0.1:6443/\n").size(),
      "    server: https://127.0.0.1:6443/\n    tls-server-name: kubernetes.default.svc\n");
  auto config = parseKubeconfig(yaml, "");
  ASSERT_TRUE(config) << config.error().toString();
  EXPECT_EQ(config->tls_server_name, "kubernetes.default.svc");
}

// A directory of kubeconfig files, removed afterwards.
class KubeconfigFiles {
 public:
  KubeconfigFiles()
      : dir_(std::filesystem::temp_directory_path() /
             ("c4-kubeconfigs-" +
              std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "-" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name())) {
    std::filesystem::create_directories(dir_);
  }
  ~KubeconfigFiles() { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& relative, const std::string& text) {
    auto path = dir_ / relative;
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path) << text;
    return path.string();
  }
  std::string path(const std::string& relative) const { return (dir_ / relative).string(); }

 private:
  std::filesystem::path dir_;
};

TEST(KubeConfigTest, SeveralFilesMergeLikeClientGo) {
  KubeconfigFiles files;
  // The first file sets no current-context; it defines cluster c1 and user u1 (whose token
  // file is relative to *its* directory).
  std::string first = files.write("a/config", R"(apiVersion: v1
kind: Config
clusters:
- name: c1
  cluster: {server: "https://first:6443"}
users:
- name: u1
  user: {tokenFile: token}
)");
  files.write("a/token", "first-token\n");
  // The second defines c1 again (ignored: the first file wins the name), c2, u1 again (ignored),
  // u2, two contexts, and the first current-context.
  std::string second = files.write("b/config", R"(apiVersion: v1
kind: Config
current-context: ctx
clusters:
- name: c1
  cluster: {server: "https://second:6443"}
- name: c2
  cluster: {server: "https://only-second:6443"}
users:
- name: u1
  user: {token: second-token}
- name: u2
  user: {token: u2-token}
contexts:
- name: ctx
  context: {cluster: c1, user: u1, namespace: team}
- name: other
  context: {cluster: c2, user: u2}
)");
  // The third sets a current-context too late to matter.
  std::string third = files.write("c/config", R"(current-context: other
contexts:
- name: ctx
  context: {cluster: c2, user: u2}
)");
  auto config = loadKubeconfigFiles({first, files.path("missing/config"), second, third});
  ASSERT_TRUE(config) << config.error().toString();
  EXPECT_EQ(config->context_name, "ctx") << "current-context of the first file that sets one";
  EXPECT_EQ(config->server, "https://first:6443") << "the first file defining c1 wins";
  EXPECT_EQ(config->token_file, files.path("a/token")) << "resolved against its own file";
  EXPECT_EQ(config->token, "");
  EXPECT_EQ(config->default_namespace, "team");

  auto other = loadKubeconfigFiles({first, second, third}, "other");
  ASSERT_TRUE(other) << other.error().toString();
  EXPECT_EQ(other->server, "https://only-second:6443");
  EXPECT_EQ(other->token, "u2-token");

  // Order matters: with the second file first, its c1 and u1 win.
  auto reversed = loadKubeconfigFiles({second, first});
  ASSERT_TRUE(reversed) << reversed.error().toString();
  EXPECT_EQ(reversed->server, "https://second:6443");
  EXPECT_EQ(reversed->token, "second-token");
}

TEST(KubeConfigTest, SeveralFilesClearErrors) {
  KubeconfigFiles files;
  auto none = loadKubeconfigFiles({files.path("x"), files.path("y")});
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code, ErrorCode::kNotFound);
  EXPECT_NE(none.error().message.find(files.path("y")), std::string::npos);

  std::string good = files.write("good", kubeconfig("    token: t"));
  std::string broken = files.write("broken", "clusters: [unclosed");
  auto bad = loadKubeconfigFiles({good, broken});
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.error().message.find(broken), std::string::npos) << "names the broken file";

  std::string not_a_list = files.write("notalist", "clusters: {c1: x}\n");
  auto malformed = loadKubeconfigFiles({not_a_list, good});
  ASSERT_FALSE(malformed);
  EXPECT_NE(malformed.error().message.find("'clusters' is not a list"), std::string::npos);

  std::string no_context = files.write("nocontext", "clusters: []\n");
  auto missing = loadKubeconfigFiles({no_context});
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("no current-context"), std::string::npos);
}

TEST(KubeConfigTest, DefaultLoadingReadsEveryFileInKubeconfig) {
  KubeconfigFiles files;
  // The cluster and user are in the first file; the context that uses them in the second.
  std::string first = files.write("first", R"(clusters:
- name: c1
  cluster: {server: "https://first:6443"}
users:
- name: u1
  user: {token: t1}
)");
  std::string second = files.write("second", R"(current-context: ctx
contexts:
- name: ctx
  context: {cluster: c1, user: u1}
)");
  const char* saved = std::getenv("KUBECONFIG");
  std::string restore = saved != nullptr ? saved : "";
  ::setenv("KUBECONFIG", (first + ":" + second).c_str(), 1);
  auto config = loadDefaultKubeConfig("");
  if (saved != nullptr) {
    ::setenv("KUBECONFIG", restore.c_str(), 1);
  } else {
    ::unsetenv("KUBECONFIG");
  }
  ASSERT_TRUE(config) << config.error().toString();
  EXPECT_EQ(config->server, "https://first:6443");
  EXPECT_EQ(config->token, "t1");
}

TEST(KubeConfigTest, KubeconfigPathListSplitsLikeClientGo) {
  EXPECT_EQ(splitKubeconfigPaths("/a:/b::/c:/a:"), (std::vector<std::string>{"/a", "/b", "/c"}));
  EXPECT_EQ(splitKubeconfigPaths("/only"), (std::vector<std::string>{"/only"}));
  EXPECT_TRUE(splitKubeconfigPaths("").empty());
}

TEST(Base64Test, DecodesAndRejects) {
  EXPECT_EQ(*base64Decode("aGVsbG8="), "hello");
  EXPECT_EQ(*base64Decode("aGVs\nbG8h"), "hello!");
  EXPECT_FALSE(base64Decode("a$b"));
  EXPECT_FALSE(base64Decode("aGVs=bG8"));
}

TEST(ApiErrorTest, HttpStatusesMapOnceKeepingTheStatusMessage) {
  std::string body = R"({"kind":"Status","apiVersion":"v1","status":"Failure",
    "message":"pods \"a\" already exists","reason":"AlreadyExists","code":409})";
  Error created = mapApiError(409, "POST", body);
  EXPECT_EQ(created.code, ErrorCode::kAlreadyExists);
  EXPECT_NE(created.message.find("pods \"a\" already exists"), std::string::npos);
  EXPECT_EQ(mapApiError(409, "PUT", body).code, ErrorCode::kAlreadyExists) << "the reason decides";
  EXPECT_EQ(mapApiError(409, "PUT", "").code, ErrorCode::kConflict) << "no reason: the verb";
  EXPECT_EQ(mapApiError(404, "GET", "").code, ErrorCode::kNotFound);
  EXPECT_EQ(mapApiError(410, "GET", "").code, ErrorCode::kGone);
  EXPECT_EQ(mapApiError(422, "POST", "").code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(mapApiError(400, "POST", "").code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(mapApiError(401, "GET", "").code, ErrorCode::kUnauthenticated);
  EXPECT_EQ(mapApiError(403, "GET", "").code, ErrorCode::kPermissionDenied);
  EXPECT_EQ(mapApiError(429, "GET", "").code, ErrorCode::kResourceExhausted);
  EXPECT_EQ(mapApiError(500, "GET", "").code, ErrorCode::kUnavailable);
  EXPECT_EQ(mapApiError(503, "GET", "").code, ErrorCode::kUnavailable);
  EXPECT_EQ(mapApiError(504, "GET", "").code, ErrorCode::kDeadlineExceeded);
  Error plain = mapApiError(502, "GET", "bad gateway");
  EXPECT_NE(plain.message.find("bad gateway"), std::string::npos);
  Json watch_error = {{"kind", "Status"}, {"code", 410}, {"message", "too old resource version"}};
  Error gone = statusObjectToError(watch_error, "WATCH");
  EXPECT_EQ(gone.code, ErrorCode::kGone);
  EXPECT_NE(gone.message.find("too old"), std::string::npos);
}

TEST(ResourceTypeTest, PathsForCoreGroupedAndClusterScoped) {
  EXPECT_EQ(resources::pods().objectPath("ns", "p", "status"),
            "/api/v1/namespaces/ns/pods/p/status");
  EXPECT_EQ(resources::pods().collectionPath(""), "/api/v1/pods");
  EXPECT_EQ(resources::trainingJobs().collectionPath("a"),
            "/apis/c4.dev/v1alpha1/namespaces/a/trainingjobs");
  EXPECT_EQ(resources::nodes().objectPath("ignored", "n1"), "/api/v1/nodes/n1");
  EXPECT_EQ(resources::leases().apiVersion(), "coordination.k8s.io/v1");
}

}  // namespace
}  // namespace c4::kube
