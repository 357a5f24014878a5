// Command lines and config files of the daemons (operator, node plugin). Each program keeps its
// own table of options (name, help, setter); this is what they share:
//   - a command line is `--name=value` or `--name value`; a flag the program calls boolean may
//     stand alone (= "true"); `--config FILE` names a YAML file with the same keys (the program
//     applies the file first, so flags win); `--help`/`-h` and `--version` are noted;
//   - a config file is a YAML map of scalars (null = empty value).
// Unknown flags and keys, a flag without its value, stray arguments and non-scalar values are
// refused with a message naming them; nothing is applied on error.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "c4/common/error.h"

namespace c4::flags {

using NamePredicate = std::function<bool(std::string_view name)>;
using KeyValues = std::vector<std::pair<std::string, std::string>>;

struct CommandLine {
  bool help = false;
  bool version = false;
  std::string config_file;  // empty: none
  KeyValues flags;          // in command-line order, names without "--"
};

// `known(name)`: the program has this option; `boolean(name)` (optional): it may stand alone.
Result<CommandLine> tokenize(const std::vector<std::string>& args, const NamePredicate& known,
                             const NamePredicate& boolean = {});

// The (key, value) pairs of a YAML config document in file order; an empty document has none.
// Errors start with "config: ".
Result<KeyValues> parseConfigYaml(const std::string& text, const NamePredicate& known);

// Applies (name, value) pairs to `options` through the program's table: `find(name)` returns
// its option (with `set(options, value) -> Status`) or null. An error names its source: "--name"
// for command-line flags, "config" for the file.
template <typename Options, typename Find>
Status apply(Options& options, const KeyValues& entries, bool from_command_line, Find&& find) {
  for (const auto& [name, value] : entries) {
    const auto* option = find(name);
    if (option == nullptr) return makeError(ErrorCode::kInvalidArgument, "unknown option " + name);
    auto status = option->set(options, value);
    if (!status) {
      return std::unexpected(
          status.error().withContext(from_command_line ? "--" + name : std::string("config")));
    }
  }
  return okStatus();
}

}  // namespace c4::flags
