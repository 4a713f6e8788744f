// Fractions of updates lost to bf16 rounding from the optimizer's per-group counts, and the
// runtime warning (lost_updates.hpp).
#include "optim/lost_updates.hpp"

#include <cstdio>

namespace kktrain {

namespace {

double share(double count, double of) {
  return of > 0.0 ? count / of : 0.0;
}

}  // namespace

std::vector<uint64_t> rounding_count_values(const std::vector<GroupRoundingCounts>& groups) {
  std::vector<uint64_t> v;
  for (const GroupRoundingCounts& g : groups) {
    v.push_back(static_cast<uint64_t>(g.counts.param_unchanged));
    v.push_back(static_cast<uint64_t>(g.counts.moment_lost[0]));
    v.push_back(static_cast<uint64_t>(g.counts.moment_lost[1]));
  }
  return v;
}

LostUpdates lost_updates(const std::vector<GroupRoundingCounts>& groups,
                         const std::function<uint64_t(uint64_t)>& sum) {
  LostUpdates out;
  // Numerators and denominators of the run-wide fractions, by ParamRounding.
  double unchanged[4] = {0, 0, 0, 0}, elements[4] = {0, 0, 0, 0};
  double moment_lost = 0.0, moment_values = 0.0;
  for (const GroupRoundingCounts& g : groups) {
    const double param = static_cast<double>(sum(static_cast<uint64_t>(g.counts.param_unchanged)));
    const double lost[2] = {
        static_cast<double>(sum(static_cast<uint64_t>(g.counts.moment_lost[0]))),
        static_cast<double>(sum(static_cast<uint64_t>(g.counts.moment_lost[1])))};
    const double n = static_cast<double>(g.elements);
    LostUpdates::Group r;
    r.dtype = g.dtype;
    r.rounding = g.rounding;
    r.elements = g.elements;
    r.unchanged_frac = g.rounding == ParamRounding::float32 ? 0.0 : share(param, n);
    const int k = static_cast<int>(g.rounding);
    unchanged[k] += param;
    elements[k] += n;
    for (std::size_t m = 0; m < g.moments.size() && m < 2; ++m) {
      const bool bf16_moment = g.moments[m].second == DType::bfloat16;
      r.moment_lost_frac.emplace_back(g.moments[m].first, bf16_moment ? share(lost[m], n) : 0.0);
      if (bf16_moment && g.elements > 0) {
        out.bf16_moments = true;
        moment_lost += lost[m];
        moment_values += n;
      }
    }
    out.can_lose = out.can_lose || (g.rounding == ParamRounding::nearest && g.elements > 0);
    out.groups.push_back(r);
  }
  out.update_lost_frac = share(unchanged[static_cast<int>(ParamRounding::nearest)],
                               elements[static_cast<int>(ParamRounding::nearest)]);
  out.sr_unchanged_frac = share(unchanged[static_cast<int>(ParamRounding::stochastic)],
                                elements[static_cast<int>(ParamRounding::stochastic)]);
  out.master_held_frac = share(unchanged[static_cast<int>(ParamRounding::master)],
                               elements[static_cast<int>(ParamRounding::master)]);
  out.ema_lost_frac = share(moment_lost, moment_values);
  return out;
}

LostUpdateWatch::LostUpdateWatch(double threshold, int64_t window_steps, int64_t first_step)
    : threshold_(threshold), window_(window_steps), last_(first_step) {}

bool LostUpdateWatch::observe(int64_t step, double update_lost_frac) {
  if (update_lost_frac > threshold_) {
    if (above_since_ < 0) above_since_ = last_ + 1;  // this step stands for those since the last
  } else {
    above_since_ = -1;
  }
  last_ = step;
  if (fired_ || window_ <= 0 || above_since_ < 0 || step - above_since_ + 1 < window_) return false;
  fired_ = true;
  return true;
}

std::string lost_update_warning(const OptimizerConfig& cfg, const ParamRegistry& params,
                                double update_lost_frac, int64_t step, double threshold,
                                int64_t steps_above) {
  int64_t elements = 0, adapters = 0;
  for (const auto& p : params.all()) {
    if (!p.trainable || p.dtype != DType::bfloat16) continue;
    elements += p.numel;
    if (p.role == ParamRole::lora_a || p.role == ParamRole::lora_b) adapters += p.numel;
  }
  char head[256];
  std::snprintf(head, sizeof(head),
                "update_lost_frac stayed above %g for %lld steps (%.3f at step %lld): ", threshold,
                static_cast<long long>(steps_above), update_lost_frac,
                static_cast<long long>(step));
  std::string msg = head;
  msg += std::string("that share of the updates ") + optimizer_kind_name(cfg.kind) +
         " made to the " + std::to_string(elements) +
         " trainable bfloat16 parameter elements it keeps without an fp32 master";
  if (adapters > 0) msg += " (" + std::to_string(adapters) + " of them LoRA adapters)";
  msg +=
      " was smaller than half a bf16 spacing and rounded away. "
      "Switch to pattern A: transformer_engine FusedAdam with master_weights: true, "
      "store_param_remainders: true and float32 exp_avg_dtype/exp_avg_sq_dtype, keeping "
      "model.dtype: bfloat16 (2 bytes more per parameter); or pattern B: torch.optim.AdamW "
      "with model.dtype: float32";
  if (adapters > 0) msg += " (for the adapters: peft.lora_dtype: float32)";
  msg +=
      ". optimizer.stochastic_rounding: true keeps the updates in expectation instead "
      "(train.update_lost_warn_frac and train.update_lost_warn_steps set this warning)";
  return msg;
}

}  // namespace kktrain
