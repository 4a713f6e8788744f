// Per-head work between the q/k/v projection and the rotary embedding: the projections' biases
// and the RMSNorm of queries and keys (per head: Qwen3, Gemma 3; whole projection: OLMo 2)
// (ops/kernels.hpp, "attention inputs").
#include <cmath>

#include "ops/kernels.hpp"

namespace kktrain {

namespace {
using Member = TeamMember;
}  // namespace

template <class TC, class TB>
void bias_fill(const ExecSpace& space, TC* y, const TB* bias, int64_t N, int64_t n) {
  Kokkos::parallel_for(
      "bias_fill", RangePolicy(space, 0, N * n),
      KOKKOS_LAMBDA(const int64_t i) { store_rounded(y, i, load_f32(bias, i % n)); });
}

template <class TC>
void bias_backward(const ExecSpace& space, float* dbias, const TC* dy, int64_t N, int64_t n) {
  // One thread per column, rows summed in order: the same bits on every backend.
  Kokkos::parallel_for(
      "bias_backward", RangePolicy(space, 0, n), KOKKOS_LAMBDA(const int64_t c) {
        float acc = 0.0f;
        for (int64_t r = 0; r < N; ++r) acc += load_f32(dy, r * n + c);
        dbias[c] = acc;
      });
}

namespace {
// Row `slot` of a token's q/k norm rows: its offset in the token's projection output (and in its
// x_pre row, of d.width() values) and its width.
KOKKOS_INLINE_FUNCTION int64_t row_offset(const HeadNormDims& d, int64_t slot) {
  return slot < d.q_rows ? slot * d.q_width : d.q_rows * d.q_width + (slot - d.q_rows) * d.k_width;
}
}  // namespace

template <class TC>
void head_rmsnorm_forward(const ExecSpace& space, TC* qkv, TC* x_pre, float* rstd,
                          const HeadNormDims& d, const float* wq, const float* wk) {
  const int64_t S = d.rows(), Q = d.Q, P = d.width();
  const float eps = d.eps, off = d.form.offset;
  const bool weighted = d.form.fp32_product;
  if (kHostKernels) {  // CPUs: one row per iteration, its sum of squares in lanes (row_sum)
    Kokkos::parallel_for(
        "head_rmsnorm_forward", RangePolicy(space, 0, d.N * S), KOKKOS_LAMBDA(const int64_t row) {
          const int64_t n = row / S, slot = row % S;
          const int64_t at = row_offset(d, slot), D = slot < d.q_rows ? d.q_width : d.k_width;
          const float* w = slot < d.q_rows ? wq : wk;
          TC* x = qkv + n * Q + at;
          TC* keep = x_pre + n * P + at;
          const float ss = row_sum(D, [&](const int64_t j) {
            const float v = load_f32(x, j);
            return v * v;
          });
          const float r = 1.0f / math::sqrt(ss / static_cast<float>(D) + eps);
          rstd[row] = r;
          for (int64_t j = 0; j < D; ++j) keep[j] = x[j];
          if (weighted) {
            for (int64_t j = 0; j < D; ++j)
              store_rounded(x, j, (off + w[j]) * (load_f32(keep, j) * r));
          } else {
            for (int64_t j = 0; j < D; ++j) store_rounded(x, j, load_f32(keep, j) * r);
          }
        });
    return;
  }
  Kokkos::parallel_for(
      "head_rmsnorm_forward", TeamPolicy(space, d.N * S, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Member& m) {
        const int64_t row = m.league_rank(), n = row / S, slot = row % S;
        const int64_t at = row_offset(d, slot), D = slot < d.q_rows ? d.q_width : d.k_width;
        const float* w = slot < d.q_rows ? wq : wk;
        TC* x = qkv + n * Q + at;
        TC* keep = x_pre + n * P + at;
        float ss = 0.0f;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(m, D),
            [&](const int64_t j, float& acc) {
              const float v = load_f32(x, j);
              acc += v * v;
            },
            ss);
        const float r = 1.0f / math::sqrt(ss / static_cast<float>(D) + eps);
        Kokkos::single(Kokkos::PerTeam(m), [&]() { rstd[row] = r; });
        m.team_barrier();  // every thread has read x before any overwrites it
        Kokkos::parallel_for(Kokkos::TeamThreadRange(m, D), [&](const int64_t j) {
          keep[j] = x[j];
          const float xhat = load_f32(x, j) * r;
          store_rounded(x, j, weighted ? (off + w[j]) * xhat : xhat);
        });
      });
}

