// The setup of `kktrain train` (apps/train/train_loop.hpp): the run before its first step, and its
// checkpoints (resume, the claimed root, saves).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "apps/dataprep/text_model.hpp"
#include "apps/train/app_model.hpp"
#include "apps/train/memory_plan.hpp"
#include "apps/train/run_files.hpp"
#include "apps/train/train_loop.hpp"
#include "core/errors.hpp"
#include "core/log.hpp"
#include "core/strings.hpp"
#include "io/checkpoint.hpp"
#include "parallel/agree.hpp"
#include "parallel/peer_wait.hpp"

namespace kktrain {

namespace {

// The storage dtype, and the parameters stored otherwise (keep_in_fp32, LoRA adapters' own
// dtype): "bfloat16 (73984 parameters float32)".
std::string storage_text(const ParamRegistry& params, DType storage) {
  int64_t other[2] = {0, 0};
  for (const auto& p : params.all()) {
    if (p.dtype != storage) other[p.dtype == DType::float32 ? 0 : 1] += p.numel;
  }
  std::string t = dtype_name(storage);
  const DType kinds[2] = {DType::float32, DType::bfloat16};
  for (int k = 0; k < 2; ++k) {
    if (other[k] > 0) {
      t += " (" + std::to_string(other[k]) + " parameters " + dtype_name(kinds[k]) + ")";
    }
  }
  return t;
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f s", s);
  return buf;
}

// Bytes of this rank's parameters and optimizer state (what it writes into a checkpoint).
int64_t checkpoint_bytes(const ParamRegistry& params, Optimizer& opt) {
  int64_t n = 0;
  for (int i = 0; i < params.size(); ++i) {
    const ParamInfo& p = params.info(i);
    n += p.local_numel * static_cast<int64_t>(dtype_size(p.dtype));
    for (const StateRef& s : opt.state_refs(i)) {
      n += p.local_numel * (s.int16 ? 2 : static_cast<int64_t>(dtype_size(s.dtype)));
    }
  }
  return n;
}

// The predicted peak of this rank, planned before anything is allocated; a run that cannot fit
// stops here (exit 2) instead of allocating until the system fails it.
PeakBreakdown check_memory(const Config& cfg, Communicator& comm) {
  auto planned = plan_model(cfg, comm.rank(), comm.size());
  const AuditReport audit = precision_audit(cfg, planned->params(), {});
  const PeakBreakdown p = predict_peak(cfg, *planned, audit);
  std::string source;
  const int64_t avail =
      available_memory_bytes(cfg.train.memory_available_bytes, &source, comm.ranks_on_node());
  if (avail >= 0 && p.total() > avail) {
    const auto [group, bytes] = p.largest();
    throw ConfigError("", "predicted peak memory " + std::to_string(p.total()) + " bytes (" +
                              format_bytes(p.total()) + ") exceeds the " + std::to_string(avail) +
                              " bytes (" + format_bytes(avail) + ") available (" + source +
                              "); largest: " + group + " " + std::to_string(bytes) + " bytes (" +
                              format_bytes(bytes) +
                              "); lower data.micro_batch_size, set "
                              "model.activation_checkpointing: true, or train on more ranks "
                              "(kktrain audit CONFIG shows the breakdown)");
  }
  return p;
}

// run.comm .. run.schedule: the agreed config, the run's inputs and end checked, the memory
// planned, the model built (initialized unless resumed), its optimizer and the data opened.
void open_run(TrainRun& run, std::unique_ptr<Communicator> comm_in, Config cfg_in) {
  run.comm = std::move(comm_in);
  Communicator& comm = *run.comm;
  run.cfg = std::move(cfg_in);
  const Config& cfg = run.cfg;
  // Text for a model that does not read text as bytes: refused before anything is read or written.
  // The model's tokenizer and vocabulary are found once, here, and passed down.
  const TextTokens text = collectively(comm, [&] {
    run.text = run_text(cfg);
    return check_text_data(cfg, run.text);
  });
  set_failed_rank_wait(cfg.distributed.failed_rank_wait_s);
  set_stuck_peer_wait(cfg.distributed.stuck_peer_wait_s);
  run.W = comm.size();
  run.rank0 = comm.rank() == 0;
  // The checkpoint to resume from (checkpoint.resume), if any: it provides every value, so the
  // model is not initialized first.
  run.source = collectively(comm, [&] { return resume_source(cfg); });
  // No input is an output, and what the run's end needs is there (checked before any work).
  collectively(comm, [&] { check_run_files(cfg, run.source); });
  collectively(comm, [&] { check_run_end(cfg, comm.rank()); });
  run.predicted = collectively(comm, [&] { return check_memory(cfg, comm); });
  // Text through the model's tokenizer: its token shards, made (or reused) now.
  const DataConfig data = tokenized_data(cfg, text, comm);
  run.model = build_model(cfg, comm, /*initialize=*/!run.source);
  const auto [risky, warnings] = precision_warnings(cfg, run.params());
  for (const auto& w : warnings) log::warn(w);
  if (risky && cfg.train.fail_on_precision_warning) {
    throw ConfigError(
        "train.fail_on_precision_warning",
        "refusing to train " + cfg.source + " with bfloat16 Adam moments (see the warning above)",
        cfg.where("train.fail_on_precision_warning"));
  }
  // Optimizer state is created after the model, its init and its freezing, for this rank's shard.
  run.opt = make_optimizer(cfg.optimizer, run.params(), cfg.model.seed);
  // Every rank opens the data itself; if one cannot, all stop with that rank's message. Examples
  // with train.epochs settle the steps.
  run.data = open_training_data(cfg, data, run.text, comm);
  // What the data needs from the starting weights (preference pairs' reference
  // log-probabilities); a resumed model is given them first, its checkpoint's values after.
  run.data->prepare(
      *run.model, run.source ? ModelWeights::not_loaded : ModelWeights::starting,
      [&] { initialize_model(*run.model, cfg, comm); }, comm);
  run.schedule.emplace(cfg.lr_scheduler, cfg.optimizer.lr, run.data->max_steps());
  if (cfg.eval.every > 0) {
    run.evaluation.emplace(Evaluation::prepare(cfg.eval.data, cfg.eval.tasks, cfg, run.text, comm,
                                               Evaluation::Keys{"eval.data", "eval.tasks"}));
    log::info("eval: " + std::to_string(cfg.eval.data.size() + cfg.eval.tasks.size()) +
              " file(s) every " + std::to_string(cfg.eval.every) +
              " steps and after the last, in rows of data.seq_len " +
              std::to_string(cfg.data.seq_len));
  }
}

// Resume (checkpoint.resume): parameters and optimizer state into this rank's shards, and
// run.state; says which settings changed since the save.
void resume_run(TrainRun& run) {
  const Config& cfg = run.cfg;
  const double t0 = now_s();
  try {
    run.state = load_training_checkpoint(*run.source, cfg, *run.model, *run.opt, *run.comm);
  } catch (const CollectiveError& e) {
    if (cfg.checkpoint.resume != ResumeFrom::latest || !e.printed_here()) throw;
    throw CollectiveError(std::string(e.what()) + " (found by checkpoint.resume: auto in " +
                              checkpoint_root(cfg) + "; checkpoint.resume=none starts afresh)",
                          e.exit_code());
  }
  log::info("resumed from " + *run.source + " at step " + std::to_string(run.state.step) + " (" +
            seconds_text(now_s() - t0) + ")");
  // Settings changed since the save take effect from here on (a longer max_steps stretches
  // the schedule); say which, so a resumed run is never silently a different run.
  const auto changed = run.state.saved_config.empty()
                           ? std::vector<std::string>{}
                           : config_differences(run.state.saved_config, to_yaml(cfg),
                                                {"checkpoint.resume", "resolved_precision"});
  if (!changed.empty()) {
    std::string list;
    for (const auto& c : changed) list += (list.empty() ? "" : "; ") + c;
    log::info("resumed with " + std::to_string(changed.size()) + " setting" +
              (changed.size() == 1 ? "" : "s") + " changed since the checkpoint: " + list);
  }
}

// run.metrics_path and, on rank 0, run.metrics (a resumed run keeps the rows up to its step).
void open_metrics(TrainRun& run) {
  run.metrics_path = (std::filesystem::path(run.cfg.train.output_dir) / "metrics.jsonl").string();
  collectively(*run.comm, [&] {
    if (run.rank0) {
      run.metrics =
          std::make_unique<MetricsWriter>(run.metrics_path, run.source ? run.state.step : -1);
      if (run.cfg.logging.tensorboard) {
        run.metrics->add_tensorboard(
            (std::filesystem::path(run.cfg.train.output_dir) / "tb").string());
      }
    }
  });
  if (run.metrics && !run.metrics->tensorboard_path().empty()) {
    log::info("tensorboard: " + run.metrics->tensorboard_path() + " (logging.tensorboard)");
  }
  if (run.metrics && !run.metrics->previous().empty()) {
    log::info("an earlier " + run.metrics_path + " was kept as " + run.metrics->previous());
  }
}

// The step's geometry, the progress bar and validation settled, and the start line (with the
// warnings that belong before it).
void announce_run(TrainRun& run, const ThreadReport& threads) {
  const Config& cfg = run.cfg;
  ParamRegistry& params = run.params();
  run.B = cfg.data.micro_batch_size;
  run.T = cfg.data.seq_len;
  run.micro_steps = cfg.data.global_batch_size / (run.B * run.W);
  run.tokens_per_step = cfg.data.global_batch_size * run.T;
  const bool bar =
      run.rank0 && (cfg.train.progress == ProgressMode::on ||
                    (cfg.train.progress == ProgressMode::automatic && isatty(STDERR_FILENO)));
  run.progress = bar ? ProgressBar::shown : ProgressBar::hidden;
  const bool val_ok = run.data->has_validation(run.T);
  run.validation = val_ok ? ValidationData::available : ValidationData::missing;
  if (cfg.train.val_every > 0 && !val_ok) {
    log::warn("data: no validation split long enough for seq_len " + std::to_string(run.T) +
              "; validation is skipped (raise data.val_fraction)");
  }
  int64_t trainable = 0;
  for (const auto& p : params.all()) trainable += p.trainable ? p.numel : 0;
  if (trainable == 0) log::warn("no trainable parameters (freeze_config froze everything)");
  std::string ranks;
  if (run.W > 1) {
    ranks = "; " + std::to_string(run.W) + " ranks (fsdp2, " +
            (cfg.distributed.reshard_after_forward ? "reshard" : "no reshard") +
            " after forward, reduce " + dtype_name(cfg.precision.reduce) + "; " +
            run.comm->collectives_summary() + ")";
  }
  if (!threads.warning.empty()) log::warn_about_launch(threads.warning);
  if (!threads.plan.empty()) log::info(threads.plan);
  log::info("training " + std::to_string(params.total_numel()) + " parameters (" +
            std::to_string(trainable) + " trainable) with " + run.opt->name() + " on " +
            run.data->source() + "; storage " + storage_text(params, cfg.precision.storage) +
            ", compute " + dtype_name(cfg.precision.compute) + "; " +
            std::to_string(run.data->max_steps()) + " steps of " +
            std::to_string(run.tokens_per_step) + " tokens" + ranks + "; metrics -> " +
            run.metrics_path);
}

// run.saved_step, and the checkpoint root made this run's (collective).
void claim_checkpoint_root(TrainRun& run) {
  const Config& cfg = run.cfg;
  // The resumed step is already saved only when it was resumed from this run's own checkpoint
  // root; resumed from elsewhere, the run saves it under checkpoint.dir (at the end at the
  // latest, even without training), which the export then reads.
  if (run.source) {
    std::error_code ec;
    const auto own = std::filesystem::path(checkpoint_root(cfg)) / step_dir_name(run.state.step) /
                     kCheckpointFile;
    if (run.comm->all_agree(std::filesystem::equivalent(*run.source, own, ec))) {
      run.saved_step = run.state.step;
    }
  }
  // The checkpoint root becomes this run's: checkpoints it did not continue from (all of them on
  // a fresh start; those after the resumed step) are moved to earlier_N/, never replaced or
  // pruned by its saves.
  collectively(*run.comm, [&] {
    if (!run.rank0) return;
    const std::string moved = set_aside_checkpoints(checkpoint_root(cfg), run.saved_step);
    if (!moved.empty()) {
      log::info("checkpoint: " + moved + " (this run " +
                (run.saved_step < 0 ? std::string("starts afresh")
                                    : "continues from step " + std::to_string(run.saved_step)) +
                " and never writes over or prunes them)");
    }
  });
}

// The counters of the loop, its device sums, and the first step's windows (collective).
void prepare_steps(TrainRun& run) {
  const Config& cfg = run.cfg;
  // Steps this process runs (a resumed run starts at state.step; one at max_steps runs none).
  run.first_step = run.state.step;
  run.ran = std::max<int64_t>(0, run.data->max_steps() - run.first_step);
  if (run.ran == 0) {
    // From here a stop request is one after the last step (announced as such): no step runs.
    // (Set before the line: a scheduler, or a test, that signals on seeing it gets that answer.)
    StopSignals::set_finishing();
    log::info("nothing to train: the checkpoint is at step " + std::to_string(run.first_step) +
              " and train.max_steps is " + std::to_string(run.data->max_steps()) +
              " (raise train.max_steps to train further); writing the export again");
  }
  // Device high-water (GPU builds): used bytes sampled at step ends; -1 on host builds.
  run.device_peak = device_used_bytes();
  // Updates lost to bf16 rounding: counted in the update launches of logged steps.
  run.lost_watch.emplace(cfg.train.update_lost_warn_frac, cfg.train.update_lost_warn_steps,
                         run.first_step);
  // The step's losses and gradient sum of squares stay on the device until its one readback.
  run.step_sums.emplace(StepSlots::kCount);
  // Each step's windows are drawn before the previous step's end agreement (where a window that
  // cannot be drawn ends every rank with that rank's message); the first step's here.
  if (run.ran > 0) {
    run.batches = collectively(*run.comm, [&] { return draw_batches(run, run.state.step); });
  }
  run.t_start = now_s();
}

}  // namespace

void setup_run(TrainRun& run, std::unique_ptr<Communicator> comm, Config cfg,
               const ThreadReport& threads) {
  open_run(run, std::move(comm), std::move(cfg));
  if (run.source) resume_run(run);
  open_metrics(run);
  announce_run(run, threads);
  // From here SIGTERM / SIGINT end the loop at a step's end, after its checkpoint (rank 0 says so).
  run.signals.emplace(run.rank0 ? Announce::yes : Announce::no);
  claim_checkpoint_root(run);
  prepare_steps(run);
}

std::vector<Batch> draw_batches(const TrainRun& run, int64_t step) {
  std::vector<Batch> v;
  for (int64_t m = 0; m < run.micro_steps; ++m) {
    const int64_t first = run.comm->rank() * (run.micro_steps * run.B) + m * run.B;
    v.push_back(run.data->batch(step, first, run.B, run.T));
  }
  return v;
}

void save_checkpoint(TrainRun& run, int64_t done) {
  const double t0 = now_s();
  const std::string dir = save_training_checkpoint(run.cfg, *run.model, *run.opt, run.state,
                                                   run.schedule->lr(done), *run.comm);
  run.saved_step = done;
  log::info("checkpoint: step " + std::to_string(done) + " -> " + dir + " (" +
            std::to_string(checkpoint_bytes(run.params(), *run.opt)) + " bytes on this rank in " +
            seconds_text(now_s() - t0) + ")");
}

}  // namespace kktrain
