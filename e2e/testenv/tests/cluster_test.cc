// Checks the shared test cluster against the harness contract: the API server answers over TLS
// with client-certificate auth, reports the pinned version, and has the KWOK nodes with topology
// labels and GPU capacity, Ready.
#include <curl/curl.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace {

struct Kubeconfig {
  std::string server;
  std::string ca;
  std::string cert;
  std::string key;
};

Kubeconfig loadKubeconfig() {
  const char* dir = std::getenv("C4_TESTENV_DIR");
  if (dir == nullptr) return {};
  YAML::Node root = YAML::LoadFile(std::string(dir) + "/kubeconfig");
  Kubeconfig kc;
  kc.server = root["clusters"][0]["cluster"]["server"].as<std::string>();
  kc.ca = root["clusters"][0]["cluster"]["certificate-authority"].as<std::string>();
  kc.cert = root["users"][0]["user"]["client-certificate"].as<std::string>();
  kc.key = root["users"][0]["user"]["client-key"].as<std::string>();
  return kc;
}

size_t appendBody(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

struct CurlDeleter {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};

// GET <path>; returns the HTTP status and fills body.
long get(const Kubeconfig& kc, const std::string& path, std::string& body) {
  std::unique_ptr<CURL, CurlDeleter> curl(curl_easy_init());
  if (!curl) return -1;
  const std::string url = kc.server + path;
  curl_easy_setopt(curl.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl.get(), CURLOPT_CAINFO, kc.ca.c_str());
  if (!kc.cert.empty()) {
    curl_easy_setopt(curl.get(), CURLOPT_SSLCERT, kc.cert.c_str());
    curl_easy_setopt(curl.get(), CURLOPT_SSLKEY, kc.key.c_str());
  }
  curl_easy_setopt(curl.get(), CURLOPT_TIMEOUT, 20L);
  curl_easy_setopt(curl.get(), CURLOPT_WRITEFUNCTION, &appendBody);
  curl_easy_setopt(curl.get(), CURLOPT_WRITEDATA, &body);
  if (curl_easy_perform(curl.get()) != CURLE_OK) return -1;
  long code = 0;
  curl_easy_getinfo(curl.get(), CURLINFO_RESPONSE_CODE, &code);
  return code;
}

class TestenvCluster : public ::testing::Test {
 protected:
  void SetUp() override {
    kc_ = loadKubeconfig();
    ASSERT_FALSE(kc_.server.empty()) << "C4_TESTENV_DIR is not set";
  }
  Kubeconfig kc_;
};

TEST_F(TestenvCluster, ServesReadyzAndStampedVersionOnLoopback) {
  EXPECT_EQ(kc_.server.rfind("https://127.0.0.1:", 0), 0U) << kc_.server;
  std::string body;
  ASSERT_EQ(get(kc_, "/readyz", body), 200) << body;
  EXPECT_EQ(body, "ok");
  body.clear();
  ASSERT_EQ(get(kc_, "/version", body), 200) << body;
  EXPECT_EQ(nlohmann::json::parse(body).at("gitVersion"), C4_TESTENV_K8S_VERSION);
}

TEST_F(TestenvCluster, RejectsRequestsWithoutClientCertificate) {
  Kubeconfig anonymous = kc_;
  anonymous.cert.clear();
  anonymous.key.clear();
  std::string body;
  const long code = get(anonymous, "/api/v1/nodes", body);
  EXPECT_TRUE(code == 401 || code == 403) << code << " " << body;
}

TEST_F(TestenvCluster, KwokNodesAreReadyWithTopologyLabelsAndGpus) {
  std::string body;
  ASSERT_EQ(get(kc_, "/api/v1/nodes", body), 200) << body;
  const auto nodes = nlohmann::json::parse(body).at("items");
  ASSERT_EQ(nodes.size(), 4U);
  for (const auto& node : nodes) {
    const std::string name = node.at("metadata").at("name");
    const int index = std::stoi(name.substr(name.find('-') + 1));
    EXPECT_EQ(node.at("metadata").at("labels").at("c4.dev/leaf"),
              "leaf-" + std::to_string(index % 2));
    EXPECT_EQ(node.at("status").at("capacity").at("nvidia.com/gpu"), "8");
    bool ready = false;
    for (const auto& cond : node.at("status").at("conditions")) {
      if (cond.at("type") == "Ready") ready = cond.at("status") == "True";
    }
    EXPECT_TRUE(ready) << name;
  }
}

}  // namespace
