// Preference objectives over pairs of sequences (train.objective dpo): the loss of one pair from
// its sides' log-probabilities, and the micro-batch's pass that turns per-token losses into the
// pairs' losses and into the weight each token's loss gradient takes.
//
// A pair has a chosen and a rejected side, each a sequence (prompt + completion) in a row of the
// micro-batch. S_c, S_r: the sums of the log-probabilities of the completions' tokens (the
// positions whose target counts, as SFT's loss mask), n_c, n_r their counts; R_c, R_r the same
// sums under the reference model (the starting weights, computed once before training). Each
// loss as TRL computes it (DPOTrainer.dpo_loss, CPOTrainer.cpo_loss's simpo branch,
// ORPOTrainer.odds_ratio_loss), with a = S / n the mean token log-probability:
//   sigmoid  z = beta ((S_c - S_r) - (R_c - R_r)); loss = -(1-e) log s(z) - e log s(-z)
//   ipo      z = (a_c - a_r) - (R_c/n_c - R_r/n_r);  loss = (z - 1 / (2 beta))^2
//   simpo    z = beta (a_c - a_r) - gamma;           loss = -(1-e) log s(z) - e log s(-z)
//   orpo     o = (a_c - a_r) - (log(1 - exp a_c) - log(1 - exp a_r));
//            loss = -a_c - beta log s(o)  (the chosen side's mean NLL plus the odds-ratio term)
// (s the logistic function, e dpo.label_smoothing, gamma dpo.simpo_gamma). Rewards, as TRL logs
// them: beta (S - R) for sigmoid, beta (a - R/n) for ipo, beta a for simpo and orpo. A batch's
// loss is the mean over its pairs.
//
// Everything is in double: a pair's arithmetic is a handful of operations, and the gradient
// weights it hands the head are rounded to fp32 once.
#pragma once

#include <cstdint>
#include <vector>

#include "core/config.hpp"
#include "core/kokkos_compat.hpp"

