// `kktrain audit CONFIG [key=value ...] [--json] [--world-size W]`: the precision audit of a
// configuration, planned without allocating the model or optimizer state, for the ranks of the
// launch (mpirun) or W ranks given on the command line.
#include <cstdio>
#include <string>

#include "apps/cli/commands.hpp"
#include "apps/train/app_model.hpp"
#include "apps/train/memory_plan.hpp"
#include "apps/train/model_source.hpp"
#include "core/errors.hpp"
#include "core/log.hpp"
#include "optim/audit.hpp"

namespace kktrain {

namespace {
int world_size_option(const ParsedArgs& args, const AppContext& ctx) {
  const std::string& v = args.options.at("--world-size");
  if (v.empty()) return ctx.mpi->size();
  std::size_t used = 0;
  long w = 0;
  try {
    w = std::stol(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || w < 1 || w > (1 << 20)) {
    throw UsageError("audit: --world-size expects a rank count from 1 to 1048576, got '" + v + "'");
  }
  if (ctx.mpi->size() > 1 && w != ctx.mpi->size()) {
    throw UsageError("audit: --world-size " + v + " differs from the " +
                     std::to_string(ctx.mpi->size()) + " ranks of this launch");
  }
  return static_cast<int>(w);
}

// The reference's pattern A (TE FusedAdam: bf16 storage, fp32 master as bf16 + int16 remainder,
// fp32 moments) and pattern B (torch AdamW on fp32 storage), applied to this config's model, data
// and ranks: the comparison of peaks the reference asks users to make for their model.
std::vector<AuditReport::PatternPeak> pattern_peaks(const Config& cfg, int world) {
  std::vector<AuditReport::PatternPeak> out;
  auto add = [&](const char* name, const char* what, OptimizerKind kind, DType storage) {
    AuditReport::PatternPeak pp;
    pp.name = name;
    pp.description = what;
    try {
      Config c = cfg;
      c.optimizer.kind = kind;
      const bool fused = kind == OptimizerKind::fused_adam;
      c.optimizer.master_weights = fused;
      c.optimizer.store_param_remainders = fused;
      c.optimizer.exp_avg_dtype = DType::float32;
      c.optimizer.exp_avg_sq_dtype = DType::float32;
      c.optimizer.stochastic_rounding = false;
      c.precision.storage = storage;
      auto model = plan_model(c, 0, world);
      std::vector<std::string> quiet;
      AuditReport r = precision_audit(c, model->params(), quiet);
      pp.peak = predict_peak(c, *model, r);
    } catch (const std::exception& e) {
      pp.error = e.what();
    }
    out.push_back(std::move(pp));
  };
  add("A", "TE FusedAdam, bf16 storage + int16 remainder, fp32 moments", OptimizerKind::fused_adam,
      DType::bfloat16);
  add("B", "torch AdamW, fp32 storage", OptimizerKind::adamw, DType::float32);
  return out;
}

int run_audit(const ParsedArgs& args, AppContext& ctx) {
  const int world = world_size_option(args, ctx);
  const Config cfg = load_app_config(args, ctx, world);
  auto model = plan_model(cfg, 0, world);
  if (cfg.model.init_from) {  // the file's tensors against the planned model, from the headers
    SingleCommunicator one;
    const auto src = open_weights(*cfg.model.init_from, "model.init_from", one);
    check_model_file(*src, model->params(), "model.init_from");
  }
  AuditReport r = precision_audit(cfg, model->params(), log::warnings());
  r.peak = predict_peak(cfg, *model, r);
  r.pattern_peaks = pattern_peaks(cfg, world);
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
  s.synopsis = "audit CONFIG [key.path=VALUE ...] [--json] [--world-size W]";
  s.summary = "Per-parameter storage, grad, moment and master dtypes with bytes; warnings.";
  s.details =
      "For every parameter, trainable or not: storage dtype, gradient dtype, the optimizer's\n"
      "exp_avg / exp_avg_sq (or SGD momentum) dtypes, the master copy (none, float32, or\n"
      "remainder: fp32 rebuilt from the bf16 parameter + an int16 remainder), bytes per element\n"
      "and in total; then the compute, reduce and output dtypes, totals with bytes per\n"
      "trainable parameter, and the precision warnings. Nothing is allocated.\n"
      "Under mpirun -np W, or with --world-size W: the layout of W ranks (frozen parameters\n"
      "lowered to the compute dtype, rows per rank of every parameter, and the resident bytes\n"
      "of the largest rank; --json: \"shard_rows\" per parameter, totals.per_rank).\n"
      "The predicted training peak of the largest rank (docs/memory.md): parameters,\n"
      "gradients, optimizer state, compute weights, activations (with and without\n"
      "model.activation_checkpointing), workspaces and the process baseline; --json:\n"
      "totals.bytes_peak_predicted and totals.peak_breakdown.\n"
      "--json prints {\"parameters\": [{\"name\", \"trainable\", \"shape\", \"storage_dtype\",\n"
      "\"grad_dtype\", \"exp_avg_dtype\", \"exp_avg_sq_dtype\", \"master\", \"bytes\", ...}],\n"
      "\"compute_dtype\", \"reduce_dtype\", \"output_dtype\", \"warnings\": [...]}; absent\n"
      "state is null.\n";
  s.positionals = {"CONFIG"};
  s.takes_overrides = true;
  s.flags = {"--json"};
  s.options = {{"--world-size", ""}};
  return Command{s, run_audit, true};
}

}  // namespace kktrain
