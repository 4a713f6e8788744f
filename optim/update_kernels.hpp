// The fused optimizer update kernels. One launch updates a whole group of tensors that share
// their dtypes and master kind (llm.c / multi-tensor style): it reads param, grad and state from
// flat buffers at each tensor's offsets and writes param and state. Arithmetic is fp32; each
// stored value is rounded once (round-to-nearest-even, or stochastic rounding for bf16 parameters
// when asked). Asked to, a launch also counts the bf16 values whose update the rounding left
// unchanged (UpdateCounts), in the same pass: a reduction alongside the update.
#pragma once

#include <cstdint>
#include <vector>

#include "core/bf16.hpp"
#include "core/kokkos_compat.hpp"
#include "core/launch.hpp"

namespace kktrain {

// Stochastic rounding of bf16 parameters updated without an fp32 master: the noise is keyed on
// (seed, step, global element index), so results do not depend on threads, backend, ranks or
// how tensors are grouped into launches.
struct RoundingMode {
  bool stochastic = false;
  uint64_t seed = 0;
  uint64_t step = 0;
};

// What an update launch counts when given somewhere to put it, over the elements it updated: the
// updates bf16 rounding left invisible (docs/precision.md, "Updates lost to rounding"). An element
// counts when the fp32 result of its update differs from the value the update started from (an
// exact comparison; NaN never counts) and the stored bf16 value is nevertheless the one it was:
//   param_unchanged   bf16 parameters. Without a master the change is lost (round to nearest) or
//                     kept in expectation (stochastic rounding); with an fp32 master (full or
//                     bf16 + remainder) the master holds it until it reaches the bf16 parameter.
//                     fp32 parameters are not counted.
//   moment_lost[k]    bf16 moments whose EMA result rounded back to the stored value: [0] exp_avg
//                     (SGD: momentum_buffer), [1] exp_avg_sq. fp32 moments are not counted.
struct UpdateCounts {
  int64_t param_unchanged = 0;
  int64_t moment_lost[2] = {0, 0};
  KOKKOS_INLINE_FUNCTION UpdateCounts& operator+=(const UpdateCounts& o) {
    param_unchanged += o.param_unchanged;
    moment_lost[0] += o.moment_lost[0];
    moment_lost[1] += o.moment_lost[1];
    return *this;
  }
  // Kokkos 3.x joins reduction values through volatile references on some backends.
  KOKKOS_INLINE_FUNCTION void operator+=(const volatile UpdateCounts& o) volatile {
    param_unchanged += o.param_unchanged;
    moment_lost[0] += o.moment_lost[0];
    moment_lost[1] += o.moment_lost[1];
  }
};

// One tensor of a grouped update: where its elements sit in the flat buffers the group's kernel
// is given (element offsets), and what differs between tensors of a group.
struct UpdateTensor {
  int64_t param = 0;  // offset in the flat parameter buffer
  int64_t grad = 0;   // offset in the flat gradient buffer
  int64_t state = 0;  // offset in the flat state buffers (moments, master, remainders)
  int64_t n = 0;      // elements
  int64_t index = 0;  // global element index of element 0 (the stochastic-rounding key)
  int32_t decay = 1;  // 1: weight decay applies; 0: excluded (optimizer.weight_decay_exclude)
  // Where its 16-bit arrays run two elements per 32-bit word (bf16.hpp): 0 when all are 4-byte
  // aligned at element 0, 1 when all are at element 1, -1 element by element. Set by UpdatePlan.
  int32_t word_start = -1;
};

// A flat array a plan will run on: its base pointer and element size.
struct FlatArray {
  const void* base = nullptr;
  int elem_bytes = 0;
};

// The launch plan of one group: its tensor table and blocks in device memory, built once on the
// host. The arrays (parameter, gradient, and every state array, indexed by `state`) decide each
// tensor's word_start; the kernels must then be run on those same arrays.
class UpdatePlan {
 public:
  UpdatePlan() = default;
  UpdatePlan(std::vector<UpdateTensor> tensors, FlatArray param, FlatArray grad,
             const std::vector<FlatArray>& state, int64_t block_len = 0);
  const DView<UpdateTensor>& tensors() const { return table_.entries; }
  const TensorBlocks& blocks() const { return table_.blocks; }
  int64_t numel() const { return numel_; }

