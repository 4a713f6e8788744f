#include "optim/schedule.hpp"

#include <algorithm>
#include <cmath>

namespace kktrain {

LrSchedule::LrSchedule(const SchedulerConfig& cfg, double base_lr, int64_t max_steps)
    : cfg_(cfg), base_(base_lr), decay_steps_(cfg.lr_decay_steps.value_or(max_steps)) {}

double LrSchedule::lr(int64_t step) const {
  const int64_t warm = cfg_.lr_warmup_steps;
  if (step < warm) return base_ * static_cast<double>(step + 1) / static_cast<double>(warm);
  if (cfg_.lr_decay_style == LrDecayStyle::constant) return base_;
  const double span = static_cast<double>(std::max<int64_t>(1, decay_steps_ - warm));
  const double progress = std::min(1.0, static_cast<double>(step - warm) / span);
  const double lo = cfg_.min_lr;
  if (cfg_.lr_decay_style == LrDecayStyle::linear) return lo + (base_ - lo) * (1.0 - progress);
  return lo + (base_ - lo) * 0.5 * (1.0 + std::cos(M_PI * progress));  // cosine
}

}  // namespace kktrain
