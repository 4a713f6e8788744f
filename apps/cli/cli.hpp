// Command-line parsing shared by every kktrain subcommand.
//
// Grammar: kktrain COMMAND POSITIONAL... [key.path=VALUE ...] [--flag] [--option VALUE]
// Anything containing '=' that is not an option value is a config override.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

namespace kktrain {

struct CommandSpec {
  const char* name;
  const char* synopsis;                        // usage line after "kktrain "
  const char* summary;                         // one line for `kktrain --help`
  const char* details;                         // per-command help text
  std::vector<std::string> positionals;        // names of required positional arguments
  const char* more_positionals = nullptr;      // name of any further ones (INPUT), or null
  bool takes_overrides;                        // accepts key.path=VALUE
  std::set<std::string> flags;                 // e.g. --json
  std::set<std::string> standalone_flags;      // flags that take no positionals (config --schema)
  std::map<std::string, std::string> options;  // option -> default ("" = required if listed
                                               // in required_options)
  std::set<std::string> required_options;
  std::set<std::string> repeated_options;  // may be given several times (--data A --data B)
};

struct ParsedArgs {
  std::vector<std::string> positionals;
  std::vector<std::string> overrides;
  std::set<std::string> flags;
  std::map<std::string, std::string> options;
  std::map<std::string, std::vector<std::string>> repeated;  // every value of a repeated option
  bool help = false;
};

// Throws UsageError naming the offending argument.
ParsedArgs parse_args(const CommandSpec& spec, const std::vector<std::string>& args);

std::string command_help(const CommandSpec& spec);

}  // namespace kktrain
