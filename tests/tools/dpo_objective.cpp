// model/preference_loss.hpp's pair_loss for tests/parity/check_dpo_objective.py: one JSON pair a
// line on stdin ({"loss", "beta", "simpo_gamma", "label_smoothing", "chosen", "rejected",
// "ref_chosen", "ref_rejected", "chosen_tokens", "rejected_tokens"}; ref_* null for reference-free
// losses), one JSON line out per pair: {"loss", "d_chosen", "d_rejected", "reward_chosen",
// "reward_rejected"} with round-trip precision.
#include <Kokkos_Core.hpp>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "model/preference_loss.hpp"

int main(int argc, char** argv) {
  Kokkos::ScopeGuard kokkos(argc, argv);
  using kktrain::PreferenceLoss;
  std::string line;
  while (std::getline(std::cin, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    kktrain::PairParams p;
    const std::string loss = j.at("loss").get<std::string>();
    p.loss = loss == "sigmoid" ? PreferenceLoss::sigmoid
             : loss == "ipo"   ? PreferenceLoss::ipo
             : loss == "simpo" ? PreferenceLoss::simpo
                               : PreferenceLoss::orpo;
    if (loss != "sigmoid" && loss != "ipo" && loss != "simpo" && loss != "orpo") {
      std::fprintf(stderr, "dpo_objective: unknown loss '%s'\n", loss.c_str());
      return 2;
    }
    p.beta = j.at("beta").get<double>();
    p.gamma = j.at("simpo_gamma").get<double>();
    p.label_smoothing = j.at("label_smoothing").get<double>();
    kktrain::PairSides x;
    x.chosen = j.at("chosen").get<double>();
    x.rejected = j.at("rejected").get<double>();
    x.ref_chosen = j.at("ref_chosen").is_null() ? 0.0 : j.at("ref_chosen").get<double>();
    x.ref_rejected = j.at("ref_rejected").is_null() ? 0.0 : j.at("ref_rejected").get<double>();
    x.n_chosen = j.at("chosen_tokens").get<double>();
    x.n_rejected = j.at("rejected_tokens").get<double>();
    const kktrain::PairLoss r = kktrain::pair_loss(p, x);
    std::printf(
        "{\"loss\": %.17g, \"d_chosen\": %.17g, \"d_rejected\": %.17g, \"reward_chosen\": %.17g, "
        "\"reward_rejected\": %.17g}\n",
        r.loss, r.d_chosen, r.d_rejected, r.reward_chosen, r.reward_rejected);
  }
  return 0;
}
