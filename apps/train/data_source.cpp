// The training data's two sources, token windows and examples (apps/train/data_source.hpp).
#include "apps/train/data_source.hpp"

#include <algorithm>

#include "apps/dataprep/example_cache.hpp"
#include "apps/train/app_model.hpp"
#include "apps/train/preference_data.hpp"
#include "core/errors.hpp"
#include "core/log.hpp"
#include "io/example_data.hpp"
#include "model/transformer.hpp"
#include "parallel/agree.hpp"
#include "parallel/communicator.hpp"
#include "parallel/round_robin.hpp"

namespace kktrain {

void StepDataReport::add_columns(JsonLine& row) const {
  if (loss_tokens >= 0) row.integer("loss_tokens", loss_tokens);
  if (pairs >= 0) row.integer("pairs", pairs);
}

namespace {

// Windows of data.seq_len tokens of token files; each micro-batch's loss is its own token mean.
class TokenWindows final : public TrainingData {
 public:
  TokenWindows(TokenDataset data, int64_t max_steps)
      : data_(std::move(data)), max_steps_(max_steps) {}

  std::string source() const override { return data_.source(); }
  int64_t max_steps() const override { return max_steps_; }
  Batch batch(int64_t step, int64_t first, int64_t B, int64_t T) const override {
    return data_.train_batch(step, first, B, T);
  }
  bool has_validation(int64_t T) const override { return data_.has_validation_windows(T); }
  void weigh_loss(const Batch&, int64_t, ForwardOptions&) const override {}
  StepLoss step_loss() const override { return StepLoss::micro_batch_means; }
  StepDataReport report(const std::vector<Batch>&) const override { return {}; }

  // The mean token loss over validation windows [0, val_batches x B), the windows of val_batches
  // micro-batches of B. Ranks take micro-batches round-robin (padded with ignored rows, so every
  // rank runs the same number of forwards) and sum losses and tokens.
  ValidationReport validation_loss(Transformer& model, const Config& cfg,
                                   Communicator& comm) const override {
    ForwardOptions fo;
    fo.compute_mtp = false;
    const int64_t B = cfg.data.micro_batch_size;
    const RoundRobinRows rr{cfg.train.val_batches * B, B, comm.size(), comm.rank()};
    double sum = 0.0, tokens = 0.0;
    // Every rank draws its windows first (a bad token id on one rank ends every rank).
    const std::vector<Batch> batches = collectively(comm, [&] {
      std::vector<Batch> v;
      for (int64_t j = 0; j < rr.calls(); ++j) {
        const int64_t count = rr.count(j);
        v.push_back(data_.val_windows(count > 0 ? rr.first(j) : 0, count, B, cfg.data.seq_len));
      }
      return v;
    });
    for (const Batch& b : batches) {
      const ForwardResult r = model.forward(b.ids.data(), b.targets.data(), b.B, b.T, fo);
      sum += r.loss * static_cast<double>(r.tokens);
      tokens += static_cast<double>(r.tokens);
    }
    return {comm.allreduce_sum_host(sum) / comm.allreduce_sum_host(tokens), {}};
  }

 private:
  TokenDataset data_;
  int64_t max_steps_;
};

// Rows of examples (one a row, or packed); the step's loss is the mean over its global batch's
// loss tokens, which each micro-batch carries.
class Examples final : public TrainingData {
 public:
  Examples(ExampleData data, int64_t max_steps) : data_(std::move(data)), max_steps_(max_steps) {}

  std::string source() const override { return data_.source(); }
  int64_t max_steps() const override { return max_steps_; }
  Batch batch(int64_t step, int64_t first, int64_t B, int64_t) const override {
    return data_.train_batch(step, first, B);
  }
  bool has_validation(int64_t) const override { return data_.val_examples() > 0; }
  // Each micro-batch's summed loss over the global batch's loss tokens, times W (the ranks'
  // reduce-scatter averages).
  void weigh_loss(const Batch& b, int64_t W, ForwardOptions& fo) const override {
    fo.row_starts = b.starts.data();
    fo.loss_tokens = std::max<int64_t>(b.loss_tokens, 1);
    fo.grad_scale = static_cast<float>(W);
  }
  StepLoss step_loss() const override { return StepLoss::global_shares; }
  StepDataReport report(const std::vector<Batch>& batches) const override {
    StepDataReport r;
    r.loss_tokens = batches.at(0).loss_tokens;
    return r;
  }

