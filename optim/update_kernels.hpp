// The fused optimizer update kernels: one Kokkos kernel per parameter reads param, grad and
// state, and writes param and state. Arithmetic is fp32; each stored value is rounded once
// (round-to-nearest-even, or stochastic rounding for bf16 parameters when asked).
#pragma once

#include <cstdint>

#include "core/bf16.hpp"
#include "core/kokkos_compat.hpp"

namespace kktrain {

// Stochastic rounding of bf16 parameters updated without an fp32 master: the noise is keyed on
// (seed, step, global element index), so results do not depend on threads, backend or ranks.
struct RoundingMode {
  bool stochastic = false;
  uint64_t seed = 0;
  uint64_t step = 0;
  int64_t index_offset = 0;  // global index of element 0 of this parameter
};

// torch.optim.Adam / AdamW, in torch's order of operations (docs/precision.md, "Optimizers"):
//   AdamW: p *= 1 - lr wd            Adam: g += wd p
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g g
//   p += -lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// Moments have the parameter's dtype P; the stored (rounded) moments feed the update, as in
// torch where they are tensors of that dtype.
struct TorchAdamHyper {
  float beta1, beta2, one_minus_beta1, one_minus_beta2;
  float eps, bias_correction2_sqrt, neg_step_size;
  float decay_factor;  // AdamW: 1 - lr wd
  float weight_decay;  // Adam: L2 coefficient
  bool decoupled;      // AdamW
  float grad_scale;
};
template <class P>
void torch_adam_update(P* param, const P* grad, P* exp_avg, P* exp_avg_sq, int64_t n,
                       const TorchAdamHyper& h, const RoundingMode& r);

// Transformer Engine FusedAdam: fp32 math on the master value (the fp32 master, the rebuilt
// bf16 + remainder master, or the parameter itself), moments of dtypes M and V.
//   L2 mode:    g += wd p;  update = m_hat / (sqrt(v_hat) + eps)
//   AdamW mode: update = m_hat / (sqrt(v_hat) + eps) + wd p
//   p -= lr update
struct FusedAdamHyper {
  float beta1, beta2, bias_correction1, bias_correction2, eps, lr, weight_decay;
  bool adam_w_mode;
  float grad_scale;
};
// master (n) fp32 or null; remainder (n) int16 or null (only with P = bf16); never both.
template <class P, class M, class V>
void fused_adam_update(P* param, const P* grad, M* exp_avg, V* exp_avg_sq, float* master,
                       int16_t* remainder, int64_t n, const FusedAdamHyper& h,
                       const RoundingMode& r);

// torch.optim.SGD with momentum, dampening, Nesterov and L2 weight decay; the momentum buffer
// has the parameter's dtype and is a copy of the gradient on the first step.
struct SgdHyper {
  float lr, momentum, one_minus_dampening, weight_decay;
  bool nesterov, first_step;
  float grad_scale;
};
template <class P>
void sgd_update(P* param, const P* grad, P* momentum_buf, int64_t n, const SgdHyper& h,
                const RoundingMode& r);

// Sum over n gradient elements of (float(g))^2, accumulated in double.
template <class P>
double grad_sum_squares(const P* grad, int64_t n);

// out (n) = float(in (n)), exact.
template <class T>
void widen_to_float(float* out, const T* in, int64_t n);

// out (n) = float(rebuild(param, remainder)), the fp32 master of a remainder pair.
void rebuild_master(float* out, const bf16* param, const int16_t* remainder, int64_t n);

}  // namespace kktrain
