// The materialized causal attention kktrain ran before the tiled kernels (ops/attention.hpp),
// kept as the reference test_attention compares them with: per (batch, KV head) group, the fp32
// scores (G*T, T) of all its query heads in one GEMM, a causal softmax over whole rows, the
// probabilities rounded to the compute dtype for the PV product; backward recomputes them, with
// dP = rnd(dout v^T), dS = rnd(P (dP - rowsum(P dP))), every GEMM accumulating in fp32.
// Also the masks and the score cap of AttentionDims, written from their definitions: query t of
// batch row b sees keys [attention_first_key(t, starts[b*T + t], window), t] (packed rows, sliding
// window), and with softcap > 0 the scores s become cap * tanh(s / cap) before the softmax, whose
// backward multiplies dS by 1 - tanh(s / cap)^2 before the rounding.
// Test-only: it holds (B, H, T, T) fp32 and (G*T, T) per group, which the model no longer does.
#pragma once

#include <Kokkos_Core.hpp>
#include <cfloat>
#include <type_traits>

#include "ops/attention.hpp"
#include "ops/gemm.hpp"
#include "ops/kernels.hpp"

namespace kktrain {
namespace reference {

// What the rows of one softmax call see: batch row b of d (its starts, window and softcap).
struct RowMask {
  const int32_t* starts;  // device (B, T), or null
  int64_t b, T, window;
  float softcap;
  RowMask(const AttentionDims& d, int64_t b_)
      : starts(d.starts), b(b_), T(d.T), window(d.window), softcap(d.softcap) {}
};

// att (R, T, T) rows of batch row mk.b: in place, scores -> softmax probabilities (fp32) over the
// keys each row sees, 0 elsewhere. With a softcap the scores are capped first and dcap (R, T, T)
// gets 1 - tanh(s / cap)^2 where the row sees the key (dcap is unused without one).
inline void causal_softmax_forward(float* att, float* dcap, int64_t R, const RowMask& mk) {
  const int32_t* starts = mk.starts;
  const int64_t b = mk.b, T = mk.T, window = mk.window;
  const float cap = mk.softcap;
  Kokkos::parallel_for(
      "ref_causal_softmax_forward", RangePolicy(0, R * T), KOKKOS_LAMBDA(const int64_t row) {
        const int64_t t = row % T;
        const int64_t lo =
            attention_first_key(t, starts != nullptr ? starts[b * T + t] : 0, window);
        float* x = att + row * T;
        if (cap > 0.0f) {
          for (int64_t j = lo; j <= t; ++j) {
            const float th = math::tanh(x[j] / cap);
            x[j] = cap * th;
            dcap[row * T + j] = 1.0f - th * th;
          }
        }
        float mx = -FLT_MAX;
        for (int64_t j = lo; j <= t; ++j) mx = x[j] > mx ? x[j] : mx;
        float sum = 0.0f;
        for (int64_t j = lo; j <= t; ++j) {
          x[j] = exp_fast(x[j] - mx);
          sum += x[j];
        }
        const float inv = 1.0f / sum;
        for (int64_t j = 0; j < T; ++j) x[j] = j >= lo && j <= t ? x[j] * inv : 0.0f;
      });
}

// datt (R, T, T): in place, dP -> dS = P * (dP - sum_j P dP) (times dcap with a softcap) on the
// keys each row sees, 0 elsewhere.
inline void causal_softmax_backward(float* datt, const float* att, const float* dcap, int64_t R,
                                    const RowMask& mk) {
  const int32_t* starts = mk.starts;
  const int64_t b = mk.b, T = mk.T, window = mk.window;
  const float cap = mk.softcap;
  Kokkos::parallel_for(
      "ref_causal_softmax_backward", RangePolicy(0, R * T), KOKKOS_LAMBDA(const int64_t row) {
        const int64_t t = row % T;
        const int64_t lo =
            attention_first_key(t, starts != nullptr ? starts[b * T + t] : 0, window);
        float* dx = datt + row * T;
        const float* p = att + row * T;
        float dot = 0.0f;
        for (int64_t j = lo; j <= t; ++j) dot += p[j] * dx[j];
        for (int64_t j = 0; j < T; ++j) {
          const bool seen = j >= lo && j <= t;
          const float ds = seen ? p[j] * (dx[j] - dot) : 0.0f;
          dx[j] = seen && cap > 0.0f ? ds * dcap[row * T + j] : ds;
        }
      });
}

// The materialized attention's buffers: (B, H, T, T) probabilities and one group's (G*T, T)
// gradient, compute-dtype copy and (with a softcap) the cap's derivative.
template <class TC>
struct Buffers {
  DView<float> att, dp, dcap;
  DView<TC> pc;
  Buffers(const AttentionDims& d)
      : att("ref_att", d.B * d.H * d.T * d.T),
        dp("ref_dp", (d.H / d.KV) * d.T * d.T),
        dcap("ref_dcap", d.softcap > 0.0f ? (d.H / d.KV) * d.T * d.T : 0),
        pc("ref_pc", (d.H / d.KV) * d.T * d.T) {}
};

// The probabilities of group g = b*KV + kv: att rows of its G heads (G*T, T).
template <class TC>
void probs(Buffers<TC>& s, const TC* q, const TC* k, const AttentionDims& d, int64_t g) {
  const int64_t G = d.H / d.KV, GT = G * d.T, T = d.T, D = d.D;
  float* att = s.att.data() + g * GT * T;
  gemm(ExecSpace(), d.options.gemm, 'N', 'T', d.scale, gin(q + g * GT * D, GT, D),
       gin(k + g * T * D, T, D), 0.0f, gout(att, GT, T));
  causal_softmax_forward(att, s.dcap.data(), G, RowMask(d, g / d.KV));
}

// out (B, H, T, D) head layout.
template <class TC>
void forward(TC* out, Buffers<TC>& s, const TC* q, const TC* k, const TC* v, const AttentionDims& d,
             Rounding rc) {
  const int64_t G = d.H / d.KV, GT = G * d.T, T = d.T, D = d.D;
  for (int64_t g = 0; g < d.B * d.KV; ++g) {
    probs(s, q, k, d, g);
    const TC* p = compute_copy(ExecSpace(), s.pc.data(), s.att.data() + g * GT * T, GT * T);
    gemm(ExecSpace(), d.options.gemm, 'N', 'N', 1.0f, gin(p, GT, T), gin(v + g * T * D, T, D), 0.0f,
         gout(out + g * GT * D, GT, D));
  }
  if constexpr (std::is_same<TC, float>::value) {
    if (rc == Rounding::bf16) round_copy(ExecSpace(), out, out, d.B * d.H * T * D, Rounding::bf16);
  }
}

template <class TC>
void backward(float* dq, float* dk, float* dv, Buffers<TC>& s, const TC* dout, const TC* q,
              const TC* k, const TC* v, const AttentionDims& d, Rounding rc) {
  const int64_t G = d.H / d.KV, GT = G * d.T, T = d.T, D = d.D;
  for (int64_t g = 0; g < d.B * d.KV; ++g) {
    probs(s, q, k, d, g);
    float* att = s.att.data() + g * GT * T;
    const TC* go = dout + g * GT * D;
    const TC* p = compute_copy(ExecSpace(), s.pc.data(), att, GT * T);
    gemm(ExecSpace(), d.options.gemm, 'T', 'N', 1.0f, gin(p, GT, T), gin(go, GT, D), 0.0f,
         gout(dv + g * T * D, T, D));
    gemm(ExecSpace(), d.options.gemm, 'N', 'T', 1.0f, gin(go, GT, D), gin(v + g * T * D, T, D),
         0.0f, gout(s.dp.data(), GT, T));
    if (rc == Rounding::bf16)
      round_copy(ExecSpace(), s.dp.data(), s.dp.data(), GT * T, Rounding::bf16);
    causal_softmax_backward(s.dp.data(), att, s.dcap.data(), G, RowMask(d, g / d.KV));
    const TC* ds = compute_copy(ExecSpace(), s.pc.data(), s.dp.data(), GT * T);
    gemm(ExecSpace(), d.options.gemm, 'N', 'N', d.scale, gin(ds, GT, T), gin(k + g * T * D, T, D),
         0.0f, gout(dq + g * GT * D, GT, D));
    gemm(ExecSpace(), d.options.gemm, 'T', 'N', d.scale, gin(ds, GT, T), gin(q + g * GT * D, GT, D),
         0.0f, gout(dk + g * T * D, T, D));
  }
  if (rc == Rounding::bf16) {
    round_copy(ExecSpace(), dq, dq, d.B * d.H * T * D, Rounding::bf16);
    round_copy(ExecSpace(), dk, dk, d.B * d.KV * T * D, Rounding::bf16);
    round_copy(ExecSpace(), dv, dv, d.B * d.KV * T * D, Rounding::bf16);
  }
}

}  // namespace reference
}  // namespace kktrain
