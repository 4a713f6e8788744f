// Learning-rate schedules: constant, or linear warmup followed by cosine or linear decay to
// lr_scheduler.min_lr over lr_scheduler.lr_decay_steps (default: train.max_steps).
#pragma once

#include <cstdint>

#include "core/config.hpp"

namespace kktrain {

class LrSchedule {
 public:
  LrSchedule(const SchedulerConfig& cfg, double base_lr, int64_t max_steps);
  // Learning rate of optimizer step `step` (0-based): warmup ramps (step + 1) / warmup * lr.
  double lr(int64_t step) const;

 private:
  SchedulerConfig cfg_;
  double base_;
  int64_t decay_steps_;
};

}  // namespace kktrain
