// The steps of `kktrain train` and its finish (apps/train/train_loop.hpp).
#include "apps/train/train_loop.hpp"

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "apps/dataprep/text_model.hpp"
#include "apps/train/lost_update_log.hpp"
#include "apps/train/memory_plan.hpp"
#include "apps/train/model_source.hpp"
#include "apps/train/peft_run.hpp"
#include "apps/train/run_files.hpp"
#include "core/errors.hpp"
#include "core/log.hpp"
#include "core/strings.hpp"
#include "io/checkpoint.hpp"
#include "io/model_export.hpp"
#include "optim/grad_norm.hpp"
#include "parallel/agree.hpp"

namespace kktrain {

namespace {

void progress_line(int64_t step, int64_t total, double loss, double tps) {
  const int width = 30;
  const int filled = total > 0 ? static_cast<int>(width * step / total) : width;
  std::fprintf(stderr, "\r[%s%s] %lld/%lld loss %.4f %.0f tok/s  ",
               std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(),
               static_cast<long long>(step), static_cast<long long>(total), loss, tps);
  std::fflush(stderr);
}

// Ends the progress bar's line before a log line.
void end_progress_line(const TrainRun& run) {
  if (run.progress == ProgressBar::shown) std::fputc('\n', stderr);
}

// Rows go to metrics.jsonl on rank 0; a failed write (a full disk) is kept in run.metrics_error,
// agreed on at the end of the step, and ends the run on every rank naming the file.
void write_row(TrainRun& run, const JsonLine& row) {
  if (!run.metrics || run.metrics_error) return;
  try {
    run.metrics->write(row);
  } catch (...) {
    run.metrics_error = std::current_exception();
  }
}

// The row of a skipped (non-finite) step.
JsonLine skipped_row(const StepRecord& s) {
  return JsonLine()
      .integer("step", s.done)
      .num("loss", s.sc.loss)
      .num("grad_norm", s.sc.grad_norm)
      .boolean("skipped", true);
}

// The step's gradients over its micro-batches (accumulated; on several ranks reduce-scattered
// after the last), and its scalars read back and reduced over the ranks (one wait).
StepScalars accumulate_gradients(TrainRun& run) {
  run.model->zero_grads();
  run.step_sums->zero();
  double aux_sum = 0.0;  // the MoE load-balancing loss (host values: routing counts)
  for (int64_t m = 0; m < run.micro_steps; ++m) {
    const Batch& b = run.batches[m];
    ForwardOptions fo;
    fo.prepare_backward = true;
    fo.compute_mtp = run.cfg.model.compute_mtp;
    fo.grad_scale = 1.0f / static_cast<float>(run.micro_steps);  // mean over micro-batches
    run.data->weigh_loss(b, run.W, fo);  // examples: the mean over the global batch's loss tokens
    fo.sync_grads = m + 1 == run.micro_steps;  // several ranks: reduce-scatter once per step
    fo.loss_sums = &*run.step_sums;            // read back once, with the gradient norm
    const ForwardResult r = run.model->forward(b.ids.data(), b.targets.data(), run.B, run.T, fo);
    run.model->backward();
    aux_sum += r.aux_loss;
  }
  grad_sum_squares(run.params(), *run.step_sums, StepSlots::kGradSquares);
  return reduce_step_scalars(*run.step_sums, run.micro_steps, aux_sum, *run.comm,
                             run.data->step_loss());
}

// The optimizer's update of a finite step; a skipped one counts towards
// train.max_nonfinite_steps, whose last ends the run on every rank (they all see the same
// reduced loss and norm).
void apply_update(TrainRun& run, const StepRecord& s) {
  const Config& cfg = run.cfg;
  if (s.update == StepUpdate::skipped) {
    int64_t& nonfinite = run.state.nonfinite;
    ++nonfinite;
    log::warn("step " + std::to_string(s.done) + ": non-finite " +
              (std::isfinite(s.sc.loss) ? "gradient norm" : "loss") + "; update skipped (" +
              std::to_string(nonfinite) + " in a row)");
    if (nonfinite >= cfg.train.max_nonfinite_steps) {
      write_row(run, skipped_row(s));
      throw CollectiveError(run.rank0 ? "stopping at step " + std::to_string(s.done) + ": " +
                                            std::to_string(nonfinite) +
                                            " non-finite steps in a row (train.max_nonfinite_steps)"
                                      : std::string(),
                            1);
    }
    return;
  }
  run.state.nonfinite = 0;
  run.opt->set_count_rounding(s.log_now);
  run.opt->step(s.lr, clip_factor(s.sc.grad_norm, cfg.train.grad_clip));
  run.state.optimizer_steps = run.opt->steps();
  run.last_loss = s.sc.loss;
}

// The step's end (apps/train/step_sync.hpp): the next step's windows, stop signals, errors, and on
// logged steps the metrics' reductions, in one agreement.
void end_step(TrainRun& run, StepRecord& s) {
  run.device_peak = std::max(run.device_peak, device_used_bytes());
  StepEndInputs in;
  try {
    if (s.done < run.data->max_steps()) run.batches = draw_batches(run, s.done);
  } catch (...) {
    in.error = std::current_exception();
  }
  if (!in.error) in.error = run.metrics_error;  // a failed metrics write (the previous row's)
  in.signal = StopSignals::received();
  {
    // The lost-update counts' readback is part of the step end's one wait.
    SyncScope why(SyncCause::step_end, /*one_wait=*/true);
    if (s.update == StepUpdate::applied && s.log_now) {
      in.logged = true;
      in.peak_rss_bytes = peak_rss_bytes();
      in.peak_device_bytes = static_cast<double>(run.device_peak);
      in.counts = rounding_count_values(run.opt->rounding_counts());
    }
    s.end = agree_step_end(in, *run.comm);
  }
  if (s.end.failed) agree_on_errors(*run.comm, in.error);  // throws on every rank
}

struct LoggedRow {
  JsonLine row;
  LostUpdates lost;  // the updates lost to rounding, summed over the ranks
};

// The metrics row of a logged, applied step.
LoggedRow train_row(TrainRun& run, const StepRecord& s) {
  const Config& cfg = run.cfg;
  LoggedRow out;
  JsonLine& row = out.row;
  row.integer("step", s.done).num("loss", s.sc.loss).num("grad_norm", s.sc.grad_norm);
  row.num("lr", s.lr);
  s.data.add_columns(row);
  if (run.data->reports_pairs()) {  // as TRL logs them
    const PairMeans& p = s.sc.pairs;
    row.num("rewards_chosen", p.rewards_chosen)
        .num("rewards_rejected", p.rewards_rejected)
        .num("reward_margin", p.rewards_chosen - p.rewards_rejected)
        .num("reward_accuracy", p.reward_accuracy)
        .num("logps_chosen", p.logps_chosen)
        .num("logps_rejected", p.logps_rejected);
  }
  if (run.model->mtp_depth() > 0 && cfg.model.compute_mtp) row.num("mtp_loss", s.sc.mtp_loss);
  // The load-balancing loss (its weighted gradient is in grad_norm; `loss` stays the LM's).
  if (cfg.model.moe.enabled()) row.num("aux_loss", s.sc.aux_loss);
  row.num("tokens_per_s", s.tps).num("ms_per_step", s.dt * 1e3);
  if (run.W > 1) {  // this rank's collectives, the expert-parallel ones included
    const CommStats& c1 = run.comm->stats();
    const CommStats m1 = run.model->moe_comm_stats();
    row.num("comm_bytes", c1.bytes_sent - s.c0.bytes_sent + m1.bytes_sent - s.m0.bytes_sent)
        .num("comm_ms", (c1.seconds - s.c0.seconds + m1.seconds - s.m0.seconds) * 1e3);
    if (cfg.model.moe.enabled()) {
      row.num("alltoall_bytes", m1.alltoall_bytes_sent - s.m0.alltoall_bytes_sent);
    }
  }
  row.num("peak_rss_bytes", s.end.peak_rss_bytes);
  if (device_memory_tracked()) {  // the same on every rank: a build property
    row.num("peak_device_bytes", s.end.peak_device_bytes);
  } else {
    row.null("peak_device_bytes");  // host builds: no device memory apart from RSS
  }
  std::size_t next = 0;
  out.lost =
      lost_updates(run.opt->rounding_counts(), [&](uint64_t) { return s.end.counts[next++]; });
  add_lost_update_columns(row, out.lost);
  add_host_sync_columns(row, s.syncs);
  return out;
}

// A logged, applied step: its row, its log line, and the lost-update warning when update_lost
// has stayed high (with train.fail_on_precision_warning: the step saved, then the error).
void log_train_step(TrainRun& run, const StepRecord& s) {
  const Config& cfg = run.cfg;
  const LoggedRow logged = train_row(run, s);
  write_row(run, logged.row);
  char line[256];
  std::snprintf(line, sizeof(line),
                "step %lld/%lld | loss %.4f | grad_norm %.3f | lr %.2e | %.0f tok/s | "
                "%.1f ms/step",
                static_cast<long long>(s.done), static_cast<long long>(run.data->max_steps()),
                s.sc.loss, s.sc.grad_norm, s.lr, s.tps, s.dt * 1e3);
  end_progress_line(run);
  log::info(line + lost_update_text(logged.lost));
  const double frac = logged.lost.update_lost_frac;
  if (!run.lost_watch->observe(s.done, frac)) return;  // the same on every rank
  const std::string w = lost_update_warning(cfg.optimizer, run.params(), frac, s.done,
                                            cfg.train.update_lost_warn_frac,
                                            s.done - run.lost_watch->above_since() + 1);
  if (cfg.train.fail_on_precision_warning) {
    save_checkpoint(run, s.done);
    throw ConfigError("train.fail_on_precision_warning",
                      "stopped at step " + std::to_string(s.done) + " (checkpoint saved): " + w,
                      cfg.where("train.fail_on_precision_warning"));
  }
  log::warn(w);
}

// The consolidated export of the final weights (rank 0 reads the checkpoint just written).
void export_final(const TrainRun& run) {
  const Config& cfg = run.cfg;
  const std::string export_path = run_export_path(cfg);
  collectively(*run.comm, [&] {
    if (!run.rank0) return;
    const std::string file = resolve_checkpoint(checkpoint_root(cfg), "checkpoint.dir");
    ExportOptions o;
    o.dtype = cfg.checkpoint.export_dtype;
    o.format = cfg.checkpoint.export_format == ExportKind::safetensors ? ExportFormat::safetensors
                                                                       : ExportFormat::hdf5;
    o.check_source = export_source_check(o);      // the checks of every model reader
    o.extra_files = export_text_files(run.text);  // the tokenizer's files (safetensors)
    export_checkpoint(file, export_path, o);
    export_run_adapters(cfg, file);  // checkpoint.export_format: peft: <output_dir>/adapter
  });
  const std::string format =
      cfg.checkpoint.export_format == ExportKind::safetensors ? "safetensors" : "hdf5";
  log::info(
      "export: " + export_path + " (" + format + ", " + dtype_name(cfg.checkpoint.export_dtype) +
      (cfg.checkpoint.export_format == ExportKind::peft ? ", the adapters merged" : "") + ")");
}

// A stop signal on any rank since the steps ended (collective).
int late_signal(const TrainRun& run) {
  return static_cast<int>(run.comm->allreduce_max_host(StopSignals::received()));
}

// The run's last line (collective: the largest rank's peak RSS). `train_peak`: the peak RSS of
// the steps over the ranks; `device_max`: the device high-water over the ranks (-1: host build).
void done_line(TrainRun& run, double train_peak, double device_max) {
  const double peak = run.comm->allreduce_max_host(peak_rss_bytes());
  char measured[96];
  if (device_max >= 0) {
    std::snprintf(measured, sizeof(measured), "peak device %.1f MiB", device_max / (1 << 20));
  } else {
    std::snprintf(measured, sizeof(measured), "peak RSS of the steps %.1f MiB",
                  train_peak / (1 << 20));
  }
  // A run with nothing left to train has no final loss and no step memory to compare with the
  // prediction; a resumed one says where it started.
  if (run.ran == 0) {
    log::info("done: no steps to train, at step " + std::to_string(run.first_step));
    return;
  }
  char resumed[64] = "";
  if (run.first_step > 0) {
    std::snprintf(resumed, sizeof(resumed), " (steps %lld to %lld, resumed)",
                  static_cast<long long>(run.first_step + 1),
                  static_cast<long long>(run.data->max_steps()));
  }
  char line[384];
  std::snprintf(line, sizeof(line),
                "done: %lld steps%s in %.1f s, final loss %.4f, peak RSS %.1f MiB%s; measured %s "
                "vs predicted peak %.1f MiB",
                static_cast<long long>(run.ran), resumed, now_s() - run.t_start, run.last_loss,
                peak / (1 << 20), run.W > 1 ? " (largest rank)" : "", measured,
                static_cast<double>(run.predicted.total()) / (1 << 20));
  log::info(line);
}

}  // namespace

StepRecord train_step(TrainRun& run, int64_t step) {
  StepRecord s;
  s.t0 = now_s();
  s.c0 = run.comm->stats();
  s.m0 = run.model->moe_comm_stats();
  s.s0 = host_sync_counts();
  // The span of host_syncs, for tools (tests/tools/fence_counter.cpp).
  Kokkos::Profiling::pushRegion("kktrain_step");
  s.data = run.data->report(run.batches);
  s.sc = accumulate_gradients(run);
  s.done = step + 1;
  run.state.step = s.done;
  const bool finite = std::isfinite(s.sc.loss) && std::isfinite(s.sc.grad_norm);
  s.update = finite ? StepUpdate::applied : StepUpdate::skipped;
  s.lr = run.schedule->lr(step);
  const int64_t every = run.cfg.train.log_every;
  s.log_now = s.done % every == 0 || s.done == 1 || s.done == run.data->max_steps();
  apply_update(run, s);
  end_step(run, s);
  s.syncs = host_sync_counts().since(s.s0);
  Kokkos::Profiling::popRegion();
  s.dt = now_s() - s.t0;
  s.tps = static_cast<double>(run.tokens_per_step) / s.dt;
  return s;
}

void log_step(TrainRun& run, const StepRecord& s) {
  if (s.update == StepUpdate::skipped) {
    write_row(run, skipped_row(s));
  } else if (s.log_now) {
    log_train_step(run, s);
  }
  if (run.progress == ProgressBar::shown && s.update == StepUpdate::applied) {
    progress_line(s.done, run.data->max_steps(), s.sc.loss, s.tps);
  }
}

void maybe_validate(TrainRun& run, const StepRecord& s) {
  const Config& cfg = run.cfg;
  const bool due = cfg.train.val_every > 0 &&
                   (s.done % cfg.train.val_every == 0 || s.done == run.data->max_steps());
  if (s.update != StepUpdate::applied || run.validation != ValidationData::available || !due) {
    return;
  }
  const HostSyncCounts v0 = host_sync_counts();
  ValidationReport v;
  {
    SyncScope why(SyncCause::validation);
    v = run.data->validation_loss(*run.model, cfg, *run.comm);
  }
  const double vl = v.loss;
  JsonLine row;
  row.integer("step", s.done).num("val_loss", vl);
  for (const auto& [name, value] : v.columns) row.num(name, value);
  add_host_sync_columns(row, host_sync_counts().since(v0));
  write_row(run, row);
  end_progress_line(run);
  char line[128];
  std::snprintf(line, sizeof(line), "step %lld | val_loss %.4f", static_cast<long long>(s.done),
                vl);
  log::info(line);
}

void maybe_evaluate(TrainRun& run, const StepRecord& s) {
  const int64_t every = run.cfg.eval.every;
  if (!run.evaluation || s.update != StepUpdate::applied || every <= 0 ||
      (s.done % every != 0 && s.done != run.data->max_steps())) {
    return;
  }
  const HostSyncCounts v0 = host_sync_counts();
  EvalFigures f;
  {
    SyncScope why(SyncCause::validation);
    f = run.evaluation->run(*run.model, *run.comm, false);
  }
  JsonLine row;
  row.integer("step", s.done);
  add_eval_columns(row, f);
  add_host_sync_columns(row, host_sync_counts().since(v0));
  write_row(run, row);
  end_progress_line(run);
  for (const std::string& line : eval_lines(f)) {
    log::info("step " + std::to_string(s.done) + " | " + line);
  }
  char cost[128];
  std::snprintf(cost, sizeof(cost), "step %lld | eval: %lld rows in %.2f s",
                static_cast<long long>(s.done), static_cast<long long>(f.rows), f.seconds);
  log::info(cost);
}

LoopControl maybe_checkpoint(TrainRun& run, const StepRecord& s) {
  // The periodic checkpoint, and a stop request (a signal on any rank), which saves and ends
  // the loop.
  const bool stop = s.end.signal != 0;
  const int64_t every = run.cfg.checkpoint.save_every;
  const bool periodic = every > 0 && s.done % every == 0;
  if (periodic || stop) {
    SyncScope why(SyncCause::io);
    save_checkpoint(run, s.done);
  }
  if (!stop) return LoopControl::go_on;
  run.stop_signal = s.end.signal;
  return LoopControl::stop;
}

int finish_run(TrainRun& run) {
  Communicator& comm = *run.comm;
  // A failed write of the last rows ends the run on every rank, naming the file.
  agree_on_errors(comm, run.metrics_error);
  StopSignals::set_finishing();
  end_progress_line(run);
  const double train_peak = comm.allreduce_max_host(peak_rss_bytes());
  const double device_max = device_memory_tracked()
                                ? comm.allreduce_max_host(static_cast<double>(run.device_peak))
                                : -1.0;
  if (run.stop_signal != 0) {
    log::info("stopped by signal " + std::to_string(run.stop_signal) + " after step " +
              std::to_string(run.state.step) +
              "; resume with the same command (checkpoint.resume: " + "auto)");
    return 128 + run.stop_signal;
  }
  if (run.saved_step != run.state.step) save_checkpoint(run, run.state.step);
  // A stop request after the last step (a scheduler's SIGTERM while the run finishes): the final
  // checkpoint is saved; the export, which a rerun writes, is skipped.
  if (const int sig = late_signal(run)) {
    log::info("stopped by signal " + std::to_string(sig) + " after the last step (" +
              std::to_string(run.state.step) +
              "): the final checkpoint is saved, the export is not "
              "written (run the same command again to write it)");
    return 128 + sig;
  }
  export_final(run);
  if (const int sig = late_signal(run)) {
    log::info("stopped by signal " + std::to_string(sig) + " after the last step (" +
              std::to_string(run.state.step) +
              "): the final checkpoint and the export are written");
    return 128 + sig;
  }
  done_line(run, train_peak, device_max);
  return 0;
}

}  // namespace kktrain
