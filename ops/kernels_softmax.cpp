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
void cross_entropy_forward_backward(const ExecSpace& space, float* losses, TC* logits,
                                    const int32_t* targets, int64_t N, int64_t V, float scale,
                                    LossPass pass) {
  constexpr Rounding rc = rounding_of<TC>();
  const bool backward = pass == LossPass::forward_backward;
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
            [&](const int64_t v, float& acc) { acc += math::exp(load_f32(row, v) - mx); }, sum);
        const float lse = mx + math::log(sum);
        const float target_logit = load_f32(row, target);
        m.team_barrier();  // everyone has read row[target] before it is overwritten
        Kokkos::single(Kokkos::PerTeam(m), [&]() { losses[n] = lse - target_logit; });
        if (!backward) return;
        const float inv = 1.0f / sum;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(m, V), [&](const int64_t v) {
          const float p = math::exp(load_f32(row, v) - mx) * inv;
          store_as(row, v, rnd((p - (v == target ? 1.0f : 0.0f)) * scale, rc));
        });
      });
}

template void cross_entropy_forward_backward<float>(const ExecSpace&, float*, float*,
                                                    const int32_t*, int64_t, int64_t, float,
                                                    LossPass);
template void cross_entropy_forward_backward<bf16>(const ExecSpace&, float*, bf16*, const int32_t*,
                                                   int64_t, int64_t, float, LossPass);

}  // namespace kktrain