template <class TC>
void head_rmsnorm_backward(const ExecSpace& space, TC* dqkv, float* dwq, float* dwk,
                           const TC* x_pre, const float* rstd, const float* wq, const float* wk,
                           const HeadNormDims& d, Rounding weight) {
  constexpr Rounding rc = rounding_of<TC>();
  const int64_t S = d.rows(), N = d.N, Q = d.Q, P = d.width();
  const int64_t Wq = d.q_width, Wk = d.k_width;
  const float off = d.form.offset;
  const bool fp32_product = d.form.fp32_product;
  // Weight gradients first (they read dy, which the input pass overwrites): each channel's sum
  // over the rows in order (tokens, then the token's q or k rows). CPUs: one block of kBlock
  // channels per iteration, its rows streamed in order with a vectorized channel loop (a thread
  // per channel walked every row once per channel, a cache line for each value); GPUs: one
  // thread per (q or k, channel).
  if (kHostKernels) {
    constexpr int64_t kBlock = 16;
    const int64_t bq = (Wq + kBlock - 1) / kBlock, bk = (Wk + kBlock - 1) / kBlock;
    const Rounding xr = fp32_product ? Rounding::fp32 : rc;  // x_hat as the weight multiply saw it
    Kokkos::parallel_for(
        "head_rmsnorm_backward_weight", RangePolicy(space, 0, bq + bk),
        KOKKOS_LAMBDA(const int64_t blk) {
          const bool key = blk >= bq;
          const int64_t j0 = (key ? blk - bq : blk) * kBlock;
          const int64_t W = key ? Wk : Wq, nj = W - j0 < kBlock ? W - j0 : kBlock;
          const int64_t s0 = key ? d.q_rows : 0, s1 = key ? S : d.q_rows;
          float acc[kBlock] = {};
          for (int64_t n = 0; n < N; ++n) {
            for (int64_t slot = s0; slot < s1; ++slot) {
              const int64_t row = n * S + slot, at = row_offset(d, slot) + j0;
              const float r = rstd[row];
              const TC* x = x_pre + n * P + at;
              const TC* dy = dqkv + n * Q + at;
              for (int64_t j = 0; j < nj; ++j) {
                acc[j] += load_f32(dy, j) * rnd(load_f32(x, j) * r, xr);
              }
            }
          }
          float* out = (key ? dwk : dwq) + j0;
          for (int64_t j = 0; j < nj; ++j) out[j] = acc[j];
        });
  } else {
    Kokkos::parallel_for(
        "head_rmsnorm_backward_weight", RangePolicy(space, 0, Wq + Wk),
        KOKKOS_LAMBDA(const int64_t i) {
          const bool key = i >= Wq;
          const int64_t j = key ? i - Wq : i;
          const int64_t s0 = key ? d.q_rows : 0, s1 = key ? S : d.q_rows;
          float acc = 0.0f;
          for (int64_t n = 0; n < N; ++n) {
            for (int64_t slot = s0; slot < s1; ++slot) {
              const int64_t row = n * S + slot, at = row_offset(d, slot);
              const float x = load_f32(x_pre, n * P + at + j) * rstd[row];
              acc += load_f32(dqkv, n * Q + at + j) * (fp32_product ? x : rnd(x, rc));
            }
          }
          (key ? dwk : dwq)[j] = acc;
        });
  }
  // Input gradients, one row per iteration on CPUs (its dot product in lanes, row_sum), one team
  // per row on GPUs: dxhat = rnd(dy * w) (the gradient of the TC-rounded
  // normalized value), or dy * (offset + w) in fp32; dx = r * dxhat - r^3 * x * mean(dxhat * x),
  // rounded to TC.
  if (kHostKernels) {
    const Rounding wr = fp32_product ? Rounding::fp32 : weight;
    const Rounding cr = fp32_product ? Rounding::fp32 : rc;
    const float wo = fp32_product ? off : 0.0f;
    Kokkos::parallel_for(
        "head_rmsnorm_backward_input", RangePolicy(space, 0, N * S),
        KOKKOS_LAMBDA(const int64_t row) {
          const int64_t n = row / S, slot = row % S;
          const int64_t at = row_offset(d, slot), D = slot < d.q_rows ? d.q_width : d.k_width;
          const float* w = slot < d.q_rows ? wq : wk;
          TC* g = dqkv + n * Q + at;
          const TC* x = x_pre + n * P + at;
          const float r = rstd[row];
          // the team kernel's dxhat, its form chosen by roundings (fp32: none) instead of a branch
          auto dxhat = [&](int64_t j) { return rnd(rnd(load_f32(g, j) * (wo + w[j]), wr), cr); };
          const float dot = row_sum(D, [&](const int64_t j) { return dxhat(j) * load_f32(x, j); });
          const float k = r * r * r * dot / static_cast<float>(D);
          for (int64_t j = 0; j < D; ++j) store_rounded(g, j, r * dxhat(j) - k * load_f32(x, j));
        });
    return;
  }
  Kokkos::parallel_for(
      "head_rmsnorm_backward_input", TeamPolicy(space, N * S, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Member& m) {
        const int64_t row = m.league_rank(), n = row / S, slot = row % S;
        const int64_t at = row_offset(d, slot), D = slot < d.q_rows ? d.q_width : d.k_width;
        const float* w = slot < d.q_rows ? wq : wk;
        TC* g = dqkv + n * Q + at;
        const TC* x = x_pre + n * P + at;
        const float r = rstd[row];
        auto dxhat = [&](int64_t j) {
          const float dy = load_f32(g, j);
          return fp32_product ? dy * (off + w[j]) : rnd(rnd(dy * w[j], weight), rc);
        };
        float dot = 0.0f;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(m, D),
            [&](const int64_t j, float& acc) { acc += dxhat(j) * load_f32(x, j); }, dot);
        const float k = r * r * r * dot / static_cast<float>(D);
        m.team_barrier();  // every thread has read g before any overwrites it
        Kokkos::parallel_for(Kokkos::TeamThreadRange(m, D), [&](const int64_t j) {
          store_rounded(g, j, r * dxhat(j) - k * load_f32(x, j));
        });
      });
}

#define KKTRAIN_INST_HEADS(TC)                                                                    \
  template void bias_fill<TC, float>(const ExecSpace&, TC*, const float*, int64_t, int64_t);      \
  template void bias_backward<TC>(const ExecSpace&, float*, const TC*, int64_t, int64_t);         \
  template void head_rmsnorm_forward<TC>(const ExecSpace&, TC*, TC*, float*, const HeadNormDims&, \
                                         const float*, const float*);                             \
  template void head_rmsnorm_backward<TC>(const ExecSpace&, TC*, float*, float*, const TC*,       \
                                          const float*, const float*, const float*,               \
                                          const HeadNormDims&, Rounding);
KKTRAIN_INST_HEADS(float)
KKTRAIN_INST_HEADS(bf16)
template void bias_fill<bf16, bf16>(const ExecSpace&, bf16*, const bf16*, int64_t, int64_t);
#undef KKTRAIN_INST_HEADS

}  // namespace kktrain
