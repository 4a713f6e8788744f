// `kktrain train CONFIG [key=value ...]`: the training loop.
//
//   per step: micro-batches -> forward -> backward (gradients accumulate) -> global grad norm ->
//             clip factor -> one fused optimizer update -> schedule
// with periodic validation, a log line every train.log_every steps (and a progress line when
// stderr is a terminal), and metrics.jsonl in train.output_dir. A step whose loss or gradient
// norm is not finite is skipped with a warning; train.max_nonfinite_steps in a row stop the run.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "apps/app_model.hpp"
#include "apps/commands.hpp"
#include "core/errors.hpp"
#include "core/log.hpp"
#include "io/data.hpp"
#include "io/metrics.hpp"
#include "optim/audit.hpp"
#include "optim/grad_norm.hpp"
#include "optim/optimizer.hpp"
#include "optim/schedule.hpp"

namespace kktrain {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Rejects settings this version cannot honour, instead of ignoring them.
void check_supported(const Config& cfg, int world_size) {
  if (world_size > 1) {
    throw UsageError("train: launched on " + std::to_string(world_size) +
                     " ranks, but sharded data parallel training is not implemented in this "
                     "version; run on one rank");
  }
  if (cfg.checkpoint.save_every > 0 ||
      (cfg.checkpoint.resume != "auto" && cfg.checkpoint.resume != "never")) {
    throw ConfigError("checkpoint",
                      "training checkpoints (save_every, resume from a path) are "
                      "not implemented in this version; use save_every: 0",
                      cfg.source);
  }
}

double validation_loss(Transformer& model, const TokenDataset& data, const Config& cfg) {
  ForwardOptions fo;
  fo.compute_mtp = false;
  double sum = 0.0;
  for (int64_t i = 0; i < cfg.train.val_batches; ++i) {
    const Batch b = data.val_batch(i, cfg.data.micro_batch_size, cfg.data.seq_len);
    sum += model.forward(b.ids.data(), b.targets.data(), b.B, b.T, fo).loss;
  }
  return sum / static_cast<double>(cfg.train.val_batches);
}

void progress_line(int64_t step, int64_t total, double loss, double tps) {
  const int width = 30;
  const int filled = total > 0 ? static_cast<int>(width * step / total) : width;
  std::fprintf(stderr, "\r[%s%s] %lld/%lld loss %.4f %.0f tok/s  ",
               std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(),
               static_cast<long long>(step), static_cast<long long>(total), loss, tps);
  std::fflush(stderr);
}

int run_train(const ParsedArgs& args, AppContext& ctx) {
  if (ctx.mpi->size() > 1) check_supported(Config(), ctx.mpi->size());  // before config errors
  const Config cfg = load_app_config(args, ctx);
  auto comm = ctx.mpi->make_communicator();
  check_supported(cfg, comm->size());
  const bool rank0 = comm->rank() == 0;

  auto model = build_model(cfg);
  ParamRegistry& params = model->params();
  const auto [risky, warnings] = precision_warnings(cfg, params);
  for (const auto& w : warnings) log::warn(w);
  if (risky && cfg.train.fail_on_precision_warning) {
    throw ConfigError("train.fail_on_precision_warning",
                      "refusing to train with bfloat16 Adam moments (see the warning above)",
                      cfg.source);
  }
  // Optimizer state is created after the model, its init and its freezing.
  auto opt = make_optimizer(cfg.optimizer, params, cfg.model.seed);
  const TokenDataset data = TokenDataset::load(cfg.data, cfg.model.vocab_size);
  const LrSchedule schedule(cfg.lr_scheduler, cfg.optimizer.lr, cfg.train.max_steps);
  const std::string metrics_path =
      (std::filesystem::path(cfg.train.output_dir) / "metrics.jsonl").string();
  MetricsWriter metrics(metrics_path);
  if (!metrics.previous().empty()) {
    log::info("an earlier " + metrics_path + " was kept as " + metrics.previous());
  }

  const int64_t B = cfg.data.micro_batch_size, T = cfg.data.seq_len;
  const int64_t micro_steps = cfg.data.global_batch_size / (B * comm->size());
  const int64_t tokens_per_step = cfg.data.global_batch_size * T;
  const bool progress = rank0 && (cfg.train.progress == "on" ||
                                  (cfg.train.progress == "auto" && isatty(STDERR_FILENO)));
  bool val_ok = data.has_validation() && data.val_tokens() > T;
  if (cfg.train.val_every > 0 && !val_ok) {
    log::warn("data: no validation split long enough for seq_len " + std::to_string(T) +
              "; validation is skipped (raise data.val_fraction)");
  }
  int64_t trainable = 0;
  for (const auto& p : params.all()) trainable += p.trainable ? p.numel : 0;
  if (trainable == 0) log::warn("no trainable parameters (freeze_config froze everything)");
  log::info("training " + std::to_string(params.total_numel()) + " parameters (" +
            std::to_string(trainable) + " trainable) with " + opt->name() + " on " + data.source() +
            "; storage " + dtype_name(cfg.precision.storage) + ", compute " +
            dtype_name(cfg.precision.compute) + "; " + std::to_string(cfg.train.max_steps) +
            " steps of " + std::to_string(tokens_per_step) + " tokens; metrics -> " + metrics_path);

  int64_t nonfinite = 0;
  double last_loss = NAN;
  const double t_start = now_s();
  for (int64_t step = 0; step < cfg.train.max_steps; ++step) {
    const double t0 = now_s();
    params.zero_grads();
    double loss_sum = 0.0, mtp_sum = 0.0;
    for (int64_t m = 0; m < micro_steps; ++m) {
      const Batch b = data.train_batch(step, comm->rank() * (micro_steps * B) + m * B, B, T);
      ForwardOptions fo;
      fo.prepare_backward = true;
      fo.compute_mtp = cfg.model.compute_mtp;
      fo.grad_scale = 1.0f / static_cast<float>(micro_steps);  // mean over micro-batches
      const ForwardResult r = model->forward(b.ids.data(), b.targets.data(), B, T, fo);
      model->backward();
      loss_sum += r.loss;
      mtp_sum += r.mtp_loss;
    }
    const double loss = comm->allreduce_sum_host(loss_sum / micro_steps) / comm->size();
    const double grad_norm = std::sqrt(comm->allreduce_sum_host(grad_sum_squares(params)));
    const int64_t done = step + 1;
    if (!std::isfinite(loss) || !std::isfinite(grad_norm)) {
      ++nonfinite;
      log::warn("step " + std::to_string(done) + ": non-finite " +
                (std::isfinite(loss) ? "gradient norm" : "loss") + "; update skipped (" +
                std::to_string(nonfinite) + " in a row)");
      metrics.write(JsonLine()
                        .integer("step", done)
                        .num("loss", loss)
                        .num("grad_norm", grad_norm)
                        .boolean("skipped", true));
      if (nonfinite >= cfg.train.max_nonfinite_steps) {
        throw RuntimeFailure("stopping at step " + std::to_string(done) + ": " +
                             std::to_string(nonfinite) +
                             " non-finite steps in a row (train.max_nonfinite_steps)");
      }
      continue;
    }
    nonfinite = 0;
    const double lr = schedule.lr(step);
    opt->step(lr, clip_factor(grad_norm, cfg.train.grad_clip));
    const double dt = now_s() - t0;
    const double tps = static_cast<double>(tokens_per_step) / dt;
    last_loss = loss;
    const bool log_now =
        done % cfg.train.log_every == 0 || done == 1 || done == cfg.train.max_steps;
    if (log_now) {
      JsonLine row;
      row.integer("step", done).num("loss", loss).num("grad_norm", grad_norm).num("lr", lr);
      if (model->mtp_depth() > 0 && cfg.model.compute_mtp)
        row.num("mtp_loss", mtp_sum / micro_steps);
      row.num("tokens_per_s", tps).num("ms_per_step", dt * 1e3);
      if (rank0) metrics.write(row);
      char line[256];
      std::snprintf(line, sizeof(line),
                    "step %lld/%lld | loss %.4f | grad_norm %.3f | lr %.2e | %.0f tok/s | "
                    "%.1f ms/step",
                    static_cast<long long>(done), static_cast<long long>(cfg.train.max_steps), loss,
                    grad_norm, lr, tps, dt * 1e3);
      if (progress) std::fputc('\n', stderr);
      log::info(line);
    }
    if (progress) progress_line(done, cfg.train.max_steps, loss, tps);
    const bool val_now = val_ok && cfg.train.val_every > 0 &&
                         (done % cfg.train.val_every == 0 || done == cfg.train.max_steps);
    if (val_now) {
      const double vl = validation_loss(*model, data, cfg);
      if (rank0) metrics.write(JsonLine().integer("step", done).num("val_loss", vl));
      if (progress) std::fputc('\n', stderr);
      char line[128];
      std::snprintf(line, sizeof(line), "step %lld | val_loss %.4f", static_cast<long long>(done),
                    vl);
      log::info(line);
    }
  }
  if (progress) std::fputc('\n', stderr);
  char line[160];
  std::snprintf(line, sizeof(line), "done: %lld steps in %.1f s, final loss %.4f",
                static_cast<long long>(cfg.train.max_steps), now_s() - t_start, last_loss);
  log::info(line);
  return 0;
}

}  // namespace

Command train_command() {
  CommandSpec s;
  s.name = "train";
  s.synopsis = "train CONFIG [key.path=VALUE ...]";
  s.summary = "Train the model a config describes (mpirun -np N for several ranks).";
  s.details =
      "Each step: data.global_batch_size / data.micro_batch_size micro-batches of data.seq_len\n"
      "tokens (gradients accumulate), global gradient-norm clipping (train.grad_clip), one\n"
      "optimizer update, the learning-rate schedule. Logs every train.log_every steps and\n"
      "writes <train.output_dir>/metrics.jsonl (step, loss, grad_norm, lr, tokens_per_s,\n"
      "ms_per_step; validation rows carry val_loss). Steps with a non-finite loss or gradient\n"
      "norm are skipped; train.max_nonfinite_steps in a row stop the run (exit 1).\n"
      "With torch Adam/AdamW and trainable bfloat16 parameters a precision warning is printed;\n"
      "train.fail_on_precision_warning: true makes it an error (exit 2).\n";
  s.positionals = {"CONFIG"};
  s.takes_overrides = true;
  return Command{s, run_train, true};
}

}  // namespace kktrain
