// Training checkpoints of a model and its optimizer (the file layer is io/checkpoint.hpp):
//
//   /params/<canonical name>           every parameter in its resident dtype, full shape; attrs
//                                      dtype, checksum, trainable, keep_in_fp32, aliases
//   /optim/<canonical name>/<state>    exp_avg, exp_avg_sq, momentum_buffer (their own dtypes),
//                                      master (fp32) or remainder (int16, meaningful only with
//                                      the bf16 parameter of the same file)
//   root attributes                    format, format_version, kktrain_version, step,
//                                      optimizer_steps, nonfinite_in_row, world_size, seeds,
//                                      the architecture, storage/compute dtypes, optimizer, lr of
//                                      the next step, and the resolved config (YAML)
//
// Resuming reads each rank's rows of the full tensors, so any rank count can resume any file.
// A config whose storage dtype differs from the file's is converted (docs/checkpoints.md):
// fp32 -> bf16 rounds to nearest even, except that a bf16 parameter with FusedAdam remainders is
// split from the fp32 value as TE splits (so parameter + remainder rebuild it exactly); fp32
// masters and remainders in the file are the fp32 value of their parameter; bf16 -> fp32 is
// exact. A different optimizer, architecture, parameter set or trainability is refused.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/version.hpp"
#include "io/h5.hpp"
#include "model/transformer.hpp"
#include "optim/optimizer.hpp"
#include "parallel/communicator.hpp"

namespace kktrain {

constexpr int64_t kCheckpointFormatVersion = 1;

struct TrainProgress {
  int64_t step = 0;             // loop steps completed (the next step's index)
  int64_t optimizer_steps = 0;  // updates applied (non-finite steps are skipped)
  int64_t nonfinite = 0;        // non-finite steps in a row
  std::string saved_config;     // the resolved config the checkpoint was saved with (YAML)
};

// checkpoint.dir, or <train.output_dir>/checkpoints.
std::string checkpoint_root(const Config& cfg);

// Saves a checkpoint of step p.step under checkpoint_root (collective); returns its directory.
std::string save_training_checkpoint(const Config& cfg, Transformer& model, Optimizer& opt,
                                     const TrainProgress& p, double next_lr, Communicator& comm);

// The file checkpoint.resume names (auto: the latest under the root, if any; none: nothing).
// auto, when `latest` names a step directory without a complete checkpoint: the newest complete
// one, with a warning saying what was found; InputError (exit 2) when there is none, rather than
// a fresh start.
std::optional<std::string> resume_source(const Config& cfg);

// Loads model parameters and optimizer state from `file` into this rank's shards (collective;
// errors agreed over ranks) and returns the progress to continue from.
TrainProgress load_training_checkpoint(const std::string& file, const Config& cfg,
                                       Transformer& model, Optimizer& opt, Communicator& comm);

}  // namespace kktrain
