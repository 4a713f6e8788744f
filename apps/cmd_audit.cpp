// `kktrain audit CONFIG [key=value ...] [--json]`: the precision audit of a configuration,
// planned without allocating the model or optimizer state.
#include <cstdio>

#include "apps/app_model.hpp"
#include "apps/commands.hpp"
#include "core/log.hpp"
#include "optim/audit.hpp"

namespace kktrain {

namespace {
int run_audit(const ParsedArgs& args, AppContext& ctx) {
  const Config cfg = load_app_config(args, ctx);
  auto model = build_model(cfg, /*allocate=*/false);
  const AuditReport r = precision_audit(cfg, model->params(), log::warnings());
  if (ctx.mpi->rank() == 0) {
    const std::string out = args.flags.count("--json") ? audit_json(r) : audit_table(r);
    std::fputs(out.c_str(), stdout);
  }
  return 0;
}
}  // namespace

Command audit_command() {
  CommandSpec s;
  s.name = "audit";
  s.synopsis = "audit CONFIG [key.path=VALUE ...] [--json]";
  s.summary = "Per-parameter storage, grad, moment and master dtypes with bytes; warnings.";
  s.details =
      "For every parameter, trainable or not: storage dtype, gradient dtype, the optimizer's\n"
      "exp_avg / exp_avg_sq (or SGD momentum) dtypes, the master copy (none, float32, or\n"
      "remainder: fp32 rebuilt from the bf16 parameter + an int16 remainder), bytes per element\n"
      "and in total; then the compute, reduce and output dtypes, totals with bytes per\n"
      "trainable parameter, and the precision warnings. Nothing is allocated.\n"
      "--json prints {\"parameters\": [{\"name\", \"trainable\", \"shape\", \"storage_dtype\",\n"
      "\"grad_dtype\", \"exp_avg_dtype\", \"exp_avg_sq_dtype\", \"master\", \"bytes\", ...}],\n"
      "\"compute_dtype\", \"reduce_dtype\", \"output_dtype\", \"warnings\": [...]}; absent\n"
      "state is null.\n";
  s.positionals = {"CONFIG"};
  s.takes_overrides = true;
  s.flags = {"--json"};
  return Command{s, run_audit, true};
}

}  // namespace kktrain
