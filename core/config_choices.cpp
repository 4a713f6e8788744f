// The spellings of the config's fixed-choice keys (core/config_choices.hpp) and the *_name /
// parse_* functions of core/config.hpp built from them.
#include "core/config_choices.hpp"

namespace kktrain {

const Choices<LrDecayStyle>& decay_styles() {
  static const Choices<LrDecayStyle> c = {{LrDecayStyle::constant, "constant"},
                                          {LrDecayStyle::cosine, "cosine"},
                                          {LrDecayStyle::linear, "linear"}};
  return c;
}
const Choices<DataFormat>& data_formats() {
  static const Choices<DataFormat> c = {{DataFormat::automatic, "auto"},
                                        {DataFormat::text, "text"},
                                        {DataFormat::jsonl, "jsonl"},
                                        {DataFormat::chat, "chat"},
                                        {DataFormat::prompt_completion, "prompt_completion"},
                                        {DataFormat::preference, "preference"},
                                        {DataFormat::uint16, "uint16"},
                                        {DataFormat::uint32, "uint32"},
                                        {DataFormat::llmc, "llmc"}};
  return c;
}
const Choices<LossOn>& loss_ons() {
  static const Choices<LossOn> c = {
      {LossOn::assistant, "assistant"}, {LossOn::completion, "completion"}, {LossOn::all, "all"}};
  return c;
}
const Choices<Objective>& objectives() {
  static const Choices<Objective> c = {{Objective::sft, "sft"}, {Objective::dpo, "dpo"}};
  return c;
}
const Choices<PreferenceLoss>& preference_losses() {
  static const Choices<PreferenceLoss> c = {{PreferenceLoss::sigmoid, "sigmoid"},
                                            {PreferenceLoss::ipo, "ipo"},
                                            {PreferenceLoss::simpo, "simpo"},
                                            {PreferenceLoss::orpo, "orpo"}};
  return c;
}
const Choices<Truncation>& truncations() {
  static const Choices<Truncation> c = {
      {Truncation::truncate, "truncate"}, {Truncation::drop, "drop"}, {Truncation::error, "error"}};
  return c;
}
const Choices<ProgressMode>& progress_modes() {
  static const Choices<ProgressMode> c = {
      {ProgressMode::automatic, "auto"}, {ProgressMode::on, "on"}, {ProgressMode::off, "off"}};
  return c;
}
const Choices<ExportKind>& export_kinds() {
  static const Choices<ExportKind> c = {{ExportKind::hdf5, "hdf5"},
                                        {ExportKind::safetensors, "safetensors"},
                                        {ExportKind::peft, "peft"}};
  return c;
}

const Choices<RopeType>& rope_types() {
  static const Choices<RopeType> c = {{RopeType::standard, "default"},
                                      {RopeType::llama3, "llama3"},
                                      {RopeType::linear, "linear"},
                                      {RopeType::longrope, "longrope"}};
  return c;
}
const Choices<GemmChoice>& gemm_choices() {
  static const Choices<GemmChoice> c = {{GemmChoice::automatic, "auto"},
                                        {GemmChoice::widened, "widened"}};
  return c;
}
const Choices<GemmFp32Choice>& gemm_fp32_choices() {
  static const Choices<GemmFp32Choice> c = {{GemmFp32Choice::automatic, "auto"},
                                            {GemmFp32Choice::kokkos_kernels, "kokkos-kernels"},
                                            {GemmFp32Choice::onednn, "onednn"}};
  return c;
}
const Choices<GradSync>& grad_syncs() {
  static const Choices<GradSync> c = {{GradSync::every_micro_batch, "every_micro_batch"},
                                      {GradSync::last_micro_batch, "last_micro_batch"}};
  return c;
}
const Choices<AttentionChoice>& attention_choices() {
  static const Choices<AttentionChoice> c = {{AttentionChoice::automatic, "auto"},
                                             {AttentionChoice::tiled_gemm, "tiled_gemm"},
                                             {AttentionChoice::team, "team"}};
  return c;
}

const Choices<ModelFamily>& model_families() {
  static const Choices<ModelFamily> c = {
      {ModelFamily::llama, "llama"},         {ModelFamily::mistral, "mistral"},
      {ModelFamily::qwen2, "qwen2"},         {ModelFamily::qwen3, "qwen3"},
      {ModelFamily::qwen3_moe, "qwen3_moe"}, {ModelFamily::smollm3, "smollm3"},
      {ModelFamily::gemma2, "gemma2"},       {ModelFamily::gemma3, "gemma3"},
      {ModelFamily::olmo2, "olmo2"},         {ModelFamily::phi3, "phi3"}};
  return c;
}
const Choices<AttentionBias>& attention_biases() {
  static const Choices<AttentionBias> c = {
      {AttentionBias::none, "none"}, {AttentionBias::qkv, "qkv"}, {AttentionBias::qkvo, "qkvo"}};
  return c;
}
const Choices<QkNorm>& qk_norms() {
  static const Choices<QkNorm> c = {
      {QkNorm::none, "none"}, {QkNorm::per_head, "per_head"}, {QkNorm::whole, "whole"}};
  return c;
}
const Choices<LayerRope>& layer_ropes() {
  static const Choices<LayerRope> c = {
      {LayerRope::rope, "rope"}, {LayerRope::none, "none"}, {LayerRope::local, "local"}};
  return c;
}
const Choices<NormWeight>& norm_weights() {
  static const Choices<NormWeight> c = {{NormWeight::plain, "plain"},
                                        {NormWeight::fp32, "fp32"},
                                        {NormWeight::one_plus_fp32, "one_plus_fp32"}};
  return c;
}
const Choices<NormPlacement>& norm_placements() {
  static const Choices<NormPlacement> c = {{NormPlacement::pre, "pre"},
                                           {NormPlacement::sandwich, "sandwich"},
                                           {NormPlacement::post, "post"}};
  return c;
}
const Choices<MlpActivation>& mlp_activations() {
  static const Choices<MlpActivation> c = {{MlpActivation::silu, "silu"},
                                           {MlpActivation::gelu_tanh, "gelu_tanh"}};
  return c;
}
const Choices<EmbedScale>& embed_scales() {
  static const Choices<EmbedScale> c = {{EmbedScale::none, "none"},
                                        {EmbedScale::sqrt_hidden, "sqrt_hidden"}};
  return c;
}

namespace {
template <typename E>
std::optional<E> parse_choice(const Choices<E>& choices, const std::string& name) {
  for (const auto& [e, n] : choices) {
    if (name == n) return e;
  }
  return std::nullopt;
}
}  // namespace

const char* layer_attention_name(LayerAttention a) {
  return a == LayerAttention::sliding ? "sliding_attention" : "full_attention";
}
std::optional<LayerAttention> parse_layer_attention(const std::string& name) {
  if (name == "full_attention") return LayerAttention::full;
  if (name == "sliding_attention") return LayerAttention::sliding;
  return std::nullopt;
}

const char* model_family_name(ModelFamily f) {
  return choice_name(model_families(), f);
}
std::optional<ModelFamily> parse_model_family(const std::string& name) {
  return parse_choice(model_families(), name);
}
const char* attention_bias_name(AttentionBias b) {
  return choice_name(attention_biases(), b);
}
std::optional<AttentionBias> parse_attention_bias(const std::string& name) {
  return parse_choice(attention_biases(), name);
}
const char* qk_norm_name(QkNorm q) {
  return choice_name(qk_norms(), q);
}
std::optional<QkNorm> parse_qk_norm(const std::string& name) {
  return parse_choice(qk_norms(), name);
}

const char* layer_rope_name(LayerRope r) {
  return choice_name(layer_ropes(), r);
}
std::optional<LayerRope> parse_layer_rope(const std::string& name) {
  return parse_choice(layer_ropes(), name);
}

const char* norm_weight_name(NormWeight w) {
  return choice_name(norm_weights(), w);
}
const char* norm_placement_name(NormPlacement p) {
  return choice_name(norm_placements(), p);
}
const char* mlp_activation_name(MlpActivation a) {
  return choice_name(mlp_activations(), a);
}
const char* embed_scale_name(EmbedScale e) {
  return choice_name(embed_scales(), e);
}
std::optional<NormWeight> parse_norm_weight(const std::string& name) {
  return parse_choice(norm_weights(), name);
}
std::optional<NormPlacement> parse_norm_placement(const std::string& name) {
  return parse_choice(norm_placements(), name);
}
std::optional<MlpActivation> parse_mlp_activation(const std::string& name) {
  return parse_choice(mlp_activations(), name);
}
std::optional<EmbedScale> parse_embed_scale(const std::string& name) {
  return parse_choice(embed_scales(), name);
}

const char* rope_type_name(RopeType t) {
  return choice_name(rope_types(), t);
}
const char* lr_decay_style_name(LrDecayStyle s) {
  return choice_name(decay_styles(), s);
}
const char* data_format_name(DataFormat f) {
  return choice_name(data_formats(), f);
}
const char* objective_name(Objective o) {
  return choice_name(objectives(), o);
}
const char* preference_loss_name(PreferenceLoss l) {
  return choice_name(preference_losses(), l);
}
const char* loss_on_name(LossOn l) {
  return choice_name(loss_ons(), l);
}
const char* truncation_name(Truncation t) {
  return choice_name(truncations(), t);
}
const char* progress_mode_name(ProgressMode p) {
  return choice_name(progress_modes(), p);
}
const char* export_kind_name(ExportKind k) {
  return choice_name(export_kinds(), k);
}

std::optional<ExportKind> parse_export_kind(const std::string& name) {
  return parse_choice(export_kinds(), name);
}

}  // namespace kktrain