  // Validation rows [0, min(val_batches x B, rows)) of the validation split in file order, the
  // ranks taking micro-batches round-robin; each row's padding and prompt tokens are not counted.
  ValidationReport validation_loss(Transformer& model, const Config& cfg,
                                   Communicator& comm) const override {
    ForwardOptions fo;
    fo.compute_mtp = false;
    const int64_t B = cfg.data.micro_batch_size;
    const RoundRobinRows rr{std::min(cfg.train.val_batches * B, data_.val_row_count()), B,
                            comm.size(), comm.rank()};
    double sum = 0.0, tokens = 0.0;
    const std::vector<Batch> batches = collectively(comm, [&] {
      std::vector<Batch> v;
      for (int64_t j = 0; j < rr.calls(); ++j)
        v.push_back(data_.val_rows(rr.first(j), rr.count(j), B));
      return v;
    });
    for (const Batch& b : batches) {
      fo.row_starts = b.starts.data();
      const ForwardResult r = model.forward(b.ids.data(), b.targets.data(), b.B, b.T, fo);
      if (r.tokens > 0) sum += r.loss * static_cast<double>(r.tokens);
      tokens += static_cast<double>(r.tokens);
    }
    const double total = comm.allreduce_sum_host(tokens);
    return {comm.allreduce_sum_host(sum) / std::max(total, 1.0), {}};
  }

 private:
  ExampleData data_;
  int64_t max_steps_;
};

}  // namespace

// The steps of train.epochs epochs of `e` (capped by a train.max_steps the config gives), else
// train.max_steps; `steps` gets the text the data line says about them.
int64_t example_steps(const Config& cfg, const ExampleData& e, std::string* steps) {
  const TrainConfig& t = cfg.train;
  if (t.epochs <= 0) {
    *steps = "; an epoch is " + std::to_string(e.steps_in_epoch(0)) + " steps";
    return t.max_steps;
  }
  // Every epoch is the same number of steps (io/example_data.hpp): constant time for any count.
  const int64_t epoch_steps = e.steps_for_epochs(t.epochs);
  if (epoch_steps < 0 && !t.max_steps_set) {
    throw ConfigError("train.epochs",
                      std::to_string(t.epochs) + " epochs of " +
                          std::to_string(e.steps_in_epoch(0)) +
                          " steps are more steps than an int64 counts; set train.max_steps",
                      cfg.where("train.epochs"));
  }
  *steps = "; " + std::to_string(t.epochs) + " epoch" + (t.epochs == 1 ? "" : "s") + " of " +
           std::to_string(e.train_examples()) + " examples: " +
           (epoch_steps < 0 ? std::string("over 2^63") : std::to_string(epoch_steps)) + " steps";
  if (t.max_steps_set && (epoch_steps < 0 || t.max_steps < epoch_steps)) {
    *steps += ", cut to train.max_steps " + std::to_string(t.max_steps);
    return t.max_steps;
  }
  return epoch_steps;
}

namespace {

// Examples: the cache made (or reused) and opened on every rank, their steps settled and said.
std::unique_ptr<TrainingData> open_examples(const Config& cfg, const ModelText& text,
                                            Communicator& comm) {
  const std::string dir = example_cache(cfg, text, comm);
  ExampleData e = collectively(comm, [&] { return ExampleData(dir, cfg.data); });
  std::string steps;
  const int64_t max_steps = example_steps(cfg, e, &steps);
  log::info("data: " + std::to_string(e.train_examples()) + " training examples, " +
            (cfg.data.packing ? "packed into rows" : "one a row") + " of " +
            std::to_string(cfg.data.seq_len) + " tokens" + steps);
  return std::make_unique<Examples>(std::move(e), max_steps);
}

}  // namespace

std::unique_ptr<TrainingData> open_training_data(const Config& cfg, const DataConfig& tokens,
                                                 const ModelText& text, Communicator& comm) {
  if (is_preference(cfg.data)) return open_preference_data(cfg, text, comm);
  if (is_examples(cfg.data)) return open_examples(cfg, text, comm);
  TokenDataset d = collectively(comm, [&] {
    return TokenDataset::load(tokens, cfg.model.vocab_size, token_load_options(cfg.data));
  });
  return std::make_unique<TokenWindows>(std::move(d), cfg.train.max_steps);
}

}  // namespace kktrain
