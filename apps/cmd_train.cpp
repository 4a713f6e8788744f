// `kktrain train CONFIG [key=value ...]`: the training loop, on one rank or sharded over the
// ranks of an mpirun launch.
//
//   per step: micro-batches -> forward -> backward (gradients accumulate; on several ranks
//             reduce-scattered into the shards) -> the step's scalars (loss, MTP loss, gradient
//             sum of squares, kept on the device) read back and all-reduced in one wait -> clip
//             factor -> one fused optimizer update of this rank's shard -> the step's end agreed
//             in one wait (signals, errors, the next step's windows, logged values) -> schedule
//             (apps/step_sync.hpp: the step's only two host synchronizations)
// The global batch is split deterministically: rank r of W takes windows [r G/W, (r+1) G/W) of
// the step's G windows, in micro-batches of data.micro_batch_size, so every rank count and every
// micro-batch size trains on the same samples. Losses are averaged over ranks; rank 0 logs and
// writes files. Periodic validation, a log line every train.log_every steps (and a progress line
// when stderr is a terminal), and metrics.jsonl in train.output_dir. A step whose loss or
// gradient norm is not finite (on any rank: both are reduced over ranks) is skipped with a
// warning on every rank; train.max_nonfinite_steps in a row stop the run.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "apps/app_model.hpp"
#include "apps/checkpointing.hpp"
#include "apps/commands.hpp"
#include "apps/lost_update_log.hpp"
#include "apps/memory_plan.hpp"
#include "apps/model_source.hpp"
#include "apps/run_files.hpp"
#include "apps/signals.hpp"
#include "apps/step_sync.hpp"
#include "core/errors.hpp"
#include "core/host_sync.hpp"
#include "core/log.hpp"
#include "core/strings.hpp"
#include "io/checkpoint.hpp"
#include "io/data.hpp"
#include "io/metrics.hpp"
#include "io/model_export.hpp"
#include "optim/audit.hpp"
#include "optim/grad_norm.hpp"
#include "optim/lost_updates.hpp"
#include "optim/optimizer.hpp"
#include "optim/schedule.hpp"
#include "parallel/agree.hpp"

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

