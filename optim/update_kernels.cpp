// The fused update kernels. Every choice that is fixed for a launch (dtypes, master kind,
// stochastic rounding, momentum) is a template parameter or folded into arithmetic (weight decay
// terms that are 0 or 1 for the other mode), so the loop bodies are branch-free and vectorize.
#include "optim/update_kernels.hpp"

#include <initializer_list>
#include <type_traits>

#include "core/random.hpp"

namespace kktrain {

namespace {

// The bf16 parameter bits for x, as an fp32 bit pattern (bf16 in the high half, low half zero):
// round to nearest even, or stochastic rounding of finite values (noise added below the kept bits,
// then truncation: unbiased in magnitude) keyed on the element's global index.
template <bool SR>
KOKKOS_INLINE_FUNCTION uint32_t param_bits32(float x, const RoundingMode& r, int64_t i) {
  if constexpr (SR) {
    const uint32_t noise =
        static_cast<uint32_t>(hash3(r.seed, r.step, static_cast<uint64_t>(r.index_offset + i))) &
        0xffffu;
    const uint32_t sr = (float_bits(x) + noise) & 0xffff0000u;
    return math::isfinite_f(x) ? sr : bf16_round_bits32(x);
  } else {
    (void)r;
    (void)i;
    return bf16_round_bits32(x);
  }
}

// Rounds an fp32 result into the stored type: exact for float; bf16 as param_bits32.
template <class T, bool SR>
struct Store {
  KOKKOS_INLINE_FUNCTION static void apply(T* p, float x, const RoundingMode&, int64_t i) {
    store_as(p, i, x);
  }
};
template <bool SR>
struct Store<bf16, SR> {
  KOKKOS_INLINE_FUNCTION static void apply(bf16* p, float x, const RoundingMode& r, int64_t i) {
    reinterpret_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(param_bits32<SR>(x, r, i) >> 16);
  }
};

// x rounded to T, as a float (x for float; round-to-nearest-even for bf16).
template <class T>
KOKKOS_INLINE_FUNCTION float round_as(float x);
template <>
KOKKOS_INLINE_FUNCTION float round_as<float>(float x) {
  return x;
}
template <>
KOKKOS_INLINE_FUNCTION float round_as<bf16>(float x) {
  return round_to_bf16(x);
}
// p[i] = x for an x that is already a value of T (exact: bf16 keeps the high half).
KOKKOS_INLINE_FUNCTION void store_exact(float* p, int64_t i, float x) {
  p[i] = x;
}
KOKKOS_INLINE_FUNCTION void store_exact(bf16* p, int64_t i, float x) {
  reinterpret_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(float_bits(x) >> 16);
}

// Where a kernel over 16-bit arrays can run word by word (bf16.hpp, "two adjacent 16-bit values"):
// 0 if every pointer is 4-byte aligned, 1 if every one is 2 bytes past (the words start at element
// 1), -1 otherwise (element by element).
inline int word_start(std::initializer_list<const void*> ptrs) {
  int odd = 0, even = 0;
  for (const void* p : ptrs) (reinterpret_cast<uintptr_t>(p) % 4 == 0 ? even : odd) += 1;
  return odd == 0 ? 0 : even == 0 ? 1 : -1;
}

// Runs elem(i) for i in [0, n), with pair(j) covering elements s + 2j and s + 2j + 1 where the
// arrays allow it (s = word_start; s < 0: elem everywhere).
template <class Elem, class Pair>
void run_words(const char* name, int64_t n, int s, const Elem& elem, const Pair& pair) {
  if (s < 0 || n < 2 + s) {
    Kokkos::parallel_for(name, RangePolicy(0, n), elem);
    return;
  }
  const int64_t words = (n - s) / 2;
  if (s > 0) Kokkos::parallel_for(name, RangePolicy(0, s), elem);
  Kokkos::parallel_for(name, RangePolicy(0, words), pair);
  if (s + 2 * words < n) Kokkos::parallel_for(name, RangePolicy(s + 2 * words, n), elem);
}

enum MasterMode { kPlain, kPlainSR, kMaster, kRemainder };

// One element of torch Adam / AdamW from the stored values (as floats): the new moments rounded to
// their stored type P (the stored moments feed the update, as in torch) and the new parameter
// before rounding. decay = 1 - lr wd and l2 = 0 for AdamW; decay = 1 and l2 = wd for Adam
// (multiplying by 1 and adding 0 * p are exact).
struct AdamResult {
  float m, v, p;
};
template <class P>
KOKKOS_INLINE_FUNCTION AdamResult torch_adam_element(float p0, float g0, float m0, float v0,
                                                     const TorchAdamHyper& h, float decay,
                                                     float l2) {
  const float g = g0 * h.grad_scale + l2 * p0;  // grad.add(param, alpha=wd)
  const float p = p0 * decay;                   // param.mul_(1 - lr * wd)
  AdamResult o;
  // exp_avg.mul_(b1).add_(g, alpha=1-b1); exp_avg_sq.mul_(b2).addcmul_(g, g, value=1-b2)
  o.m = round_as<P>(m0 * h.beta1 + h.one_minus_beta1 * g);
  o.v = round_as<P>(v0 * h.beta2 + h.one_minus_beta2 * g * g);
  // denom = sqrt(v) / sqrt(bc2) + eps; param.addcdiv_(m, denom, value=-step_size)
  const float denom = math::sqrt(o.v) / h.bias_correction2_sqrt + h.eps;
  o.p = p + h.neg_step_size * o.m / denom;
  return o;
}

template <class P, bool SR>
void torch_adam_impl(P* param, const P* grad, P* exp_avg, P* exp_avg_sq, int64_t n,
                     const TorchAdamHyper& h, const RoundingMode& r) {
  const float decay = h.decoupled ? h.decay_factor : 1.0f;
  const float l2 = h.decoupled ? 0.0f : h.weight_decay;
  const auto elem = KOKKOS_LAMBDA(const int64_t i) {
    const AdamResult o = torch_adam_element<P>(
        to_f32(param[i]), to_f32(grad[i]), to_f32(exp_avg[i]), to_f32(exp_avg_sq[i]), h, decay, l2);
    store_exact(exp_avg, i, o.m);
    store_exact(exp_avg_sq, i, o.v);
    Store<P, SR>::apply(param, o.p, r, i);
  };
  if constexpr (std::is_same<P, bf16>::value) {
    const int s = word_start({param, grad, exp_avg, exp_avg_sq});
    const int64_t o = s > 0 ? s : 0;
    bf16 *pp = param + o, *mp = exp_avg + o, *vp = exp_avg_sq + o;
    const bf16* gp = grad + o;
    const auto pair = KOKKOS_LAMBDA(const int64_t j) {
      const uint32_t pw = load_word(pp, j), gw = load_word(gp, j);
      const uint32_t mw = load_word(mp, j), vw = load_word(vp, j);
      const AdamResult lo = torch_adam_element<bf16>(bf16_lo(pw), bf16_lo(gw), bf16_lo(mw),
                                                     bf16_lo(vw), h, decay, l2);
      const AdamResult hi = torch_adam_element<bf16>(bf16_hi(pw), bf16_hi(gw), bf16_hi(mw),
                                                     bf16_hi(vw), h, decay, l2);
      store_word(mp, j, bf16_word(float_bits(lo.m), float_bits(hi.m)));
      store_word(vp, j, bf16_word(float_bits(lo.v), float_bits(hi.v)));
      const int64_t i = s + 2 * j;
      store_word(pp, j, bf16_word(param_bits32<SR>(lo.p, r, i), param_bits32<SR>(hi.p, r, i + 1)));
    };
    run_words("torch_adam_update", n, s, elem, pair);
  } else {
    Kokkos::parallel_for("torch_adam_update", RangePolicy(0, n), elem);
  }
}

// One element of TE FusedAdam from the master value p and the stored gradient and moments (as
// floats): the new moments and parameter, before rounding. l2 = wd in L2 mode, decoupled = wd in
// AdamW mode (the other 0).
KOKKOS_INLINE_FUNCTION AdamResult fused_adam_element(float p, float g0, float m0, float v0,
                                                     const FusedAdamHyper& h, float l2,
                                                     float decoupled) {
  const float g = g0 * h.grad_scale + l2 * p;  // L2 mode: g += wd p
  AdamResult o;
  o.m = h.beta1 * m0 + (1.0f - h.beta1) * g;
  o.v = h.beta2 * v0 + (1.0f - h.beta2) * g * g;
  const float denom = math::sqrt(o.v / h.bias_correction2) + h.eps;
  const float update = (o.m / h.bias_correction1) / denom + decoupled * p;  // AdamW: + wd p
  o.p = p - h.lr * update;
  return o;
}

template <class P, class M, class V, int Mode>
void fused_adam_impl(P* param, const P* grad, M* exp_avg, V* exp_avg_sq, float* master,
                     int16_t* remainder, int64_t n, const FusedAdamHyper& h,
                     const RoundingMode& r) {
  const float l2 = h.adam_w_mode ? 0.0f : h.weight_decay;
  const float decoupled = h.adam_w_mode ? h.weight_decay : 0.0f;
  const auto elem = KOKKOS_LAMBDA(const int64_t i) {
    // nvcc: an extended lambda may not capture a variable first inside `if constexpr`; name the
    // ones only some branches use here.
    (void)param;
    (void)master;
    (void)remainder;
    (void)r;
    float p0;
    if constexpr (Mode == kMaster) {
      p0 = master[i];
    } else if constexpr (Mode == kRemainder) {
      p0 = rebuild_remainder(param[i], remainder[i]);
    } else {
      p0 = to_f32(param[i]);
    }
    const AdamResult o = fused_adam_element(p0, to_f32(grad[i]), to_f32(exp_avg[i]),
                                            to_f32(exp_avg_sq[i]), h, l2, decoupled);
    store_as(exp_avg, i, o.m);
    store_as(exp_avg_sq, i, o.v);
    if constexpr (Mode == kMaster) {
      master[i] = o.p;
      store_as(param, i, o.p);
    } else if constexpr (Mode == kRemainder) {
      const Bf16Remainder sp = split_remainder(o.p);
      store_bits(param, i, sp.high);
      remainder[i] = sp.remainder;
    } else {
      Store<P, Mode == kPlainSR>::apply(param, o.p, r, i);
    }
  };
  // All-16-bit patterns (bf16 parameter and moments, remainder or none) run word by word.
  if constexpr (std::is_same<P, bf16>::value && std::is_same<M, bf16>::value &&
                std::is_same<V, bf16>::value && Mode != kMaster) {
    const int s = Mode == kRemainder ? word_start({param, grad, exp_avg, exp_avg_sq, remainder})
                                     : word_start({param, grad, exp_avg, exp_avg_sq});
    const int64_t o = s > 0 ? s : 0;
    bf16 *pp = param + o, *mp = exp_avg + o, *vp = exp_avg_sq + o;
    const bf16* gp = grad + o;
    int16_t* rp = Mode == kRemainder ? remainder + o : nullptr;
    const auto pair = KOKKOS_LAMBDA(const int64_t j) {
      (void)rp;  // captured before any `if constexpr` (nvcc extended-lambda rule)
      (void)r;
      (void)s;
      const uint32_t pw = load_word(pp, j), gw = load_word(gp, j);
      const uint32_t mw = load_word(mp, j), vw = load_word(vp, j);
      float p_lo, p_hi;
      if constexpr (Mode == kRemainder) {
        const uint32_t rw = load_word(rp, j);
        p_lo = rebuild_remainder_lo(pw, rw);
        p_hi = rebuild_remainder_hi(pw, rw);
      } else {
        p_lo = bf16_lo(pw);
        p_hi = bf16_hi(pw);
      }
      const AdamResult lo =
          fused_adam_element(p_lo, bf16_lo(gw), bf16_lo(mw), bf16_lo(vw), h, l2, decoupled);
      const AdamResult hi =
          fused_adam_element(p_hi, bf16_hi(gw), bf16_hi(mw), bf16_hi(vw), h, l2, decoupled);
      store_word(mp, j, bf16_word(bf16_round_bits32(lo.m), bf16_round_bits32(hi.m)));
      store_word(vp, j, bf16_word(bf16_round_bits32(lo.v), bf16_round_bits32(hi.v)));
      if constexpr (Mode == kRemainder) {
        store_word(pp, j, bf16_word(split_remainder_high32(lo.p), split_remainder_high32(hi.p)));
        store_word(rp, j, remainder_word(lo.p, hi.p));
      } else {
        const int64_t i = s + 2 * j;
        store_word(pp, j,
                   bf16_word(param_bits32<Mode == kPlainSR>(lo.p, r, i),
                             param_bits32<Mode == kPlainSR>(hi.p, r, i + 1)));
      }
    };
    run_words("fused_adam_update", n, s, elem, pair);
  } else {
    Kokkos::parallel_for("fused_adam_update", RangePolicy(0, n), elem);
  }
}

template <class P, bool SR, bool Momentum>
void sgd_impl(P* param, const P* grad, P* momentum_buf, int64_t n, const SgdHyper& h,
              const RoundingMode& r) {
  const float keep = h.first_step ? 0.0f : h.momentum;  // first step: buf = clone(d_p)
  const float take = h.first_step ? 1.0f : h.one_minus_dampening;
  const float nesterov = h.nesterov ? 1.0f : 0.0f;
  Kokkos::parallel_for(
      "sgd_update", RangePolicy(0, n), KOKKOS_LAMBDA(const int64_t i) {
        (void)momentum_buf;  // captured before the `if constexpr` (nvcc extended-lambda rule)
        (void)keep;
        (void)take;
        (void)nesterov;
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