namespace kktrain {

struct PairParams {
  PreferenceLoss loss = PreferenceLoss::sigmoid;
  double beta = 0.1, gamma = 0.5, label_smoothing = 0.0;
};
inline PairParams pair_params(const DpoConfig& d) {
  return PairParams{d.loss, d.beta, d.simpo_gamma, d.label_smoothing};
}

// One pair's inputs and what its loss gives.
struct PairSides {
  double chosen = 0, rejected = 0;          // S_c, S_r
  double ref_chosen = 0, ref_rejected = 0;  // R_c, R_r (unused by simpo and orpo)
  double n_chosen = 1, n_rejected = 1;      // token counts (> 0)
};
struct PairLoss {
  double loss = 0;
  double d_chosen = 0, d_rejected = 0;  // d loss / d S_c, d loss / d S_r
  double reward_chosen = 0, reward_rejected = 0;
};

namespace pair_math {
KOKKOS_INLINE_FUNCTION double log_sigmoid(double z) {  // log s(z) without overflow
  return z >= 0 ? -math::log1p(math::exp(-z)) : z - math::log1p(math::exp(z));
}
KOKKOS_INLINE_FUNCTION double sigmoid(double z) {
  return z >= 0 ? 1.0 / (1.0 + math::exp(-z)) : math::exp(z) / (1.0 + math::exp(z));
}
}  // namespace pair_math

// The loss of one pair and its derivatives with respect to S_c and S_r.
KOKKOS_INLINE_FUNCTION PairLoss pair_loss(const PairParams& p, const PairSides& x) {
  using namespace pair_math;
  PairLoss out;
  const double e = p.label_smoothing, beta = p.beta;
  const double ac = x.chosen / x.n_chosen, ar = x.rejected / x.n_rejected;
  switch (p.loss) {
    case PreferenceLoss::sigmoid: {
      const double z = beta * ((x.chosen - x.rejected) - (x.ref_chosen - x.ref_rejected));
      out.loss = -(1 - e) * log_sigmoid(z) - e * log_sigmoid(-z);
      const double dz = -(1 - e) * sigmoid(-z) + e * sigmoid(z);
      out.d_chosen = beta * dz;
      out.d_rejected = -beta * dz;
      out.reward_chosen = beta * (x.chosen - x.ref_chosen);
      out.reward_rejected = beta * (x.rejected - x.ref_rejected);
      break;
    }
    case PreferenceLoss::ipo: {
      const double rc = x.ref_chosen / x.n_chosen, rr = x.ref_rejected / x.n_rejected;
      const double z = (ac - ar) - (rc - rr);
      const double m = z - 1.0 / (2.0 * beta);
      out.loss = m * m;
      out.d_chosen = 2.0 * m / x.n_chosen;
      out.d_rejected = -2.0 * m / x.n_rejected;
      out.reward_chosen = beta * (ac - rc);
      out.reward_rejected = beta * (ar - rr);
      break;
    }
    case PreferenceLoss::simpo: {
      const double z = beta * (ac - ar) - p.gamma;
      out.loss = -(1 - e) * log_sigmoid(z) - e * log_sigmoid(-z);
      const double dz = -(1 - e) * sigmoid(-z) + e * sigmoid(z);
      out.d_chosen = beta * dz / x.n_chosen;
      out.d_rejected = -beta * dz / x.n_rejected;
      out.reward_chosen = beta * ac;
      out.reward_rejected = beta * ar;
      break;
    }
    case PreferenceLoss::orpo: {
      // log(1 - exp a) = log(-expm1(a)); d/da = -exp(a) / (1 - exp(a)) = 1 + 1 / expm1(a)
      const double o = (ac - ar) - (math::log(-math::expm1(ac)) - math::log(-math::expm1(ar)));
      out.loss = -ac - beta * log_sigmoid(o);
      const double dlo = -beta * sigmoid(-o);  // d loss / d o
      // d o / d a_c = 1 - (1 + 1/expm1(a_c)) = -1 / expm1(a_c); d o / d a_r = 1 / expm1(a_r)
      out.d_chosen = (-1.0 + dlo * (-1.0 / math::expm1(ac))) / x.n_chosen;
      out.d_rejected = (dlo * (1.0 / math::expm1(ar))) / x.n_rejected;
      out.reward_chosen = beta * ac;
      out.reward_rejected = beta * ar;
      break;
    }
  }
  return out;
}

// One pair of a micro-batch: its sides' positions in the flattened (B*T) rows, [chosen,
// rejected) and [rejected, end), and its reference sums.
struct PairSpan {
  int64_t chosen = 0, rejected = 0, end = 0;
  double ref_chosen = 0, ref_rejected = 0;
};

// The pairs of a micro-batch, what ForwardOptions::pairs points to.
struct PairBatch {
  PairParams params;
  std::vector<PairSpan> pairs;  // in row order
  // The loss's denominator: the global batch's pair count (0: this micro-batch's own mean). As
  // ForwardOptions::loss_tokens: several ranks need grad_scale = W with the global count.
  int64_t global_pairs = 0;
};

// What a pair's loss gave, per pair (Transformer::pair_results) and as the means a step's
// metrics report (StepSlots: their sums over the global batch's pairs / its pair count).
struct PairResult {
  double loss = 0, logps_chosen = 0, logps_rejected = 0;
  int64_t tokens_chosen = 0, tokens_rejected = 0;
  double reward_chosen = 0, reward_rejected = 0;
};
constexpr int kPairMeans = 5;  // logps_chosen, logps_rejected, rewards_chosen, rewards_rejected,
                               // reward_accuracy
struct PairMeans {
  double logps_chosen = 0, logps_rejected = 0, rewards_chosen = 0, rewards_rejected = 0,
         reward_accuracy = 0;
  static PairMeans of(const std::vector<PairResult>& r, double denominator);
};

constexpr int64_t kPairResultColumns = 8;

// From per-token losses (N; position q's loss is -log p(target q)) and each position's target
// (< 0: not counted): every pair's sums, loss and derivatives. `results` (P, 8) gets per pair
// {loss, S_c, S_r, n_c, n_r, reward_c, reward_r, reward_c > reward_r}; `scale` (N) gets each
// position's gradient weight on its token loss: -d loss / d S_side * grad_scale / denominator
// on counted completion positions, 0 elsewhere. `spans` is a device copy of the pairs.
void pair_objective(const ExecSpace& space, const PairParams& params, const DView<PairSpan>& spans,
                    const float* losses, const int32_t* targets, int64_t N, double grad_scale,
                    double denominator, float* scale, const DView<double>& results);

}  // namespace kktrain
