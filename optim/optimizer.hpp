// Optimizers over a ParamRegistry, with state dtypes chosen by the precision policy.
//
//   torch.optim.Adam / AdamW   moments in the trainable parameter's storage dtype (bf16 params get
//                              bf16 moments: that is the point of the precision warning)
//   TE FusedAdam               fp32 master (full copy, or bf16 param + int16 remainder), moments
//                              independently fp32 or bf16
//   torch.optim.SGD            momentum buffer in the parameter's dtype
//
// State exists only for trainable parameters and is created when the optimizer is constructed, so
// build it after the model's freeze/adapter setup. The trainable parameters of one storage dtype
// form a group: each state tensor of the group is one flat buffer (a parameter's state is a window
// of it), and a step is one fused kernel launch per group (optim/update_kernels.hpp) that reads
// param, grad and state and writes param and state, with fp32 arithmetic and one rounding per
// stored value. Asked to, that launch also counts the bf16 values whose update rounding left
// unchanged (rounding_counts(): docs/precision.md, "Updates lost to rounding").
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/param_registry.hpp"
#include "optim/update_kernels.hpp"

namespace kktrain {

enum class MasterKind { none, float32, remainder };
const char* master_kind_name(MasterKind k);  // "none", "float32", "remainder"

// What state one parameter has (for the audit and tests).
struct ParamStateInfo {
  bool has_state = false;
  std::optional<DType> exp_avg, exp_avg_sq, momentum;
  MasterKind master = MasterKind::none;
};

// How the parameters of a dtype group store their updates, which says what their
// UpdateCounts::param_unchanged means: fp32 storage (not counted), bf16 rounded to nearest
// without a master (the update is lost), bf16 with stochastic rounding (kept in expectation),
// bf16 with an fp32 master, full or bf16 + remainder (held in the master until it shows).
enum class ParamRounding { float32, nearest, stochastic, master };
const char* param_rounding_name(ParamRounding r);  // "float32", "nearest", "stochastic", "master"

// One dtype group's counts of the last counted step on this rank, and what they are out of.
struct GroupRoundingCounts {
  DType dtype = DType::float32;  // the group's storage dtype
  ParamRounding rounding = ParamRounding::float32;
  // The group's moment arrays in UpdateCounts::moment_lost order ("exp_avg", "exp_avg_sq"; SGD:
  // "momentum_buffer"), with their dtypes (only bf16 ones are counted).
  std::vector<std::pair<std::string, DType>> moments;
  int64_t elements = 0;  // the group's elements on all ranks together
  UpdateCounts counts;   // this rank's shard
};

// A 1-D state tensor of a runtime dtype (float32, bfloat16) or int16 remainders.
struct StateTensor {
  DType dtype = DType::float32;
  DView<float> f32;
  DView<bf16> b16;
  bool present = false;  // allocated (a rank's shard of it may hold no elements)
  void allocate(const std::string& label, DType d, int64_t n);
  // Elements [offset, offset + n) of this tensor, sharing its allocation.
  StateTensor window(int64_t offset, int64_t n) const;
  bool empty() const { return !present; }
  template <class T>
  T* data() const;
};

// One state tensor of a parameter in its own dtype: this rank's shard (the parameter's
// local_numel elements) in device memory. Checkpoints write and read these bit for bit.
struct StateRef {
  std::string name;  // "exp_avg", "exp_avg_sq", "momentum_buffer", "master", "remainder"
  DType dtype = DType::float32;  // float32 or bfloat16; ignored when int16
  bool int16 = false;            // TE remainders
  DBytesU data;                  // the shard's bytes in device memory
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update of every trainable parameter at learning rate `lr`; gradients are multiplied by
  // `grad_scale` as they are read (gradient clipping without an extra pass).
  virtual void step(double lr, float grad_scale = 1.0f) = 0;
  virtual ParamStateInfo state_info(int param) const = 0;
  virtual const char* name() const = 0;
  int64_t steps() const { return step_; }
  // Restores the update count (bias correction, SGD's first step) of a resumed run.
  void set_steps(int64_t s) { step_ = s; }
  // The state tensors of parameter `param` (empty when it has none).
  virtual std::vector<StateRef> state_refs(int param) = 0;

  // While on, every step() counts, in its update launches, the bf16 values whose update rounding
  // left unchanged (UpdateCounts); rounding_counts() then holds this rank's counts of the last
  // step, one entry per dtype group. Off (the default), the launches count nothing.
  void set_count_rounding(bool on) { count_rounding_ = on; }
  // Reading the counts of a counted step waits for the device once (core/host_sync.hpp).
  const std::vector<GroupRoundingCounts>& rounding_counts() const;

  // Named state tensors of a parameter, as fp32 host copies (tests, checkpoints): "exp_avg",
  // "exp_avg_sq", "momentum_buffer", "master" (the fp32 master, rebuilt for remainders).
  virtual std::vector<std::pair<std::string, std::vector<float>>> state_to_host(
      int param) const = 0;

 protected:
  // Zeroes the counts of a step and returns where group k's launches add theirs: two
  // UpdateCounts in device memory, the sum and a launch's scratch (null when not counting).
  UpdateCounts* counts_for(std::size_t k);
  int64_t step_ = 0;
  bool count_rounding_ = false;
  // Filled by the optimizers' constructors; the counts are copied from device_counts_ when read.
  mutable std::vector<GroupRoundingCounts> rounding_;
  Kokkos::View<UpdateCounts*, MemSpace> device_counts_;  // 2 per group: sum, scratch
  mutable std::vector<bool> counted_;  // per group: device_counts_ has counts rounding_ has not
};

// The state `cfg` gives parameter `p` (none when frozen): the single source of truth for the
// optimizers' allocations and for the precision audit, which plans without allocating.
ParamStateInfo plan_state(const OptimizerConfig& cfg, const ParamInfo& p);

// How a step launches its kernels: one launch per group (what training uses), or one per
// parameter (the same arithmetic on the same state layout; tests compare the two bit for bit).
enum class UpdateLaunch { grouped, per_parameter };

// Builds the optimizer named by cfg.optimizer for the trainable parameters of `params` and
// marks weight-decay exclusions (optimizer.weight_decay_exclude globs) on the registry. Settings
// that have no effect are reported by precision_warnings() (optim/audit.hpp).
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& cfg, ParamRegistry& params,
                                          uint64_t seed,
                                          UpdateLaunch launch = UpdateLaunch::grouped);

}  // namespace kktrain
