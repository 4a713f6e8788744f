// `kktrain config CONFIG [key=value ...]`: print the fully resolved config as YAML.
#include <cstdio>

#include "apps/commands.hpp"
#include "core/log.hpp"

namespace kktrain {

namespace {
int run_config(const ParsedArgs& args, AppContext& ctx) {
  const Config cfg = load_app_config(args, ctx);
  if (ctx.mpi->rank() == 0) std::fputs(to_yaml(cfg).c_str(), stdout);
  return 0;
}
}  // namespace

Command config_command() {
  CommandSpec s;
  s.name = "config";
  s.synopsis = "config CONFIG [key.path=VALUE ...]";
  s.summary = "Print the fully resolved config (every default filled, every dtype resolved).";
  s.details =
      "Reads CONFIG, applies the overrides (VALUE is parsed as YAML: null, [a, b] and\n"
      "{glob: \"*\"} all work), validates everything and prints the result as YAML on stdout.\n"
      "Dtypes print in canonical spelling (float32, bfloat16, float16). The section\n"
      "resolved_precision says which dtype each role resolved to and where it came from;\n"
      "it is ignored when the printed config is read back in.\n"
      "Exit status: 0 on success, 2 with one line on stderr for any invalid input.\n";
  s.positionals = {"CONFIG"};
  s.takes_overrides = true;
  return Command{s, run_config, false};
}

}  // namespace kktrain
