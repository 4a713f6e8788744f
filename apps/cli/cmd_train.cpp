// `kktrain train CONFIG [key=value ...]`: the training loop, on one rank or sharded over the
// ranks of an mpirun launch.
//
//   per step: micro-batches -> forward -> backward (gradients accumulate; on several ranks
//             reduce-scattered into the shards) -> the step's scalars (loss, MTP loss, gradient
//             sum of squares, kept on the device) read back and all-reduced in one wait -> clip
//             factor -> one fused optimizer update of this rank's shard -> the step's end agreed
//             in one wait (signals, errors, the next step's windows, logged values) -> schedule
//             (apps/train/step_sync.hpp: the step's only two host synchronizations)
// The global batch is split deterministically: rank r of W takes windows [r G/W, (r+1) G/W) of
// the step's G windows, in micro-batches of data.micro_batch_size, so every rank count and every
// micro-batch size trains on the same samples. Losses are averaged over ranks; rank 0 logs and
// writes files. Periodic validation, a log line every train.log_every steps (and a progress line
// when stderr is a terminal), and metrics.jsonl in train.output_dir. A step whose loss or
// gradient norm is not finite (on any rank: both are reduced over ranks) is skipped with a
// warning on every rank; train.max_nonfinite_steps in a row stop the run.
//
// The loop's named steps and their shared state: apps/train/train_loop.hpp.
#include "apps/cli/commands.hpp"
#include "apps/train/train_loop.hpp"

namespace kktrain {

namespace {

// The run: its setup, then each step (the training step with its two waits, its log, its
// validation and its checkpoint) until train.max_steps or a stop signal, then its finish; the
// exit status.
int run_train(const ParsedArgs& args, AppContext& ctx) {
  TrainRun run;
  std::unique_ptr<Communicator> comm = ctx.mpi->make_communicator();
  Config cfg = load_agreed_config(args, ctx, *comm);
  setup_run(run, std::move(comm), std::move(cfg), ThreadReport{ctx.threads, ctx.threads_warning});
  for (int64_t step = run.state.step; step < run.data->max_steps(); ++step) {
    const StepRecord s = train_step(run, step);
    log_step(run, s);
    maybe_validate(run, s);
    maybe_evaluate(run, s);
    if (maybe_checkpoint(run, s) == LoopControl::stop) break;
  }
  return finish_run(run);
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
      "ms_per_step, peak_rss_bytes, peak_device_bytes, host_syncs: the step's waits for the\n"
      "device or the ranks, 2 at most; kernel_launches: the Kokkos kernels this rank launched\n"
      "in the step, deep_copies its Kokkos::deep_copy calls; validation rows carry val_loss).\n"
      "Before allocating, the predicted peak (kktrain audit) is compared with the available\n"
      "memory (train.memory_available_bytes overrides it); a run that cannot fit exits 2.\n"
      "Steps with a non-finite loss or gradient norm are skipped; train.max_nonfinite_steps in\n"
      "a row stop the run\n"
      "(exit 1). With torch Adam/AdamW and trainable bfloat16 parameters a precision warning\n"
      "is printed; train.fail_on_precision_warning: true makes it an error (exit 2).\n"
      "Logged steps also count the updates bf16 rounding left unchanged (update_lost_frac,\n"
      "ema_lost_frac in metrics.jsonl); when update_lost_frac stays above\n"
      "train.update_lost_warn_frac for train.update_lost_warn_steps steps, a second warning\n"
      "(with train.fail_on_precision_warning an error, after a checkpoint of that step).\n"
      "Checkpoints go to checkpoint.dir (<train.output_dir>/checkpoints) every\n"
      "checkpoint.save_every steps and at the end; the last checkpoint.keep_last are kept.\n"
      "checkpoint.resume: auto (the default) continues from the latest one there, none starts\n"
      "afresh, or give a checkpoint path. At the end <train.output_dir>/export.h5 holds the\n"
      "weights in checkpoint.export_dtype. SIGTERM or SIGINT: a checkpoint at the end of the\n"
      "current step, then exit 128 + the signal number (130, 143); a second signal exits at\n"
      "once. Under mpirun -np N the model is sharded over the N ranks.\n";
  s.positionals = {"CONFIG"};
  s.takes_overrides = true;
  return Command{s, run_train, true};
}

}  // namespace kktrain
