// The spellings of the config's fixed-choice keys (private to core/): one table per enum, in the
// order the reader's error lists them, from which the reader's get_enum, the *_name functions of
// core/config.hpp (the resolved config, messages) and their parse_* inverses all come.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/config.hpp"
#include "core/config_reader.hpp"

namespace kktrain {

template <typename E>
using Choices = std::vector<std::pair<E, const char*>>;

const Choices<LrDecayStyle>& decay_styles();
const Choices<DataFormat>& data_formats();
const Choices<LossOn>& loss_ons();
const Choices<Truncation>& truncations();
const Choices<Objective>& objectives();
const Choices<PreferenceLoss>& preference_losses();
const Choices<ProgressMode>& progress_modes();
const Choices<ExportKind>& export_kinds();
const Choices<RopeType>& rope_types();
const Choices<GemmChoice>& gemm_choices();
const Choices<GemmFp32Choice>& gemm_fp32_choices();
const Choices<GradSync>& grad_syncs();
const Choices<AttentionChoice>& attention_choices();
const Choices<ModelFamily>& model_families();
const Choices<AttentionBias>& attention_biases();
const Choices<QkNorm>& qk_norms();
const Choices<LayerRope>& layer_ropes();
const Choices<NormWeight>& norm_weights();
const Choices<NormPlacement>& norm_placements();
const Choices<MlpActivation>& mlp_activations();
const Choices<EmbedScale>& embed_scales();

// The spelling of `value` ("?" for none).
template <typename E>
const char* choice_name(const Choices<E>& choices, E value) {
  for (const auto& [e, name] : choices) {
    if (e == value) return name;
  }
  return "?";
}

// A fixed-choice key read once into its enum: Section::get_choice refuses any other spelling,
// listing `choices`.
template <typename E>
E get_enum(Section& s, const std::string& key, E def, const Choices<E>& choices) {
  std::vector<std::string> names;
  for (const auto& c : choices) names.emplace_back(c.second);
  const std::string got = s.get_choice(key, choice_name(choices, def), names);
  for (const auto& [e, name] : choices) {
    if (got == name) return e;
  }
  return def;  // not reached: get_choice accepts only the names
}

}  // namespace kktrain
