// Preference pairs as training data (apps/train/preference_data.hpp).
#include "apps/train/preference_data.hpp"

#include <yaml-cpp/yaml.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "apps/dataprep/cache_manifest.hpp"
#include "apps/dataprep/cache_protocol.hpp"
#include "apps/dataprep/example_cache.hpp"
#include "core/config_reader.hpp"
#include "core/errors.hpp"
#include "core/files.hpp"
#include "core/log.hpp"
#include "core/strings.hpp"
#include "io/durable.hpp"
#include "io/example_data.hpp"
#include "model/preference_loss.hpp"
#include "model/transformer.hpp"
#include "parallel/agree.hpp"
#include "parallel/communicator.hpp"
#include "parallel/round_robin.hpp"

namespace kktrain {

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using Split = ExampleData::Split;

std::string seconds(double s) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.1f s", s);
  return b;
}

constexpr uint64_t kReferenceMagic = 0x6b6b726566657265ull;  // "kkrefere"

// Each pair's reference sums, per split: (chosen, rejected) of example i at [2 i], [2 i + 1].
struct ReferenceLogps {
  std::vector<double> train, val;
};

// The files a model source is: the file, or a directory's regular files.
Json model_files(const std::string& path) {
  Json files = Json::array();
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(path, ec)) {
      if (e.is_regular_file(ec)) names.push_back(e.path().string());
    }
    std::sort(names.begin(), names.end());
    for (const auto& n : names) files.push_back(manifest_file_stat(n, "model.init_from"));
  } else {
    files.push_back(manifest_file_stat(path, "model.init_from"));
  }
  return files;
}

// What the reference sums are computed from.
Json reference_manifest(const Config& cfg, const std::string& examples_dir) {
  Json m;
  m["examples"] = read_manifest(examples_dir + "/manifest.json");
  m["model"] = YAML::Dump(cfg.resolved["model"]);
  m["peft"] = YAML::Dump(cfg.resolved["peft"]);
  if (cfg.model.init_from) m["model_files"] = model_files(*cfg.model.init_from);
  m["storage"] = dtype_name(cfg.precision.storage);
  m["compute"] = dtype_name(cfg.precision.compute);
  m["packing"] = cfg.data.packing;
  m["micro_batch_size"] = cfg.data.micro_batch_size;
  return m;
}

// The file written by write_reference for `train` + `val` pairs: read whole through
// read_regular_file (a FIFO or device in its place is refused, its size is what the header
// says), each split's sums after the header. RuntimeFailure naming the file otherwise.
ReferenceLogps read_reference(const std::string& file, int64_t train, int64_t val) {
  const std::size_t want = 24 + 16 * static_cast<std::size_t>(train + val);
  std::string bytes;
  if (auto why = read_regular_file(&bytes, file, want)) {
    throw RuntimeFailure("'" + file + "' cannot be read: " + *why);
  }
  uint64_t h[3] = {0, 0, 0};
  if (bytes.size() >= sizeof(h)) std::memcpy(h, bytes.data(), sizeof(h));
  if (bytes.size() != want || h[0] != kReferenceMagic || h[1] != uint64_t(train) ||
      h[2] != uint64_t(val)) {
    throw RuntimeFailure("'" + file + "' is not the reference log-probabilities of " +
                         std::to_string(train) + " + " + std::to_string(val) + " pairs");
  }
  ReferenceLogps r;
  r.train.resize(static_cast<std::size_t>(2 * train));
  r.val.resize(static_cast<std::size_t>(2 * val));
  std::memcpy(r.train.data(), bytes.data() + 24, r.train.size() * 8);
  std::memcpy(r.val.data(), bytes.data() + 24 + r.train.size() * 8, r.val.size() * 8);
  return r;
}

void write_reference(const std::string& file, const ReferenceLogps& r) {
  std::string bytes(24 + 8 * (r.train.size() + r.val.size()), '\0');
  const uint64_t h[3] = {kReferenceMagic, r.train.size() / 2, r.val.size() / 2};
  std::memcpy(bytes.data(), h, sizeof(h));
  std::memcpy(bytes.data() + 24, r.train.data(), r.train.size() * 8);
  std::memcpy(bytes.data() + 24 + r.train.size() * 8, r.val.data(), r.val.size() * 8);
  write_text_atomically(file, bytes);
}

// The pairs of micro-batch `b` as the model reads them: flattened spans, their reference sums.
void fill_pairs(const Batch& b, const std::vector<double>* ref, PairBatch* out) {
  out->pairs.clear();
  for (const BatchPair& p : b.pairs) {
    PairSpan s;
    const int64_t base = static_cast<int64_t>(p.row) * b.T;
    s.chosen = base + p.chosen;
    s.rejected = base + p.rejected;
    s.end = base + p.end;
    if (ref != nullptr) {
      s.ref_chosen = (*ref)[static_cast<size_t>(2 * p.example)];
      s.ref_rejected = (*ref)[static_cast<size_t>(2 * p.example + 1)];
    }
    out->pairs.push_back(s);
  }
}