 private:
  TensorTable<UpdateTensor> table_;
  int64_t numel_ = 0;
};

// Each update below adds its launch's counts to counts[0] when counts is not null: two
// UpdateCounts in device memory, the sum and the launch's scratch (the launch is then a
// parallel_reduce into the scratch, and the host does not wait for it; without, the same loop as
// a parallel_for with no counting in it).

// torch.optim.Adam / AdamW, in torch's order of operations (docs/precision.md, "Optimizers"):
//   AdamW: p *= 1 - lr wd            Adam: g += wd p
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g g
//   p += -lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// Moments have the parameter's dtype P; the stored (rounded) moments feed the update, as in
// torch where they are tensors of that dtype.
struct TorchAdamHyper {
  float beta1, beta2, one_minus_beta1, one_minus_beta2;
  float eps, bias_correction2_sqrt, neg_step_size;
  float decay_factor;  // AdamW: 1 - lr wd (tensors without weight decay: 1)
  float weight_decay;  // Adam: L2 coefficient (tensors without weight decay: 0)
  bool decoupled;      // AdamW
  float grad_scale;
};
template <class P>
void torch_adam_update(const UpdatePlan& plan, P* param, const P* grad, P* exp_avg, P* exp_avg_sq,
                       const TorchAdamHyper& h, const RoundingMode& r,
                       UpdateCounts* counts = nullptr);

// Transformer Engine FusedAdam: fp32 math on the master value (the fp32 master, the rebuilt
// bf16 + remainder master, or the parameter itself), moments of dtypes M and V.
//   L2 mode:    g += wd p;  update = m_hat / (sqrt(v_hat) + eps)
//   AdamW mode: update = m_hat / (sqrt(v_hat) + eps) + wd p
//   p -= lr update
struct FusedAdamHyper {
  float beta1, beta2, bias_correction1, bias_correction2, eps, lr;
  float weight_decay;  // tensors without weight decay: 0
  bool adam_w_mode;
  float grad_scale;
};
// master: fp32 or null; remainder: int16 or null (only with P = bf16); never both. Both are
// state arrays (indexed by UpdateTensor::state).
template <class P, class M, class V>
void fused_adam_update(const UpdatePlan& plan, P* param, const P* grad, M* exp_avg, V* exp_avg_sq,
                       float* master, int16_t* remainder, const FusedAdamHyper& h,
                       const RoundingMode& r, UpdateCounts* counts = nullptr);

// torch.optim.SGD with momentum, dampening, Nesterov and L2 weight decay; the momentum buffer
// has the parameter's dtype and is a copy of the gradient on the first step.
struct SgdHyper {
  float lr, momentum, one_minus_dampening;
  float weight_decay;  // tensors without weight decay: 0
  bool nesterov, first_step;
  float grad_scale;
};
// momentum_buf: a state array, or null without momentum.
template <class P>
void sgd_update(const UpdatePlan& plan, P* param, const P* grad, P* momentum_buf, const SgdHyper& h,
                const RoundingMode& r, UpdateCounts* counts = nullptr);

// out = the sum over n gradient elements of (float(g))^2, accumulated in double (on the device;
// no wait).
template <class P>
void grad_sum_squares(const P* grad, int64_t n, const Kokkos::View<double, MemSpace>& out);

// out (n) = float(in (n)), exact.
template <class T>
void widen_to_float(float* out, const T* in, int64_t n);

// out (n) = float(rebuild(param, remainder)), the fp32 master of a remainder pair.
void rebuild_master(float* out, const bf16* param, const int16_t* remainder, int64_t n);

}  // namespace kktrain

// The zero of UpdateCounts for Kokkos::Sum.
namespace Kokkos {
template <>
struct reduction_identity<kktrain::UpdateCounts> {
  KOKKOS_FORCEINLINE_FUNCTION static kktrain::UpdateCounts sum() { return kktrain::UpdateCounts(); }
};
}  // namespace Kokkos
