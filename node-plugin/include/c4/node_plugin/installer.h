// Installs an NCCL plugin library (net or profiler) into the host directory that training pods
// mount, so a pod never loads a half-written file: the bytes go to a temporary file in the target
// directory, which is fsynced and renamed over the target, and the directory is fsynced. An
// identical target (same size and bytes) is left alone. Any failure is an error naming the path.
#pragma once

#include <string>

#include "c4/common/error.h"

namespace c4::node {

enum class InstallOutcome { kInstalled, kUnchanged };

// Copies `source` to `<install_dir>/<basename of source>`, creating `install_dir` if needed.
// The installed file is mode 0755.
Result<InstallOutcome> installPlugin(const std::string& source, const std::string& install_dir);

}  // namespace c4::node
