// kubeconfig and in-cluster configuration.
#include "kube/client/kube_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace c4::kube {

Result<std::string> readFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::unexpected(errnoError("cannot read " + path, errno));
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

Result<std::string> base64Decode(std::string_view text) {
  static constexpr std::array<int, 256> kTable = [] {
    std::array<int, 256> t{};
    t.fill(-1);
    const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i) t[static_cast<unsigned char>(alphabet[i])] = i;
    return t;
  }();
  std::string out;
  out.reserve(text.size() * 3 / 4);
  unsigned int buffer = 0;
  int bits = 0;
  std::size_t padding = 0;
  for (char c : text) {
    if (c == '\n' || c == '\r' || c == ' ' || c == '\t') continue;
    if (c == '=') {
      ++padding;
      continue;
    }
    if (padding > 0) return makeError(ErrorCode::kInvalidArgument, "base64: data after padding");
    int v = kTable[static_cast<unsigned char>(c)];
    if (v < 0) return makeError(ErrorCode::kInvalidArgument, "base64: invalid character");
    buffer = (buffer << 6) | static_cast<unsigned int>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((buffer >> bits) & 0xFFu));
    }
  }
  if (padding > 2) return makeError(ErrorCode::kInvalidArgument, "base64: too much padding");
  return out;
}