class PreferencePairs final : public TrainingData {
 public:
  PreferencePairs(const Config& cfg, ExampleData data, int64_t max_steps, std::string dir)
      : data_(std::move(data)), max_steps_(max_steps), dir_(std::move(dir)) {
    pairs_.params = pair_params(cfg.dpo);
    reference_ = uses_reference(cfg.dpo.loss);
    cfg_ = &cfg;
  }

  std::string source() const override { return data_.source(); }
  int64_t max_steps() const override { return max_steps_; }
  Batch batch(int64_t step, int64_t first, int64_t B, int64_t) const override {
    return data_.train_batch(step, first, B);
  }
  bool has_validation(int64_t) const override { return data_.val_examples() > 0; }
  bool reports_pairs() const override { return true; }

  // Each micro-batch's pairs, their share of the mean over the global batch's pairs, times W
  // (the ranks' reduce-scatter averages).
  void weigh_loss(const Batch& b, int64_t W, ForwardOptions& fo) const override {
    fill_pairs(b, reference_ ? &ref_.train : nullptr, &pairs_);
    pairs_.global_pairs = std::max<int64_t>(b.step_examples, 1);
    fo.row_starts = b.starts.data();
    fo.row_gaps = b.gaps.empty() ? nullptr : b.gaps.data();
    fo.pairs = &pairs_;
    fo.pair_slots = StepSlots::kPairs;
    fo.grad_scale = static_cast<float>(W);
  }
  StepLoss step_loss() const override { return StepLoss::global_shares; }
  StepDataReport report(const std::vector<Batch>& batches) const override {
    StepDataReport r;
    r.pairs = batches.at(0).step_examples;
    return r;
  }

  // The validation split's first min(val_batches x B, rows) rows in file order, the ranks taking
  // micro-batches in turn: the mean over their pairs of the loss and of what the step rows report.
  ValidationReport validation_loss(Transformer& model, const Config& cfg,
                                   Communicator& comm) const override {
    const int64_t B = cfg.data.micro_batch_size;
    const RoundRobinRows rr{std::min(cfg.train.val_batches * B, data_.val_row_count()), B,
                            comm.size(), comm.rank()};
    const std::vector<Batch> batches = collectively(comm, [&] {
      std::vector<Batch> v;
      for (int64_t j = 0; j < rr.calls(); ++j)
        v.push_back(data_.val_rows(rr.first(j), rr.count(j), B));
      return v;
    });
    std::vector<double> sums(7, 0.0), none;  // loss, pairs, PairMeans' five
    for (const Batch& b : batches) {
      const std::vector<PairResult> r = run_pairs(model, b, reference_ ? &ref_.val : nullptr);
      const PairMeans m = PairMeans::of(r, 1.0);  // sums
      for (const PairResult& p : r) sums[0] += p.loss;
      sums[1] += static_cast<double>(r.size());
      const double v[kPairMeans] = {m.logps_chosen, m.logps_rejected, m.rewards_chosen,
                                    m.rewards_rejected, m.reward_accuracy};
      for (int k = 0; k < kPairMeans; ++k) sums[static_cast<size_t>(2 + k)] += v[k];
    }
    comm.allreduce_host(sums, none);
    const double n = std::max(sums[1], 1.0);
    ValidationReport out;
    out.loss = sums[0] / n;
    out.columns = {{"val_pairs", sums[1]},
                   {"val_logps_chosen", sums[2] / n},
                   {"val_logps_rejected", sums[3] / n},
                   {"val_rewards_chosen", sums[4] / n},
                   {"val_rewards_rejected", sums[5] / n},
                   {"val_reward_margin", (sums[4] - sums[5]) / n},
                   {"val_reward_accuracy", sums[6] / n}};
    return out;
  }

