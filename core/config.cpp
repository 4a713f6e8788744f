// Reads every config section through Section (core/config_reader.hpp): one line per key with its
// default and valid range, then cross-key validation and dtype resolution.
#include "core/config.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <set>
#include <sstream>

#include "core/config_choices.hpp"
#include "core/config_model_file.hpp"
#include "core/config_reader.hpp"
#include "core/errors.hpp"
#include "core/files.hpp"
#include "core/log.hpp"

namespace kktrain {

namespace {

constexpr int64_t kMaxInt = std::numeric_limits<int64_t>::max();
constexpr double kInf = std::numeric_limits<double>::infinity();

const char* const kAdamW = "torch.optim.AdamW";
const char* const kAdam = "torch.optim.Adam";
const char* const kFusedAdam = "transformer_engine.pytorch.optimizers.fused_adam.FusedAdam";
const char* const kSGD = "torch.optim.SGD";

bool parse_optimizer_target(const std::string& t, OptimizerKind* k) {
  static const std::vector<std::pair<std::string, OptimizerKind>> names = {
      {kAdamW, OptimizerKind::adamw},
      {"AdamW", OptimizerKind::adamw},
      {"adamw", OptimizerKind::adamw},
      {kAdam, OptimizerKind::adam},
      {"Adam", OptimizerKind::adam},
      {"adam", OptimizerKind::adam},
      {kFusedAdam, OptimizerKind::fused_adam},
      {"transformer_engine.pytorch.optimizers.FusedAdam", OptimizerKind::fused_adam},
      {"FusedAdam", OptimizerKind::fused_adam},
      {"fused_adam", OptimizerKind::fused_adam},
      {kSGD, OptimizerKind::sgd},
      {"SGD", OptimizerKind::sgd},
      {"sgd", OptimizerKind::sgd},
  };
  for (const auto& n : names) {
    if (n.first == t) {
      *k = n.second;
      return true;
    }
  }
  return false;
}

// float16 parses as a dtype (so the error is precise) but kktrain stores and computes only
// float32 and bfloat16: fp16 training needs loss scaling, which is out of scope.
void require_supported(Section& s, const std::string& key, std::optional<DType> d) {
  if (d && *d == DType::float16) {
    s.fail(key, "float16 is not supported by kktrain (use float32 or bfloat16)");
  }
}

// model.rope_scaling (Hugging Face's rope_scaling): the llama3 factors are required, as Hugging
// Face requires them; they are read only for llama3. longrope (Phi-3) needs its two factor lists
// and original_max_position_embeddings; its attention_factor defaults from factor, which defaults
// to max_seq_len / original_max_position_embeddings. The lists' lengths (rotary_dim / 2) are
// checked once rotary_dim is read.
void read_rope_scaling(Section& s, RopeScaling* r, int64_t max_seq_len) {
  r->rope_type = get_enum(s, "rope_type", RopeType::standard, rope_types());
  std::map<std::string, std::string> foreign;
  const char* const kLlama3[] = {"factor", "low_freq_factor", "high_freq_factor",
                                 "original_max_position_embeddings"};
  const char* const kLongrope[] = {"short_factor", "long_factor", "attention_factor"};
  if (!r->longrope()) {
    for (const char* k : kLongrope) foreign[k] = "applies only to rope_type: longrope";
  }
  if (r->rope_type == RopeType::linear) {
    if (!s.has("factor")) s.fail("factor", "rope_type linear needs factor (> 0)");
    r->factor = s.get_double("factor", 1.0, 1e-6, kInf);
    for (int i = 1; i < 4; ++i) foreign[kLlama3[i]] = "applies only to rope_type: llama3";
    s.finish(foreign);
    return;
  }
  if (r->longrope()) {
    for (const char* k : {"short_factor", "long_factor", "original_max_position_embeddings"}) {
      if (!s.has(k)) {
        s.fail(k,
               "rope_type longrope needs short_factor, long_factor (rotary_dim / 2 numbers "
               "each) and original_max_position_embeddings");
      }
    }
    r->short_factor = s.get_number_list("short_factor", kMaxLongropeFactors, 1e-6, 1e12);
    r->long_factor = s.get_number_list("long_factor", kMaxLongropeFactors, 1e-6, 1e12);
    for (const char* k : {"short_factor", "long_factor"}) {
      s.accepts(k, std::string("longrope (required): rotary_dim / 2 numbers, each 1e-06 .. 1e12: "
                               "inv_freq[j] = 1 / (factor[j] * rope_theta^(2j / rotary_dim)), ") +
                       (k[0] == 's' ? "for a batch whose positions stay within "
                                      "original_max_position_embeddings"
                                    : "for one whose positions go beyond"));
    }
    // (the schema's rows of these two keys are llama3's, which say what longrope takes)
    r->original_max_position_embeddings =
        s.get_int("original_max_position_embeddings", 8192, 1, 1 << 30);
    std::optional<double> factor;
    if (s.has("factor")) {
      factor = s.get_opt_double("factor", 1e-6, 1e12);
    } else {
      s.accept("factor");
      s.set_resolved("factor", YAML::Node(YAML::NodeType::Null));
    }
    const auto attention = s.get_opt_double("attention_factor", 1e-6, 1e6);
    s.accepts("attention_factor",
              "longrope: null (sqrt(1 + ln(factor) / ln(original_max_position_embeddings)), 1 "
              "when factor <= 1) or > 0: cos and sin are multiplied by it");
    for (int i = 1; i < 3; ++i) foreign[kLlama3[i]] = "applies only to rope_type: llama3";
    s.finish(foreign);
    r->factor = factor ? *factor
                       : static_cast<double>(max_seq_len) /
                             static_cast<double>(r->original_max_position_embeddings);
    r->attention_factor =
        attention ? *attention
                  : longrope_attention_factor(r->factor, r->original_max_position_embeddings);
    return;
  }
  if (!r->llama3()) {
    for (const char* k : kLlama3) foreign[k] = "applies only to rope_type: llama3 (or linear)";
    s.finish(foreign);
    return;
  }
  for (const char* k : kLlama3) {
    if (!s.has(k)) {
      s.fail(k,
             "rope_type llama3 needs factor, low_freq_factor, high_freq_factor and "
             "original_max_position_embeddings");
    }
  }
  r->factor = s.get_double("factor", 8.0, 1e-6, kInf);
  r->low_freq_factor = s.get_double("low_freq_factor", 1.0, 1e-6, kInf);
  r->high_freq_factor = s.get_double("high_freq_factor", 4.0, 1e-6, kInf);
  r->original_max_position_embeddings =
      s.get_int("original_max_position_embeddings", 8192, 1, 1 << 30);
  for (const char* k : kLlama3) {
    s.accepts(k, std::string("required with rope_type llama3: ") +
                     (k == kLlama3[3] ? "an integer >= 1" : "> 0") + " (Llama 3.1's shown)" +
                     (k == kLlama3[0]   ? "; linear: required; longrope: null or > 0, only for "
                                          "attention_factor's default (null: max_seq_len / "
                                          "original_max_position_embeddings)"
                      : k == kLlama3[3] ? "; longrope: required, the longest sequence the "
                                          "short factors serve"
                                        : ""));
  }
  s.finish(foreign);
  if (r->high_freq_factor <= r->low_freq_factor) {
    s.fail_either("low_freq_factor", "high_freq_factor",
                  "high_freq_factor " + format_double(r->high_freq_factor) +
                      " must exceed low_freq_factor " + format_double(r->low_freq_factor));
  }
}

// model.moe: the keys past num_experts are read only for a sparse model (num_experts > 0).
void read_moe(Section& s, MoeConfig* e, int64_t dense_intermediate) {
  e->num_experts = s.get_int("num_experts", 0, 0, 1 << 16);
  s.accepts("num_experts", "0 (dense MLPs) or the experts of every layer's sparse MLP");
  const char* const kSparse[] = {"top_k", "intermediate_size", "norm_topk_prob",
                                 "shared_expert_intermediate_size", "aux_loss_coef"};
  if (!e->enabled()) {
    std::map<std::string, std::string> foreign;
    for (const char* k : kSparse) foreign[k] = "applies only with model.moe.num_experts > 0";
    s.finish(foreign);
    return;
  }
  e->top_k = s.get_int("top_k", e->top_k, 1, 1 << 16);
  const auto f = s.get_opt_int("intermediate_size", std::nullopt, 1, 1 << 22);
  s.accepts("intermediate_size", "an integer >= 1 (per expert); null: model.intermediate_size");
  e->intermediate_size = f ? *f : dense_intermediate;
  s.set_resolved("intermediate_size", YAML::Node(e->intermediate_size));
  e->norm_topk_prob = s.get_bool("norm_topk_prob", e->norm_topk_prob);
  e->shared_expert_intermediate_size = s.get_int("shared_expert_intermediate_size", 0, 0, 1 << 22);
  e->aux_loss_coef = s.get_double("aux_loss_coef", e->aux_loss_coef, 0.0, kInf);
  s.finish();
  if (e->top_k > e->num_experts) {
    s.fail_either("top_k", "num_experts",
                  "top_k " + std::to_string(e->top_k) + " exceeds num_experts " +
                      std::to_string(e->num_experts));
  }
}

}  // namespace

double longrope_attention_factor(double factor, int64_t original) {
  if (!(factor > 1.0) || original <= 1) return 1.0;
  return std::sqrt(1.0 + std::log(factor) / std::log(static_cast<double>(original)));
}

float ModelConfig::attn_scale() const {
  if (query_pre_attn_scalar > 0) return static_cast<float>(1.0 / std::sqrt(query_pre_attn_scalar));
  return 1.0f / std::sqrt(static_cast<float>(head_dim()));
}

namespace {

// model.final_logit_softcapping: null or absent (off), or the cap, a number > 0.
void read_softcap(Section& s, ModelConfig* m) {
  const char* const key = "final_logit_softcapping";
  const auto cap = s.get_opt_double(key, -kInf, kInf);
  s.accepts(key, "null (off) or a number > 0 (logits = cap * tanh(logits / cap))");
  if (cap && !(*cap > 0.0)) {
    s.fail(key, "expected a number > 0 (the cap) or null (off), got " + format_double(*cap));
  }
  m->final_logit_softcapping = cap ? *cap : 0.0;
}

// model.tokenizer: null, or an existing tokenizer.json or directory holding one.
void read_tokenizer(Section& s, ModelConfig* m) {
  m->tokenizer = s.get_opt_string("tokenizer");
  s.accepts("tokenizer",
            "a tokenizer.json, or a directory holding one; null: model.init_from's, if any");
  if (!m->tokenizer) return;
  const std::string& t = *m->tokenizer;
  if (t.empty()) {
    s.fail("tokenizer", "an empty path (leave it unset, or null, for model.init_from's)");
  }
  std::error_code ec;
  if (std::filesystem::is_directory(t, ec)) {
    if (!std::filesystem::exists(std::filesystem::path(t) / "tokenizer.json", ec)) {
      s.fail("tokenizer", "directory '" + t + "' holds no tokenizer.json");
    }
  } else if (!std::filesystem::exists(t, ec)) {
    s.fail("tokenizer",
           "'" + t + "' does not exist (a tokenizer.json, or a directory holding one)");
  }
}

// ---- Run options that were environment variables (issue 48) -------------------------------

// model.attention (auto | tiled_gemm | team) and model.attention_tiles (null or "QxK").
void read_attention(Section& s, AttentionConfig* a) {
  a->kernel = get_enum(s, "attention", AttentionChoice::automatic, attention_choices());
  const char* const key = "attention_tiles";
  const std::optional<std::string> tiles = s.get_opt_string(key);
  s.accepts(key, "null (the kernel's defaults) or \"QxK\": query rows x keys per block");
  if (!tiles) return;
  long long q = 0, k = 0;
  char x = 0, extra = 0;
  if (std::sscanf(tiles->c_str(), "%lld%c%lld%c", &q, &x, &k, &extra) != 3 || x != 'x' || q < 1 ||
      k < 1) {
    s.fail(key, "'" + *tiles + "': expected QxK, query rows x keys per block, both >= 1");
  }
  a->q_rows = q;
  a->k_cols = k;
}

// data.validate_at_load_tokens: a count of tokens, 0 and up.
void read_validate_at_load(Section& s, DataConfig* d) {
  d->validate_at_load_tokens =
      s.get_int("validate_at_load_tokens", d->validate_at_load_tokens, 0, kMaxInt);
}

// train.memory_available_bytes: null (measured) or a count of bytes, 0 and up.
void read_memory_available(Section& s, TrainConfig* t) {
  const char* const key = "memory_available_bytes";
  t->memory_available_bytes = s.get_opt_int(key, std::nullopt, 0, kMaxInt);
  s.accepts(key,
            "null (measured: MemAvailable, cgroup and rlimits, or the device's free memory) "
            "or bytes >= 0");
}

void read_model(Section& s, ModelConfig* m, StorageDtypeSpec* spec) {
  m->vocab_size = s.get_int("vocab_size", m->vocab_size, 1, 1 << 24);
  m->hidden_size = s.get_int("hidden_size", m->hidden_size, 2, 1 << 20);
  m->num_layers = s.get_int("num_layers", m->num_layers, 0, 4096);
  m->num_heads = s.get_int("num_heads", m->num_heads, 1, 4096);
  m->num_kv_heads = s.get_int("num_kv_heads", m->num_heads, 1, 4096);
  m->intermediate_size = s.get_int("intermediate_size", m->intermediate_size, 1, 1 << 22);
  m->max_seq_len = s.get_int("max_seq_len", m->max_seq_len, 1, 1 << 22);
  m->rope_theta = s.get_double("rope_theta", m->rope_theta, 1e-6, kInf);
  m->rms_norm_eps = s.get_double("rms_norm_eps", m->rms_norm_eps, 0.0, 1.0);
  {
    Section r = s.sub("rope_scaling");
    read_rope_scaling(r, &m->rope_scaling, m->max_seq_len);
  }
  m->tie_word_embeddings = s.get_bool("tie_word_embeddings", m->tie_word_embeddings);
  m->family = get_enum(s, "family", m->family, model_families());
  m->explicit_head_dim = s.get_opt_int("head_dim", std::nullopt, 2, 1 << 16).value_or(0);
  s.accepts("head_dim", "null (hidden_size / num_heads) or an even number >= 2");
  m->explicit_rotary_dim = s.get_opt_int("rotary_dim", std::nullopt, 2, 1 << 16).value_or(0);
  s.accepts("rotary_dim",
            "null (head_dim) or an even number >= 2, at most head_dim: the values of each query "
            "and key head that rotate (the first rotary_dim; the rest pass through)");
  m->attention_bias = get_enum(s, "attention_bias", m->attention_bias, attention_biases());
  m->qk_norm = get_enum(s, "qk_norm", m->qk_norm, qk_norms());
  m->sliding_window = s.get_opt_int("sliding_window", std::nullopt, 1, 1 << 22).value_or(0);
  s.accepts("sliding_window", "null (no window) or the keys a query sees, >= 1");
  const std::vector<std::string> types = s.get_string_list("layer_types");
  s.accepts("layer_types",
            "null (every layer slides with a window) or one of full_attention, "
            "sliding_attention per layer");
  m->layer_types.clear();
  for (const auto& t : types) {
    const auto a = parse_layer_attention(t);
    if (!a) s.fail("layer_types", "\"" + t + "\" is not full_attention or sliding_attention");
    m->layer_types.push_back(*a);
  }
  const std::vector<std::string> ropes = s.get_string_list("layer_rope");
  s.accepts("layer_rope", "null (every layer rotates) or one of rope, none, local per layer");
  m->layer_rope.clear();
  for (const auto& r : ropes) {
    const auto v = parse_layer_rope(r);
    if (!v) s.fail("layer_rope", "\"" + r + "\" is not rope, none or local");
    m->layer_rope.push_back(*v);
  }
  m->norm_weight = get_enum(s, "norm_weight", m->norm_weight, norm_weights());
  m->norm_placement = get_enum(s, "norm_placement", m->norm_placement, norm_placements());
  m->mlp_activation = get_enum(s, "mlp_activation", m->mlp_activation, mlp_activations());
  m->embed_scale = get_enum(s, "embed_scale", m->embed_scale, embed_scales());
  m->query_pre_attn_scalar = s.get_opt_double("query_pre_attn_scalar", 1e-6, 1e12).value_or(0.0);
  s.accepts("query_pre_attn_scalar", "null (head_dim) or a number > 0: scores * its ^-1/2");
  m->attn_logit_softcapping = s.get_opt_double("attn_logit_softcapping", 1e-6, 1e12).value_or(0.0);
  s.accepts("attn_logit_softcapping",
            "null (off) or a number > 0 (scores = cap * tanh(scores / cap))");
  m->rope_local_theta = s.get_opt_double("rope_local_theta", 1e-6, kInf).value_or(0.0);
  s.accepts("rope_local_theta", "null (no local layers) or the rotary base of layer_rope local");

  // Storage dtype: both spellings accept the same values; resolution happens in load_config.
  spec->dtype = s.get_dtype("dtype", std::nullopt, DTypeNull::accepted, DTypeAuto::accepted,
                            &spec->dtype_auto);
  spec->dtype_present = spec->dtype_auto || spec->dtype.has_value();
  spec->torch_dtype = s.get_dtype("torch_dtype", std::nullopt, DTypeNull::accepted,
                                  DTypeAuto::accepted, &spec->torch_dtype_auto);
  spec->torch_dtype_present = spec->torch_dtype_auto || spec->torch_dtype.has_value();
  if (spec->torch_dtype_present) {
    log::warn(std::string("model.torch_dtype is deprecated; use model.dtype") +
              (spec->dtype_present ? " (model.dtype is set and takes precedence)" : ""));
  }
  require_supported(s, "dtype", spec->dtype);
  if (!spec->dtype_present) require_supported(s, "torch_dtype", spec->torch_dtype);

  m->seed = static_cast<uint64_t>(s.get_int("seed", static_cast<int64_t>(m->seed), 0, kMaxInt));
  m->init_std = s.get_double("init_std", m->init_std, 0.0, 10.0);
  m->init_from = s.get_opt_string("init_from");
  if (m->init_from && m->init_from->empty()) {
    s.fail("init_from", "an empty path (leave it unset, or null, to initialize from model.seed)");
  }
  spec->init_from = m->init_from;
  read_tokenizer(s, m);
  m->activation_checkpointing = s.get_bool("activation_checkpointing", false);
  m->loss_chunk_tokens = s.get_int("loss_chunk_tokens", m->loss_chunk_tokens, 1, 1 << 24);
  m->keep_in_fp32 = s.get_string_list("keep_in_fp32");
  m->mtp_num_layers = s.get_int("mtp_num_layers", 0, 0, 64);
  m->compute_mtp = s.get_bool("compute_mtp", true);
  m->mtp_loss_weight = s.get_double("mtp_loss_weight", m->mtp_loss_weight, 0.0, kInf);
  read_softcap(s, m);
  read_attention(s, &m->attention);
  m->gemm.bf16 = get_enum(s, "gemm", GemmChoice::automatic, gemm_choices());
  m->gemm.fp32 = get_enum(s, "gemm_fp32", GemmFp32Choice::automatic, gemm_fp32_choices());
  {
    Section e = s.sub("moe");
    read_moe(e, &m->moe, m->intermediate_size);
  }
  s.finish();
  if (m->moe.enabled() && m->mtp_num_layers > 0) {
    s.fail("mtp_num_layers",
           "a multi-token-prediction head on a mixture-of-experts model is not implemented "
           "(model.moe.num_experts > 0); set mtp_num_layers: 0");
  }

  if (m->explicit_head_dim == 0 && m->hidden_size % m->num_heads != 0) {
    s.fail_either("hidden_size", "num_heads",
                  "hidden_size " + std::to_string(m->hidden_size) +
                      " is not divisible by num_heads " + std::to_string(m->num_heads));
  }
  if (m->num_heads % m->num_kv_heads != 0) {
    s.fail_either("num_heads", "num_kv_heads",
                  "num_heads " + std::to_string(m->num_heads) +
                      " is not divisible by num_kv_heads " + std::to_string(m->num_kv_heads));
  }
  if (!m->layer_types.empty()) {
    if (static_cast<int64_t>(m->layer_types.size()) != m->num_layers) {
      s.fail("layer_types", std::to_string(m->layer_types.size()) + " layer types for " +
                                std::to_string(m->num_layers) + " layers (num_layers)");
    }
  }
  if (!m->layer_rope.empty() && static_cast<int64_t>(m->layer_rope.size()) != m->num_layers) {
    s.fail("layer_rope", std::to_string(m->layer_rope.size()) + " entries for " +
                             std::to_string(m->num_layers) + " layers (num_layers)");
  }
  bool local = false;
  for (auto r : m->layer_rope) local = local || r == LayerRope::local;
  if (local != (m->rope_local_theta > 0)) {
    s.fail_either("layer_rope", "rope_local_theta",
                  local ? "layer_rope has local layers and rope_local_theta is null"
                        : "rope_local_theta is set and no layer_rope entry is local");
  }
  if (m->mtp_num_layers > 0 &&
      (m->norm_placement != NormPlacement::pre || m->embed_scale != EmbedScale::none ||
       m->norm_weight != NormWeight::plain || m->mlp_activation != MlpActivation::silu)) {
    s.fail("mtp_num_layers",
           "a multi-token-prediction head is defined for Llama's block only (norm_placement pre, "
           "norm_weight plain, mlp_activation silu, embed_scale none); set mtp_num_layers: 0");
  }
  if (m->explicit_head_dim % 2 != 0) {
    s.fail("head_dim",
           std::to_string(m->explicit_head_dim) + " must be even for rotary embeddings");
  }
  if (m->head_dim() % 2 != 0) {
    s.fail_either("hidden_size", "num_heads",
                  "head_dim = hidden_size / num_heads = " + std::to_string(m->head_dim()) +
                      " must be even for rotary embeddings");
  }
  if (m->family == ModelFamily::phi3 && m->attention_bias != AttentionBias::none) {
    s.fail_either("family", "attention_bias",
                  "family phi3's fused qkv_proj has no bias (attention_bias none)");
  }
  if (m->family == ModelFamily::phi3 && m->moe.enabled()) {
    s.fail("family", "family phi3 has a dense MLP (gate_up_proj); model.moe.num_experts is " +
                         std::to_string(m->moe.num_experts));
  }
  if (m->explicit_rotary_dim % 2 != 0 || m->explicit_rotary_dim > m->head_dim()) {
    s.fail("rotary_dim", std::to_string(m->explicit_rotary_dim) +
                             " must be even and at most head_dim " + std::to_string(m->head_dim()));
  }
  const RopeScaling& r = m->rope_scaling;
  if (r.longrope()) {
    const int64_t half = m->rotary_dim() / 2;
    for (const auto& [key, list] :
         {std::pair<const char*, const std::vector<double>*>{"short_factor", &r.short_factor},
          {"long_factor", &r.long_factor}}) {
      if (static_cast<int64_t>(list->size()) != half) {
        Section rs = s.sub("rope_scaling");
        rs.fail(key, std::to_string(list->size()) + " factors; rotary_dim " +
                         std::to_string(m->rotary_dim()) +
                         " needs rotary_dim / 2 = " + std::to_string(half));
      }
    }
  }
}

void read_freeze(Section& s, FreezeConfig* f) {
  f->freeze_modules = s.get_string_list("freeze_modules", GlobMaps::accepted);
  f->unfreeze_modules = s.get_string_list("unfreeze_modules", GlobMaps::accepted);
  f->freeze_parameters = s.get_string_list("freeze_parameters");
  f->unfreeze_parameters = s.get_string_list("unfreeze_parameters");
  s.finish();
  // Duplicate exact names are rejected (unknown names are checked against the model later).
  const auto no_duplicates = [&](const char* key, const std::vector<std::string>& names) {
    std::set<std::string> seen;
    for (const auto& n : names) {
      if (!seen.insert(n).second) s.fail(key, "duplicate parameter name '" + n + "'");
    }
  };
  no_duplicates("freeze_parameters", f->freeze_parameters);
  no_duplicates("unfreeze_parameters", f->unfreeze_parameters);
}

void read_peft(Section& s, PeftConfig* p) {
  p->enabled = s.present("target_modules") || s.present("dim") || s.present("lora_dtype") ||
               s.present("alpha") || s.present("dropout") || s.present("_target_");
  const auto target = s.get_opt_string("_target_");
  s.accepts("_target_", "nemo_automodel.components._peft.lora.PeftConfig, PeftConfig, lora, null");
  if (target && *target != "nemo_automodel.components._peft.lora.PeftConfig" &&
      *target != "PeftConfig" && *target != "lora") {
    s.fail("_target_", "unknown PEFT component \"" + *target +
                           "\"; accepted: nemo_automodel.components._peft.lora.PeftConfig, "
                           "PeftConfig, lora");
  }
  p->target_modules = s.get_string_list("target_modules", GlobMaps::accepted);
  p->dim = s.get_int("dim", p->dim, 1, 1 << 16);
  p->alpha = s.get_double("alpha", p->alpha, 0.0, kInf);
  p->dropout = s.get_double("dropout", p->dropout, 0.0, 1.0);
  if (p->dropout != 0.0) s.fail("dropout", "LoRA dropout is not implemented; use 0.0");
  p->lora_dtype = s.get_dtype("lora_dtype", std::nullopt, DTypeNull::accepted);
  require_supported(s, "lora_dtype", p->lora_dtype);
  p->init_from = s.get_opt_string("init_from");
  s.accepts("init_from",
            "a PEFT adapter directory (adapter_config.json + adapter_model.safetensors), or null");
  if (p->init_from && p->init_from->empty()) s.fail("init_from", "an empty directory name");
  p->enabled = p->enabled || p->init_from.has_value();  // an adapter to start from: LoRA
  s.finish();
  if (p->enabled && p->target_modules.empty()) {
    s.fail("target_modules", "PEFT is configured but no target_modules are given");
  }
}

// A peft section naming an adapter in init_from takes its r, lora_alpha and target_modules for
// the keys it leaves unset (a key it sets must agree: io/peft.hpp checks the directory later).
void peft_from_adapter(YAML::Node root, const ModelConfig& m, const LoadOptions& opts) {
  const YAML::Node& croot = root;
  if (!croot["peft"] || !croot["peft"].IsMap()) return;
  YAML::Node p = root["peft"];
  const YAML::Node& cp = p;
  const bool all_set = cp["dim"] && cp["alpha"] && cp["target_modules"];
  if (!cp["init_from"] || !cp["init_from"].IsScalar() || cp["init_from"].Scalar().empty() ||
      all_set) {
    return;
  }
  const PeftAdapterSettings a =
      opts.peft_adapter(cp["init_from"].Scalar(), m.num_layers, m.fused_projections());
  if (!cp["dim"]) p["dim"] = a.dim;
  if (!cp["alpha"]) p["alpha"] = a.alpha;
  if (!cp["target_modules"]) p["target_modules"] = a.target_modules;
}

void read_optimizer(Section& s, OptimizerConfig* o) {
  const std::string target = s.get_string("_target_", kAdamW);
  s.accepts("_target_", std::string(kAdamW) + ", " + kAdam + ", " + kFusedAdam + ", " + kSGD +
                            " (or AdamW, Adam, FusedAdam, SGD)");
  if (!parse_optimizer_target(target, &o->kind)) {
    s.fail("_target_", "unknown optimizer \"" + target + "\"; accepted: " + kAdamW + ", " + kAdam +
                           ", " + kFusedAdam + ", " + kSGD + " (or AdamW, Adam, FusedAdam, SGD)");
  }
  s.set_resolved("_target_", YAML::Node(optimizer_kind_name(o->kind)));
  const bool fused = o->kind == OptimizerKind::fused_adam;
  // Defaults are those of the component named: torch AdamW decays 1e-2, Adam/FusedAdam/SGD 0.
  o->lr = s.get_double("lr", 1e-3, 0.0, kInf);
  o->weight_decay =
      s.get_double("weight_decay", o->kind == OptimizerKind::adamw ? 1e-2 : 0.0, 0.0, kInf);
  std::map<std::string, std::string> foreign;
  const std::string fused_only = "only transformer_engine FusedAdam has this option, not " + target;
  const std::string sgd_only = "only SGD has this option, not " + target;
  const std::string adam_only = "SGD has no such option (it is an Adam option)";
  if (o->is_adam_family()) {
    const auto betas = s.get_double_list("betas", {0.9, 0.999}, 0.0, 1.0);
    o->beta1 = betas[0];
    o->beta2 = betas[1];
    if (o->beta1 >= 1.0 || o->beta2 >= 1.0) s.fail("betas", "betas must be in [0, 1)");
    o->eps = s.get_double("eps", 1e-8, 0.0, kInf);
    if (s.get_bool("amsgrad", false)) s.fail("amsgrad", "amsgrad is not supported by kktrain");
    for (const char* k : {"momentum", "dampening", "nesterov"}) foreign[k] = sgd_only;
  } else {
    o->momentum = s.get_double("momentum", 0.0, 0.0, 1.0);
    o->dampening = s.get_double("dampening", 0.0, 0.0, 1.0);
    o->nesterov = s.get_bool("nesterov", false);
    if (o->nesterov && (o->momentum <= 0.0 || o->dampening != 0.0)) {
      s.fail("nesterov", "Nesterov momentum requires a momentum and zero dampening");
    }
    for (const char* k : {"betas", "eps", "amsgrad"}) foreign[k] = adam_only;
  }
  if (fused) {
    o->adam_w_mode = s.get_bool("adam_w_mode", true);
    o->bias_correction = s.get_bool("bias_correction", true);
    o->master_weights = s.get_bool("master_weights", false);
    o->store_param_remainders = s.get_bool("store_param_remainders", false);
    o->exp_avg_dtype = *s.get_dtype("exp_avg_dtype", DType::float32, DTypeNull::refused);
    o->exp_avg_sq_dtype = *s.get_dtype("exp_avg_sq_dtype", DType::float32, DTypeNull::refused);
    require_supported(s, "exp_avg_dtype", o->exp_avg_dtype);
    require_supported(s, "exp_avg_sq_dtype", o->exp_avg_sq_dtype);
  } else {
    for (const char* k : {"adam_w_mode", "bias_correction", "master_weights",
                          "store_param_remainders", "exp_avg_dtype", "exp_avg_sq_dtype"}) {
      foreign[k] = fused_only;
    }
  }
  o->stochastic_rounding = s.get_bool("stochastic_rounding", false);
  o->weight_decay_exclude = s.get_string_list("weight_decay_exclude");
  s.finish(foreign);
}

void read_scheduler(Section& s, SchedulerConfig* c) {
  c->lr_decay_style = get_enum(s, "lr_decay_style", LrDecayStyle::constant, decay_styles());
  c->lr_warmup_steps = s.get_int("lr_warmup_steps", 0, 0, kMaxInt);
  c->lr_decay_steps = s.get_opt_int("lr_decay_steps", std::nullopt, 1, kMaxInt);
  c->min_lr = s.get_double("min_lr", 0.0, 0.0, kInf);
  s.finish();
}

void read_distributed(Section& s, DistributedConfig* d, int world_size) {
  const std::string strategy = s.get_string("strategy", "fsdp2");
  s.accepts("strategy", "fsdp2");
  if (strategy != "fsdp2") {
    s.fail("strategy", "\"" + strategy +
                           "\" is not supported; kktrain implements fsdp2 (parameters, gradients "
                           "and optimizer state sharded over all ranks)");
  }
  {
    Section mp = s.sub("mp_policy");
    const char* const kPolicy = "torch.distributed.fsdp.MixedPrecisionPolicy";
    const std::string target = mp.get_string("_target_", kPolicy);
    mp.accepts("_target_", std::string(kPolicy) + ", MixedPrecisionPolicy");
    if (target != kPolicy && target != "MixedPrecisionPolicy") {
      mp.fail("_target_", "unknown mixed-precision policy \"" + target +
                              "\"; accepted: " + kPolicy + ", MixedPrecisionPolicy");
    }
    mp.set_resolved("_target_", YAML::Node(kPolicy));
    auto& p = d->mp_policy;
    p.param_dtype = mp.get_dtype("param_dtype", DType::bfloat16, DTypeNull::accepted);
    p.reduce_dtype = mp.get_dtype("reduce_dtype", DType::float32, DTypeNull::accepted);
    p.output_dtype = mp.get_dtype("output_dtype", DType::bfloat16, DTypeNull::accepted);
    p.cast_forward_inputs = mp.get_bool("cast_forward_inputs", true);
    require_supported(mp, "param_dtype", p.param_dtype);
    require_supported(mp, "reduce_dtype", p.reduce_dtype);
    require_supported(mp, "output_dtype", p.output_dtype);
    mp.finish();
  }
  d->autocast_dtype = s.get_dtype("autocast_dtype", std::nullopt, DTypeNull::accepted);
  require_supported(s, "autocast_dtype", d->autocast_dtype);
  d->reshard_after_forward = s.get_bool("reshard_after_forward", true);
  d->grad_sync = get_enum(s, "grad_sync", GradSync::every_micro_batch, grad_syncs());
  d->nonblocking_collectives = s.get_bool("nonblocking_collectives", false);
  {
    const std::string c = s.get_choice("collectives", "auto", {"auto", "kktrain", "mpi"});
    d->collectives = c == "kktrain" ? CollectiveImpl::kktrain
                     : c == "mpi"   ? CollectiveImpl::mpi
                                    : CollectiveImpl::automatic;
  }
  d->failed_rank_wait_s = s.get_double("failed_rank_wait_s", 60.0, 0.0, 86400.0);
  d->stuck_peer_wait_s = s.get_double("stuck_peer_wait_s", 300.0, 1.0, 86400.0);
  d->expert_parallel_size = s.get_int("expert_parallel_size", 1, 1, 1 << 16);
  d->moe_param_dtype = s.get_dtype("moe_param_dtype", std::nullopt, DTypeNull::accepted);
  require_supported(s, "moe_param_dtype", d->moe_param_dtype);
  d->allow_moe_param_dtype_mismatch = s.get_bool("allow_moe_param_dtype_mismatch", false);
  s.finish();
  if (!d->reshard_after_forward && world_size == 1) {
    log::warn(
        "distributed.reshard_after_forward has no effect on one rank: nothing is sharded, and the "
        "compute copies of the weights live from forward to backward (as autocast keeps them)");
  }
}

// The keys of examples data (data.format chat or prompt_completion).
void read_examples(Section& s, DataConfig* d) {
  const bool examples = is_examples(*d);
  const std::string format = data_format_name(d->format);
  const std::string loss_on =
      s.get_choice("loss_on", "auto", {"auto", "assistant", "completion", "all"});
  if (d->format == DataFormat::preference && loss_on != "auto" && loss_on != "completion") {
    s.fail("loss_on", loss_on +
                          ": a preference pair's log-probabilities are over its completions' "
                          "tokens (data.format preference takes completion, or auto)");
  }
  if (loss_on == "completion" && d->format == DataFormat::preference) {
    d->loss_on = LossOn::completion;
  } else if (loss_on == "assistant" && d->format != DataFormat::chat) {
    s.fail("loss_on", "assistant needs data.format chat (data.format is " + format + ")");
  }
  if (loss_on == "completion" && d->format != DataFormat::prompt_completion) {
    s.fail("loss_on",
           "completion needs data.format prompt_completion (data.format is " + format + ")");
  }
  if (loss_on == "auto") {
    d->loss_on = d->format == DataFormat::chat ? LossOn::assistant
                 : d->format == DataFormat::prompt_completion || is_preference(*d)
                     ? LossOn::completion
                     : LossOn::all;
    s.set_resolved("loss_on", YAML::Node(loss_on_name(d->loss_on)));
  } else if (!is_preference(*d)) {
    d->loss_on = loss_on == "assistant"    ? LossOn::assistant
                 : loss_on == "completion" ? LossOn::completion
                                           : LossOn::all;
  }
  d->truncation = get_enum(s, "truncation", Truncation::truncate, truncations());
  d->packing = s.get_bool("packing", false);
  d->share_prompt = s.get_bool("share_prompt", true);
  d->chat_template = s.get_opt_string("chat_template");
  s.accepts("chat_template", "a Jinja chat template file; null: the tokenizer's");
  if (d->chat_template && d->chat_template->empty()) s.fail("chat_template", "an empty file name");
  d->val_path = s.get_opt_string("val_path");
  s.accepts("val_path",
            "a JSONL file of validation examples; null: data.val_fraction of data.path's");
  if (d->val_path && d->val_path->empty()) s.fail("val_path", "an empty file name");
  if (examples) return;
  const bool set =
      d->truncation != Truncation::truncate || d->packing || d->chat_template || d->val_path;
  if (set) {
    log::warn(
        "data.truncation, data.packing, data.chat_template and data.val_path apply to "
        "examples (data.format chat, prompt_completion or preference); data.format is " +
        format + ", so they have no effect");
  }
}

void read_data(Section& s, DataConfig* d, int world_size) {
  d->paths = s.get_string_list("path");
  s.accepts("path", "a file, a glob (shards_*.bin) or a list of them; null: the embedded corpus");
  if (d->paths.size() <= 1) {
    s.set_resolved("path",
                   d->paths.empty() ? YAML::Node(YAML::NodeType::Null) : YAML::Node(d->paths[0]));
  }
  if (d->paths.empty() && s.has("path")) {
    s.fail("path",
           "an empty list names no file (leave data.path unset or null for the embedded "
           "corpus)");
  }
  for (const auto& p : d->paths) {
    if (p.empty()) s.fail("path", "an empty file name");
  }
  d->format = get_enum(s, "format", DataFormat::automatic, data_formats());
  d->jsonl_key = s.get_string("jsonl_key", d->jsonl_key);
  if (d->jsonl_key.empty()) s.fail("jsonl_key", "an empty key");
  read_examples(s, d);
  d->seq_len = s.get_int("seq_len", d->seq_len, 1, 1 << 22);
  d->micro_batch_size = s.get_int("micro_batch_size", d->micro_batch_size, 1, 1 << 20);
  d->global_batch_size = s.get_int("global_batch_size", d->micro_batch_size * world_size, 1,
                                   static_cast<int64_t>(1) << 30);
  d->seed = static_cast<uint64_t>(s.get_int("seed", static_cast<int64_t>(d->seed), 0, kMaxInt));
  d->val_fraction = s.get_double("val_fraction", d->val_fraction, 0.0, 0.5);
  read_validate_at_load(s, d);
  s.finish();
}

void read_train(Section& s, TrainConfig* t) {
  t->objective = get_enum(s, "objective", Objective::sft, objectives());
  t->max_steps_set = s.present("max_steps");
  t->max_steps = s.get_int("max_steps", t->max_steps, 0, kMaxInt);
  t->epochs = s.get_int("epochs", 0, 0, kMaxInt);
  s.accepts("epochs", ">= 0; passes over the examples (chat, prompt_completion); 0: max_steps");
  t->log_every = s.get_int("log_every", t->log_every, 1, kMaxInt);
  t->val_every = s.get_int("val_every", t->val_every, 0, kMaxInt);
  t->val_batches = s.get_int("val_batches", t->val_batches, 1, 1 << 20);
  t->grad_clip = s.get_double("grad_clip", t->grad_clip, 0.0, kInf);
  t->output_dir = s.get_string("output_dir", t->output_dir);
  t->max_nonfinite_steps = s.get_int("max_nonfinite_steps", t->max_nonfinite_steps, 1, kMaxInt);
  t->fail_on_precision_warning = s.get_bool("fail_on_precision_warning", false);
  t->update_lost_warn_frac =
      s.get_double("update_lost_warn_frac", t->update_lost_warn_frac, 0.0, 1.0);
  t->update_lost_warn_steps =
      s.get_int("update_lost_warn_steps", t->update_lost_warn_steps, 0, kMaxInt);
  t->progress = get_enum(s, "progress", ProgressMode::automatic, progress_modes());
  read_memory_available(s, t);
  s.finish();
  if (t->output_dir.empty()) s.fail("output_dir", "must not be empty");
}

// The dpo section (train.objective dpo; its keys are refused with another objective).
void read_dpo(Section& s, DpoConfig* d) {
  d->loss = get_enum(s, "loss", PreferenceLoss::sigmoid, preference_losses());
  d->beta = s.get_double("beta", d->beta, 1e-9, 1e9);
  d->simpo_gamma = s.get_double("simpo_gamma", d->simpo_gamma, -1e9, 1e9);
  d->label_smoothing = s.get_double("label_smoothing", d->label_smoothing, 0.0, 0.5);
  s.finish();
  if (d->label_smoothing >= 0.5) {
    s.fail("label_smoothing", "0.5 makes the loss ignore which side is chosen; take [0, 0.5)");
  }
  if (d->label_smoothing > 0 && d->loss != PreferenceLoss::sigmoid &&
      d->loss != PreferenceLoss::simpo) {
    s.fail_either(
        "label_smoothing", "loss",
        std::string("dpo.label_smoothing applies to the sigmoid and simpo losses; dpo.loss is ") +
            preference_loss_name(d->loss));
  }
  if (s.has("simpo_gamma") && d->loss != PreferenceLoss::simpo) {
    s.fail_either("simpo_gamma", "loss",
                  std::string("dpo.simpo_gamma is the simpo loss's margin; dpo.loss is ") +
                      preference_loss_name(d->loss));
  }
}

void read_checkpoint(Section& s, CheckpointConfig* c) {
  c->dir = s.get_opt_string("dir");
  if (c->dir && c->dir->empty()) {
    s.fail("dir", "an empty path (leave it unset, or null, for <train.output_dir>/checkpoints)");
  }
  c->save_every = s.get_int("save_every", 0, 0, kMaxInt);
  c->keep_last = s.get_int("keep_last", 2, 1, 1 << 20);
  const std::string resume = s.get_string("resume", "auto");
  s.accepts("resume", "auto, none, or a checkpoint path");
  if (resume.empty()) s.fail("resume", "must be auto, none, or a checkpoint path");
  c->resume = resume == "auto"                        ? ResumeFrom::latest
              : resume == "none" || resume == "never" ? ResumeFrom::none  // never: older spelling
                                                      : ResumeFrom::path;
  c->resume_path = c->resume == ResumeFrom::path ? resume : "";
  s.set_resolved("resume", YAML::Node(resume_name(*c)));
  c->export_dtype = *s.get_dtype("export_dtype", DType::bfloat16, DTypeNull::refused);
  require_supported(s, "export_dtype", c->export_dtype);
  c->export_format = get_enum(s, "export_format", ExportKind::hdf5, export_kinds());
  s.finish();
}

// Cross-section rules and warnings about settings that have no effect.
// Locates a dotted key path in the (overridden) config tree for error messages.
struct Locator {
  YAML::Node root;
  const ConfigOrigin* origin;
  std::string where(const std::string& path) const {
    YAML::Node n = root;
    std::stringstream ss(path);
    for (std::string part; std::getline(ss, part, '.');) {
      if (!n.IsMap()) return origin->where(path, YAML::Node());
      const YAML::Node& cn = n;
      const YAML::Node next = cn[part];  // a missing key gives an invalid node: never reset() to it
      if (!next.IsDefined()) return origin->where(path, YAML::Node());
      n.reset(next);
    }
    return origin->where(path, n);
  }
  [[noreturn]] void fail(const std::string& path, const std::string& msg) const {
    throw ConfigError(path, msg, where(path));
  }
  // A rule between two keys that fails: blames `a` when an override set it and not `b`, else `b`.
  [[noreturn]] void fail_either(const std::string& a, const std::string& b,
                                const std::string& msg) const {
    const std::string wa = where(a);
    if (wa.rfind("override ", 0) == 0 && where(b).rfind("override ", 0) != 0) {
      throw ConfigError(a, msg, wa);
    }
    fail(b, msg);
  }
};

// Expert parallelism and the MoE compute dtype (docs/moe.md).
void validate_moe(const Config& c, const LoadOptions& opts, const Locator& loc) {
  const MoeConfig& e = c.model.moe;
  const int64_t ep = c.distributed.expert_parallel_size;
  const std::string eps = "expert_parallel_size " + std::to_string(ep);
  if (ep > 1 && !e.enabled()) {
    loc.fail("distributed.expert_parallel_size",
             eps + " needs experts to split (model.moe.num_experts is 0)");
  }
  if (opts.world_size % ep != 0) {
    loc.fail("distributed.expert_parallel_size",
             eps + " does not divide the " + std::to_string(opts.world_size) + " rank" +
                 (opts.world_size == 1 ? "" : "s") +
                 " (the experts are split over groups of that many ranks)");
  }
  if (e.enabled() && e.num_experts % ep != 0) {
    loc.fail_either("distributed.expert_parallel_size", "model.moe.num_experts",
                    eps + " does not divide model.moe.num_experts " +
                        std::to_string(e.num_experts) + " (each rank of a group holds as many)");
  }
  const auto& d = c.distributed;
  if (d.moe_param_dtype && !e.enabled()) {
    loc.fail("distributed.moe_param_dtype", "applies only with model.moe.num_experts > 0");
  }
  if (d.moe_param_dtype && *d.moe_param_dtype != c.precision.compute &&
      d.allow_moe_param_dtype_mismatch) {
    loc.fail("distributed.moe_param_dtype",
             std::string(dtype_name(*d.moe_param_dtype)) + " differs from the compute dtype " +
                 dtype_name(c.precision.compute) +
                 ": experts computing in another dtype than the rest of the model are not "
                 "implemented yet (allow_moe_param_dtype_mismatch is true)");
  }
  if (d.moe_param_dtype && *d.moe_param_dtype != c.precision.compute &&
      !d.allow_moe_param_dtype_mismatch) {
    loc.fail("distributed.moe_param_dtype",
             std::string(dtype_name(*d.moe_param_dtype)) + " differs from the compute dtype " +
                 dtype_name(c.precision.compute) + " (" + c.precision.compute_source +
                 "): the experts and the rest of the model would compute in different dtypes; "
                 "set distributed.allow_moe_param_dtype_mismatch: true if that is meant");
  }
}

void validate(const Config& c, const LoadOptions& opts, const Locator& loc) {
  if (c.data.seq_len > c.model.max_seq_len) {
    loc.fail_either("model.max_seq_len", "data.seq_len",
                    "seq_len " + std::to_string(c.data.seq_len) + " exceeds model.max_seq_len " +
                        std::to_string(c.model.max_seq_len));
  }
  const int64_t per_step = c.data.micro_batch_size * opts.world_size;
  if (c.data.global_batch_size % per_step != 0) {
    loc.fail_either("data.micro_batch_size", "data.global_batch_size",
                    "global_batch_size " + std::to_string(c.data.global_batch_size) +
                        " is not a multiple of micro_batch_size x ranks = " +
                        std::to_string(c.data.micro_batch_size) + " x " +
                        std::to_string(opts.world_size));
  }
  const auto& o = c.optimizer;
  if (o.kind == OptimizerKind::fused_adam && o.store_param_remainders) {
    if (!o.master_weights) {
      log::warn("optimizer.store_param_remainders has no effect without master_weights: true");
    } else if (c.precision.storage != DType::bfloat16) {
      log::warn(std::string("optimizer.store_param_remainders has no effect: it applies only to "
                            "bfloat16 parameters and the storage dtype is ") +
                dtype_name(c.precision.storage));
    }
  }
  if (o.stochastic_rounding) {
    const bool has_master = o.kind == OptimizerKind::fused_adam && o.master_weights;
    if (has_master || c.precision.storage != DType::bfloat16) {
      log::warn(
          "optimizer.stochastic_rounding has no effect: it applies to bfloat16 parameters "
          "updated without an fp32 master copy");
    }
  }
  const auto& mp = c.distributed.mp_policy;
  if (opts.world_size > 1 && !mp.cast_forward_inputs && c.precision.output &&
      *c.precision.output != c.precision.compute) {
    // FSDP2 would hand a unit's output_dtype activations to the next unit's param_dtype
    // weights (torch rejects the mixed matmul); kktrain does not guess a promotion either.
    loc.fail("distributed.mp_policy.cast_forward_inputs",
             std::string("false with output_dtype ") + dtype_name(*c.precision.output) +
                 " and param_dtype " + dtype_name(c.precision.compute) +
                 " would feed each layer activations in a dtype other than its weights'; set "
                 "cast_forward_inputs: true, or output_dtype equal to param_dtype (or null)");
  }
  if (c.distributed.autocast_dtype && opts.world_size > 1) {
    log::warn("distributed.autocast_dtype has no effect with " + std::to_string(opts.world_size) +
              " ranks: the sharded path computes in mp_policy.param_dtype");
  }
  validate_moe(c, opts, loc);
  if (c.checkpoint.export_format == ExportKind::peft && !c.peft.enabled) {
    loc.fail("checkpoint.export_format",
             "peft exports LoRA adapters; this run has no peft section");
  }
  const bool examples = is_examples(c.data);
  if (c.train.epochs > 0 && !examples) {
    loc.fail("train.epochs",
             "counts passes over examples (data.format chat or prompt_completion); data.format "
             "is " +
                 std::string(data_format_name(c.data.format)) + " (use train.max_steps)");
  }
  const bool dpo = c.train.objective == Objective::dpo;
  if (dpo != is_preference(c.data)) {
    loc.fail(dpo ? "data.format" : "train.objective",
             dpo ? "train.objective dpo trains on preference pairs; data.format is " +
                       std::string(data_format_name(c.data.format)) +
                       " (set data.format: preference)"
                 : std::string("data.format preference holds pairs for a preference objective; "
                               "train.objective is sft (set train.objective: dpo)"));
  }
  const YAML::Node& root = loc.root;
  const YAML::Node dpo_keys = root["dpo"];
  if (!dpo && dpo_keys.IsDefined() && dpo_keys.IsMap() && dpo_keys.size() > 0) {
    loc.fail("dpo",
             "sets a preference objective's keys, and train.objective is sft (set "
             "train.objective: dpo, or remove the dpo section)");
  }
  if (dpo && c.model.moe.enabled()) {
    loc.fail("train.objective",
             "dpo with a mixture of experts is not supported yet (its "
             "load-balancing loss beside a pair objective is untested)");
  }
  if (examples && c.model.mtp_num_layers > 0) {
    loc.fail("model.mtp_num_layers",
             "multi-token prediction across packed or padded examples is not supported; train "
             "examples (data.format " +
                 std::string(data_format_name(c.data.format)) + ") with mtp_num_layers: 0");
  }
  if (c.lr_scheduler.min_lr > o.lr) {
    loc.fail("lr_scheduler.min_lr", "min_lr " + format_double(c.lr_scheduler.min_lr) +
                                        " exceeds optimizer.lr " + format_double(o.lr));
  }
}

}  // namespace

std::string resume_name(const CheckpointConfig& c) {
  switch (c.resume) {
    case ResumeFrom::latest:
      return "auto";
    case ResumeFrom::none:
      return "none";
    case ResumeFrom::path:
      return c.resume_path;
  }
  return "?";
}

const char* optimizer_kind_name(OptimizerKind k) {
  switch (k) {
    case OptimizerKind::adamw:
      return kAdamW;
    case OptimizerKind::adam:
      return kAdam;
    case OptimizerKind::fused_adam:
      return kFusedAdam;
    case OptimizerKind::sgd:
      return kSGD;
  }
  return "?";
}

namespace {

// Configs nest a few levels deep; a flow collection ([...] or {...}) nested deeper than this is
// refused before parsing, at the bracket that goes too deep (the YAML parser's own depth limit
// reports only "bad file").
constexpr int kMaxNesting = 64;

void check_nesting(const std::string& text, const std::string& name) {
  int depth = 0, line = 1, col = 0;
  char quote = 0;
  bool comment = false;
  for (char ch : text) {
    ++col;
    if (ch == '\n') {
      ++line;
      col = 0;
      comment = false;
      continue;
    }
    if (comment) continue;
    if (quote) {
      if (ch == quote) quote = 0;
      continue;
    }
    if (ch == '"' || ch == '\'') {
      quote = ch;
    } else if (ch == '#') {
      comment = true;
    } else if (ch == '[' || ch == '{') {
      if (++depth > kMaxNesting) {
        throw ConfigError("",
                          "nested more than " + std::to_string(kMaxNesting) +
                              " levels deep; a config is a few levels of mappings",
                          name + ":" + std::to_string(line) + ":" + std::to_string(col));
      }
    } else if ((ch == ']' || ch == '}') && depth > 0) {
      --depth;
    }
  }
}

}  // namespace

Config load_config_text(const std::string& text, const std::string& name,
                        const std::vector<std::string>& overrides, const LoadOptions& opts) {
  auto origin = std::make_shared<ConfigOrigin>();
  origin->file = name;
  check_nesting(text, name);
  YAML::Node root;
  try {
    // Empty documents (a stray '---') hold nothing; a second one with content would be dropped.
    std::vector<YAML::Node> docs;
    for (const YAML::Node& d : YAML::LoadAll(text)) {
      if (!d.IsNull()) docs.push_back(d);
    }
    if (docs.size() > 1) {
      const YAML::Mark m = docs[1].Mark();
      throw ConfigError("",
                        "holds " + std::to_string(docs.size()) +
                            " YAML documents (separated by '---'); a config is one document",
                        m.is_null() ? name : name + ":" + std::to_string(m.line + 1));
    }
    if (!docs.empty()) root = docs[0];
  } catch (const YAML::Exception& e) {
    throw ConfigError(
        "", "invalid YAML: " + e.msg,
        name + ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1));
  }
  if (root.IsNull() || !root.IsDefined()) root = YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap()) throw ConfigError("", "the config must be a mapping of sections", name);
  for (const auto& o : overrides) apply_override(root, o, origin.get());

  Config c;
  if (opts.model_file_architecture) {
    const std::string init_from = init_from_in_tree(root);
    if (!init_from.empty()) {
      if (auto arch = opts.model_file_architecture(init_from)) {
        apply_model_file_architecture(root, *arch, origin.get(), &c.model_file_keys);
      }
    }
  }
  c.source = name;
  c.resolved = YAML::Node(YAML::NodeType::Map);
  Section top(root, "", origin, c.resolved);
  StorageDtypeSpec spec;
  {
    Section s = top.sub("model");
    read_model(s, &c.model, &spec);
  }
  {
    Section s = top.sub("freeze_config");
    read_freeze(s, &c.freeze);
  }
  {
    if (opts.peft_adapter) peft_from_adapter(root, c.model, opts);
    Section s = top.sub("peft");
    read_peft(s, &c.peft);
    if (!c.peft.enabled) c.resolved["peft"] = YAML::Node(YAML::NodeType::Null);
  }
  {
    Section s = top.sub("optimizer");
    read_optimizer(s, &c.optimizer);
  }
  {
    Section s = top.sub("lr_scheduler");
    read_scheduler(s, &c.lr_scheduler);
  }
  {
    Section s = top.sub("distributed");
    read_distributed(s, &c.distributed, opts.world_size);
  }
  {
    Section s = top.sub("data");
    read_data(s, &c.data, opts.world_size);
  }
  {
    Section s = top.sub("train");
    read_train(s, &c.train);
  }
  {
    Section s = top.sub("logging");
    c.logging.tensorboard = s.get_bool("tensorboard", true);
    s.finish();
  }
  {
    Section s = top.sub("eval");
    c.eval.every = s.get_int("every", 0, 0, int64_t(1) << 40);
    c.eval.data = s.get_string_list("data");
    c.eval.tasks = s.get_string_list("tasks");
    s.finish();
    if (c.eval.every > 0 && c.eval.data.empty() && c.eval.tasks.empty()) {
      s.fail("every", "eval.every runs eval.data and eval.tasks, and both are empty");
    }
  }
  {
    Section s = top.sub("dpo");
    read_dpo(s, &c.dpo);
    if (c.train.objective != Objective::dpo) c.resolved["dpo"] = YAML::Node(YAML::NodeType::Null);
  }
  {
    Section s = top.sub("checkpoint");
    read_checkpoint(s, &c.checkpoint);
  }
  // Printed configs carry a `resolved_precision` section; it is output only and ignored on input
  // so that `kktrain config` output can be fed back in unchanged.
  top.accept("resolved_precision");
  top.finish();

  // ---- dtype resolution -------------------------------------------------------------------
  const Locator loc{root, origin.get()};
  c.locate = [root, origin](const std::string& path) {
    return Locator{root, origin.get()}.where(path);
  };
  resolve_storage_dtype(
      spec,
      [&](const std::string& path) {
        if (!opts.checkpoint_dtype) {
          loc.fail("model.init_from", "cannot read the dtype of '" + path + "'");
        }
        return opts.checkpoint_dtype(path);
      },
      &c.precision);
  if (c.precision.storage == DType::float16) {
    loc.fail("model.init_from", "checkpoint dtype float16 is not supported by kktrain");
  }
  resolve_compute_dtypes(c.distributed.mp_policy, c.distributed.autocast_dtype, opts.world_size,
                         &c.precision);
  c.precision.lora = c.peft.lora_dtype;
  if (c.distributed.moe_param_dtype) {
    c.precision.moe_compute = *c.distributed.moe_param_dtype;
    c.precision.moe_compute_source = "distributed.moe_param_dtype";
  } else {
    c.precision.moe_compute = c.precision.compute;
    c.precision.moe_compute_source = "compute dtype";
  }
  c.resolved["model"]["dtype"] = dtype_name(c.precision.storage);
  validate(c, opts, loc);

  YAML::Node rp(YAML::NodeType::Map);
  rp["world_size"] = opts.world_size;
  rp["storage_dtype"] = dtype_name(c.precision.storage);
  rp["storage_dtype_source"] = c.precision.storage_source;
  rp["compute_dtype"] = dtype_name(c.precision.compute);
  rp["compute_dtype_source"] = c.precision.compute_source;
  rp["reduce_dtype"] = dtype_name(c.precision.reduce);
  rp["reduce_dtype_source"] = c.precision.reduce_source;
  rp["output_dtype"] = c.precision.output ? YAML::Node(dtype_name(*c.precision.output))
                                          : YAML::Node(YAML::NodeType::Null);
  rp["output_dtype_applied"] = c.precision.output_applied;
  rp["cast_forward_inputs_applied"] = opts.world_size > 1 && c.precision.cast_forward_inputs;
  if (c.model.moe.enabled()) {
    rp["moe_compute_dtype"] = dtype_name(c.precision.moe_compute);
    rp["moe_compute_dtype_source"] = c.precision.moe_compute_source;
    rp["router_dtype"] = "float32";
  }
  rp["lora_dtype"] = c.peft.enabled ? (c.precision.lora ? YAML::Node(dtype_name(*c.precision.lora))
                                                        : YAML::Node("inherit"))
                                    : YAML::Node(YAML::NodeType::Null);
  c.resolved["resolved_precision"] = rp;
  return c;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides,
                   const LoadOptions& opts) {
  // A config is a few KiB; a file of megabytes is a mistake (a corpus given as the config, a
  // generated list of every shard) that would cost minutes and gigabytes to parse.
  std::string text;
  if (auto why = read_regular_file(&text, path, kMaxConfigBytes)) {
    const bool large = why->rfind("is larger", 0) == 0;
    throw UsageError("cannot read config file '" + path + "': " + *why +
                     (large ? ", the most a config may hold (name many data files with a glob in "
                              "data.path)"
                            : ""));
  }
  return load_config_text(text, path, overrides, opts);
}