namespace {

std::string resolvePath(const std::string& base_dir, const std::string& path) {
  if (path.empty() || path.front() == '/' || base_dir.empty()) return path;
  return (std::filesystem::path(base_dir) / path).string();
}

// The clusters, users and contexts of one or more kubeconfig files, by name; each entry keeps
// the directory of the file that defined it (its relative paths resolve there).
struct NamedEntry {
  YAML::Node value;
  std::string base_dir;
};
struct MergedKubeconfig {
  std::string current_context;
  std::map<std::string, NamedEntry> clusters;
  std::map<std::string, NamedEntry> users;
  std::map<std::string, NamedEntry> contexts;
};

// Adds the entries of `root` whose names are not defined yet (the first file wins).
Status mergeKubeconfig(MergedKubeconfig& merged, const YAML::Node& root,
                       const std::string& base_dir) {
  if (!root || root.IsNull()) return okStatus();  // an empty file defines nothing
  if (!root.IsMap()) return makeError(ErrorCode::kInvalidArgument, "kubeconfig: not a YAML map");
  if (merged.current_context.empty()) {
    YAML::Node current = root["current-context"];
    if (current && current.IsScalar()) merged.current_context = current.as<std::string>();
  }
  const std::pair<const char*, std::map<std::string, NamedEntry>*> lists[] = {
      {"clusters", &merged.clusters}, {"users", &merged.users}, {"contexts", &merged.contexts}};
  for (const auto& [list, entries] : lists) {
    YAML::Node items = root[list];
    if (!items || items.IsNull()) continue;
    if (!items.IsSequence()) {
      return makeError(ErrorCode::kInvalidArgument,
                       std::string("kubeconfig: '") + list + "' is not a list");
    }
    for (const auto& item : items) {
      if (!item.IsMap() || !item["name"] || !item["name"].IsScalar()) {
        return makeError(ErrorCode::kInvalidArgument,
                         std::string("kubeconfig: an entry of '") + list + "' has no name");
      }
      entries->try_emplace(item["name"].as<std::string>(), NamedEntry{item, base_dir});
    }
  }
  return okStatus();
}

// The inner map (cluster/user/context) of the entry named `name` in `list`.
Result<NamedEntry> findNamed(const std::map<std::string, NamedEntry>& entries, const char* list,
                             const char* inner, const std::string& name) {
  auto it = entries.find(name);
  if (it == entries.end()) {
    return makeError(ErrorCode::kInvalidArgument,
                     std::string("kubeconfig: no entry '") + name + "' in '" + list + "'");
  }
  YAML::Node value = it->second.value[inner];
  if (!value || !value.IsMap()) {
    return makeError(ErrorCode::kInvalidArgument, std::string("kubeconfig: ") + list + " '" + name +
                                                      "' has no '" + inner + "' map");
  }
  return NamedEntry{value, it->second.base_dir};
}

std::string str(const YAML::Node& map, const char* key) {
  YAML::Node v = map[key];
  return v && v.IsScalar() ? v.as<std::string>() : std::string{};
}

// Reads PEM material from "<key>-data" (base64) or "<key>" (a file path).
Result<std::string> pemField(const YAML::Node& map, const std::string& key,
                             const std::string& base_dir) {
  std::string data = str(map, (key + "-data").c_str());
  if (!data.empty()) {
    auto decoded = base64Decode(data);
    if (!decoded)
      return std::unexpected(decoded.error().withContext("kubeconfig: " + key + "-data"));
    return decoded;
  }
  std::string file = str(map, key.c_str());
  if (file.empty()) return std::string{};
  auto content = readFileToString(resolvePath(base_dir, file));
  if (!content) return std::unexpected(content.error().withContext("kubeconfig: " + key));
  return content;
}

Result<KubeConfig> resolveKubeconfig(const MergedKubeconfig& merged,
                                     std::string_view requested_context) {
  std::string context_name{requested_context};
  if (context_name.empty()) context_name = merged.current_context;
  if (context_name.empty()) {
    return makeError(ErrorCode::kInvalidArgument,
                     "kubeconfig: no current-context and no context requested");
  }
  C4_ASSIGN_OR_RETURN(NamedEntry context,
                      findNamed(merged.contexts, "contexts", "context", context_name));
  std::string cluster_name = str(context.value, "cluster");
  std::string user_name = str(context.value, "user");
  if (cluster_name.empty()) {
    return makeError(ErrorCode::kInvalidArgument,
                     "kubeconfig: context '" + context_name + "' names no cluster");
  }
  C4_ASSIGN_OR_RETURN(NamedEntry cluster_entry,
                      findNamed(merged.clusters, "clusters", "cluster", cluster_name));
  const YAML::Node& cluster = cluster_entry.value;

  KubeConfig config;
  config.context_name = context_name;
  config.server = str(cluster, "server");
  if (config.server.empty()) {
    return makeError(ErrorCode::kInvalidArgument,
                     "kubeconfig: cluster '" + cluster_name + "' has no server");
  }
  while (!config.server.empty() && config.server.back() == '/') config.server.pop_back();
  C4_ASSIGN_OR_RETURN(config.ca_pem,
                      pemField(cluster, "certificate-authority", cluster_entry.base_dir));
  config.insecure_skip_tls_verify = str(cluster, "insecure-skip-tls-verify") == "true";
  config.tls_server_name = str(cluster, "tls-server-name");
  std::string ns = str(context.value, "namespace");
  if (!ns.empty()) config.default_namespace = ns;

  if (!user_name.empty()) {
    C4_ASSIGN_OR_RETURN(NamedEntry user_entry, findNamed(merged.users, "users", "user", user_name));
    const YAML::Node& user = user_entry.value;
    const std::string& base_dir = user_entry.base_dir;
    C4_ASSIGN_OR_RETURN(config.client_cert_pem, pemField(user, "client-certificate", base_dir));
    C4_ASSIGN_OR_RETURN(config.client_key_pem, pemField(user, "client-key", base_dir));
    if (config.client_cert_pem.empty() != config.client_key_pem.empty()) {
      return makeError(ErrorCode::kInvalidArgument,
                       "kubeconfig: user '" + user_name +
                           "' has a client certificate without a key (or the reverse)");
    }
    config.token = str(user, "token");
    std::string token_file = str(user, "tokenFile");
    if (!token_file.empty()) config.token_file = resolvePath(base_dir, token_file);
    if (user["exec"] || user["auth-provider"]) {
      if (config.client_cert_pem.empty() && config.token.empty() && config.token_file.empty()) {
        return makeError(ErrorCode::kInvalidArgument,
                         "kubeconfig: user '" + user_name +
                             "' uses exec/auth-provider credentials, which c4 does not support");
      }
    }
  }
  return config;
}

Status mergeKubeconfigText(MergedKubeconfig& merged, std::string_view yaml,
                           const std::string& base_dir) {
  try {
    return mergeKubeconfig(merged, YAML::Load(std::string{yaml}), base_dir);
  } catch (const YAML::Exception& e) {
    return makeError(ErrorCode::kInvalidArgument, std::string("kubeconfig: ") + e.what());
  }
}

}  // namespace

