// Preference objectives over pairs (model/preference_loss.hpp).
#include "model/preference_loss.hpp"

namespace kktrain {

PairMeans PairMeans::of(const std::vector<PairResult>& r, double denominator) {
  PairMeans m;
  if (denominator <= 0) return m;
  for (const PairResult& p : r) {
    m.logps_chosen += p.logps_chosen;
    m.logps_rejected += p.logps_rejected;
    m.rewards_chosen += p.reward_chosen;
    m.rewards_rejected += p.reward_rejected;
    m.reward_accuracy += p.reward_chosen > p.reward_rejected ? 1.0 : 0.0;
  }
  m.logps_chosen /= denominator;
  m.logps_rejected /= denominator;
  m.rewards_chosen /= denominator;
  m.rewards_rejected /= denominator;
  m.reward_accuracy /= denominator;
  return m;
}

void pair_objective(const ExecSpace& space, const PairParams& params, const DView<PairSpan>& spans,
                    const float* losses, const int32_t* targets, int64_t N, double grad_scale,
                    double denominator, float* scale, const DView<double>& results) {
  Kokkos::parallel_for(
      "pair_scale_zero", RangePolicy(space, 0, N),
      KOKKOS_LAMBDA(const int64_t i) { scale[i] = 0.0f; });
  const int64_t P = static_cast<int64_t>(spans.extent(0));
  const double g = denominator > 0 ? grad_scale / denominator : 0.0;
  // One pair a thread: its sums in position order (deterministic whatever the thread count).
  Kokkos::parallel_for(
      "pair_objective", RangePolicy(space, 0, P), KOKKOS_LAMBDA(const int64_t p) {
        const PairSpan sp = spans(p);
        double sc = 0, sr = 0, nc = 0, nr = 0;
        for (int64_t q = sp.chosen; q < sp.rejected; ++q) {
          if (targets[q] >= 0) {
            sc -= static_cast<double>(losses[q]);
            nc += 1;
          }
        }
        for (int64_t q = sp.rejected; q < sp.end; ++q) {
          if (targets[q] >= 0) {
            sr -= static_cast<double>(losses[q]);
            nr += 1;
          }
        }
        PairSides x;
        x.chosen = sc;
        x.rejected = sr;
        x.ref_chosen = sp.ref_chosen;
        x.ref_rejected = sp.ref_rejected;
        x.n_chosen = nc > 0 ? nc : 1;
        x.n_rejected = nr > 0 ? nr : 1;
        const PairLoss l = pair_loss(params, x);
        // S = -(sum of token losses): d loss / d (token loss) = -d loss / d S
        const float wc = static_cast<float>(-l.d_chosen * g);
        const float wr = static_cast<float>(-l.d_rejected * g);
        for (int64_t q = sp.chosen; q < sp.rejected; ++q) {
          if (targets[q] >= 0) scale[q] = wc;
        }
        for (int64_t q = sp.rejected; q < sp.end; ++q) {
          if (targets[q] >= 0) scale[q] = wr;
        }
        results(p * kPairResultColumns + 0) = l.loss;
        results(p * kPairResultColumns + 1) = sc;
        results(p * kPairResultColumns + 2) = sr;
        results(p * kPairResultColumns + 3) = nc;
        results(p * kPairResultColumns + 4) = nr;
        results(p * kPairResultColumns + 5) = l.reward_chosen;
        results(p * kPairResultColumns + 6) = l.reward_rejected;
        results(p * kPairResultColumns + 7) = l.reward_chosen > l.reward_rejected ? 1.0 : 0.0;
      });
}

}  // namespace kktrain
