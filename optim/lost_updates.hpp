// Updates lost to bf16 rounding, as training sees them (docs/precision.md, "Updates lost to
// rounding"): the fractions of one step from the optimizer's counts (Optimizer::rounding_counts,
// counted inside the update launches), summed over ranks, and the runtime warning's condition.
//
//   update_lost_frac   bf16 parameters rounded to nearest without an fp32 master (the risky
//                      pattern, bf16 LoRA adapters, FusedAdam or SGD on bf16 without a master):
//                      the share of their elements whose nonzero update left the stored value as
//                      it was. 0 where nothing can be lost (fp32 parameters, fp32 masters).
//   ema_lost_frac      bf16 moments (torch Adam/AdamW on bf16, FusedAdam exp_avg_dtype /
//                      exp_avg_sq_dtype bfloat16, SGD's bf16 momentum buffer): the share of their
//                      values whose EMA update rounded back to the stored value.
//   sr_unchanged_frac  bf16 parameters with stochastic rounding: the share left unchanged by a
//                      nonzero update (expected: the update rounds down to the old value with
//                      probability 1 - |update| / spacing; unbiased, so not lost).
//   master_held_frac   bf16 parameters with an fp32 master (full or bf16 + remainder): the share
//                      whose master moved while the bf16 parameter did not yet (the master
//                      accumulates the change until it shows).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/config.hpp"
#include "core/param_registry.hpp"
#include "optim/optimizer.hpp"

namespace kktrain {

struct LostUpdates {
  double update_lost_frac = 0.0, ema_lost_frac = 0.0;
  double sr_unchanged_frac = 0.0, master_held_frac = 0.0;
  bool can_lose = false;      // some group rounds bf16 parameters to nearest without a master
  bool bf16_moments = false;  // some group keeps a moment in bf16
  // Per dtype group: its unchanged share (meaning set by `rounding`: lost, rounded to the old
  // value, held in the master; 0 for float32) and every moment array's lost share (0 for fp32
  // moments).
  struct Group {
    DType dtype = DType::float32;
    ParamRounding rounding = ParamRounding::float32;
    int64_t elements = 0;
    double unchanged_frac = 0.0;
    std::vector<std::pair<std::string, double>> moment_lost_frac;
  };
  std::vector<Group> groups;
};

// The fractions of the last counted step. sum(v) sums a count over the ranks (the identity on one
// rank); every rank calls it the same number of times in the same order (three per group).
LostUpdates lost_updates(const std::vector<GroupRoundingCounts>& groups,
                         const std::function<uint64_t(uint64_t)>& sum);
// This rank's counts in the order lost_updates() asks sum() for them: to sum over ranks in one
// reduction, then hand lost_updates() a sum() that returns the summed values in that order.
std::vector<uint64_t> rounding_count_values(const std::vector<GroupRoundingCounts>& groups);

// The runtime warning's condition: update_lost_frac above `threshold` on every observed step for
// `window_steps` steps (train.update_lost_warn_frac, train.update_lost_warn_steps). Training
// observes the steps it logs; an observed step stands for the steps since the one before (the
// first, for the steps since `first_step`, where the run started or resumed). window_steps 0:
// never.
class LostUpdateWatch {
 public:
  LostUpdateWatch(double threshold, int64_t window_steps, int64_t first_step = 0);
  // Steps in increasing order. True once: at the step the condition is first met.
  bool observe(int64_t step, double update_lost_frac);
  // The first step of the run of steps above the threshold that ends at the last observed step
  // (-1: the last one was not above).
  int64_t above_since() const { return above_since_; }

 private:
  double threshold_;
  int64_t window_, last_, above_since_ = -1;
  bool fired_ = false;
};

// The runtime warning: how much was lost over how many steps, and the pattern to switch to.
std::string lost_update_warning(const OptimizerConfig& cfg, const ParamRegistry& params,
                                double update_lost_frac, int64_t step, double threshold,
                                int64_t steps_above);

}  // namespace kktrain
