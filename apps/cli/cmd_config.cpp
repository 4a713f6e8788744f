// `kktrain config CONFIG [key=value ...]`: print the fully resolved config as YAML.
#include <cstdio>

#include "apps/cli/commands.hpp"
#include "core/log.hpp"

namespace kktrain {

namespace {
int run_config(const ParsedArgs& args, AppContext& ctx) {
  if (args.flags.count("--schema")) {
    if (ctx.mpi->rank() == 0) std::fputs(config_schema_markdown().c_str(), stdout);
    return 0;
  }
  const Config cfg = load_app_config(args, ctx);
  if (ctx.mpi->rank() == 0) std::fputs(to_yaml(cfg).c_str(), stdout);
  return 0;
}
}  // namespace

Command config_command() {
  CommandSpec s;
  s.name = "config";
  s.synopsis = "config CONFIG [key.path=VALUE ...] | config --schema";
  s.summary = "Print the fully resolved config (every default filled, every dtype resolved).";
  s.details =
      "Reads CONFIG, applies the overrides (VALUE is parsed as YAML: null, [a, b] and\n"
      "{glob: \"*\"} all work), validates everything and prints the result as YAML on stdout.\n"
      "Dtypes print in canonical spelling (float32, bfloat16, float16). The section\n"
      "resolved_precision says which dtype each role resolved to and where it came from;\n"
      "it is ignored when the printed config is read back in.\n"
      "--schema prints every key with its type, default and accepted values as a markdown\n"
      "table, recorded from the readers themselves (README's configuration reference).\n"
      "Exit status: 0 on success, 2 with one line on stderr for any invalid input.\n";
  s.positionals = {"CONFIG"};
  s.flags = {"--schema"};
  s.standalone_flags = {"--schema"};
  s.takes_overrides = true;
  return Command{s, run_config, false};
}

}  // namespace kktrain
