// The fused update kernels. Every choice that is fixed for a launch (dtypes, master kind,
// stochastic rounding, momentum) is a template parameter or folded into arithmetic (weight decay
// terms that are 0 or 1 for the other mode), so the loop bodies are branch-free and vectorize.
#include "optim/update_kernels.hpp"

#include "core/random.hpp"

namespace kktrain {

namespace {

// Rounds an fp32 result into the stored type: exact for float; bf16 round-to-nearest-even, or
// stochastic rounding (noise added below the kept bits, then truncation: unbiased in magnitude).
template <class T, bool SR>
struct Store {
  KOKKOS_INLINE_FUNCTION static void apply(T* p, float x, const RoundingMode&, int64_t i) {
    store_as(p, i, x);
  }
};
template <>
struct Store<bf16, true> {
  KOKKOS_INLINE_FUNCTION static void apply(bf16* p, float x, const RoundingMode& r, int64_t i) {
    const uint32_t noise =
        static_cast<uint32_t>(hash3(r.seed, r.step, static_cast<uint64_t>(r.index_offset + i))) &
        0xffffu;
    const uint16_t sr = static_cast<uint16_t>((float_bits(x) + noise) >> 16);
    reinterpret_cast<uint16_t*>(p)[i] = math::isfinite_f(x) ? sr : bf16_bits_from_float(x);
  }
};

enum MasterMode { kPlain, kPlainSR, kMaster, kRemainder };

template <class P, bool SR>
void torch_adam_impl(P* param, const P* grad, P* exp_avg, P* exp_avg_sq, int64_t n,
                     const TorchAdamHyper& h, const RoundingMode& r) {
  // AdamW decays the parameter (decay = 1 - lr wd, l2 = 0); Adam adds wd p to the gradient
  // (decay = 1, l2 = wd). Multiplying by 1 and adding 0 * p are exact.
  const float decay = h.decoupled ? h.decay_factor : 1.0f;
  const float l2 = h.decoupled ? 0.0f : h.weight_decay;
  Kokkos::parallel_for(
      "torch_adam_update", RangePolicy(0, n), KOKKOS_LAMBDA(const int64_t i) {
        const float p0 = to_f32(param[i]);
        const float g = to_f32(grad[i]) * h.grad_scale + l2 * p0;  // grad.add(param, alpha=wd)
        const float p = p0 * decay;                                // param.mul_(1 - lr * wd)
        // exp_avg.mul_(b1).add_(g, alpha=1-b1); exp_avg_sq.mul_(b2).addcmul_(g, g, value=1-b2)
        const float m =
            store_rounded(exp_avg, i, to_f32(exp_avg[i]) * h.beta1 + h.one_minus_beta1 * g);
        const float v = store_rounded(exp_avg_sq, i,
                                      to_f32(exp_avg_sq[i]) * h.beta2 + h.one_minus_beta2 * g * g);
        // denom = sqrt(v) / sqrt(bc2) + eps; param.addcdiv_(m, denom, value=-step_size)
        const float denom = math::sqrt(v) / h.bias_correction2_sqrt + h.eps;
        Store<P, SR>::apply(param, p + h.neg_step_size * m / denom, r, i);
      });
}

template <class P, class M, class V, int Mode>
void fused_adam_impl(P* param, const P* grad, M* exp_avg, V* exp_avg_sq, float* master,
                     int16_t* remainder, int64_t n, const FusedAdamHyper& h,
                     const RoundingMode& r) {
  const float l2 = h.adam_w_mode ? 0.0f : h.weight_decay;
  const float decoupled = h.adam_w_mode ? h.weight_decay : 0.0f;
  Kokkos::parallel_for(
      "fused_adam_update", RangePolicy(0, n), KOKKOS_LAMBDA(const int64_t i) {
        float p;
        if constexpr (Mode == kMaster) {
          p = master[i];
        } else if constexpr (Mode == kRemainder) {
          p = rebuild_remainder(param[i], remainder[i]);
        } else {
          p = to_f32(param[i]);
        }
        const float g = to_f32(grad[i]) * h.grad_scale + l2 * p;  // L2 mode: g += wd p
        const float m = h.beta1 * to_f32(exp_avg[i]) + (1.0f - h.beta1) * g;
        const float v = h.beta2 * to_f32(exp_avg_sq[i]) + (1.0f - h.beta2) * g * g;
        const float denom = math::sqrt(v / h.bias_correction2) + h.eps;
        const float update = (m / h.bias_correction1) / denom + decoupled * p;  // AdamW: + wd p
        p = p - h.lr * update;
        store_as(exp_avg, i, m);
        store_as(exp_avg_sq, i, v);
        if constexpr (Mode == kMaster) {
          master[i] = p;
          store_as(param, i, p);
        } else if constexpr (Mode == kRemainder) {
          const Bf16Remainder s = split_remainder(p);
          store_bits(param, i, s.high);
          remainder[i] = s.remainder;
        } else {
          Store<P, Mode == kPlainSR>::apply(param, p, r, i);
        }
      });
}

template <class P, bool SR, bool Momentum>
void sgd_impl(P* param, const P* grad, P* momentum_buf, int64_t n, const SgdHyper& h,
              const RoundingMode& r) {
  const float keep = h.first_step ? 0.0f : h.momentum;  // first step: buf = clone(d_p)
  const float take = h.first_step ? 1.0f : h.one_minus_dampening;
  const float nesterov = h.nesterov ? 1.0f : 0.0f;
  Kokkos::parallel_for(
      "sgd_update", RangePolicy(0, n), KOKKOS_LAMBDA(const int64_t i) {
        const float p = to_f32(param[i]);
        float d = to_f32(grad[i]) * h.grad_scale + h.weight_decay * p;  // d_p.add(param, wd)
        if constexpr (Momentum) {
          // buf.mul_(momentum).add_(d_p, alpha=1-dampening); nesterov: d_p.add(buf, momentum)
          const float b = store_rounded(momentum_buf, i, to_f32(momentum_buf[i]) * keep + take * d);
          d = nesterov != 0.0f ? d + h.momentum * b : b;
        }
        Store<P, SR>::apply(param, p + (-h.lr) * d, r, i);  // param.add_(d_p, alpha=-lr)
      });
}

}  // namespace

template <class P>
void torch_adam_update(P* param, const P* grad, P* exp_avg, P* exp_avg_sq, int64_t n,
                       const TorchAdamHyper& h, const RoundingMode& r) {
  if (r.stochastic) {
    torch_adam_impl<P, true>(param, grad, exp_avg, exp_avg_sq, n, h, r);
  } else {
    torch_adam_impl<P, false>(param, grad, exp_avg, exp_avg_sq, n, h, r);
  }
}

template <class P, class M, class V>
void fused_adam_update(P* param, const P* grad, M* exp_avg, V* exp_avg_sq, float* master,
                       int16_t* remainder, int64_t n, const FusedAdamHyper& h,
                       const RoundingMode& r) {
  if (master) {
    fused_adam_impl<P, M, V, kMaster>(param, grad, exp_avg, exp_avg_sq, master, remainder, n, h, r);
  } else if (remainder) {
    if constexpr (std::is_same<P, bf16>::value) {
      fused_adam_impl<P, M, V, kRemainder>(param, grad, exp_avg, exp_avg_sq, master, remainder, n,
                                           h, r);
    }
  } else if (r.stochastic) {
    fused_adam_impl<P, M, V, kPlainSR>(param, grad, exp_avg, exp_avg_sq, master, remainder, n, h,
                                       r);
  } else {
    fused_adam_impl<P, M, V, kPlain>(param, grad, exp_avg, exp_avg_sq, master, remainder, n, h, r);
  }
}

template <class P>
void sgd_update(P* param, const P* grad, P* momentum_buf, int64_t n, const SgdHyper& h,
                const RoundingMode& r) {
  if (momentum_buf) {
    if (r.stochastic) {
      sgd_impl<P, true, true>(param, grad, momentum_buf, n, h, r);
    } else {
      sgd_impl<P, false, true>(param, grad, momentum_buf, n, h, r);
    }
  } else if (r.stochastic) {
    sgd_impl<P, true, false>(param, grad, momentum_buf, n, h, r);
  } else {
    sgd_impl<P, false, false>(param, grad, momentum_buf, n, h, r);
  }
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

void rebuild_master(float* out, const bf16* param, const int16_t* remainder, int64_t n) {
  Kokkos::parallel_for(
      "rebuild_master", RangePolicy(0, n),
      KOKKOS_LAMBDA(const int64_t i) { out[i] = rebuild_remainder(param[i], remainder[i]); });
}

#define KKTRAIN_INSTANTIATE_P(P)                                                                \
  template void torch_adam_update<P>(P*, const P*, P*, P*, int64_t, const TorchAdamHyper&,      \
                                     const RoundingMode&);                                      \
  template void sgd_update<P>(P*, const P*, P*, int64_t, const SgdHyper&, const RoundingMode&); \
  template double grad_sum_squares<P>(const P*, int64_t);                                       \
  template void widen_to_float<P>(float*, const P*, int64_t);
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
