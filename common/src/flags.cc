#include "c4/common/flags.h"

#include <yaml-cpp/yaml.h>

namespace c4::flags {

Result<CommandLine> tokenize(const std::vector<std::string>& args, const NamePredicate& known,
                             const NamePredicate& boolean) {
  CommandLine out;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-h") {
      out.help = true;
      continue;
    }
    if (arg == "--version") {
      out.version = true;
      continue;
    }
    if (!arg.starts_with("--")) {
      return makeError(ErrorCode::kInvalidArgument, "unexpected argument '" + arg + "'");
    }
    std::string name = arg.substr(2);
    std::string value;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else if (i + 1 < args.size() && !args[i + 1].starts_with("--")) {
      value = args[++i];
    } else if (boolean && boolean(name)) {
      value = "true";
    } else {
      return makeError(ErrorCode::kInvalidArgument, "--" + name + " needs a value");
    }
    if (name == "config") {
      out.config_file = value;
      continue;
    }
    if (!known(name)) return makeError(ErrorCode::kInvalidArgument, "unknown flag --" + name);
    out.flags.emplace_back(std::move(name), std::move(value));
  }
  return out;
}

Result<KeyValues> parseConfigYaml(const std::string& text, const NamePredicate& known) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return makeError(ErrorCode::kInvalidArgument, std::string("config: ") + e.what());
  }
  KeyValues out;
  if (root.IsNull()) return out;
  if (!root.IsMap()) return makeError(ErrorCode::kInvalidArgument, "config: not a YAML map");
  for (const auto& entry : root) {
    if (!entry.first.IsScalar()) {
      return makeError(ErrorCode::kInvalidArgument, "config: keys must be scalars");
    }
    std::string key = entry.first.as<std::string>();
    if (!known(key)) {
      return makeError(ErrorCode::kInvalidArgument, "config: unknown key '" + key + "'");
    }
    if (!entry.second.IsScalar() && !entry.second.IsNull()) {
      return makeError(ErrorCode::kInvalidArgument, "config: '" + key + "' must be a scalar");
    }
    out.emplace_back(key, entry.second.IsNull() ? std::string{} : entry.second.as<std::string>());
  }
  return out;
}

}  // namespace c4::flags
