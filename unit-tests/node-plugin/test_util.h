// Helpers of the node plugin tests: temporary directories and files, pods as the API returns them.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "c4/common/report.h"
#include "kube/client/kube_client.h"

namespace c4::node::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "c4-node-test-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  [[nodiscard]] const std::string& path() const { return path_; }
  [[nodiscard]] std::string operator/(const std::string& rel) const { return path_ + "/" + rel; }

 private:
  std::string path_;
};

inline void writeFile(const std::string& path, const std::string& content) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
}

inline std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buf;
  if (in) buf << in.rdbuf();
  return buf.str();
}

// Makes a throwaway CA (ca.crt) and a serving certificate for localhost/127.0.0.1 (srv.crt,
// srv.key) in `dir` with the openssl CLI. Returns whether it worked.
inline bool makeTestCertificates(const std::string& dir) {
  const std::string cmd =
      "cd " + dir +
      " && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
      "-keyout ca.key -out ca.crt -days 1 -subj /CN=c4-test-ca >/dev/null 2>&1"
      " && openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
      "-keyout srv.key -out srv.csr -subj /CN=localhost >/dev/null 2>&1"
      " && printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > ext.cnf"
      " && openssl x509 -req -in srv.csr -CA ca.crt -CAkey ca.key -CAcreateserial "
      "-out srv.crt -days 1 -extfile ext.cnf >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

// A pod of TrainingJob `job` (replica `index`, attempt `attempt`) on `node`.
inline kube::Json jobPod(const std::string& ns, const std::string& name, const std::string& uid,
                         const std::string& node, const std::string& job, int index, int attempt,
                         int nproc = 0) {
  kube::Json pod = {{"metadata",
                     {{"namespace", ns},
                      {"name", name},
                      {"uid", uid},
                      {"labels",
                       {{"c4.dev/job-name", job},
                        {"c4.dev/replica-index", std::to_string(index)},
                        {"c4.dev/restart-attempt", std::to_string(attempt)}}}}},
                    {"spec", {{"nodeName", node}, {"containers", kube::Json::array()}}}};
  kube::Json container = {{"name", "trainer"}, {"env", kube::Json::array()}};
  container["env"].push_back({{"name", "OTHER"}, {"value", "x"}});
  if (nproc > 0) {
    container["env"].push_back({{"name", "C4_NPROC_PER_NODE"}, {"value", std::to_string(nproc)}});
  }
  pod["spec"]["containers"].push_back(container);
  return pod;
}

inline report::RankIdentity identityOf(const std::string& ns, const std::string& pod,
                                       const std::string& node, const std::string& job, int rank,
                                       int attempt) {
  report::RankIdentity id;
  id.ns = ns;
  id.pod = pod;
  id.node = node;
  id.job = job;
  id.rank = rank;
  id.world_size = 16;
  id.restart_attempt = static_cast<std::uint32_t>(attempt);
  id.pid = 1;
  return id;
}

inline report::RankReport rankReport(const report::RankIdentity& id, std::uint64_t seq,
                                     std::size_t connections = 1) {
  report::RankReport r;
  r.id = id;
  r.seq = seq;
  r.time_unix_ns = 1'764'673'209'000'000'000LL + static_cast<std::int64_t>(seq);
  for (std::size_t i = 0; i < connections; ++i) {
    report::ConnectionStats c;
    c.id = i;
    c.peer_rank = 1;
    c.bytes = 1000 * (i + 1);
    r.connections.push_back(c);
  }
  return r;
}

}  // namespace c4::node::testing