Result<KubeConfig> parseKubeconfig(std::string_view yaml, const std::string& base_dir,
                                   std::string_view context) {
  MergedKubeconfig merged;
  C4_RETURN_IF_ERROR(mergeKubeconfigText(merged, yaml, base_dir));
  return resolveKubeconfig(merged, context);
}

Result<KubeConfig> loadKubeconfigFile(const std::string& path, std::string_view context) {
  C4_ASSIGN_OR_RETURN(std::string text, readFileToString(path));
  auto config = parseKubeconfig(text, std::filesystem::path(path).parent_path().string(), context);
  if (!config) return std::unexpected(config.error().withContext(path));
  return config;
}

std::vector<std::string> splitKubeconfigPaths(std::string_view list) {
  std::vector<std::string> paths;
  std::size_t start = 0;
  while (start <= list.size()) {
    std::size_t colon = list.find(':', start);
    if (colon == std::string_view::npos) colon = list.size();
    std::string path{list.substr(start, colon - start)};
    if (!path.empty() && std::find(paths.begin(), paths.end(), path) == paths.end()) {
      paths.push_back(std::move(path));
    }
    start = colon + 1;
  }
  return paths;
}

Result<KubeConfig> loadKubeconfigFiles(const std::vector<std::string>& paths,
                                       std::string_view context) {
  MergedKubeconfig merged;
  std::string read;
  for (const auto& path : paths) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) continue;  // client-go skips missing files
    C4_ASSIGN_OR_RETURN(std::string text, readFileToString(path));
    auto merged_one =
        mergeKubeconfigText(merged, text, std::filesystem::path(path).parent_path().string());
    if (!merged_one) return std::unexpected(merged_one.error().withContext(path));
    read += read.empty() ? path : ":" + path;
  }
  if (read.empty()) {
    std::string all;
    for (const auto& path : paths) all += all.empty() ? path : ":" + path;
    return makeError(ErrorCode::kNotFound, "kubeconfig: none of these files exists: " + all);
  }
  auto config = resolveKubeconfig(merged, context);
  if (!config) return std::unexpected(config.error().withContext(read));
  return config;
}

Result<KubeConfig> inClusterConfig(
    const std::function<std::optional<std::string>(const char*)>& getenv_fn,
    const std::string& sa_dir) {
  auto host = getenv_fn("KUBERNETES_SERVICE_HOST");
  auto port = getenv_fn("KUBERNETES_SERVICE_PORT");
  if (!host || host->empty() || !port || port->empty()) {
    return makeError(ErrorCode::kNotFound,
                     "in-cluster config: KUBERNETES_SERVICE_HOST/PORT are not set");
  }
  KubeConfig config;
  std::string h = *host;
  if (h.find(':') != std::string::npos) h = "[" + h + "]";  // IPv6
  config.server = "https://" + h + ":" + *port;
  config.token_file = sa_dir + "/token";
  C4_ASSIGN_OR_RETURN(config.token, readFileToString(config.token_file));
  while (!config.token.empty() && (config.token.back() == '\n' || config.token.back() == ' ')) {
    config.token.pop_back();
  }
  C4_ASSIGN_OR_RETURN(config.ca_pem, readFileToString(sa_dir + "/ca.crt"));
  if (auto ns = readFileToString(sa_dir + "/namespace"); ns && !ns->empty()) {
    config.default_namespace = *ns;
  }
  return config;
}

Result<KubeConfig> loadDefaultKubeConfig(const std::string& explicit_path,
                                         std::string_view context) {
  if (!explicit_path.empty()) return loadKubeconfigFile(explicit_path, context);
  if (const char* env = std::getenv("KUBECONFIG"); env != nullptr && *env != '\0') {
    return loadKubeconfigFiles(splitKubeconfigPaths(env), context);
  }
  auto in_cluster = inClusterConfig([](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    if (v == nullptr) return std::nullopt;
    return std::string{v};
  });
  if (in_cluster || in_cluster.error().code != ErrorCode::kNotFound) return in_cluster;
  if (const char* home = std::getenv("HOME"); home != nullptr) {
    return loadKubeconfigFile(std::string{home} + "/.kube/config", context);
  }
  return makeError(ErrorCode::kNotFound,
                   "no kubeconfig: pass --kubeconfig, set KUBECONFIG, or run in a cluster");
}

}  // namespace c4::kube
