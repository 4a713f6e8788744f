// The steps of `kktrain train` (apps/cli/cmd_train.cpp), named, over one run state:
//
//   setup_run -> for each step { train_step; log_step; maybe_validate; maybe_checkpoint }
//             -> finish_run
//
// TrainRun is what the steps share (the config, the communicator, the model, the optimizer, the
// data, the run's files, its metrics and counters); StepRecord is what one step hands from one
// named step to the next. The steps run in this order on every rank, so every rank makes the
// same collective calls in the same order (apps/train/step_sync.hpp: a step's two host waits).
// apps/train/train_setup.cpp holds the setup, apps/train/train_loop.cpp the steps and the finish.
#pragma once

#include <cmath>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "apps/eval/evaluation.hpp"
#include "apps/train/checkpointing.hpp"
#include "apps/train/data_source.hpp"
#include "apps/train/signals.hpp"
#include "apps/train/step_sync.hpp"
#include "core/config.hpp"
#include "core/device_sums.hpp"
#include "core/host_sync.hpp"
#include "io/data.hpp"
#include "io/metrics.hpp"
#include "model/transformer.hpp"
#include "optim/audit.hpp"
#include "optim/lost_updates.hpp"
#include "optim/optimizer.hpp"
#include "optim/schedule.hpp"
#include "parallel/communicator.hpp"

namespace kktrain {

// Whether rank 0 redraws a progress bar on stderr (train.progress; auto: stderr is a terminal).
enum class ProgressBar { hidden, shown };

// Whether train.val_every can run: the validation split has windows of data.seq_len tokens.
enum class ValidationData { available, missing };

// What a step did with its update: applied, or skipped (a non-finite loss or gradient norm).
enum class StepUpdate { applied, skipped };

// The launch's thread plan for the start line, and its warning when the thread settings
// oversubscribe the CPUs or were clamped to a rank's share (parallel/threads.hpp); empty: none.
struct ThreadReport {
  std::string plan, warning;
};

// Whether the loop goes on after a step, or stops (a stop signal, after its checkpoint).
enum class LoopControl { go_on, stop };

// The run's shared state. Members are set by setup_run in declaration order and destroyed in the
// reverse order (as the locals of the one function they were).
struct TrainRun {
  std::unique_ptr<Communicator> comm;
  Config cfg;  // agreed over the ranks
  ModelText
      text;   // the model's tokenizer and vocabulary, found once (apps/dataprep/text_model.hpp)
  int W = 1;  // ranks
  bool rank0 = true;
  std::optional<std::string> source;  // the checkpoint resumed from
  PeakBreakdown predicted;            // the planned peak of this rank
  std::unique_ptr<Transformer> model;
  std::unique_ptr<Optimizer> opt;
  std::unique_ptr<TrainingData>
      data;  // windows of token files, or examples (apps/train/data_source.hpp)
  std::optional<LrSchedule> schedule;
  TrainProgress state;  // steps done, updates applied, non-finite steps in a row
  std::string metrics_path;
  std::unique_ptr<MetricsWriter> metrics;  // rank 0 only
  int64_t B = 0, T = 0, micro_steps = 0, tokens_per_step = 0;
  ProgressBar progress = ProgressBar::hidden;
  ValidationData validation = ValidationData::missing;
  std::exception_ptr metrics_error;  // a failed metrics write, agreed on at the step's end
  std::optional<StopSignals> signals;
  int64_t saved_step = -1;  // the step of the last checkpoint under this run's root
  int stop_signal = 0;      // the signal that stopped the loop (0: none)
  double last_loss = NAN;   // the loss of the last applied update
  int64_t first_step = 0;   // the step the run starts from
  int64_t ran = 0;          // the steps this process runs (0: nothing to train)
  int64_t device_peak = 0;  // device high-water at step ends (-1: host builds)
  std::optional<LostUpdateWatch> lost_watch;
  std::optional<DeviceSums> step_sums;   // the step's losses and gradient square sum, on device
  std::vector<Batch> batches;            // this step's micro-batches (drawn the step before)
  double t_start = 0.0;                  // when the first step started
  std::optional<Evaluation> evaluation;  // eval.every's files, read and tokenized once

  ParamRegistry& params() { return model->params(); }
};

// One step, as its named parts see it.
struct StepRecord {
  int64_t done = 0;     // the steps done after this one (its index + 1)
  double t0 = 0.0;      // when it started
  CommStats c0, m0;     // the communicator's and the experts' collective totals at its start
  HostSyncCounts s0;    // the host waits at its start
  StepScalars sc;       // loss, MTP loss, gradient norm, load-balancing loss (over ranks)
  StepDataReport data;  // what its metrics row reports of its data
  StepUpdate update = StepUpdate::applied;
  double lr = 0.0;
  bool log_now = false;        // a logged step (train.log_every, the first and the last)
  StepEnd end;                 // what the ranks agreed at its end
  HostSyncCounts syncs;        // its host waits
  double dt = 0.0, tps = 0.0;  // seconds, tokens per second
};

// The run before its first step: the config agreed, the inputs checked, the memory planned, the
// model built (or resumed), the data opened, metrics.jsonl started, the start announced, the
// checkpoint root claimed, and the first step's windows drawn. Collective; throws what the
// checks throw (on every rank).
// `comm`: the run's communicator; `cfg`: the configuration agreed over its ranks; `threads`: what
// the launch says of its threads, printed with the start line.
void setup_run(TrainRun& run, std::unique_ptr<Communicator> comm, Config cfg,
               const ThreadReport& threads);

// The windows of step `step`: this rank's micro-batches.
std::vector<Batch> draw_batches(const TrainRun& run, int64_t step);

// Saves the checkpoint of step `done` (collective) and logs it.
void save_checkpoint(TrainRun& run, int64_t done);

// Step `step` (0-based): gradients over the micro-batches, the step's scalars (one wait), the
// update or its skip, and the step's end (one wait). Throws on every rank when
// train.max_nonfinite_steps non-finite steps in a row end the run, or a rank failed.
StepRecord train_step(TrainRun& run, int64_t step);

// The step's metrics row and log line (logged steps), the lost-update warning (its error saves
// the step first), and the progress bar.
void log_step(TrainRun& run, const StepRecord& s);

// The validation loss on train.val_every steps and the last (collective), its row and line.
void maybe_validate(TrainRun& run, const StepRecord& s);
// eval.every's evaluation (apps/eval/evaluation.hpp) on those steps and the last (collective):
// its row of eval/<name>/<figure> columns and a line per file.
void maybe_evaluate(TrainRun& run, const StepRecord& s);

// The periodic checkpoint, and one on a stop signal: then LoopControl::stop.
LoopControl maybe_checkpoint(TrainRun& run, const StepRecord& s);

// After the loop: the final checkpoint, the export and the summary line; the exit status
// (128 + the signal that stopped the run, else 0). Collective.
int finish_run(TrainRun& run);

}  // namespace kktrain