std::string config_schema_markdown() {
  // Configs that take every branch of the readers; the label says whose default a row shows
  // when the branches differ, or which optimizer a key belongs to.
  const std::vector<std::pair<std::string, std::string>> variants = {
      {"AdamW", ""},
      {"Adam", "optimizer:\n  _target_: torch.optim.Adam\n"},
      {"FusedAdam", "optimizer:\n  _target_: FusedAdam\n"},
      {"SGD", "optimizer:\n  _target_: SGD\n"},
      {"AdamW", "peft:\n  target_modules: [q_proj]\n"},
      {"AdamW",
       "model:\n  rope_scaling: {rope_type: llama3, factor: 8, low_freq_factor: 1,\n"
       "    high_freq_factor: 4, original_max_position_embeddings: 8192}\n"},
      {"AdamW",
       "model:\n  rotary_dim: 4\n  rope_scaling: {rope_type: longrope, short_factor: [1, 1],\n"
       "    long_factor: [2, 2], original_max_position_embeddings: 64}\n"},
      {"AdamW", "model:\n  moe: {num_experts: 8}\n"},
  };
  struct Row {
    SchemaEntry entry;
    std::vector<std::string> labels;                            // variants that read it
    std::vector<std::pair<std::string, std::string>> defaults;  // (default, variants)
  };
  std::vector<Row> rows;
  auto section = [](const std::string& k) { return k.substr(0, k.find('.')); };
  for (const auto& [label, text] : variants) {
    SchemaRecorder rec;
    load_config_text(text, "<schema>", {}, LoadOptions());
    for (const SchemaEntry& e : rec.entries) {
      auto it = std::find_if(rows.begin(), rows.end(),
                             [&](const Row& r) { return r.entry.key == e.key; });
      if (it == rows.end()) {
        // A key only some variants read goes after the last row of its section.
        auto pos = rows.end();
        for (auto r = rows.begin(); r != rows.end(); ++r) {
          if (section(r->entry.key) == section(e.key)) pos = r + 1;
        }
        it = rows.insert(pos, Row{e, {}, {}});
      }
      if (std::find(it->labels.begin(), it->labels.end(), label) == it->labels.end()) {
        it->labels.push_back(label);
      }
      auto d = std::find_if(it->defaults.begin(), it->defaults.end(),
                            [&](const auto& x) { return x.first == e.default_value; });
      if (d == it->defaults.end()) {
        it->defaults.emplace_back(e.default_value, label);
      } else if (d->second.find(label) == std::string::npos) {
        d->second += ", " + label;
      }
    }
  }
  auto cell = [](const std::string& s) {
    std::string out;
    for (char ch : s) out += ch == '|' ? std::string("\\|") : std::string(1, ch);
    return out;
  };
  std::string out = "| key | type | default | accepted |\n|---|---|---|---|\n";
  for (const Row& r : rows) {
    std::string type = r.entry.type;
    if (section(r.entry.key) == "optimizer" && r.labels.size() < 4) {
      std::string who;
      for (const auto& l : r.labels) who += (who.empty() ? "" : ", ") + l;
      type += " (" + who + ")";
    }
    std::string def;
    for (const auto& [value, who] : r.defaults) {
      def += (def.empty() ? "" : "; ") + std::string("`") + value + "`" +
             (r.defaults.size() > 1 ? " (" + who + ")" : "");
    }
    out += "| `" + r.entry.key + "` | " + cell(type) + " | " + cell(def) + " | " +
           cell(r.entry.accepted) + " |\n";
  }
  return out;
}