  // The reference sums: reused, or computed (collectively) and written, through the cache
  // protocol (apps/dataprep/cache_protocol.hpp) whose third user they are.
  void prepare(Transformer& model, ModelWeights weights, const std::function<void()>& load_starting,
               Communicator& comm) override {
    if (!reference_) return;
    const std::string dir = dir_ + "/reference";
    const std::string file = dir + "/logps.bin";
    const Json want = collectively(comm, [&] { return reference_manifest(*cfg_, dir_); });
    // Whether rank 0 will reuse them (every rank computes, or none does).
    const Json have = collectively(
        comm, [&] { return comm.rank() == 0 ? read_manifest(dir + "/manifest.json") : Json(); });
    const bool reuse = comm.all_agree(comm.rank() != 0 || (have.is_object() && have == want));
    double seconds_taken = 0.0;
    if (!reuse) {
      if (weights == ModelWeights::not_loaded) load_starting();
      const double t0 = now_s();
      ref_.train = reference_pass(model, Split::train, comm);
      ref_.val = reference_pass(model, Split::val, comm);
      seconds_taken = now_s() - t0;
    }
    CacheSteps c;
    c.dir = dir;
    c.describe = [&want] { return want; };
    c.present = [](const Json& m) { return m.is_object(); };
    c.matches = [](const Json& have, const Json& want) { return have == want; };
    c.reused = [dir](const Json&) {
      return "dpo: the reference log-probabilities computed at an earlier start are reused (" +
             dir + ")";
    };
    c.remade = "dpo: the reference log-probabilities in " + dir +
               " were computed from another model, data, template or setting "
               "(reference/manifest.json); they were computed again from the starting weights";
    c.remove_files = [file] {
      std::error_code ec;
      fs::remove(file, ec);
    };
    c.build = [this, file](Json w) {
      write_reference(file, ref_);
      return w;
    };
    c.missing = "dpo: the reference log-probabilities in '" + dir +
                "' are missing after writing them (is train.output_dir on a file system every "
                "rank sees?)";
    derive_cache(c, comm);
    if (!reuse) {
      log::info("dpo: reference log-probabilities of " + std::to_string(data_.train_examples()) +
                " + " + std::to_string(data_.val_examples()) + " pairs computed in " +
                seconds(seconds_taken) + " on " + std::to_string(comm.size()) + " rank" +
                (comm.size() == 1 ? "" : "s") + " -> " + dir);
    }
    if (reuse) {
      ref_ = collectively(
          comm, [&] { return read_reference(file, data_.train_examples(), data_.val_examples()); });
    }
  }

 private:
  // One micro-batch's pairs through the model (no backward): what each pair's loss gave.
  std::vector<PairResult> run_pairs(Transformer& model, const Batch& b,
                                    const std::vector<double>* ref) const {
    ForwardOptions fo;
    fo.compute_mtp = false;
    fo.row_starts = b.starts.data();
    fo.row_gaps = b.gaps.empty() ? nullptr : b.gaps.data();
    PairBatch pb;
    pb.params = pairs_.params;
    fill_pairs(b, ref, &pb);
    fo.pairs = &pb;
    model.forward(b.ids.data(), b.targets.data(), b.B, b.T, fo);
    return model.pair_results();
  }

  // Every pair's sums over a split's rows in file order, the ranks taking micro-batches in turn
  // (the sums added over ranks: each pair's on exactly one rank, 0 elsewhere).
  std::vector<double> reference_pass(Transformer& model, Split split, Communicator& comm) const {
    const int64_t n = split == Split::train ? data_.train_examples() : data_.val_examples();
    std::vector<double> sums(static_cast<size_t>(2 * n), 0.0), none;
    const int64_t B = cfg_->data.micro_batch_size;
    const RoundRobinRows rr{data_.split_row_count(split), B, comm.size(), comm.rank()};
    const int64_t rows = rr.rows, calls = rr.calls();
    const bool shown = comm.rank() == 0 && isatty(2);
    for (int64_t j = 0; j < calls; ++j) {
      const Batch b =
          collectively(comm, [&] { return data_.split_rows(split, rr.first(j), rr.count(j), B); });
      const std::vector<PairResult> r = run_pairs(model, b, nullptr);
      for (size_t k = 0; k < r.size(); ++k) {
        const int64_t e = b.pairs[k].example;
        sums[static_cast<size_t>(2 * e)] = r[k].logps_chosen;
        sums[static_cast<size_t>(2 * e + 1)] = r[k].logps_rejected;
      }
      if (shown) {
        std::fprintf(stderr, "\rdpo: reference log-probabilities, %s rows %lld/%lld  ",
                     split == Split::train ? "training" : "validation",
                     static_cast<long long>(rr.done(j)), static_cast<long long>(rows));
        if (j + 1 == calls) std::fputc('\n', stderr);
      }
    }
    comm.allreduce_host(sums, none);
    return sums;
  }

  ExampleData data_;
  int64_t max_steps_;
  std::string dir_;
  const Config* cfg_ = nullptr;
  bool reference_ = false;
  ReferenceLogps ref_;
  mutable PairBatch pairs_;  // the micro-batch's pairs, read by the forward weigh_loss set up
};

}  // namespace

std::unique_ptr<TrainingData> open_preference_data(const Config& cfg, const ModelText& text,
                                                   Communicator& comm) {
  const std::string dir = example_cache(cfg, text, comm);
  ExampleData e = collectively(comm, [&] { return ExampleData(dir, cfg.data); });
  std::string steps;
  const int64_t max_steps = example_steps(cfg, e, &steps);
  log::info("data: " + std::to_string(e.train_examples()) + " preference pairs, " +
            (cfg.data.packing ? "packed into rows" : "one a row") + " of " +
            std::to_string(cfg.data.seq_len) + " tokens" + steps + "; dpo.loss " +
            preference_loss_name(cfg.dpo.loss) + ", beta " + format_double(cfg.dpo.beta));
  return std::make_unique<PreferencePairs>(cfg, std::move(e), max_steps, dir);
}

}  // namespace kktrain
