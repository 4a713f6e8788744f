#include "optim/update_kernels.hpp"

#include "core/random.hpp"

namespace kktrain {

namespace {

// Rounds an fp32 result into the stored type: exact for float; for bf16 nearest-even, or
// stochastic (unbiased in magnitude: noise added below the kept bits, then truncation).
template <class T>
KOKKOS_INLINE_FUNCTION T store(float x, const RoundingMode& r, int64_t i);
template <>
KOKKOS_INLINE_FUNCTION float store<float>(float x, const RoundingMode&, int64_t) {
  return x;
}
template <>
KOKKOS_INLINE_FUNCTION bf16 store<bf16>(float x, const RoundingMode& r, int64_t i) {
  if (!r.stochastic || !math::isfinite_f(x)) return bf16(x);
  const uint32_t noise =
      static_cast<uint32_t>(hash3(r.seed, r.step, static_cast<uint64_t>(r.index_offset + i))) &
      0xffffu;
  return bf16::from_bits(static_cast<uint16_t>((float_bits(x) + noise) >> 16));
}

template <class T>
KOKKOS_INLINE_FUNCTION T store_rne(float x) {
  return from_f32<T>(x);
}

}  // namespace

template <class P>
void torch_adam_update(P* param, const P* grad, P* exp_avg, P* exp_avg_sq, int64_t n,
                       const TorchAdamHyper& h, const RoundingMode& r) {
  Kokkos::parallel_for(
      "torch_adam_update", RangePolicy(0, n), KOKKOS_LAMBDA(const int64_t i) {
        float g = to_f32(grad[i]) * h.grad_scale;
        float p = to_f32(param[i]);
        if (h.decoupled) {
          p = p * h.decay_factor;  // param.mul_(1 - lr * wd)
        } else {
          g = g + h.weight_decay * p;  // grad.add(param, alpha=wd)
        }
        // exp_avg.mul_(b1).add_(g, alpha=1-b1); exp_avg_sq.mul_(b2).addcmul_(g, g, value=1-b2)
        const P m = store_rne<P>(to_f32(exp_avg[i]) * h.beta1 + h.one_minus_beta1 * g);
        const P v = store_rne<P>(to_f32(exp_avg_sq[i]) * h.beta2 + h.one_minus_beta2 * g * g);
        exp_avg[i] = m;
        exp_avg_sq[i] = v;
        // denom = sqrt(v) / sqrt(bc2) + eps; param.addcdiv_(m, denom, value=-step_size)
        const float denom = math::sqrt(to_f32(v)) / h.bias_correction2_sqrt + h.eps;
        param[i] = store<P>(p + h.neg_step_size * to_f32(m) / denom, r, i);
      });
}

template <class P, class M, class V>
void fused_adam_update(P* param, const P* grad, M* exp_avg, V* exp_avg_sq, float* master,
                       int16_t* remainder, int64_t n, const FusedAdamHyper& h,
                       const RoundingMode& r) {
  Kokkos::parallel_for(
      "fused_adam_update", RangePolicy(0, n), KOKKOS_LAMBDA(const int64_t i) {
        float g = to_f32(grad[i]) * h.grad_scale;
        float p;
        if (master) {
          p = master[i];
        } else if (remainder) {
          p = rebuild_remainder(bf16::from_bits(reinterpret_cast<const bf16*>(param)[i].bits),
                                remainder[i]);
        } else {
          p = to_f32(param[i]);
        }
        if (!h.adam_w_mode) g = g + h.weight_decay * p;
        const float m = h.beta1 * to_f32(exp_avg[i]) + (1.0f - h.beta1) * g;
        const float v = h.beta2 * to_f32(exp_avg_sq[i]) + (1.0f - h.beta2) * g * g;
        const float denom = math::sqrt(v / h.bias_correction2) + h.eps;
        float update = (m / h.bias_correction1) / denom;
        if (h.adam_w_mode) update = update + h.weight_decay * p;
        p = p - h.lr * update;
        exp_avg[i] = store_rne<M>(m);
        exp_avg_sq[i] = store_rne<V>(v);
        if (master) {
          master[i] = p;
          param[i] = store_rne<P>(p);
        } else if (remainder) {
          const Bf16Remainder s = split_remainder(p);
          reinterpret_cast<bf16*>(param)[i] = s.high;
          remainder[i] = s.remainder;
        } else {
          param[i] = store<P>(p, r, i);
        }
      });
}

template <class P>
void sgd_update(P* param, const P* grad, P* momentum_buf, int64_t n, const SgdHyper& h,
                const RoundingMode& r) {
  Kokkos::parallel_for(
      "sgd_update", RangePolicy(0, n), KOKKOS_LAMBDA(const int64_t i) {
        float d = to_f32(grad[i]) * h.grad_scale;
        const float p = to_f32(param[i]);
        if (h.weight_decay != 0.0f) d = d + h.weight_decay * p;  // d_p.add(param, alpha=wd)
        if (momentum_buf) {
          // first step: buf = clone(d_p); then buf.mul_(momentum).add_(d_p, alpha=1-dampening)
          const P b = store_rne<P>(
              h.first_step ? d : to_f32(momentum_buf[i]) * h.momentum + h.one_minus_dampening * d);
          momentum_buf[i] = b;
          d = h.nesterov ? d + h.momentum * to_f32(b) : to_f32(b);
        }
        param[i] = store<P>(p + (-h.lr) * d, r, i);  // param.add_(d_p, alpha=-lr)
      });
}

template <class P>
double grad_sum_squares(const P* grad, int64_t n) {
  double total = 0.0;
  Kokkos::parallel_reduce(
      "grad_sum_squares", RangePolicy(0, n),
      KOKKOS_LAMBDA(const int64_t i, double& acc) {
        const float g = to_f32(grad[i]);
        acc += static_cast<double>(g * g);
      },
      total);
  return total;
}

template <class T>
void widen_to_float(float* out, const T* in, int64_t n) {
  Kokkos::parallel_for(
      "widen_to_float", RangePolicy(0, n),
      KOKKOS_LAMBDA(const int64_t i) { out[i] = to_f32(in[i]); });
}
template void widen_to_float<float>(float*, const float*, int64_t);
template void widen_to_float<bf16>(float*, const bf16*, int64_t);

void rebuild_master(float* out, const bf16* param, const int16_t* remainder, int64_t n) {
  Kokkos::parallel_for(
      "rebuild_master", RangePolicy(0, n),
      KOKKOS_LAMBDA(const int64_t i) { out[i] = rebuild_remainder(param[i], remainder[i]); });
}

#define KKTRAIN_INSTANTIATE_P(P)                                                                \
  template void torch_adam_update<P>(P*, const P*, P*, P*, int64_t, const TorchAdamHyper&,      \
                                     const RoundingMode&);                                      \
  template void sgd_update<P>(P*, const P*, P*, int64_t, const SgdHyper&, const RoundingMode&); \
  template double grad_sum_squares<P>(const P*, int64_t);
KKTRAIN_INSTANTIATE_P(float)
KKTRAIN_INSTANTIATE_P(bf16)
#undef KKTRAIN_INSTANTIATE_P

#define KKTRAIN_INSTANTIATE_FUSED(P, M, V)                                                  \
  template void fused_adam_update<P, M, V>(P*, const P*, M*, V*, float*, int16_t*, int64_t, \
                                           const FusedAdamHyper&, const RoundingMode&);
KKTRAIN_INSTANTIATE_FUSED(float, float, float)
KKTRAIN_INSTANTIATE_FUSED(float, float, bf16)
KKTRAIN_INSTANTIATE_FUSED(float, bf16, float)
KKTRAIN_INSTANTIATE_FUSED(float, bf16, bf16)
KKTRAIN_INSTANTIATE_FUSED(bf16, float, float)
KKTRAIN_INSTANTIATE_FUSED(bf16, float, bf16)
KKTRAIN_INSTANTIATE_FUSED(bf16, bf16, float)
KKTRAIN_INSTANTIATE_FUSED(bf16, bf16, bf16)
#undef KKTRAIN_INSTANTIATE_FUSED

}  // namespace kktrain
