// The fused softmax + cross-entropy loss over rows of logits (the attention's softmax lives in
// ops/attention.cpp, tile by tile). Max, exponentials, sums and the loss are fp32 whatever the
// compute dtype.
#include <Kokkos_Core.hpp>
#include <cfloat>

#include "ops/kernels.hpp"

namespace kktrain {

namespace {
using Member = TeamMember;
}  // namespace

template <class TC>
void logit_softcap_forward(const ExecSpace& space, TC* logits, int64_t n, LogitSoftcap softcap) {
  if (!softcap.on()) return;
  const float cap = softcap.cap, inv_cap = 1.0f / softcap.cap;
  Kokkos::parallel_for(
      "logit_softcap", RangePolicy(space, 0, n), KOKKOS_LAMBDA(const int64_t i) {
        // fp32 from the stored logit; the one rounding is store_as's, to the compute dtype
        store_as(logits, i, cap * math::tanh(load_f32(logits, i) * inv_cap));
      });
}

template void logit_softcap_forward<float>(const ExecSpace&, float*, int64_t, LogitSoftcap);
template void logit_softcap_forward<bf16>(const ExecSpace&, bf16*, int64_t, LogitSoftcap);

template <class TC>
void cross_entropy_forward_backward(const ExecSpace& space, float* losses, TC* logits,
                                    const int32_t* targets, int64_t N, int64_t V, float scale,
                                    LossPass pass, LogitSoftcap softcap, const float* row_scale) {
  constexpr Rounding rc = rounding_of<TC>();
  const bool backward = pass == LossPass::forward_backward;
  // dl = dz * (1 - (z / cap)^2). With the cap off, t is masked to +0 (whatever z is, inf
  // included), so the factor is exactly 1 and dl is dz bit for bit; a mask rather than a branch
  // keeps the loop vectorizable (as rnd does).
  const float inv_cap = softcap.on() ? 1.0f / softcap.cap : 0.0f;
  const uint32_t cap_mask = softcap.on() ? ~0u : 0u;
  if (kHostKernels) {
    // CPUs: one row per iteration, its max and sum in lanes (row_max, row_sum), every loop
    // vectorized (exp_fast: a libm exp per logit was most of the loss's time at large V).
    Kokkos::parallel_for(
        "cross_entropy", RangePolicy(space, 0, N), KOKKOS_LAMBDA(const int64_t n) {
          TC* row = logits + n * V;
          const int32_t target = targets[n];
          if (target < 0) {  // ignored position: no loss, no gradient
            losses[n] = 0.0f;
            if (backward) {
              for (int64_t v = 0; v < V; ++v) store_as(row, v, 0.0f);
            }
            return;
          }
          const float mx = row_max(V, [&](const int64_t v) { return load_f32(row, v); });
          const float sum =
              row_sum(V, [&](const int64_t v) { return exp_fast(load_f32(row, v) - mx); });
          losses[n] = mx + math::log(sum) - load_f32(row, target);
          if (!backward) return;
          const float inv = 1.0f / sum;
          const float sn = row_scale != nullptr ? row_scale[n] : scale;
          for (int64_t v = 0; v < V; ++v) {
            const float z = load_f32(row, v);
            const float p = exp_fast(z - mx) * inv;
            const float dz = rnd((p - (v == target ? 1.0f : 0.0f)) * sn, rc);
            const float t = bits_float(float_bits(z * inv_cap) & cap_mask);
            store_rounded(row, v, dz * (1.0f - t * t));
          }
        });
    return;
  }
  Kokkos::parallel_for(
      "cross_entropy", TeamPolicy(space, N, Kokkos::AUTO), KOKKOS_LAMBDA(const Member& m) {
        const int64_t n = m.league_rank();
        TC* row = logits + n * V;
        const int32_t target = targets[n];
        if (target < 0) {  // ignored position: no loss, no gradient
          Kokkos::single(Kokkos::PerTeam(m), [&]() { losses[n] = 0.0f; });
          if (backward) {
            Kokkos::parallel_for(Kokkos::TeamThreadRange(m, V),
                                 [&](const int64_t v) { store_as(row, v, 0.0f); });
          }
          return;
        }
        float mx = -FLT_MAX;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(m, V),
            [&](const int64_t v, float& acc) { acc = math::max_f(acc, load_f32(row, v)); },
            Kokkos::Max<float>(mx));
        float sum = 0.0f;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(m, V),
            [&](const int64_t v, float& acc) { acc += exp_fast(load_f32(row, v) - mx); }, sum);
        const float lse = mx + math::log(sum);
        const float target_logit = load_f32(row, target);
        m.team_barrier();  // everyone has read row[target] before it is overwritten
        Kokkos::single(Kokkos::PerTeam(m), [&]() { losses[n] = lse - target_logit; });
        if (!backward) return;
        const float inv = 1.0f / sum;
        const float sn = row_scale != nullptr ? row_scale[n] : scale;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(m, V), [&](const int64_t v) {
          const float z = load_f32(row, v);
          const float p = exp_fast(z - mx) * inv;
          const float dz = rnd((p - (v == target ? 1.0f : 0.0f)) * sn, rc);
          // tanh(l / cap), from the stored (rounded) z
          const float t = bits_float(float_bits(z * inv_cap) & cap_mask);
          store_rounded(row, v, dz * (1.0f - t * t));
        });
      });
}

template void cross_entropy_forward_backward<float>(const ExecSpace&, float*, float*,
                                                    const int32_t*, int64_t, int64_t, float,
                                                    LossPass, LogitSoftcap, const float*);
template void cross_entropy_forward_backward<bf16>(const ExecSpace&, float*, bf16*, const int32_t*,
                                                   int64_t, int64_t, float, LossPass, LogitSoftcap,
                                                   const float*);

}  // namespace kktrain
