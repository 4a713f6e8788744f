#include "apps/cli/cli.hpp"

#include <filesystem>

#include "core/errors.hpp"

namespace kktrain {

namespace {

// key.path=VALUE where no file of that name exists: an override, not a positional argument.
bool looks_like_override(const std::string& a) {
  const auto eq = a.find('=');
  if (eq == std::string::npos || eq == 0) return false;
  const std::string key = a.substr(0, eq);
  if (key.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.") !=
      std::string::npos) {
    return false;
  }
  std::error_code ec;
  return !std::filesystem::exists(a, ec);
}

}  // namespace

ParsedArgs parse_args(const CommandSpec& spec, const std::vector<std::string>& args) {
  ParsedArgs p;
  p.options = spec.options;
  const std::string cmd = std::string("kktrain ") + spec.name;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") {
      p.help = true;
      return p;
    }
    if (a.rfind("--", 0) == 0) {
      std::string name = a, value;
      const auto eq = a.find('=');
      const bool inline_value = eq != std::string::npos;
      if (inline_value) {
        name = a.substr(0, eq);
        value = a.substr(eq + 1);
      }
      if (spec.flags.count(name)) {
        if (inline_value) throw UsageError(cmd + ": " + name + " takes no value");
        p.flags.insert(name);
      } else if (spec.repeated_options.count(name)) {
        if (!inline_value) {
          if (i + 1 >= args.size()) throw UsageError(cmd + ": " + name + " needs a value");
          value = args[++i];
        }
        if (value.empty()) throw UsageError(cmd + ": " + name + " needs a value");
        p.repeated[name].push_back(value);
      } else if (spec.options.count(name)) {
        if (!inline_value) {
          if (i + 1 >= args.size()) throw UsageError(cmd + ": " + name + " needs a value");
          value = args[++i];
        }
        p.options[name] = value;
      } else {
        throw UsageError(cmd + ": unknown option '" + name + "' (see kktrain " + spec.name +
                         " --help)");
      }
      continue;
    }
    if (p.positionals.size() < spec.positionals.size()) {
      if (spec.takes_overrides && looks_like_override(a)) {
        throw UsageError(cmd + ": the override '" + a + "' comes before " +
                         spec.positionals[p.positionals.size()] +
                         "; overrides go after it (usage: kktrain " + spec.synopsis + ")");
      }
      p.positionals.push_back(a);
    } else if (spec.more_positionals) {
      p.positionals.push_back(a);
    } else if (spec.takes_overrides && a.find('=') != std::string::npos) {
      p.overrides.push_back(a);
    } else {
      throw UsageError(cmd + ": unexpected argument '" + a + "'" +
                       (spec.takes_overrides ? " (overrides are key.path=VALUE)" : ""));
    }
  }
  bool standalone = false;
  for (const auto& f : spec.standalone_flags) standalone = standalone || p.flags.count(f) > 0;
  if (standalone && (!p.positionals.empty() || !p.overrides.empty())) {
    throw UsageError(cmd + ": " + *spec.standalone_flags.begin() + " takes no other arguments");
  }
  if (!standalone && p.positionals.size() < spec.positionals.size()) {
    throw UsageError(cmd + ": missing " + spec.positionals[p.positionals.size()] +
                     " (usage: kktrain " + spec.synopsis + ")");
  }
  for (const auto& r : spec.required_options) {
    if (p.options[r].empty()) throw UsageError(cmd + ": " + r + " is required");
  }
  return p;
}

std::string command_help(const CommandSpec& spec) {
  return std::string("usage: kktrain ") + spec.synopsis + "\n\n" + spec.summary + "\n\n" +
         spec.details;
}

}  // namespace kktrain