namespace {

// Leaves of a YAML map as (dotted key, flow-style value); a map value that is not a map (a null
// `peft`, a list) is one leaf.
void flatten_yaml(const YAML::Node& n, const std::string& prefix,
                  std::vector<std::pair<std::string, std::string>>* out) {
  if (n.IsMap() && n.size() > 0) {
    for (const auto& kv : n) {
      const std::string k = kv.first.Scalar();
      flatten_yaml(kv.second, prefix.empty() ? k : prefix + "." + k, out);
    }
    return;
  }
  YAML::Emitter e;
  e.SetNullFormat(YAML::LowerNull);
  e << YAML::Flow << n;
  out->emplace_back(prefix, e.c_str());
}

std::vector<std::pair<std::string, std::string>> yaml_leaves(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> out;
  try {
    flatten_yaml(YAML::Load(text), "", &out);
  } catch (const YAML::Exception&) {
    out = {{"", text}};
  }
  return out;
}

}  // namespace

std::vector<std::string> config_differences(const std::string& before, const std::string& after,
                                            const std::vector<std::string>& ignore) {
  const auto b = yaml_leaves(before), a = yaml_leaves(after);
  auto ignored = [&](const std::string& k) {
    for (const auto& i : ignore) {
      if (k == i || k.rfind(i + ".", 0) == 0) return true;
    }
    return false;
  };
  auto find = [](const std::vector<std::pair<std::string, std::string>>& v,
                 const std::string& k) -> const std::string* {
    for (const auto& [key, val] : v) {
      if (key == k) return &val;
    }
    return nullptr;
  };
  std::vector<std::string> out;
  for (const auto& [k, v] : a) {
    if (ignored(k)) continue;
    const std::string* old = find(b, k);
    if (!old) {
      out.push_back(k + ": (absent) -> " + v);
    } else if (*old != v) {
      out.push_back(k + ": " + *old + " -> " + v);
    }
  }
  for (const auto& [k, v] : b) {
    if (!ignored(k) && !find(a, k)) out.push_back(k + ": " + v + " -> (absent)");
  }
  return out;
}

std::string to_yaml(const Config& cfg) {
  YAML::Emitter e;
  e.SetNullFormat(YAML::LowerNull);
  e.SetIndent(2);
  e << cfg.resolved;
  return mark_model_file_keys(std::string(e.c_str()) + "\n", cfg.model_file_keys);
}

}  // namespace kktrain
