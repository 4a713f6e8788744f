// The fused update kernels, one launch per group of tensors (for_tensor_blocks). Every choice that
// is fixed for a launch (dtypes, master kind, stochastic rounding, momentum) is a template
// parameter or folded into arithmetic (weight decay terms that are 0 or 1 for the other mode), so
// the loop bodies are branch-free and vectorize; what differs per tensor (offsets, weight decay,
// word alignment) is read once per block. A counting launch (UpdateCounts) runs the same loop
// body as a parallel_reduce: each call tallies its span beside the update (a few compares on values
// already in registers, no extra memory traffic) and the launch sums the tallies
// (update_tally.hpp).
#include "optim/update_kernels.hpp"

#include <type_traits>

#include "core/errors.hpp"
#include "core/random.hpp"
#include "optim/update_tally.hpp"

namespace kktrain {

namespace {

using namespace update_detail;

// The bf16 parameter bits for x, as an fp32 bit pattern (bf16 in the high half, low half zero):
// round to nearest even, or stochastic rounding of finite values (noise added below the kept bits,
// then truncation: unbiased in magnitude) keyed on the element's global index.
template <bool SR>
KOKKOS_INLINE_FUNCTION uint32_t param_bits32(float x, const RoundingMode& r, int64_t index) {
  if constexpr (SR) {
    const uint32_t noise =
        static_cast<uint32_t>(hash3(r.seed, r.step, static_cast<uint64_t>(index))) & 0xffffu;
    const uint32_t sr = (float_bits(x) + noise) & 0xffff0000u;
    return math::isfinite_f(x) ? sr : bf16_round_bits32(x);
  } else {
    (void)r;
    (void)index;
    return bf16_round_bits32(x);
  }
}

// Rounds an fp32 result into the stored type and returns the stored value: exact for float; bf16
// as param_bits32 (element i of a tensor whose element 0 has global index `first`).
template <class T, bool SR>
struct Store {
  KOKKOS_INLINE_FUNCTION static float apply(T* p, int64_t i, float x, const RoundingMode&,
                                            int64_t) {
    store_as(p, i, x);
    return x;
  }
};
template <bool SR>
struct Store<bf16, SR> {
  KOKKOS_INLINE_FUNCTION static float apply(bf16* p, int64_t i, float x, const RoundingMode& r,
                                            int64_t first) {
    const uint32_t bits = param_bits32<SR>(x, r, first + i);
    reinterpret_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(bits >> 16);
    return bits_float(bits);
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

// Elements [lo, hi) of a tensor: pair(j) covers elements s + 2j and s + 2j + 1 where the arrays
// allow it (s = word_start >= 0), elem(i) the rest (s < 0: everything). One call per block on
// CPUs (the pair loop is the vectorized one), one element per call on GPUs. Both return their
// Tally<Count>; the span's is their sum.
template <bool Count, class Elem, class Pair>
KOKKOS_INLINE_FUNCTION Tally<Count> run_span(int64_t lo, int64_t hi, int s, const Elem& elem,
                                             const Pair& pair) {
  Tally<Count> t;
  if (s < 0 || hi - lo < 2) {
    for (int64_t i = lo; i < hi; ++i) t.add(elem(i));
    return t;
  }
  int64_t first = lo;
  if (((first - s) & 1) != 0) t.add(elem(first++));
  const int64_t j0 = (first - s) / 2, words = (hi - first) / 2;
  for (int64_t j = j0; j < j0 + words; ++j) t.add(pair(j));
  if (first + 2 * words < hi) t.add(elem(hi - 1));
  return t;
}

enum MasterMode { kPlain, kPlainSR, kMaster, kRemainder };

// One element of torch Adam / AdamW from the stored values (as floats): the new moments rounded to
// their stored type P (the stored moments feed the update, as in torch) and the new parameter
// before rounding; m_lost / v_lost: the moment's EMA change was rounded away (bf16 moments).
// decay = 1 - lr wd and l2 = 0 for AdamW; decay = 1 and l2 = wd for Adam (multiplying by 1 and
// adding 0 * p are exact).
struct AdamResult {
  float m, v, p;
  uint32_t m_lost, v_lost;
};
template <class P>
KOKKOS_INLINE_FUNCTION AdamResult torch_adam_element(float p0, float g0, float m0, float v0,
                                                     const TorchAdamHyper& h, float decay,
                                                     float l2) {
  const float g = g0 * h.grad_scale + l2 * p0;  // grad.add(param, alpha=wd)
  const float p = p0 * decay;                   // param.mul_(1 - lr * wd)
  AdamResult o;
  // exp_avg.mul_(b1).add_(g, alpha=1-b1); exp_avg_sq.mul_(b2).addcmul_(g, g, value=1-b2)
  const float m = m0 * h.beta1 + h.one_minus_beta1 * g;
  const float v = v0 * h.beta2 + h.one_minus_beta2 * g * g;
  o.m = round_as<P>(m);
  o.v = round_as<P>(v);
  o.m_lost = unchanged_as<P>(m0, m, m0, o.m);
  o.v_lost = unchanged_as<P>(v0, v, v0, o.v);
  // denom = sqrt(v) / sqrt(bc2) + eps; param.addcdiv_(m, denom, value=-step_size)
  const float denom = math::sqrt(o.v) / h.bias_correction2_sqrt + h.eps;
  o.p = p + h.neg_step_size * o.m / denom;
  return o;
}

template <class P, bool SR, bool Count>
void torch_adam_impl(const UpdatePlan& plan, P* param, const P* grad, P* exp_avg, P* exp_avg_sq,
                     const TorchAdamHyper& h, const RoundingMode& r, UpdateCounts* counts) {
  const DView<UpdateTensor> tensors = plan.tensors();
  const auto body =
      KOKKOS_LAMBDA(const int64_t t, const int64_t lo, const int64_t hi, Tally<Count>& tally) {
    const UpdateTensor u = tensors(t);
    const float decay = h.decoupled && u.decay ? h.decay_factor : 1.0f;
    const float l2 = !h.decoupled && u.decay ? h.weight_decay : 0.0f;
    P* pp = param + u.param;
    const P* gp = grad + u.grad;
    P* mp = exp_avg + u.state;
    P* vp = exp_avg_sq + u.state;
    const auto elem = [=](const int64_t i) {
      const float p0 = to_f32(pp[i]);
      const AdamResult o =
          torch_adam_element<P>(p0, to_f32(gp[i]), to_f32(mp[i]), to_f32(vp[i]), h, decay, l2);
      store_exact(mp, i, o.m);
      store_exact(vp, i, o.v);
      const float stored = Store<P, SR>::apply(pp, i, o.p, r, u.index);
      return tally_of<Count>(unchanged_as<P>(p0, o.p, p0, stored), o.m_lost, o.v_lost);
    };
    if constexpr (std::is_same<P, bf16>::value) {
      const int s = u.word_start;
      const int64_t o = s > 0 ? s : 0;  // words start at element s
      const auto pair = [=](const int64_t j) {
        const uint32_t pw = load_word(pp + o, j), gw = load_word(gp + o, j);
        const uint32_t mw = load_word(mp + o, j), vw = load_word(vp + o, j);
        const AdamResult lo2 = torch_adam_element<bf16>(bf16_lo(pw), bf16_lo(gw), bf16_lo(mw),
                                                        bf16_lo(vw), h, decay, l2);
        const AdamResult hi2 = torch_adam_element<bf16>(bf16_hi(pw), bf16_hi(gw), bf16_hi(mw),
                                                        bf16_hi(vw), h, decay, l2);
        store_word(mp + o, j, bf16_word(float_bits(lo2.m), float_bits(hi2.m)));
        store_word(vp + o, j, bf16_word(float_bits(lo2.v), float_bits(hi2.v)));
        const int64_t i = u.index + o + 2 * j;
        const uint32_t p_lo = param_bits32<SR>(lo2.p, r, i);
        const uint32_t p_hi = param_bits32<SR>(hi2.p, r, i + 1);
        store_word(pp + o, j, bf16_word(p_lo, p_hi));
        return tally_of<Count>(unchanged(bf16_lo(pw), lo2.p, bf16_lo(pw), bits_float(p_lo)) +
                                   unchanged(bf16_hi(pw), hi2.p, bf16_hi(pw), bits_float(p_hi)),
                               lo2.m_lost + hi2.m_lost, lo2.v_lost + hi2.v_lost);
      };
      tally.add(run_span<Count>(lo, hi, s, elem, pair));
    } else {
      tally.add(run_span<Count>(lo, hi, -1, elem, elem));
    }
  };
  launch_update(std::integral_constant<bool, Count>(), "torch_adam_update", plan, body, counts);
}

// One element of TE FusedAdam from the master value p and the stored gradient and moments (as
// floats): the new moments and parameter, before rounding (m_lost, v_lost 0). l2 = wd in L2
// mode, decoupled = wd in AdamW mode (the other 0).
KOKKOS_INLINE_FUNCTION AdamResult fused_adam_element(float p, float g0, float m0, float v0,
                                                     const FusedAdamHyper& h, float l2,
                                                     float decoupled) {
  const float g = g0 * h.grad_scale + l2 * p;  // L2 mode: g += wd p
  AdamResult o{};
  o.m = h.beta1 * m0 + (1.0f - h.beta1) * g;
  o.v = h.beta2 * v0 + (1.0f - h.beta2) * g * g;
  const float denom = math::sqrt(o.v / h.bias_correction2) + h.eps;
  const float update = (o.m / h.bias_correction1) / denom + decoupled * p;  // AdamW: + wd p
  o.p = p - h.lr * update;
  return o;
}

// All-16-bit patterns (bf16 parameter and moments, remainder or none) run word by word. (A
// trait, not a local constant: nvcc counts a local named in `if constexpr` inside a device
// lambda as a capture there, and a constexpr function as host-only.)
template <class P, class M, class V, int Mode>
struct FusedWords {
  static constexpr bool value = std::is_same<P, bf16>::value && std::is_same<M, bf16>::value &&
                                std::is_same<V, bf16>::value && Mode != kMaster;
};

template <class P, class M, class V, int Mode, bool Count>
void fused_adam_impl(const UpdatePlan& plan, P* param, const P* grad, M* exp_avg, V* exp_avg_sq,
                     float* master, int16_t* remainder, const FusedAdamHyper& h,
                     const RoundingMode& r, UpdateCounts* counts) {
  const DView<UpdateTensor> tensors = plan.tensors();
  const auto body =
      KOKKOS_LAMBDA(const int64_t t, const int64_t lo, const int64_t hi, Tally<Count>& tally) {
    // nvcc: an extended lambda may not capture a variable first inside `if constexpr`; name
    // the ones only some branches use here.
    (void)master;
    (void)remainder;
    (void)r;
    const UpdateTensor u = tensors(t);
    const float wd = u.decay ? h.weight_decay : 0.0f;
    const float l2 = h.adam_w_mode ? 0.0f : wd;
    const float decoupled = h.adam_w_mode ? wd : 0.0f;
    P* pp = param + u.param;
    const P* gp = grad + u.grad;
    M* mp = exp_avg + u.state;
    V* vp = exp_avg_sq + u.state;
    float* wp = master ? master + u.state : nullptr;
    int16_t* rp = remainder ? remainder + u.state : nullptr;
    const auto elem = [=](const int64_t i) {
      // p0: the value the update starts from; before: the stored parameter before it (with a
      // full master, the master rounded to nearest: what every update stores, read without
      // a load of the parameter).
      float p0, before, stored;
      if constexpr (Mode == kMaster) {
        p0 = wp[i];
        before = round_as<P>(p0);
      } else if constexpr (Mode == kRemainder) {
        p0 = rebuild_remainder(pp[i], rp[i]);
        before = to_f32(pp[i]);
      } else {
        p0 = to_f32(pp[i]);
        before = p0;
      }
      const float m0 = to_f32(mp[i]), v0 = to_f32(vp[i]);
      const AdamResult o = fused_adam_element(p0, to_f32(gp[i]), m0, v0, h, l2, decoupled);
      const float m = store_rounded(mp, i, o.m);
      const float v = store_rounded(vp, i, o.v);
      if constexpr (Mode == kMaster) {
        wp[i] = o.p;
        stored = store_rounded(pp, i, o.p);
      } else if constexpr (Mode == kRemainder) {
        const Bf16Remainder sp = split_remainder(o.p);
        store_bits(pp, i, sp.high);
        rp[i] = sp.remainder;
        stored = sp.high.to_float();
      } else {
        stored = Store<P, Mode == kPlainSR>::apply(pp, i, o.p, r, u.index);
      }
      return tally_of<Count>(unchanged_as<P>(p0, o.p, before, stored),
                             unchanged_as<M>(m0, o.m, m0, m), unchanged_as<V>(v0, o.v, v0, v));
    };
    if constexpr (FusedWords<P, M, V, Mode>::value) {
      const int s = u.word_start;
      const int64_t o = s > 0 ? s : 0;  // words start at element s
      const auto pair = [=](const int64_t j) {
        const uint32_t pw = load_word(pp + o, j), gw = load_word(gp + o, j);
        const uint32_t mw = load_word(mp + o, j), vw = load_word(vp + o, j);
        float p_lo, p_hi;
        if constexpr (Mode == kRemainder) {
          const uint32_t rw = load_word(rp + o, j);
          p_lo = rebuild_remainder_lo(pw, rw);
          p_hi = rebuild_remainder_hi(pw, rw);
        } else {
          p_lo = bf16_lo(pw);
          p_hi = bf16_hi(pw);
        }
        const AdamResult lo2 =
            fused_adam_element(p_lo, bf16_lo(gw), bf16_lo(mw), bf16_lo(vw), h, l2, decoupled);
        const AdamResult hi2 =
            fused_adam_element(p_hi, bf16_hi(gw), bf16_hi(mw), bf16_hi(vw), h, l2, decoupled);
        const uint32_t m_lo = bf16_round_bits32(lo2.m), m_hi = bf16_round_bits32(hi2.m);
        const uint32_t v_lo = bf16_round_bits32(lo2.v), v_hi = bf16_round_bits32(hi2.v);
        store_word(mp + o, j, bf16_word(m_lo, m_hi));
        store_word(vp + o, j, bf16_word(v_lo, v_hi));
        uint32_t s_lo, s_hi;  // the stored parameters, as fp32 bit patterns
        if constexpr (Mode == kRemainder) {
          s_lo = split_remainder_high32(lo2.p);
          s_hi = split_remainder_high32(hi2.p);
          store_word(rp + o, j, remainder_word(lo2.p, hi2.p));
        } else {
          const int64_t i = u.index + o + 2 * j;
          s_lo = param_bits32<Mode == kPlainSR>(lo2.p, r, i);
          s_hi = param_bits32<Mode == kPlainSR>(hi2.p, r, i + 1);
        }
        store_word(pp + o, j, bf16_word(s_lo, s_hi));
        return tally_of<Count>(unchanged(p_lo, lo2.p, bf16_lo(pw), bits_float(s_lo)) +
                                   unchanged(p_hi, hi2.p, bf16_hi(pw), bits_float(s_hi)),
                               unchanged(bf16_lo(mw), lo2.m, bf16_lo(mw), bits_float(m_lo)) +
                                   unchanged(bf16_hi(mw), hi2.m, bf16_hi(mw), bits_float(m_hi)),
                               unchanged(bf16_lo(vw), lo2.v, bf16_lo(vw), bits_float(v_lo)) +
                                   unchanged(bf16_hi(vw), hi2.v, bf16_hi(vw), bits_float(v_hi)));
      };
      tally.add(run_span<Count>(lo, hi, s, elem, pair));
    } else {
      tally.add(run_span<Count>(lo, hi, -1, elem, elem));
    }
  };
  launch_update(std::integral_constant<bool, Count>(), "fused_adam_update", plan, body, counts);
}

template <class P, bool SR, bool Momentum, bool Count>
void sgd_impl(const UpdatePlan& plan, P* param, const P* grad, P* momentum_buf, const SgdHyper& h,
              const RoundingMode& r, UpdateCounts* counts) {
  const float keep = h.first_step ? 0.0f : h.momentum;  // first step: buf = clone(d_p)
  const float take = h.first_step ? 1.0f : h.one_minus_dampening;
  const float nesterov = h.nesterov ? 1.0f : 0.0f;
  const DView<UpdateTensor> tensors = plan.tensors();
  const auto body =
      KOKKOS_LAMBDA(const int64_t t, const int64_t lo, const int64_t hi, Tally<Count>& tally) {
    (void)momentum_buf;  // captured before the `if constexpr` (nvcc extended-lambda rule)
    (void)keep;
    (void)take;
    (void)nesterov;
    const UpdateTensor u = tensors(t);
    const float wd = u.decay ? h.weight_decay : 0.0f;
    P* pp = param + u.param;
    const P* gp = grad + u.grad;
    P* bp = Momentum ? momentum_buf + u.state : nullptr;
    const auto elem = [=](const int64_t i) {
      const float p = to_f32(pp[i]);
      float d = to_f32(gp[i]) * h.grad_scale + wd * p;  // d_p.add(param, wd)
      uint32_t b_lost = 0;
      if constexpr (Momentum) {
        // buf.mul_(momentum).add_(d_p, alpha=1-dampening); nesterov: d_p.add(buf, momentum)
        const float b0 = to_f32(bp[i]);
        const float b_new = b0 * keep + take * d;
        const float b = store_rounded(bp, i, b_new);
        b_lost = unchanged_as<P>(b0, b_new, b0, b);
        d = nesterov != 0.0f ? d + h.momentum * b : b;
      }
      const float x = p + (-h.lr) * d;  // param.add_(d_p, alpha=-lr)
      const float stored = Store<P, SR>::apply(pp, i, x, r, u.index);
      return tally_of<Count>(unchanged_as<P>(p, x, p, stored), b_lost, 0);
    };
    tally.add(run_span<Count>(lo, hi, -1, elem, elem));
  };
  launch_update(std::integral_constant<bool, Count>(), "sgd_update", plan, body, counts);
}

// Where 16-bit arrays at these addresses can run word by word (bf16.hpp, "two adjacent 16-bit
// values"): 0 if every address is 4-byte aligned, 1 if every one is 2 bytes past (the words start
// at element 1), -1 otherwise (element by element).
int word_start(const std::vector<uintptr_t>& addresses) {
  int odd = 0, even = 0;
  for (uintptr_t a : addresses) (a % 4 == 0 ? even : odd) += 1;
  return odd == 0 ? 0 : even == 0 ? 1 : -1;
}

}  // namespace

UpdatePlan::UpdatePlan(std::vector<UpdateTensor> tensors, FlatArray param, FlatArray grad,
                       const std::vector<FlatArray>& state, int64_t block_len) {
  std::vector<int64_t> sizes;
  for (UpdateTensor& u : tensors) {
    auto at = [](const FlatArray& a, int64_t off) {
      return reinterpret_cast<uintptr_t>(a.base) + static_cast<uintptr_t>(off * a.elem_bytes);
    };
    std::vector<uintptr_t> addresses{at(param, u.param), at(grad, u.grad)};
    for (const FlatArray& a : state) {
      if (a.base) addresses.push_back(at(a, u.state));
    }
    u.word_start = word_start(addresses);
    sizes.push_back(u.n);
    numel_ += u.n;
  }
  table_ = TensorTable<UpdateTensor>(tensors, sizes, block_len);
  // A call's span is at most one block, whose counts a counting launch tallies in 16-bit fields.
  if (table_.blocks.block_len() >= (int64_t{1} << 16)) {
    throw InternalError("UpdatePlan: blocks of 2^16 elements or more");
  }
}

// f(std::true_type) when counting (counts not null), f(std::false_type) otherwise.
template <class F>
void with_count(const UpdateCounts* counts, const F& f) {
  if (counts) {
    f(std::true_type());
  } else {
    f(std::false_type());
  }
}

template <class P>
void torch_adam_update(const UpdatePlan& plan, P* param, const P* grad, P* exp_avg, P* exp_avg_sq,
                       const TorchAdamHyper& h, const RoundingMode& r, UpdateCounts* counts) {
  with_count(counts, [&](auto count) {
    constexpr bool C = decltype(count)::value;
    if (r.stochastic) {
      torch_adam_impl<P, true, C>(plan, param, grad, exp_avg, exp_avg_sq, h, r, counts);
    } else {
      torch_adam_impl<P, false, C>(plan, param, grad, exp_avg, exp_avg_sq, h, r, counts);
    }
  });
}

template <class P, class M, class V>
void fused_adam_update(const UpdatePlan& plan, P* param, const P* grad, M* exp_avg, V* exp_avg_sq,
                       float* master, int16_t* remainder, const FusedAdamHyper& h,
                       const RoundingMode& r, UpdateCounts* counts) {
  with_count(counts, [&](auto count) {
    constexpr bool C = decltype(count)::value;
    if (master) {
      fused_adam_impl<P, M, V, kMaster, C>(plan, param, grad, exp_avg, exp_avg_sq, master,
                                           remainder, h, r, counts);
    } else if (remainder) {
      if constexpr (std::is_same<P, bf16>::value) {
        fused_adam_impl<P, M, V, kRemainder, C>(plan, param, grad, exp_avg, exp_avg_sq, master,
                                                remainder, h, r, counts);
      }
    } else if (r.stochastic) {
      fused_adam_impl<P, M, V, kPlainSR, C>(plan, param, grad, exp_avg, exp_avg_sq, master,
                                            remainder, h, r, counts);
    } else {
      fused_adam_impl<P, M, V, kPlain, C>(plan, param, grad, exp_avg, exp_avg_sq, master, remainder,
                                          h, r, counts);
    }
  });
}

template <class P>
void sgd_update(const UpdatePlan& plan, P* param, const P* grad, P* momentum_buf, const SgdHyper& h,
                const RoundingMode& r, UpdateCounts* counts) {
  with_count(counts, [&](auto count) {
    constexpr bool C = decltype(count)::value;
    if (momentum_buf) {
      if (r.stochastic) {
        sgd_impl<P, true, true, C>(plan, param, grad, momentum_buf, h, r, counts);
      } else {
        sgd_impl<P, false, true, C>(plan, param, grad, momentum_buf, h, r, counts);
      }
    } else if (r.stochastic) {
      sgd_impl<P, true, false, C>(plan, param, grad, momentum_buf, h, r, counts);
    } else {
      sgd_impl<P, false, false, C>(plan, param, grad, momentum_buf, h, r, counts);
    }
  });
}

template <class P>
void grad_sum_squares(const P* grad, int64_t n, const Kokkos::View<double, MemSpace>& out) {
  Kokkos::parallel_reduce(
      "grad_sum_squares", RangePolicy(0, n),
      KOKKOS_LAMBDA(const int64_t i, double& acc) {
        const float g = to_f32(grad[i]);
        acc += static_cast<double>(g * g);
      },
      out);
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

#define KKTRAIN_INSTANTIATE_P(P)                                                                 \
  template void torch_adam_update<P>(const UpdatePlan&, P*, const P*, P*, P*,                    \
                                     const TorchAdamHyper&, const RoundingMode&, UpdateCounts*); \
  template void sgd_update<P>(const UpdatePlan&, P*, const P*, P*, const SgdHyper&,              \
                              const RoundingMode&, UpdateCounts*);                               \
  template void grad_sum_squares<P>(const P*, int64_t, const Kokkos::View<double, MemSpace>&);   \
  template void widen_to_float<P>(float*, const P*, int64_t);
KKTRAIN_INSTANTIATE_P(float)
KKTRAIN_INSTANTIATE_P(bf16)
#undef KKTRAIN_INSTANTIATE_P

#define KKTRAIN_INSTANTIATE_FUSED(P, M, V)                                                       \
  template void fused_adam_update<P, M, V>(const UpdatePlan&, P*, const P*, M*, V*, float*,      \
                                           int16_t*, const FusedAdamHyper&, const RoundingMode&, \
                                           UpdateCounts*);
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
