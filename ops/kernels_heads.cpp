// Per-head work between the q/k/v projection and the rotary embedding: the projections' biases
// and Qwen3's per-head RMSNorm of queries and keys (ops/kernels.hpp, "attention inputs").
#include <cmath>

#include "ops/kernels.hpp"

namespace kktrain {

namespace {
using Member = TeamMember;
}  // namespace

template <class TC, class TB>
void bias_fill(const ExecSpace& space, TC* y, const TB* bias, int64_t N, int64_t n) {
  constexpr Rounding rc = rounding_of<TC>();
  Kokkos::parallel_for(
      "bias_fill", RangePolicy(space, 0, N * n),
      KOKKOS_LAMBDA(const int64_t i) { store_as(y, i, rnd(load_f32(bias, i % n), rc)); });
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

template <class TC>
void head_rmsnorm_forward(const ExecSpace& space, TC* qkv, TC* x_pre, float* rstd,
                          const HeadNormDims& d) {
  constexpr Rounding rc = rounding_of<TC>();
  const int64_t S = d.H + d.KV, D = d.D, Q = (d.H + 2 * d.KV) * d.D;
  const float eps = d.eps;
  Kokkos::parallel_for(
      "head_rmsnorm_forward", TeamPolicy(space, d.N * S, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Member& m) {
        const int64_t row = m.league_rank(), n = row / S, slot = row % S;
        TC* x = qkv + n * Q + slot * D;
        TC* keep = x_pre + row * D;
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
          store_as(x, j, rnd(load_f32(x, j) * r, rc));
        });
      });
}

template <class TC>
void head_rmsnorm_backward(const ExecSpace& space, TC* dqkv, float* dwq, float* dwk,
                           const TC* x_pre, const float* rstd, const float* wq, const float* wk,
                           const HeadNormDims& d, Rounding weight) {
  constexpr Rounding rc = rounding_of<TC>();
  const int64_t H = d.H, S = d.H + d.KV, D = d.D, N = d.N, Q = (d.H + 2 * d.KV) * d.D;
  // Weight gradients first (they read dy = d(x_hat * w), which the input pass overwrites): one
  // thread per (q or k, channel), rows summed in order.
  Kokkos::parallel_for(
      "head_rmsnorm_backward_weight", RangePolicy(space, 0, 2 * D), KOKKOS_LAMBDA(const int64_t i) {
        const bool key = i >= D;
        const int64_t j = key ? i - D : i;
        const int64_t s0 = key ? H : 0, s1 = key ? S : H;
        float acc = 0.0f;
        for (int64_t n = 0; n < N; ++n) {
          for (int64_t slot = s0; slot < s1; ++slot) {
            const int64_t row = n * S + slot;
            const float xhat = rnd(load_f32(x_pre, row * D + j) * rstd[row], rc);
            acc += load_f32(dqkv, n * Q + slot * D + j) * xhat;
          }
        }
        (key ? dwk : dwq)[j] = acc;
      });
  // Input gradients, one team per (token, head): dxhat = rnd(dy * w), the gradient of the
  // TC-rounded normalized value; dx = r * dxhat - r^3 * x * mean(dxhat * x), rounded to TC.
  Kokkos::parallel_for(
      "head_rmsnorm_backward_input", TeamPolicy(space, N * S, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Member& m) {
        const int64_t row = m.league_rank(), n = row / S, slot = row % S;
        const float* w = slot < H ? wq : wk;
        TC* g = dqkv + n * Q + slot * D;
        const TC* x = x_pre + row * D;
        const float r = rstd[row];
        float dot = 0.0f;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(m, D),
            [&](const int64_t j, float& acc) {
              acc += rnd(rnd(load_f32(g, j) * w[j], weight), rc) * load_f32(x, j);
            },
            dot);
        const float k = r * r * r * dot / static_cast<float>(D);
        m.team_barrier();  // every thread has read g before any overwrites it
        Kokkos::parallel_for(Kokkos::TeamThreadRange(m, D), [&](const int64_t j) {
          const float dxhat = rnd(rnd(load_f32(g, j) * w[j], weight), rc);
          store_as(g, j, rnd(r * dxhat - k * load_f32(x, j), rc));
        });
      });
}

#define KKTRAIN_INST_HEADS(TC)                                                                     \
  template void bias_fill<TC, float>(const ExecSpace&, TC*, const float*, int64_t, int64_t);       \
  template void bias_backward<TC>(const ExecSpace&, float*, const TC*, int64_t, int64_t);          \
  template void head_rmsnorm_forward<TC>(const ExecSpace&, TC*, TC*, float*, const HeadNormDims&); \
  template void head_rmsnorm_backward<TC>(const ExecSpace&, TC*, float*, float*, const TC*,        \
                                          const float*, const float*, const float*,                \
                                          const HeadNormDims&, Rounding);
KKTRAIN_INST_HEADS(float)
KKTRAIN_INST_HEADS(bf16)
template void bias_fill<bf16, bf16>(const ExecSpace&, bf16*, const bf16*, int64_t, int64_t);
#undef KKTRAIN_INST_HEADS

}  // namespace kktrain