// The validation loss: the mean token loss over validation windows [0, val_batches x B), the
// windows of val_batches micro-batches of B. Ranks take micro-batches round-robin (padded with
// ignored rows, so every rank runs the same number of forwards) and sum losses and tokens.
double validation_loss(Transformer& model, const TokenDataset& data, const Config& cfg,
                       Communicator& comm) {
  ForwardOptions fo;
  fo.compute_mtp = false;
  const int64_t B = cfg.data.micro_batch_size, W = comm.size();
  const int64_t windows = cfg.train.val_batches * B;
  const int64_t calls = (windows + W * B - 1) / (W * B);
  double sum = 0.0, tokens = 0.0;
  // Every rank draws its windows first (a bad token id on one rank ends every rank).
  const std::vector<Batch> batches = collectively(comm, [&] {
    std::vector<Batch> v;
    for (int64_t j = 0; j < calls; ++j) {
      const int64_t first = (j * W + comm.rank()) * B;
      const int64_t count = std::max<int64_t>(0, std::min<int64_t>(B, windows - first));
      v.push_back(data.val_windows(count > 0 ? first : 0, count, B, cfg.data.seq_len));
    }
    return v;
  });
  for (const Batch& b : batches) {
    const ForwardResult r = model.forward(b.ids.data(), b.targets.data(), b.B, b.T, fo);
    sum += r.loss * static_cast<double>(r.tokens);
    tokens += static_cast<double>(r.tokens);
  }
  return comm.allreduce_sum_host(sum) / comm.allreduce_sum_host(tokens);
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
  const int64_t avail = available_memory_bytes(&source, comm.ranks_on_node());
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

void progress_line(int64_t step, int64_t total, double loss, double tps) {
  const int width = 30;
  const int filled = total > 0 ? static_cast<int>(width * step / total) : width;
  std::fprintf(stderr, "\r[%s%s] %lld/%lld loss %.4f %.0f tok/s  ",
               std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(),
               static_cast<long long>(step), static_cast<long long>(total), loss, tps);
  std::fflush(stderr);
}

int run_train(const ParsedArgs& args, AppContext& ctx) {
  auto comm = ctx.mpi->make_communicator();
  const Config cfg = load_agreed_config(args, ctx, *comm);
  set_failed_rank_wait(cfg.distributed.failed_rank_wait_s);
  const int W = comm->size();
  const bool rank0 = comm->rank() == 0;

  // The checkpoint to resume from (checkpoint.resume), if any: it provides every value, so the
  // model is not initialized first.
  const auto source = collectively(*comm, [&] { return resume_source(cfg); });
  // No input is an output, and what the run's end needs is there (checked before any work).
  collectively(*comm, [&] { check_run_files(cfg, source); });
  collectively(*comm, [&] { check_run_end(cfg, comm->rank()); });
  const PeakBreakdown predicted = collectively(*comm, [&] { return check_memory(cfg, *comm); });
  auto model = build_model(cfg, *comm, /*initialize=*/!source);
  ParamRegistry& params = model->params();
  const auto [risky, warnings] = precision_warnings(cfg, params);
  for (const auto& w : warnings) log::warn(w);
  if (risky && cfg.train.fail_on_precision_warning) {
    throw ConfigError(
        "train.fail_on_precision_warning",
        "refusing to train " + cfg.source + " with bfloat16 Adam moments (see the warning above)",
        cfg.where("train.fail_on_precision_warning"));
  }
  // Optimizer state is created after the model, its init and its freezing, for this rank's shard.
  auto opt = make_optimizer(cfg.optimizer, params, cfg.model.seed);
  // Every rank opens the data itself; if one cannot, all stop with that rank's message.
  const TokenDataset data = collectively(*comm, [&] {
    return TokenDataset::load(cfg.data, cfg.model.vocab_size, token_load_options());
  });
  const LrSchedule schedule(cfg.lr_scheduler, cfg.optimizer.lr, cfg.train.max_steps);
  // Resume (checkpoint.resume): parameters and optimizer state into this rank's shards.
  TrainProgress state;
  if (source) {
    const double t0 = now_s();
    try {
      state = load_training_checkpoint(*source, cfg, *model, *opt, *comm);
    } catch (const CollectiveError& e) {
      if (cfg.checkpoint.resume != "auto" || !e.printed_here()) throw;
      throw CollectiveError(std::string(e.what()) + " (found by checkpoint.resume: auto in " +
                                checkpoint_root(cfg) + "; checkpoint.resume=none starts afresh)",
                            e.exit_code());
    }
    log::info("resumed from " + *source + " at step " + std::to_string(state.step) + " (" +
              seconds_text(now_s() - t0) + ")");
    // Settings changed since the save take effect from here on (a longer max_steps stretches
    // the schedule); say which, so a resumed run is never silently a different run.
    const auto changed = state.saved_config.empty()
                             ? std::vector<std::string>{}
                             : config_differences(state.saved_config, to_yaml(cfg),
                                                  {"checkpoint.resume", "resolved_precision"});
    if (!changed.empty()) {
      std::string list;
      for (const auto& c : changed) list += (list.empty() ? "" : "; ") + c;
      log::info("resumed with " + std::to_string(changed.size()) + " setting" +
                (changed.size() == 1 ? "" : "s") + " changed since the checkpoint: " + list);
    }
  }
  const std::string metrics_path =
      (std::filesystem::path(cfg.train.output_dir) / "metrics.jsonl").string();
  std::unique_ptr<MetricsWriter> metrics;
  collectively(*comm, [&] {
    if (rank0) {
      metrics = std::make_unique<MetricsWriter>(metrics_path, source ? state.step : -1);
    }
  });
  if (metrics && !metrics->previous().empty()) {
    log::info("an earlier " + metrics_path + " was kept as " + metrics->previous());
  }

  const int64_t B = cfg.data.micro_batch_size, T = cfg.data.seq_len;
  const int64_t micro_steps = cfg.data.global_batch_size / (B * W);
  const int64_t tokens_per_step = cfg.data.global_batch_size * T;
  const bool progress = rank0 && (cfg.train.progress == "on" ||
                                  (cfg.train.progress == "auto" && isatty(STDERR_FILENO)));
  bool val_ok = data.has_validation_windows(T);
  if (cfg.train.val_every > 0 && !val_ok) {
    log::warn("data: no validation split long enough for seq_len " + std::to_string(T) +
              "; validation is skipped (raise data.val_fraction)");
  }
  int64_t trainable = 0;
  for (const auto& p : params.all()) trainable += p.trainable ? p.numel : 0;
  if (trainable == 0) log::warn("no trainable parameters (freeze_config froze everything)");
  std::string ranks;
  if (W > 1) {
    ranks = "; " + std::to_string(W) + " ranks (fsdp2, " +
            (cfg.distributed.reshard_after_forward ? "reshard" : "no reshard") +
            " after forward, reduce " + dtype_name(cfg.precision.reduce) + ", " + comm->name() +
            " collectives on " + comm->buffer_path() + " buffers)";
  }
  if (!ctx.threads_warning.empty()) log::warn_about_launch(ctx.threads_warning);
  if (!ctx.threads.empty()) log::info(ctx.threads);
  log::info("training " + std::to_string(params.total_numel()) + " parameters (" +
            std::to_string(trainable) + " trainable) with " + opt->name() + " on " + data.source() +
            "; storage " + storage_text(params, cfg.precision.storage) + ", compute " +
            dtype_name(cfg.precision.compute) + "; " + std::to_string(cfg.train.max_steps) +
            " steps of " + std::to_string(tokens_per_step) + " tokens" + ranks + "; metrics -> " +
            metrics_path);
  // Rows go to metrics.jsonl on rank 0; a failed write (a full disk) is agreed on at the end of
  // the step, and ends the run on every rank naming the file.
  std::exception_ptr metrics_error;
  auto write_row = [&](const JsonLine& row) {
    if (!metrics || metrics_error) return;
    try {
      metrics->write(row);
    } catch (...) {
      metrics_error = std::current_exception();
    }
  };

  StopSignals signals(rank0);
  // The resumed step is already saved only when it was resumed from this run's own checkpoint
  // root; resumed from elsewhere, the run saves it under checkpoint.dir (at the end at the
  // latest, even without training), which the export then reads.
  int64_t saved_step = -1;
  if (source) {
    std::error_code ec;
    const auto own =
        std::filesystem::path(checkpoint_root(cfg)) / step_dir_name(state.step) / kCheckpointFile;
    if (comm->all_agree(std::filesystem::equivalent(*source, own, ec))) saved_step = state.step;
  }
  // The checkpoint root becomes this run's: checkpoints it did not continue from (all of them on
  // a fresh start; those after the resumed step) are moved to earlier_N/, never replaced or
  // pruned by its saves.
  collectively(*comm, [&] {
    if (!rank0) return;
    const std::string moved = set_aside_checkpoints(checkpoint_root(cfg), saved_step);
    if (!moved.empty()) {
      log::info("checkpoint: " + moved + " (this run " +
                (saved_step < 0 ? std::string("starts afresh")
                                : "continues from step " + std::to_string(saved_step)) +
                " and never writes over or prunes them)");
    }
  });
  auto save = [&](int64_t done) {
    const double t0 = now_s();
    const std::string dir =
        save_training_checkpoint(cfg, *model, *opt, state, schedule.lr(done), *comm);
    saved_step = done;
    log::info("checkpoint: step " + std::to_string(done) + " -> " + dir + " (" +
              std::to_string(checkpoint_bytes(params, *opt)) + " bytes on this rank in " +
              seconds_text(now_s() - t0) + ")");
  };
  int stop_signal = 0;
  double last_loss = NAN;
  // Steps this process runs (a resumed run starts at state.step; one at max_steps runs none).
  const int64_t first_step = state.step;
  const int64_t ran = std::max<int64_t>(0, cfg.train.max_steps - first_step);
  if (ran == 0) {
    // From here a stop request is one after the last step (announced as such): no step runs.
    // (Set before the line: a scheduler, or a test, that signals on seeing it gets that answer.)
    StopSignals::set_finishing();
    log::info("nothing to train: the checkpoint is at step " + std::to_string(first_step) +
              " and train.max_steps is " + std::to_string(cfg.train.max_steps) +
              " (raise train.max_steps to train further); writing the export again");
  }
  // Device high-water (GPU builds): used bytes sampled at step ends; -1 on host builds.
  int64_t device_peak = device_used_bytes();
  // Updates lost to bf16 rounding: counted in the update launches of logged steps.
  LostUpdateWatch lost_watch(cfg.train.update_lost_warn_frac, cfg.train.update_lost_warn_steps,
                             first_step);
  // The step's losses and gradient sum of squares stay on the device until its one readback.
  DeviceSums step_sums(StepSlots::kCount);
  // Each step's windows are drawn before the previous step's end agreement (where a window that
  // cannot be drawn ends every rank with that rank's message); the first step's here.
  auto draw_batches = [&](int64_t step) {
    std::vector<Batch> v;
    for (int64_t m = 0; m < micro_steps; ++m) {
      v.push_back(data.train_batch(step, comm->rank() * (micro_steps * B) + m * B, B, T));
    }
    return v;
  };
  std::vector<Batch> batches;
  if (ran > 0) batches = collectively(*comm, [&] { return draw_batches(state.step); });
  const double t_start = now_s();
  for (int64_t step = state.step; step < cfg.train.max_steps; ++step) {
    const double t0 = now_s();
    const CommStats c0 = comm->stats(), m0 = model->moe_comm_stats();
    const HostSyncCounts s0 = host_sync_counts();
    // The span of host_syncs, for tools (tests/tools/fence_counter.cpp).
    Kokkos::Profiling::pushRegion("kktrain_step");
    model->zero_grads();
    step_sums.zero();
    double aux_sum = 0.0;  // the MoE load-balancing loss (host values: routing counts)
    for (int64_t m = 0; m < micro_steps; ++m) {
      const Batch& b = batches[m];
      ForwardOptions fo;
      fo.prepare_backward = true;
      fo.compute_mtp = cfg.model.compute_mtp;
      fo.grad_scale = 1.0f / static_cast<float>(micro_steps);  // mean over micro-batches
      fo.sync_grads = m + 1 == micro_steps;  // several ranks: reduce-scatter once per step
      fo.loss_sums = &step_sums;             // read back once, with the gradient norm
      const ForwardResult r = model->forward(b.ids.data(), b.targets.data(), B, T, fo);
      model->backward();
      aux_sum += r.aux_loss;
    }
    grad_sum_squares(params, step_sums, StepSlots::kGradSquares);
    const StepScalars sc = reduce_step_scalars(step_sums, micro_steps, aux_sum, *comm);
    const double loss = sc.loss, mtp_loss = sc.mtp_loss, grad_norm = sc.grad_norm;
    const double aux_loss = sc.aux_loss;
    const int64_t done = step + 1;
    state.step = done;
    const bool finite = std::isfinite(loss) && std::isfinite(grad_norm);
    const double lr = schedule.lr(step);
    const bool log_now =
        done % cfg.train.log_every == 0 || done == 1 || done == cfg.train.max_steps;
    if (!finite) {
      int64_t& nonfinite = state.nonfinite;
      ++nonfinite;
      log::warn("step " + std::to_string(done) + ": non-finite " +
                (std::isfinite(loss) ? "gradient norm" : "loss") + "; update skipped (" +
                std::to_string(nonfinite) + " in a row)");
      if (nonfinite >= cfg.train.max_nonfinite_steps) {
        write_row(JsonLine()
                      .integer("step", done)
                      .num("loss", loss)
                      .num("grad_norm", grad_norm)
                      .boolean("skipped", true));
        // Every rank sees the same reduced loss and norm, so all stop here together.
        throw CollectiveError(rank0 ? "stopping at step " + std::to_string(done) + ": " +
                                          std::to_string(nonfinite) +
                                          " non-finite steps in a row (train.max_nonfinite_steps)"
                                    : std::string(),
                              1);
      }
    } else {
      state.nonfinite = 0;
      opt->set_count_rounding(log_now);
      opt->step(lr, clip_factor(grad_norm, cfg.train.grad_clip));
      state.optimizer_steps = opt->steps();
      last_loss = loss;
    }
    device_peak = std::max(device_peak, device_used_bytes());
    // The step's end (apps/step_sync.hpp): the next step's windows, stop signals, errors, and
    // on logged steps the metrics' reductions, in one agreement.
    StepEndInputs in;
    try {
      if (done < cfg.train.max_steps) batches = draw_batches(done);
    } catch (...) {
      in.error = std::current_exception();
    }
    if (!in.error) in.error = metrics_error;  // a failed metrics write (the previous row's)
    in.signal = StopSignals::received();
    StepEnd end;
    {
      // The lost-update counts' readback is part of the step end's one wait.
      SyncScope why(SyncCause::step_end, /*one_wait=*/true);
      if (finite && log_now) {
        in.logged = true;
        in.peak_rss_bytes = peak_rss_bytes();
        in.peak_device_bytes = static_cast<double>(device_peak);
        in.counts = rounding_count_values(opt->rounding_counts());
      }
      end = agree_step_end(in, *comm);
    }
    if (end.failed) agree_on_errors(*comm, in.error);  // throws on every rank
    const HostSyncCounts syncs = host_sync_counts().since(s0);
    Kokkos::Profiling::popRegion();
    const double dt = now_s() - t0;
    const double tps = static_cast<double>(tokens_per_step) / dt;
    if (!finite) {
      write_row(JsonLine()
                    .integer("step", done)
                    .num("loss", loss)
                    .num("grad_norm", grad_norm)
                    .boolean("skipped", true));
    } else if (log_now) {
      JsonLine row;
      row.integer("step", done).num("loss", loss).num("grad_norm", grad_norm).num("lr", lr);
      if (model->mtp_depth() > 0 && cfg.model.compute_mtp) row.num("mtp_loss", mtp_loss);
      // The load-balancing loss (its weighted gradient is in grad_norm; `loss` stays the LM's).
      if (cfg.model.moe.enabled()) row.num("aux_loss", aux_loss);
      row.num("tokens_per_s", tps).num("ms_per_step", dt * 1e3);
      if (W > 1) {  // this rank's collectives, the expert-parallel ones included
        const CommStats& c1 = comm->stats();
        const CommStats m1 = model->moe_comm_stats();
        row.num("comm_bytes", c1.bytes_sent - c0.bytes_sent + m1.bytes_sent - m0.bytes_sent)
            .num("comm_ms", (c1.seconds - c0.seconds + m1.seconds - m0.seconds) * 1e3);
        if (cfg.model.moe.enabled()) {
          row.num("alltoall_bytes", m1.alltoall_bytes_sent - m0.alltoall_bytes_sent);
        }
      }
      row.num("peak_rss_bytes", end.peak_rss_bytes);
      if (device_memory_tracked()) {  // the same on every rank: a build property
        row.num("peak_device_bytes", end.peak_device_bytes);
      } else {
        row.null("peak_device_bytes");  // host builds: no device memory apart from RSS
      }
      std::size_t next = 0;
      const LostUpdates lost =
          lost_updates(opt->rounding_counts(), [&](uint64_t) { return end.counts[next++]; });
      add_lost_update_columns(row, lost);
      add_host_sync_columns(row, syncs);
      write_row(row);
      char line[256];
      std::snprintf(line, sizeof(line),
                    "step %lld/%lld | loss %.4f | grad_norm %.3f | lr %.2e | %.0f tok/s | "
                    "%.1f ms/step",
                    static_cast<long long>(done), static_cast<long long>(cfg.train.max_steps), loss,
                    grad_norm, lr, tps, dt * 1e3);
      if (progress) std::fputc('\n', stderr);
      log::info(line + lost_update_text(lost));
      if (lost_watch.observe(done, lost.update_lost_frac)) {  // the same on every rank
        const std::string w = lost_update_warning(cfg.optimizer, params, lost.update_lost_frac,
                                                  done, cfg.train.update_lost_warn_frac,
                                                  done - lost_watch.above_since() + 1);
        if (cfg.train.fail_on_precision_warning) {
          save(done);
          throw ConfigError("train.fail_on_precision_warning",
                            "stopped at step " + std::to_string(done) + " (checkpoint saved): " + w,
                            cfg.where("train.fail_on_precision_warning"));
        }
        log::warn(w);
      }
    }
    if (progress && finite) progress_line(done, cfg.train.max_steps, loss, tps);
    const bool val_now = finite && val_ok && cfg.train.val_every > 0 &&
                         (done % cfg.train.val_every == 0 || done == cfg.train.max_steps);
    if (val_now) {
      const HostSyncCounts v0 = host_sync_counts();
      double vl = 0.0;
      {
        SyncScope why(SyncCause::validation);
        vl = validation_loss(*model, data, cfg, *comm);
      }
      JsonLine row;
      row.integer("step", done).num("val_loss", vl);
      add_host_sync_columns(row, host_sync_counts().since(v0));
      write_row(row);
      if (progress) std::fputc('\n', stderr);
      char line[128];
      std::snprintf(line, sizeof(line), "step %lld | val_loss %.4f", static_cast<long long>(done),
                    vl);
      log::info(line);
    }
    // The periodic checkpoint, and a stop request (a signal on any rank), which saves and ends
    // the loop.
    const bool stop = end.signal != 0;
    const bool periodic = cfg.checkpoint.save_every > 0 && done % cfg.checkpoint.save_every == 0;
    if (periodic || stop) {
      SyncScope why(SyncCause::io);
      save(done);
    }
    if (stop) {
      stop_signal = end.signal;
      break;
    }
  }
  // A failed write of the last rows ends the run on every rank, naming the file.
  agree_on_errors(*comm, metrics_error);
  StopSignals::set_finishing();
  if (progress) std::fputc('\n', stderr);
  const double train_peak = comm->allreduce_max_host(peak_rss_bytes());
  const double device_max =
      device_memory_tracked() ? comm->allreduce_max_host(static_cast<double>(device_peak)) : -1.0;
  if (stop_signal != 0) {
    log::info("stopped by signal " + std::to_string(stop_signal) + " after step " +
              std::to_string(state.step) +
              "; resume with the same command (checkpoint.resume: " + "auto)");
    return 128 + stop_signal;
  }
  if (saved_step != state.step) save(state.step);
  // A stop request after the last step (a scheduler's SIGTERM while the run finishes): the final
  // checkpoint is saved; the export, which a rerun writes, is skipped.
  auto late_signal = [&] {
    return static_cast<int>(comm->allreduce_max_host(StopSignals::received()));
  };
  if (const int sig = late_signal()) {
    log::info("stopped by signal " + std::to_string(sig) + " after the last step (" +
              std::to_string(state.step) +
              "): the final checkpoint is saved, the export is not "
              "written (run the same command again to write it)");
    return 128 + sig;
  }
  // The consolidated export of the final weights (rank 0 reads the checkpoint just written).
  const std::string export_path = run_export_path(cfg);
  collectively(*comm, [&] {
    if (!rank0) return;
    const std::string file = resolve_checkpoint(checkpoint_root(cfg), "checkpoint.dir");
    ExportOptions o;
    o.dtype = cfg.checkpoint.export_dtype;
    o.format = cfg.checkpoint.export_format == "safetensors" ? ExportFormat::safetensors
                                                             : ExportFormat::hdf5;
    o.check_source = export_source_check(o);  // the checks of every model reader
    export_checkpoint(file, export_path, o);
  });
  log::info("export: " + export_path + " (" + cfg.checkpoint.export_format + ", " +
            dtype_name(cfg.checkpoint.export_dtype) + ")");
  if (const int sig = late_signal()) {
    log::info("stopped by signal " + std::to_string(sig) + " after the last step (" +
              std::to_string(state.step) + "): the final checkpoint and the export are written");
    return 128 + sig;
  }
  const double peak = comm->allreduce_max_host(peak_rss_bytes());
  char measured[96];
  if (device_max >= 0) {
    std::snprintf(measured, sizeof(measured), "peak device %.1f MiB", device_max / (1 << 20));
  } else {
    std::snprintf(measured, sizeof(measured), "peak RSS of the steps %.1f MiB",
                  train_peak / (1 << 20));
  }
  // A run with nothing left to train has no final loss and no step memory to compare with the
  // prediction; a resumed one says where it started.
  if (ran == 0) {
    log::info("done: no steps to train, at step " + std::to_string(first_step));
    return 0;
  }
  char resumed[64] = "";
  if (first_step > 0) {
    std::snprintf(resumed, sizeof(resumed), " (steps %lld to %lld, resumed)",
                  static_cast<long long>(first_step + 1),
                  static_cast<long long>(cfg.train.max_steps));
  }
  char line[384];
  std::snprintf(line, sizeof(line),
                "done: %lld steps%s in %.1f s, final loss %.4f, peak RSS %.1f MiB%s; measured %s "
                "vs predicted peak %.1f MiB",
                static_cast<long long>(ran), resumed, now_s() - t_start, last_loss,
                peak / (1 << 20), W > 1 ? " (largest rank)" : "", measured,
                static_cast<double>(predicted.total()) / (1 << 20));
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
      "ms_per_step, peak_rss_bytes, peak_device_bytes, host_syncs: the step's waits for the\n"
      "device or the ranks, 2 at most; validation rows carry val_loss). Before\n"
      "allocating, the predicted peak (kktrain audit) is compared with the available memory\n"
      "(KKTRAIN_MEMORY_AVAILABLE_BYTES overrides it); a run that cannot fit exits 2.\n"
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
