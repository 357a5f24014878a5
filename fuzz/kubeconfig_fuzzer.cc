// kubeconfig YAML (KUBECONFIG files, the operator's and tools' --kubeconfig) on arbitrary text.
// Relative file paths resolve under a directory that does not exist.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_check.h"
#include "kube/client/kube_config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  // Absolute *-file paths read this machine's files, and some never end (/dev/zero): not the
  // parser's business. Escapes could spell such a path too.
  for (std::string_view special : {"/dev", "/proc", "/sys", "\\"}) {
    if (text.find(special) != std::string_view::npos) return 0;
  }
  auto config = c4::kube::parseKubeconfig(text, "/nonexistent-c4-fuzz");
  if (config) C4_FUZZ_CHECK(!config->server.empty());
  return 0;
}
