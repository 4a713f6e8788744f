// What `kktrain train` trains on, behind one interface the loop sees (apps/train/train_loop.hpp):
// the micro-batches of a step, the validation loss, how a micro-batch's loss is weighed and what a
// step's metrics row reports of its data. Two sources implement it:
//
//   token windows  data.path's token files (or the shards made from its text,
//   apps/dataprep/text_data.hpp):
//                  windows of data.seq_len tokens, each micro-batch's loss its own token mean;
//   examples       data.format chat or prompt_completion (the cache of
//   apps/dataprep/example_cache.hpp):
//                  rows of one or several packed examples, the step's loss the mean over its
//                  global batch's loss tokens, which each row reports.
//
//   preference pairs  data.format preference (apps/train/preference_data.hpp): rows of pairs,
//                  the step's loss the mean over its global batch's pairs of their objective.
//
// A new kind of data is another implementation and a case of open_training_data; the loop does
// not change. Every rank opens the same source and draws its
// own rows of each global batch.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "apps/dataprep/text_model.hpp"
#include "apps/train/step_sync.hpp"
#include "core/config.hpp"
#include "io/data.hpp"
#include "io/metrics.hpp"
#include "model/model_types.hpp"

namespace kktrain {

class Communicator;
class Transformer;

// What a step's metrics row reports of its data (measured on the step's micro-batches).
struct StepDataReport {
  int64_t loss_tokens = -1;  // examples: the loss tokens of the global batch (-1: not reported)
  int64_t pairs = -1;        // preference pairs of the global batch (-1: not reported)

  // The columns of the report into `row` (none for a report of nothing).
  void add_columns(JsonLine& row) const;
};

// A validation pass: its loss, and the further columns of its metrics row (name, value).
struct ValidationReport {
  double loss = 0.0;
  std::vector<std::pair<std::string, double>> columns;
};

// Whether the model holds the run's starting weights when the data is prepared (a resumed run's
// model waits for its checkpoint's values).
enum class ModelWeights { starting, not_loaded };

class TrainingData {
 public:
  virtual ~TrainingData() = default;

  // The data as the start line names it.
  virtual std::string source() const = 0;

  // The steps the run trains: train.max_steps, or what a source with epochs settles from
  // train.epochs (then capped by a train.max_steps the config gives).
  virtual int64_t max_steps() const = 0;

  // Rows [first, first + B) of step `step`'s global batch, rows of T tokens. Throws what the
  // reader throws (a token id out of range, an unreadable file).
  virtual Batch batch(int64_t step, int64_t first, int64_t B, int64_t T) const = 0;

  // Whether there is validation data for rows of T tokens (train.val_every can run).
  virtual bool has_validation(int64_t T) const = 0;

  // The validation loss over train.val_batches micro-batches of data.micro_batch_size rows, the
  // ranks taking micro-batches in turn (collective: the same value on every rank).
  virtual ValidationReport validation_loss(Transformer& model, const Config& cfg,
                                           Communicator& comm) const = 0;

  // What the data needs from the starting weights, before the first step (collective; by default
  // nothing): preference pairs' reference log-probabilities. `weights` says whether `model` holds
  // them; `load_starting` puts them into it when it does not (the checkpoint's values are loaded
  // afterwards).
  virtual void prepare(Transformer&, ModelWeights, const std::function<void()>&, Communicator&) {}

  // What a step's metrics add beside its data report: the preference pairs' means (StepScalars).
  virtual bool reports_pairs() const { return false; }

  // How micro-batch `b`'s training forward weighs its loss, in `fo` (W: the ranks).
  virtual void weigh_loss(const Batch& b, int64_t W, ForwardOptions& fo) const = 0;

  // How the step's losses are summed over micro-batches and ranks (apps/train/step_sync.hpp).
  virtual StepLoss step_loss() const = 0;

  // What the metrics row of the step drawing `batches` (this rank's micro-batches) reports.
  virtual StepDataReport report(const std::vector<Batch>& batches) const = 0;
};

// The source of cfg's data, opened on every rank (collective; an error on one rank ends every
// rank with its message). `tokens`: the token files of a run on windows (cfg.data, or the shards
// tokenized_data made of its text); `text`: the run's tokenizer and vocabulary, found once
// (run_text). Examples: their cache made (or reused) first, and the line saying what an epoch is
// logged.
std::unique_ptr<TrainingData> open_training_data(const Config& cfg, const DataConfig& tokens,
                                                 const ModelText& text, Communicator& comm);

}  // namespace kktrain
