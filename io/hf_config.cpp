// Hugging Face config.json read and written (io/hf_config.hpp).
#include "io/hf_config.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <vector>

#include "core/config_reader.hpp"
#include "core/errors.hpp"
#include "core/files.hpp"
#include "core/json_reader.hpp"
#include "core/json_text.hpp"
#include "core/strings.hpp"

namespace kktrain {

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// Which numbers a key takes.
enum class Bound { positive, nonnegative };

// A key path of config.json for messages: "'<file>': <key> = <value>: <what>"
// (core/json_reader.hpp).
constexpr char kConfigJson[] = "";
using Where = json_reader::JsonWhere<kConfigJson>;

// One key of config.json, read with the file's name in every error.
// Every key asked about is recorded in `read` (when set): a key of the file that no reader asked
// about is one kktrain does not understand, and is refused (refuse_unread_keys).
struct Keys {
  const json& j;
  std::string file;
  std::set<std::string>* read = nullptr;

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    Where{file, key}.fail_valued(j.contains(key) ? &j[key] : nullptr, what);
  }
  bool has(const std::string& key) const {
    if (read) read->insert(key);
    return j.contains(key) && !j[key].is_null();
  }
  int64_t integer(const std::string& key, std::optional<int64_t> def, int64_t min) const {
    if (!has(key)) {
      if (!def) fail(key, "missing (a Llama config.json has it)");
      return *def;
    }
    const json& v = j[key];
    if (!v.is_number_integer() || v.get<int64_t>() < min) {
      fail(key, "not an integer of at least " + std::to_string(min));
    }
    return v.get<int64_t>();
  }
  double number(const std::string& key, double def, Bound bound = Bound::positive) const {
    if (!has(key)) return def;
    const json& v = j[key];
    const double x = v.is_number() ? v.get<double>() : std::nan("");
    const bool sign_ok = bound == Bound::positive ? x > 0 : x >= 0;
    if (!std::isfinite(x) || !sign_ok) {
      fail(key, bound == Bound::positive ? "not a positive number" : "not a number of at least 0");
    }
    return v.get<double>();
  }
  bool boolean(const std::string& key, bool def) const {
    if (!has(key)) return def;
    if (!j[key].is_boolean()) fail(key, "not true or false");
    return j[key].get<bool>();
  }
  std::string text(const std::string& key, const std::string& def) const {
    if (!has(key)) return def;
    if (!j[key].is_string()) fail(key, "not a string");
    return j[key].get<std::string>();
  }
};

}  // namespace

void refuse_duplicate_keys(const std::string& file, const std::string& text) {
  check_json_nesting(text, "'" + file + "'");  // before any parse: nothing walks a deep value
  // The keys of each open object, and the dotted path of the value being read.
  std::vector<std::set<std::string>> open;
  std::vector<std::string> path;
  json::parser_callback_t cb = [&](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        open.emplace_back();
        path.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!open.empty()) open.pop_back();
        if (!path.empty()) path.pop_back();
        break;
      case json::parse_event_t::key: {
        const std::string key = parsed.get<std::string>();
        path.back() = key;
        if (!open.back().insert(key).second) {
          std::string dotted;
          for (const auto& p : path) dotted += (dotted.empty() ? "" : ".") + p;
          throw InputError("'" + file + "': key \"" + printable_name(dotted) +
                           "\" appears twice in one object: which value is meant?");
        }
        break;
      }
      default:
        break;
    }
    return true;
  };
  try {
    const json parsed = json::parse(text, cb);
    (void)parsed;
  } catch (const json::exception&) {
    // Not valid JSON: the parse proper names the problem.
  }
}

namespace {

json parse_json_object(const std::string& file, const std::string& text) {
  refuse_duplicate_keys(file, text);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw InputError("'" + file + "': not valid JSON (" + std::string(e.what()) + ")");
  }
  if (!j.is_object()) throw InputError("'" + file + "': not a JSON object");
  return j;
}

// How read_rope_object reads: transformers 5's rope_parameters hold rope_theta (read by the
// caller); Phi-3 (phi3) has longrope (its older names "su" and "yarn" read as longrope) and, in
// rope_parameters, partial_rotary_factor (into *partial); kktrain's own files (own) any type.
struct RopeRead {
  bool with_theta = false;
  bool phi3 = false;
  bool own = false;
  double* partial = nullptr;
};

// longrope's factor list `name` of `s` at `w`: 1 to kMaxLongropeFactors finite positive
// numbers (its length against rotary_dim is checked by the caller).
std::vector<double> read_factor_list(const json& s, const Where& w, const char* name) {
  const std::string need = "longrope needs it as a list of 1 to " +
                           std::to_string(kMaxLongropeFactors) + " positive numbers";
  if (s.contains(name) && s[name].is_array() &&
      (s[name].empty() || static_cast<int64_t>(s[name].size()) > kMaxLongropeFactors)) {
    w.at(name).fail(std::to_string(s[name].size()) + " values: " + need);  // (not shown)
  }
  if (!s.contains(name) || !s[name].is_array()) {
    w.at(name).fail_valued(s.contains(name) ? &s[name] : nullptr, need);
  }
  std::vector<double> out;
  for (std::size_t i = 0; i < s[name].size(); ++i) {
    const json& x = s[name][i];
    if (!x.is_number() || !(x.get<double>() > 0) || !std::isfinite(x.get<double>())) {
      w.at(name).at(i).fail_valued(&x, "not a positive number");
    }
    out.push_back(x.get<double>());
  }
  return out;
}

// One rotary object at `w` (rope_scaling, or transformers 5's rope_parameters, which also holds
// rope_theta: read by the caller): its rope_type (older files say "type") and that type's numbers.
// Keys the type does not have are refused by name. longrope: the factor lists as written,
// original_max_position_embeddings, factor and attention_factor when given (0 when not: the
// caller resolves them).
RopeScaling read_rope_object(const json& s, const Where& w, const RopeRead& how) {
  if (!s.is_object()) w.fail_valued(&s, "not a JSON object");
  const std::string key = s.contains("rope_type") ? "rope_type" : "type";
  if (!s.contains(key) || !s[key].is_string()) w.fail_valued(&s, "has no rope_type");
  std::string type = s[key].get<std::string>();
  if (how.phi3 && (type == "su" || type == "yarn")) type = "longrope";  // Phi3Config's old names
  RopeScaling r;
  std::set<std::string> known = {key};
  if (how.with_theta) known.insert("rope_theta");
  if (how.with_theta && how.phi3) known.insert("partial_rotary_factor");
  const bool longrope_ok = how.phi3 || how.own;
  if (type == "llama3") {
    r.rope_type = RopeType::llama3;
    known.insert(
        {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"});
  } else if (type == "linear") {
    r.rope_type = RopeType::linear;
    known.insert("factor");
  } else if (type == "longrope" && longrope_ok) {
    r.rope_type = RopeType::longrope;
    known.insert({"short_factor", "long_factor", "factor", "attention_factor",
                  "original_max_position_embeddings"});
  } else if (type != "default") {
    w.at(key).fail_valued(&s[key], std::string("kktrain implements llama3 and linear rope "
                                               "scaling (and none)") +
                                       (longrope_ok ? ", and Phi-3's longrope" : ""));
  }
  for (const auto& item : s.items()) {
    if (!known.count(item.key())) {
      w.at(item.key()).fail_valued(&item.value(), "not a key of rope_type \"" + type + "\"");
    }
  }
  auto field = [&](const char* name) {
    if (!s.contains(name) || !s[name].is_number() || !(s[name].get<double>() > 0) ||
        !std::isfinite(s[name].get<double>())) {
      w.at(name).fail_valued(s.contains(name) ? &s[name] : nullptr,
                             type + " rope scaling needs it as a positive number");
    }
    return s[name].get<double>();
  };
  auto original = [&]() {
    const double orig = field("original_max_position_embeddings");
    if (orig != std::floor(orig) || orig > double(1 << 30)) {
      w.at("original_max_position_embeddings")
          .fail_valued(&s["original_max_position_embeddings"], "not an integer up to 2^30");
    }
    return static_cast<int64_t>(orig);
  };
  if (how.partial && s.contains("partial_rotary_factor")) {
    *how.partial = field("partial_rotary_factor");
  }
  if (!r.scaled()) return r;
  if (r.longrope()) {
    r.short_factor = read_factor_list(s, w, "short_factor");
    r.long_factor = read_factor_list(s, w, "long_factor");
    auto optional = [&](const char* name) {
      return s.contains(name) && !s[name].is_null() ? field(name) : 0.0;
    };
    r.factor = optional("factor");
    r.attention_factor = optional("attention_factor");
    if (s.contains("original_max_position_embeddings") &&
        !s["original_max_position_embeddings"].is_null()) {
      r.original_max_position_embeddings = original();
    }
    return r;
  }
  r.factor = field("factor");
  if (r.rope_type == RopeType::linear) return r;
  r.low_freq_factor = field("low_freq_factor");
  r.high_freq_factor = field("high_freq_factor");
  r.original_max_position_embeddings = original();
  if (r.high_freq_factor <= r.low_freq_factor) {
    throw InputError("'" + w.file + "': " + w.key +
                     ".high_freq_factor = " + s["high_freq_factor"].dump() +
                     " must exceed low_freq_factor = " + s["low_freq_factor"].dump());
  }
  return r;
}

RopeScaling read_rope_scaling(const Keys& k, const RopeRead& how) {
  if (!k.has("rope_scaling")) return RopeScaling();
  return read_rope_object(k.j["rope_scaling"], Where{k.file, "rope_scaling"}, how);
}

bool same_scaling(const RopeScaling& a, const RopeScaling& b) {
  return rope_scaling_json(a) == rope_scaling_json(b);
}

// The rotary base and scaling: transformers 4's rope_theta / rope_scaling, or transformers 5's
// rope_parameters {rope_type, rope_theta, the type's numbers}. A file with both forms is read
// when they agree and refused, naming both keys, when they do not. Sets a's keys of origin.
void read_rope(const Keys& k, HfArchitecture* a, double default_theta, double* partial) {
  ModelConfig& m = a->model;
  const bool phi3 = m.family == ModelFamily::phi3;
  m.rope_theta = k.number("rope_theta", default_theta);
  m.rope_scaling = read_rope_scaling(k, RopeRead{false, phi3, false, nullptr});
  if (!k.has("rope_parameters")) return;
  const json& p = k.j["rope_parameters"];
  const Where w{k.file, "rope_parameters"};
  const bool per_type =
      p.is_object() && (p.contains("full_attention") || p.contains("sliding_attention"));
  if (per_type && a->model.family == ModelFamily::gemma3) return;  // read_gemma3_rope's
  if (per_type) {
    w.fail_valued(
        &p, "rotary settings per layer type are Gemma 3's; " + a->architecture + " has one set");
  }
  const RopeScaling r = read_rope_object(p, w, RopeRead{true, phi3, false, partial});
  if (k.has("rope_scaling") && !same_scaling(r, m.rope_scaling)) {
    w.fail_valued(&p, "disagrees with rope_scaling = " + k.j["rope_scaling"].dump() +
                          ": which one is meant?");
  }
  m.rope_scaling = r;
  a->rope_scaling_key = "rope_parameters";
  if (p.contains("rope_theta")) {
    const json& t = p["rope_theta"];
    if (!t.is_number() || !(t.get<double>() > 0) || !std::isfinite(t.get<double>())) {
      w.at("rope_theta").fail_valued(&t, "not a positive number");
    }
    if (k.has("rope_theta") && k.j["rope_theta"].get<double>() != t.get<double>()) {
      w.at("rope_theta")
          .fail_valued(&t, "disagrees with rope_theta = " + k.j["rope_theta"].dump() +
                               ": which one is meant?");
    }
    m.rope_theta = t.get<double>();
    a->rope_theta_key = "rope_parameters.rope_theta";
  }
}

// The stored dtype: `torch_dtype` (transformers 4) or `dtype` (5); both, disagreeing, refused.
void read_dtype(const Keys& k, HfArchitecture* a) {
  const std::string old_form = k.text("torch_dtype", ""), new_form = k.text("dtype", "");
  if (!old_form.empty() && !new_form.empty() && old_form != new_form) {
    k.fail("dtype", "disagrees with torch_dtype = \"" + old_form + "\": which one is meant?");
  }
  a->torch_dtype_text = new_form.empty() ? old_form : new_form;
  if (a->torch_dtype_text.empty()) return;
  const std::string key = new_form.empty() ? "torch_dtype" : "dtype";
  DType d;
  if (!parse_dtype(a->torch_dtype_text, &d)) k.fail(key, "not float32, bfloat16 or float16");
  a->torch_dtype = d;
}

// Keys that describe the file or generation, not the model's math (no reader asks for them).
const std::set<std::string>& metadata_keys() {
  static const std::set<std::string> keys = {"_name_or_path",
                                             "transformers_version",
                                             "architectures",
                                             "model_type",
                                             "bos_token_id",
                                             "eos_token_id",
                                             "pad_token_id",
                                             "sep_token_id",
                                             "decoder_start_token_id",
                                             "use_cache",
                                             "initializer_range",
                                             "pretraining_tp",
                                             "tokenizer_class",
                                             "transformers.js_config",
                                             "is_llama_config",
                                             "auto_map",
                                             "output_attentions",
                                             "output_hidden_states",
                                             "return_dict",
                                             "use_return_dict",
                                             "torchscript",
                                             "id2label",
                                             "label2id",
                                             "problem_type",
                                             "task_specific_params",
                                             "max_length",
                                             "min_length",
                                             "chunk_size_feed_forward",
                                             "is_encoder_decoder",
                                             "is_decoder",
                                             "add_cross_attention",
                                             "tie_encoder_decoder",
                                             "use_bfloat16",
                                             "tf_legacy_loss",
                                             "pruned_heads",
                                             "finetuning_task",
                                             "prefix",
                                             "cross_attention_hidden_size",
                                             "torch_dtype",
                                             "dtype"};
  return keys;
}

// Every key of the file is one a reader asked about or metadata; any other is a setting kktrain
// would otherwise silently ignore (a model it does not compute): refused by name.
void refuse_unread_keys(const Keys& k, const std::set<std::string>& read, const std::string& arch) {
  for (const auto& item : k.j.items()) {
    if (read.count(item.key()) || metadata_keys().count(item.key())) continue;
    k.fail(item.key(), "not a key of " + arch +
                           " that kktrain knows: it refuses the model rather than ignore it");
  }
}

// Mixtral's sparse MLP: num_local_experts experts of intermediate_size, num_experts_per_tok per
// token, the k weights renormalized, no shared expert; router_aux_loss_coef weights the
// load-balancing loss. Router jitter (training noise kktrain does not add) is refused.
void read_mixtral(const Keys& k, MoeConfig* e, int64_t intermediate) {
  e->num_experts = k.integer("num_local_experts", 8, 1);
  e->top_k = k.integer("num_experts_per_tok", 2, 1);
  if (e->top_k > e->num_experts) {
    k.fail("num_experts_per_tok", "exceeds num_local_experts " + std::to_string(e->num_experts));
  }
  e->intermediate_size = intermediate;
  e->norm_topk_prob = true;
  e->aux_loss_coef = k.number("router_aux_loss_coef", 0.001, Bound::nonnegative);
  (void)k.boolean("output_router_logits", false);  // kktrain adds the weighted loss either way
  if (k.has("router_jitter_noise") && (!k.j["router_jitter_noise"].is_number() ||
                                       k.j["router_jitter_noise"].get<double>() != 0.0)) {
    k.fail("router_jitter_noise", "kktrain's router adds no jitter noise (0.0 is accepted)");
  }
}

// Qwen3-MoE's sparse MLP (Qwen3MoeConfig): num_experts experts of moe_intermediate_size,
// num_experts_per_tok per token, renormalized when norm_topk_prob; the load-balancing loss only
// with output_router_logits (then weighted by router_aux_loss_coef, else 0). Every layer sparse:
// decoder_sparse_step 1 and no mlp_only_layers (mixed dense and sparse layers are refused).
void read_qwen3_moe(const Keys& k, MoeConfig* e) {
  e->num_experts = k.integer("num_experts", 128, 1);
  e->top_k = k.integer("num_experts_per_tok", 8, 1);
  if (e->top_k > e->num_experts) {
    k.fail("num_experts_per_tok", "exceeds num_experts " + std::to_string(e->num_experts));
  }
  e->intermediate_size = k.integer("moe_intermediate_size", 768, 1);
  e->norm_topk_prob = k.boolean("norm_topk_prob", false);
  const double coef = k.number("router_aux_loss_coef", 0.001, Bound::nonnegative);
  e->aux_loss_coef = k.boolean("output_router_logits", false) ? coef : 0.0;
  if (k.integer("decoder_sparse_step", 1, 1) != 1) {
    k.fail("decoder_sparse_step", "kktrain's mixture of experts is sparse on every layer (1)");
  }
  if (k.has("mlp_only_layers") &&
      (!k.j["mlp_only_layers"].is_array() || !k.j["mlp_only_layers"].empty())) {
    k.fail("mlp_only_layers", "kktrain's mixture of experts is sparse on every layer ([])");
  }
}

// SmolLM3's layers without positions: no_rope_layers[i] is 1 where layer i rotates q and k, 0
// where it does not; null: every no_rope_layer_interval-th layer does not (interval 4).
void read_no_rope(const Keys& k, ModelConfig* m) {
  const int64_t interval = k.integer("no_rope_layer_interval", 4, 1);
  m->layer_rope.clear();
  if (!k.has("no_rope_layers")) {
    for (int64_t l = 0; l < m->num_layers; ++l) {
      m->layer_rope.push_back((l + 1) % interval != 0 ? LayerRope::rope : LayerRope::none);
    }
    return;
  }
  const json& v = k.j["no_rope_layers"];
  if (!v.is_array() || static_cast<int64_t>(v.size()) != m->num_layers) {
    k.fail("no_rope_layers", "not a list of num_hidden_layers " + std::to_string(m->num_layers) +
                                 " entries (1: the layer uses RoPE, 0: it does not)");
  }
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (v[i] != 0 && v[i] != 1) {
      Where{k.file, "no_rope_layers"}.at(i).fail_valued(&v[i], "not 0 or 1");
    }
    m->layer_rope.push_back(v[i] == 1 ? LayerRope::rope : LayerRope::none);
  }
}

// The MLP activation: Gemma's hidden_activation (its older files also write hidden_act, which
// Gemma 2 and 3 do not read: refused when it says something else), every other family's
// hidden_act.
void read_activation(const Keys& k, MlpActivation activation) {
  if (activation == MlpActivation::gelu_tanh) {
    const std::string act = k.text("hidden_activation", "gelu_pytorch_tanh");
    if (act != "gelu_pytorch_tanh") {
      k.fail("hidden_activation", "kktrain's GeGLU is gelu_pytorch_tanh's tanh-approximated GELU");
    }
    if (k.has("hidden_act") && k.text("hidden_act", "") != act) {
      k.fail("hidden_act", "disagrees with hidden_activation \"" + act +
                               "\" (what Gemma computes): which one is meant?");
    }
    return;
  }
  const std::string act = k.text("hidden_act", "silu");
  if (act != "silu") k.fail("hidden_act", "kktrain's MLP is SwiGLU (hidden_act \"silu\")");
}

// What the model does not compute, refused by key and value.
void refuse_unsupported(const Keys& k) {
  if (k.boolean("mlp_bias", false)) k.fail("mlp_bias", "kktrain's MLP has no biases");
  // Nanotron's spelling in SmolLM2 files: false is the rotation of halves every family uses.
  if (k.boolean("rope_interleaved", false)) {
    k.fail("rope_interleaved", "kktrain rotates the two halves of each head (false is accepted)");
  }
  if (k.has("attention_dropout") &&
      (!k.j["attention_dropout"].is_number() || k.j["attention_dropout"].get<double>() != 0.0)) {
    k.fail("attention_dropout", "kktrain has no attention dropout (0.0 is accepted)");
  }
}

// layer_types: one "full_attention" or "sliding_attention" per layer (empty when absent).
std::vector<LayerAttention> read_layer_types(const Keys& k, int64_t num_layers) {
  std::vector<LayerAttention> out;
  if (!k.has("layer_types")) return out;
  const json& t = k.j["layer_types"];
  if (!t.is_array() || static_cast<int64_t>(t.size()) != num_layers) {
    k.fail("layer_types",
           "not a list of num_hidden_layers " + std::to_string(num_layers) + " layer types");
  }
  for (std::size_t i = 0; i < t.size(); ++i) {
    const auto a = t[i].is_string() ? parse_layer_attention(t[i].get<std::string>()) : std::nullopt;
    if (!a) {
      Where{k.file, "layer_types"}.at(i).fail_valued(
          &t[i], "not \"full_attention\" or \"sliding_attention\"");
    }
    out.push_back(*a);
  }
  return out;
}

// Mistral and Mixtral: `sliding_window` on every layer (Mistral's default, when the key is
// absent, is 4096; null: none), or on the layers layer_types marks. Llama has no window: a
// sliding_window shorter than the context is refused, as is use_sliding_window: true.
void read_llama_window(const Keys& k, const std::string& arch, bool llama, ModelConfig* m) {
  const bool mistral = m->family == ModelFamily::mistral;
  const bool absent = !k.j.contains("sliding_window");
  int64_t w = 0;
  if (!k.has("sliding_window")) {
    w = absent && mistral ? 4096 : 0;
  } else {
    w = k.integer("sliding_window", std::nullopt, 1);
  }
  if (k.boolean("use_sliding_window", false)) {
    k.fail("use_sliding_window", "not a key of " + arch + " (its window is sliding_window alone)");
  }
  if (llama) {
    if (w > 0 && w < m->max_seq_len) {
      k.fail("sliding_window",
             "LlamaForCausalLM has no sliding window (it is shorter than "
             "max_position_embeddings " +
                 std::to_string(m->max_seq_len) + ")");
    }
    (void)k.has("layer_types");
    return;
  }
  m->sliding_window = w;
  m->layer_types = read_layer_types(k, m->num_layers);
}

// Qwen2 and Qwen3: a window only when use_sliding_window is true (sliding_window alone means
// nothing, as Qwen2Config sets it to None), on the layers at index >= max_window_layers, or on
// those layer_types marks when the file has them.
void read_qwen_window(const Keys& k, ModelConfig* m) {
  if (k.boolean("use_mrope", false)) {
    k.fail("use_mrope", "multimodal rotary positions are Qwen2-VL's (false is accepted)");
  }
  const bool on = k.boolean("use_sliding_window", false);
  const int64_t w = k.has("sliding_window") ? k.integer("sliding_window", std::nullopt, 1) : 0;
  const int64_t first = k.integer("max_window_layers", m->num_layers, 0);
  m->layer_types = read_layer_types(k, m->num_layers);
  if (!on) {
    m->layer_types.clear();
    return;
  }
  if (w == 0) k.fail("sliding_window", "missing, and use_sliding_window is true");
  m->sliding_window = w;
  if (m->layer_types.empty()) {
    for (int64_t l = 0; l < m->num_layers; ++l) {
      m->layer_types.push_back(l >= first ? LayerAttention::sliding : LayerAttention::full);
    }
  }
}

// SmolLM3: with use_sliding_window true and a sliding_window, the layers without RoPE slide (or
// those layer_types marks); max_window_layers is written by its files but read by nothing.
void read_smollm3_window(const Keys& k, ModelConfig* m) {
  (void)k.has("max_window_layers");
  const bool on = k.boolean("use_sliding_window", false);
  const int64_t w = k.has("sliding_window") ? k.integer("sliding_window", std::nullopt, 1) : 0;
  m->layer_types = read_layer_types(k, m->num_layers);
  bool any = false;
  for (auto t : m->layer_types) any = any || t == LayerAttention::sliding;
  if (!on || w == 0) {
    if (any) {
      k.fail("layer_types",
             "marks sliding layers while use_sliding_window is false or "
             "sliding_window null: which window is meant?");
    }
    m->layer_types.clear();
    return;
  }
  m->sliding_window = w;
  if (m->layer_types.empty()) {
    for (int64_t l = 0; l < m->num_layers; ++l) {
      m->layer_types.push_back(m->rotates(l) ? LayerAttention::full : LayerAttention::sliding);
    }
  }
}

// A soft cap: the family's default when the key is absent, none when it is null.
double read_cap(const Keys& k, const std::string& key, double absent) {
  if (!k.j.contains(key)) {
    (void)k.has(key);
    return absent;
  }
  return k.has(key) ? k.number(key, 0.0) : 0.0;
}

// Gemma 2 and 3 (Gemma2Config, Gemma3TextConfig): the attention scale, the soft caps, the
// sliding layers (Gemma 2: every other one from the first; Gemma 3: layer_types, else all but
// every sliding_window_pattern-th), and Gemma 3's rotary base of the sliding layers.
void read_gemma(const Keys& k, HfArchitecture* a) {
  ModelConfig& m = a->model;
  const bool g3 = m.family == ModelFamily::gemma3;
  m.query_pre_attn_scalar = k.number("query_pre_attn_scalar", 256.0);
  // Gemma3Attention never passes its config's attn_logit_softcapping to the attention: read, and
  // without effect, as in transformers.
  m.attn_logit_softcapping = read_cap(k, "attn_logit_softcapping", g3 ? 0.0 : 50.0);
  if (g3) m.attn_logit_softcapping = 0.0;
  m.final_logit_softcapping = read_cap(k, "final_logit_softcapping", g3 ? 0.0 : 30.0);
  (void)k.has("cache_implementation");  // generation's cache layout
  if (k.boolean("use_bidirectional_attention", false)) {
    k.fail("use_bidirectional_attention", "kktrain's attention is causal (false is accepted)");
  }
  m.sliding_window = k.has("sliding_window") ? k.integer("sliding_window", std::nullopt, 1) : 4096;
  m.layer_types = read_layer_types(k, m.num_layers);
  // transformers writes the pattern as sliding_window_pattern, newer versions
  // _sliding_window_pattern
  const char* pattern_key = k.j.contains("_sliding_window_pattern") ? "_sliding_window_pattern"
                                                                    : "sliding_window_pattern";
  const int64_t pattern = g3 ? k.integer(pattern_key, 6, 1) : 2;
  if (g3)
    (void)k.has(k.j.contains("_sliding_window_pattern") ? "sliding_window_pattern"
                                                        : "_sliding_window_pattern");
  if (m.layer_types.empty()) {
    for (int64_t l = 0; l < m.num_layers; ++l) {
      m.layer_types.push_back((l + 1) % pattern != 0 ? LayerAttention::sliding
                                                     : LayerAttention::full);
    }
  }
  if (!g3) return;
  // Gemma 3's sliding layers rotate with rope_local_base_freq, unscaled; transformers 5 writes
  // rope_parameters per layer type instead.
  m.rope_local_theta = k.number("rope_local_base_freq", 10000.0);
  m.layer_rope.clear();
  bool any = false;
  for (auto t : m.layer_types) {
    m.layer_rope.push_back(t == LayerAttention::sliding ? LayerRope::local : LayerRope::rope);
    any = any || t == LayerAttention::sliding;
  }
  if (!any) m.layer_rope.clear();  // every layer global: no local base in use
}

// Gemma 3's rotary settings: rope_theta / rope_scaling / rope_local_base_freq, or transformers
// 5's rope_parameters {full_attention: {...}, sliding_attention: {...}}.
void read_gemma3_rope(const Keys& k, HfArchitecture* a) {
  ModelConfig& m = a->model;
  if (!k.has("rope_parameters") || !k.j["rope_parameters"].is_object() ||
      !(k.j["rope_parameters"].contains("full_attention") ||
        k.j["rope_parameters"].contains("sliding_attention"))) {
    return;
  }
  const json& p = k.j["rope_parameters"];
  const Where w{k.file, "rope_parameters"};
  for (const auto& item : p.items()) {
    if (item.key() != "full_attention" && item.key() != "sliding_attention") {
      w.at(item.key())
          .fail_valued(&item.value(),
                       "not a layer type (full_attention, "
                       "sliding_attention)");
    }
  }
  auto theta_of = [&](const char* type) {
    const json& o = p[type];
    const Where wt = w.at(type);
    if (!o.is_object() || !o.contains("rope_theta") || !o["rope_theta"].is_number() ||
        !(o["rope_theta"].get<double>() > 0) || !std::isfinite(o["rope_theta"].get<double>())) {
      wt.fail_valued(&o, "needs rope_theta, a positive number");
    }
    return o["rope_theta"].get<double>();
  };
  for (const char* type : {"full_attention", "sliding_attention"}) {
    if (!p.contains(type)) w.at(type).fail_valued(nullptr, "missing");
  }
  const RopeRead how{true, false, false, nullptr};
  const RopeScaling full = read_rope_object(p["full_attention"], w.at("full_attention"), how);
  const RopeScaling local =
      read_rope_object(p["sliding_attention"], w.at("sliding_attention"), how);
  if (local.scaled()) {
    w.at("sliding_attention")
        .fail_valued(&p["sliding_attention"], "Gemma 3's sliding layers rotate unscaled");
  }
  const double theta = theta_of("full_attention"), local_theta = theta_of("sliding_attention");
  auto agree = [&](const char* key, double have, double want) {
    if (k.has(key) && have != want) {
      k.fail(key, "disagrees with rope_parameters: which one is meant?");
    }
  };
  agree("rope_theta", m.rope_theta, theta);
  agree("rope_local_base_freq", m.rope_local_theta, local_theta);
  if (k.has("rope_scaling") && !same_scaling(full, m.rope_scaling)) {
    k.fail("rope_scaling", "disagrees with rope_parameters.full_attention: which one is meant?");
  }
  m.rope_theta = theta;
  m.rope_scaling = full;
  m.rope_local_theta = local_theta;
  a->rope_theta_key = "rope_parameters.full_attention.rope_theta";
  a->rope_scaling_key = "rope_parameters.full_attention";
}

// A dropout probability of Phi3Config: 0 (inert in kktrain's deterministic training) or refused.
void refuse_dropout(const Keys& k, const char* key) {
  if (k.has(key) && (!k.j[key].is_number() || k.j[key].get<double>() != 0.0)) {
    k.fail(key, "kktrain trains without dropout (0.0 is accepted)");
  }
}

// Phi-3's keys beside Llama's (Phi3Config): original_max_position_embeddings (top level; the
// longest sequence longrope's short factors serve, absent: max_position_embeddings),
// partial_rotary_factor (rotary on int(head_dim * factor) values of each head; top level, or in
// transformers 5's rope_parameters), longrope resolved (factor = max_position_embeddings /
// original_max_position_embeddings, attention_factor sqrt(1 + ln(factor) / ln(original)) unless
// given; each factor list rotary_dim / 2 long), the dropouts (0 only), and Phi-4-mini's keys that
// Phi3Config does not read (read here and unused, as transformers leaves them).
void read_phi3(const Keys& k, HfArchitecture* a, double partial_in_rope) {
  ModelConfig& m = a->model;
  const bool top_original = k.has("original_max_position_embeddings");
  const int64_t original = k.integer("original_max_position_embeddings", m.max_seq_len, 1);
  if (original > (int64_t(1) << 30)) k.fail("original_max_position_embeddings", "above 2^30");
  double partial = k.number("partial_rotary_factor", 1.0);
  if (partial_in_rope > 0) {
    if (k.has("partial_rotary_factor") && partial != partial_in_rope) {
      k.fail("partial_rotary_factor",
             "disagrees with rope_parameters.partial_rotary_factor: "
             "which one is meant?");
    }
    partial = partial_in_rope;
  }
  const int64_t D = m.head_dim();
  const double rotary_f = static_cast<double>(D) * partial;  // Python's int(): toward zero
  const int64_t rotary =
      rotary_f >= 1.0 && rotary_f <= static_cast<double>(D) ? static_cast<int64_t>(rotary_f) : 0;
  if (rotary < 2 || rotary % 2 != 0) {
    k.fail("partial_rotary_factor", "rotary on int(head_dim " + std::to_string(D) +
                                        " * factor) values of each head: an even number from 2 "
                                        "to head_dim is needed");
  }
  m.explicit_rotary_dim = rotary == D ? 0 : rotary;
  refuse_dropout(k, "resid_pdrop");
  refuse_dropout(k, "embd_pdrop");
  // Phi-4-mini's files carry these; Phi3Config does not read them, so transformers computes the
  // model without them: read and unused here too.
  (void)k.has("full_attn_mod");
  (void)k.has("interpolate_factor");
  if (k.boolean("lm_head_bias", false)) {
    k.fail("lm_head_bias", "Phi-3's LM head has no bias (false is accepted)");
  }
  RopeScaling& r = m.rope_scaling;
  const std::string key = a->rope_scaling_key;
  if (r.scaled() && !r.longrope()) {
    k.fail(key, "Phi3Config's rotary scaling is longrope (or none)");
  }
  if (!r.longrope()) return;
  const json& obj = k.j[key];
  const Where w{k.file, key};
  auto value = [&](const char* n) { return obj.contains(n) ? &obj[n] : nullptr; };
  // The short factors serve sequences up to the top-level original_max_position_embeddings (the
  // rotary object's when only it has one, else max_position_embeddings).
  if (top_original || r.original_max_position_embeddings == 0) {
    if (r.original_max_position_embeddings > 0 && r.original_max_position_embeddings != original) {
      w.at("original_max_position_embeddings")
          .fail_valued(value("original_max_position_embeddings"),
                       "disagrees with original_max_position_embeddings = " +
                           std::to_string(original) + ": which one is meant?");
    }
    r.original_max_position_embeddings = original;
  }
  const double ratio =
      static_cast<double>(m.max_seq_len) / static_cast<double>(r.original_max_position_embeddings);
  // transformers 4 takes max_position_embeddings / original_max_position_embeddings whenever the
  // config has the latter (Phi3Config always does), transformers 5 the object's factor: a factor
  // beside a top-level original_max_position_embeddings that disagrees is ambiguous.
  if (r.factor > 0 && top_original && std::fabs(r.factor - ratio) > 1e-9 * ratio) {
    w.at("factor").fail_valued(value("factor"),
                               "disagrees with max_position_embeddings / "
                               "original_max_position_embeddings = " +
                                   format_double(ratio) +
                                   " (transformers versions differ on "
                                   "which one is used)");
  }
  if (!(r.factor > 0)) r.factor = ratio;
  if (!(r.attention_factor > 0)) {
    r.attention_factor = longrope_attention_factor(r.factor, r.original_max_position_embeddings);
  }
  for (const char* name : {"short_factor", "long_factor"}) {
    const auto& list = std::string(name) == "short_factor" ? r.short_factor : r.long_factor;
    if (static_cast<int64_t>(list.size()) != rotary / 2) {
      w.at(name).fail(std::to_string(list.size()) + " factors; rotary_dim " +
                      std::to_string(rotary) + " (head_dim * partial_rotary_factor) needs " +
                      std::to_string(rotary / 2));
    }
  }
}

// Gemma 2's soft-capped logits: no family kktrain reads computes them.
void refuse_softcap(const Keys& k, const std::string& arch) {
  // Gemma 2's key: Llama, Mistral and Mixtral do not cap their logits, so a model that sets it
  // was trained with capped logits these architectures would not reproduce (null is accepted).
  if (k.has("final_logit_softcapping")) {
    k.fail("final_logit_softcapping",
           arch +
               " has no soft-capped logits, so the file's model is not one kktrain would "
               "train as " +
               arch + " (a cap of your own is model.final_logit_softcapping)");
  }
}

}  // namespace

bool is_hf_directory(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::exists(fs::path(path) / "config.json", ec);
}

std::string read_small_file(const std::string& file) {
  std::string text;
  if (auto why = read_regular_file(&text, file, kMaxSmallFileBytes)) {
    throw InputError("'" + file + "': " + (why->rfind("is ", 0) == 0 ? "" : "cannot read: ") +
                     *why);
  }
  return text;
}

HfArchitecture read_hf_config(const std::string& dir) {
  const std::string file = (fs::path(dir) / "config.json").string();
  return parse_hf_config(file, read_small_file(file));
}

namespace {

// How a family reads its window keys (none: it has none; gemma: Gemma 2's and 3's layer pattern;
// phi3: sliding_window null or on every layer).
enum class WindowKeys { llama, qwen, smollm3, gemma, phi3, none };

// What a family's decoder layer computes besides its attention: its norms, its MLP activation
// and its embedding scale (core/model_enums.hpp), and its tied head's default.
struct HfBlock {
  NormWeight norm_weight;
  NormPlacement placement;
  MlpActivation activation;
  EmbedScale embed_scale;
  bool tied;                   // tie_word_embeddings when absent
  double rope_theta;           // rope_theta when absent
  double rms_norm_eps = 1e-6;  // rms_norm_eps when absent
};
constexpr HfBlock kLlamaBlock{
    NormWeight::plain, NormPlacement::pre, MlpActivation::silu, EmbedScale::none, false, 10000.0};
constexpr HfBlock kGemmaBlock{NormWeight::one_plus_fp32,
                              NormPlacement::sandwich,
                              MlpActivation::gelu_tanh,
                              EmbedScale::sqrt_hidden,
                              true,
                              10000.0};
constexpr HfBlock kGemma3Block{NormWeight::one_plus_fp32,
                               NormPlacement::sandwich,
                               MlpActivation::gelu_tanh,
                               EmbedScale::sqrt_hidden,
                               true,
                               1000000.0};
constexpr HfBlock kOlmo2Block{
    NormWeight::fp32, NormPlacement::post, MlpActivation::silu, EmbedScale::none, false, 10000.0};
constexpr HfBlock kPhi3Block{NormWeight::plain,
                             NormPlacement::pre,
                             MlpActivation::silu,
                             EmbedScale::none,
                             false,
                             10000.0,
                             1e-5};

// One Hugging Face architecture kktrain reads: its names, what its keys mean when absent, and what
// it computes that Llama does not (the rest of ModelConfig's family fields).
struct HfFamily {
  const char* architecture;
  const char* model_type;
  ModelFamily family;
  bool sparse;                   // Mixtral's mixture of experts
  int64_t max_positions;         // max_position_embeddings when absent
  int64_t head_dim;              // head_dim when absent (0: hidden_size / num_attention_heads)
  AttentionBias bias;            // the biases every model of the family has
  AttentionBias bias_when_true;  // attention_bias: true (none: the family has no such key)
  QkNorm qk_norm;
  WindowKeys window;
  HfBlock block = kLlamaBlock;
};

// Defaults as transformers' configuration_<family>.py has them.
constexpr HfFamily kHfFamilies[] = {
    {"LlamaForCausalLM", "llama", ModelFamily::llama, false, 2048, 0, AttentionBias::none,
     AttentionBias::qkvo, QkNorm::none, WindowKeys::llama},
    {"MistralForCausalLM", "mistral", ModelFamily::mistral, false, 4096 * 32, 0,
     AttentionBias::none, AttentionBias::none, QkNorm::none, WindowKeys::llama},
    {"MixtralForCausalLM", "mixtral", ModelFamily::llama, true, 4096 * 32, 0, AttentionBias::none,
     AttentionBias::none, QkNorm::none, WindowKeys::llama},
    {"Qwen2ForCausalLM", "qwen2", ModelFamily::qwen2, false, 32768, 0, AttentionBias::qkv,
     AttentionBias::none, QkNorm::none, WindowKeys::qwen},
    {"Qwen3ForCausalLM", "qwen3", ModelFamily::qwen3, false, 32768, 128, AttentionBias::none,
     AttentionBias::qkvo, QkNorm::per_head, WindowKeys::qwen},
    {"Qwen3MoeForCausalLM", "qwen3_moe", ModelFamily::qwen3_moe, true, 32768, 128,
     AttentionBias::none, AttentionBias::qkvo, QkNorm::per_head, WindowKeys::qwen},
    {"SmolLM3ForCausalLM", "smollm3", ModelFamily::smollm3, false, 32768, 0, AttentionBias::none,
     AttentionBias::qkvo, QkNorm::none, WindowKeys::smollm3},
    {"Gemma2ForCausalLM", "gemma2", ModelFamily::gemma2, false, 8192, 256, AttentionBias::none,
     AttentionBias::qkvo, QkNorm::none, WindowKeys::gemma, kGemmaBlock},
    {"Gemma3ForCausalLM", "gemma3_text", ModelFamily::gemma3, false, 131072, 256,
     AttentionBias::none, AttentionBias::qkvo, QkNorm::per_head, WindowKeys::gemma, kGemma3Block},
    {"Olmo2ForCausalLM", "olmo2", ModelFamily::olmo2, false, 2048, 0, AttentionBias::none,
     AttentionBias::qkvo, QkNorm::whole, WindowKeys::none, kOlmo2Block},
    // Phi-3 and Phi-4-mini: Llama's block with fused qkv_proj / gate_up_proj tensors (kktrain's
    // family phi3 names its parameters so), partial rotary and longrope (read_phi3).
    {"Phi3ForCausalLM", "phi3", ModelFamily::phi3, false, 4096, 0, AttentionBias::none,
     AttentionBias::none, QkNorm::none, WindowKeys::phi3, kPhi3Block},
};

std::string family_list() {
  std::string out;
  for (const auto& f : kHfFamilies) out += std::string(out.empty() ? "" : ", ") + f.architecture;
  return out + ", Gemma3ForConditionalGeneration (its language model)";
}

const HfFamily& read_family(const Keys& k) {
  if (!k.has("architectures") || !k.j["architectures"].is_array() ||
      k.j["architectures"].size() != 1 || !k.j["architectures"][0].is_string()) {
    k.fail("architectures", "expected a list of one of: " + family_list());
  }
  const std::string arch = k.j["architectures"][0].get<std::string>();
  for (const auto& f : kHfFamilies) {
    if (arch != f.architecture) continue;
    if (k.text("model_type", "") != f.model_type) {
      k.fail("model_type", "expected \"" + std::string(f.model_type) + "\" for " + arch);
    }
    return f;
  }
  k.fail("architectures", "kktrain trains " + family_list() + " models");
}

// head_dim, the attention biases and the q/k norms of family f.
void read_attention_shape(const Keys& k, const HfFamily& f, ModelConfig* m) {
  m->family = f.family;
  m->qk_norm = f.qk_norm;
  m->attention_bias = f.bias;
  if (k.boolean("attention_bias", false)) {
    if (f.bias_when_true == AttentionBias::none) {
      k.fail("attention_bias", std::string(f.architecture) + "'s attention has no biases");
    }
    m->attention_bias = f.bias_when_true;
  }
  const int64_t derived = m->hidden_size / m->num_heads;
  if (f.head_dim == 0 && !k.has("head_dim") && m->hidden_size % m->num_heads != 0) {
    k.fail("hidden_size", "not divisible by num_attention_heads " + std::to_string(m->num_heads));
  }
  const int64_t head_dim = k.integer("head_dim", f.head_dim > 0 ? f.head_dim : derived, 2);
  if (head_dim % 2 != 0) k.fail("head_dim", "must be even for rotary embeddings");
  if (head_dim != derived || m->hidden_size % m->num_heads != 0) m->explicit_head_dim = head_dim;
}

}  // namespace

namespace {

// Gemma3ForConditionalGeneration (the 4B and larger Gemma 3): its language model's settings are
// text_config (a Gemma3TextConfig); the vision tower's and the image tokens' keys are not read.
// Returns text_config as a Gemma3ForCausalLM config.json (the dtype from the outer file where
// text_config has none).
json gemma3_text_config(const json& j, const std::string& file) {
  std::set<std::string> read;
  const Keys k{j, file, &read};
  if (k.text("model_type", "") != "gemma3") {
    k.fail("model_type", "expected \"gemma3\" for Gemma3ForConditionalGeneration");
  }
  if (!k.has("text_config") || !j["text_config"].is_object()) {
    k.fail("text_config", "Gemma3ForConditionalGeneration's language model settings are missing");
  }
  for (const char* key : {"vision_config", "boi_token_index", "eoi_token_index",
                          "image_token_index", "mm_tokens_per_image", "initializer_range"}) {
    (void)k.has(key);
  }
  json t = j["text_config"];
  const Keys kt{t, file + " text_config"};
  if (kt.text("model_type", "gemma3_text") != "gemma3_text") {
    kt.fail("model_type", "expected \"gemma3_text\" for Gemma 3's language model");
  }
  if (t.contains("architectures")) kt.fail("architectures", "not a key of text_config");
  t["architectures"] = json::array({"Gemma3ForCausalLM"});
  t["model_type"] = "gemma3_text";
  for (const char* key : {"torch_dtype", "dtype"}) {
    if (k.has(key) && !t.contains("torch_dtype") && !t.contains("dtype")) t[key] = j[key];
  }
  if (k.has("tie_word_embeddings") && !t.contains("tie_word_embeddings")) {
    t["tie_word_embeddings"] = j["tie_word_embeddings"];
  }
  refuse_unread_keys(k, read, "Gemma3ForConditionalGeneration");
  return t;
}

HfArchitecture parse_hf_json(const std::string& file, const json& j);

}  // namespace

HfArchitecture parse_hf_config(const std::string& file, const std::string& text) {
  const json j = parse_json_object(file, text);
  if (j.contains("architectures") && j["architectures"].is_array() &&
      j["architectures"].size() == 1 && j["architectures"][0] == "Gemma3ForConditionalGeneration") {
    HfArchitecture a = parse_hf_json(file + " text_config", gemma3_text_config(j, file));
    a.file = file;
    a.multimodal = true;
    return a;
  }
  return parse_hf_json(file, j);
}

namespace {

HfArchitecture parse_hf_json(const std::string& file, const json& j) {
  HfArchitecture a;
  a.file = file;
  std::set<std::string> read;
  const Keys k{j, a.file, &read};
  const HfFamily& f = read_family(k);
  a.architecture = f.architecture;
  ModelConfig& m = a.model;
  m.vocab_size = k.integer("vocab_size", std::nullopt, 1);
  m.hidden_size = k.integer("hidden_size", std::nullopt, 1);
  m.intermediate_size = k.integer("intermediate_size", std::nullopt, 1);
  m.num_layers = k.integer("num_hidden_layers", std::nullopt, 0);
  // The per-layer lists below are built before the config reader sees the count: bound it here
  // (model.num_layers' own bound), so a forged count cannot make them allocate without end.
  if (m.num_layers > 4096) k.fail("num_hidden_layers", "more than 4096 layers (model.num_layers)");
  m.num_heads = k.integer("num_attention_heads", std::nullopt, 1);
  m.num_kv_heads = k.integer("num_key_value_heads", m.num_heads, 1);
  m.rms_norm_eps = k.number("rms_norm_eps", f.block.rms_norm_eps, Bound::nonnegative);
  m.max_seq_len = k.integer("max_position_embeddings", f.max_positions, 1);
  if (f.sparse && f.family == ModelFamily::qwen3_moe) {
    read_qwen3_moe(k, &m.moe);
  } else if (f.sparse) {
    read_mixtral(k, &m.moe, m.intermediate_size);
  }
  m.tie_word_embeddings = k.boolean("tie_word_embeddings", f.block.tied);
  m.family = f.family;  // read_rope asks
  m.norm_weight = f.block.norm_weight;
  m.norm_placement = f.block.placement;
  m.mlp_activation = f.block.activation;
  m.embed_scale = f.block.embed_scale;
  double partial = 0.0;  // transformers 5's rope_parameters.partial_rotary_factor (Phi-3)
  read_rope(k, &a, f.block.rope_theta, &partial);
  read_attention_shape(k, f, &m);
  if (f.family == ModelFamily::phi3) read_phi3(k, &a, partial);
  if (f.family == ModelFamily::smollm3) read_no_rope(k, &m);
  read_activation(k, f.block.activation);
  refuse_unsupported(k);
  if (f.window == WindowKeys::qwen) {
    read_qwen_window(k, &m);
  } else if (f.window == WindowKeys::smollm3) {
    read_smollm3_window(k, &m);
  } else if (f.window == WindowKeys::gemma) {
    read_gemma(k, &a);
    if (f.family == ModelFamily::gemma3) read_gemma3_rope(k, &a);
  } else if (f.window == WindowKeys::llama) {
    read_llama_window(k, a.architecture, f.family == ModelFamily::llama && !f.sparse, &m);
  } else if (f.window == WindowKeys::phi3) {
    // Phi3Config: sliding_window null (none) or a window on every layer
    m.sliding_window = k.has("sliding_window") ? k.integer("sliding_window", std::nullopt, 1) : 0;
  }
  if (f.window != WindowKeys::gemma) refuse_softcap(k, a.architecture);
  read_dtype(k, &a);
  refuse_unread_keys(k, read, a.architecture);
  return a;
}

}  // namespace

std::string rope_scaling_json(const RopeScaling& r) {
  if (!r.scaled()) return "";
  nlohmann::ordered_json j;
  if (r.rope_type == RopeType::linear) {
    j["rope_type"] = "linear";
    j["factor"] = r.factor;
    return j.dump();
  }
  if (r.longrope()) {  // attention_factor resolved
    j["rope_type"] = "longrope";
    j["short_factor"] = r.short_factor;
    j["long_factor"] = r.long_factor;
    j["original_max_position_embeddings"] = r.original_max_position_embeddings;
    j["attention_factor"] = r.attention_factor;
    return j.dump();
  }
  j["rope_type"] = "llama3";
  j["factor"] = r.factor;
  j["low_freq_factor"] = r.low_freq_factor;
  j["high_freq_factor"] = r.high_freq_factor;
  j["original_max_position_embeddings"] = r.original_max_position_embeddings;
  return j.dump();
}

RopeScaling rope_scaling_from_json(const std::string& text, const std::string& where) {
  if (text.empty()) return RopeScaling();
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw InputError(where + ": rope_scaling is not valid JSON (" + std::string(e.what()) + ")");
  }
  json wrapper = json::object();
  wrapper["rope_scaling"] = j;
  RopeScaling r = read_rope_scaling(Keys{wrapper, where}, RopeRead{false, false, true, nullptr});
  if (r.longrope() && (r.original_max_position_embeddings <= 0 || !(r.attention_factor > 0))) {
    throw InputError(where +
                     ": longrope rope_scaling without original_max_position_embeddings or "
                     "attention_factor");
  }
  return r;
}

namespace {

// The row an export of m writes: a mixture of experts is a Mixtral, a dense model its family's.
const HfFamily& export_family(const ModelConfig& m) {
  for (const auto& f : kHfFamilies) {
    if (f.sparse == m.moe.enabled() && f.family == m.family) return f;
  }
  throw UsageError(std::string("no Hugging Face architecture is a ") +
                   (m.moe.enabled() ? "mixture of experts" : "dense model") + " of model.family " +
                   model_family_name(m.family) + "; export to HDF5 instead");
}

// A model the architecture's config.json cannot describe: refused before anything is written.
void check_expressible(const ModelConfig& m, const HfFamily& f) {
  const std::string arch = f.architecture;
  if (m.attention_bias != f.bias &&
      (f.bias_when_true == AttentionBias::none || m.attention_bias != f.bias_when_true)) {
    throw UsageError("model.attention_bias is " +
                     std::string(attention_bias_name(m.attention_bias)) +
                     ", which a Hugging Face " + arch + " cannot hold; export to HDF5 instead");
  }
  bool all_rotate = true;
  for (int64_t l = 0; l < m.num_layers; ++l) all_rotate = all_rotate && m.rotates(l);
  if (!all_rotate && f.family != ModelFamily::smollm3) {
    throw UsageError("model.layer_rope leaves some layers without RoPE, and a Hugging Face " +
                     arch + " rotates every layer; export to HDF5 instead");
  }
  const bool phi3 = f.family == ModelFamily::phi3;
  if (m.rotary_dim() != m.head_dim() && !phi3) {
    throw UsageError("model.rotary_dim is " + std::to_string(m.rotary_dim()) + " of head_dim " +
                     std::to_string(m.head_dim()) + ", and a Hugging Face " + arch +
                     " rotates all of each head; export to HDF5 instead");
  }
  if (m.rope_scaling.longrope() != phi3 && m.rope_scaling.scaled()) {
    throw UsageError(std::string("model.rope_scaling is ") +
                     rope_type_name(m.rope_scaling.rope_type) + ", which a Hugging Face " + arch +
                     " cannot hold (" +
                     (phi3 ? "Phi-3's rotary scaling is longrope or none" : "longrope is Phi-3's") +
                     "); export to HDF5 instead");
  }
  if (m.qk_norm != f.qk_norm) {
    throw UsageError("model.qk_norm is " + std::string(qk_norm_name(m.qk_norm)) + ", and a " +
                     "Hugging Face " + arch + " has " + qk_norm_name(f.qk_norm) +
                     "; export to HDF5 instead");
  }
  auto differs = [&](const char* key, const char* have, const char* want) {
    if (std::string(have) == want) return;
    throw UsageError(std::string("model.") + key + " is " + have + ", and a Hugging Face " + arch +
                     " has " + want + "; export to HDF5 instead");
  };
  differs("norm_weight", norm_weight_name(m.norm_weight), norm_weight_name(f.block.norm_weight));
  differs("norm_placement", norm_placement_name(m.norm_placement),
          norm_placement_name(f.block.placement));
  differs("mlp_activation", mlp_activation_name(m.mlp_activation),
          mlp_activation_name(f.block.activation));
  differs("embed_scale", embed_scale_name(m.embed_scale), embed_scale_name(f.block.embed_scale));
  const bool gemma = f.window == WindowKeys::gemma;
  auto absent = [&](const char* key, double v, bool allowed) {
    if (v > 0 && !allowed) {
      throw UsageError(std::string("model.") + key + " is " + format_double(v) +
                       ", which a Hugging Face " + arch + " cannot hold; export to HDF5 instead");
    }
  };
  absent("query_pre_attn_scalar", m.query_pre_attn_scalar, gemma);
  absent("attn_logit_softcapping", m.attn_logit_softcapping, f.family == ModelFamily::gemma2);
  absent("final_logit_softcapping", m.final_logit_softcapping, gemma);
  absent("rope_local_theta", m.rope_local_theta, f.family == ModelFamily::gemma3);
  if (f.family == ModelFamily::gemma3) {
    for (int64_t l = 0; l < m.num_layers; ++l) {
      const bool local = m.rope_of(l) == LayerRope::local;
      if (local != (m.window_of(l) > 0) && m.rope_of(l) != LayerRope::none) {
        throw UsageError(
            "model.layer_rope's local layers are not model.layer_types' sliding "
            "ones, and a Hugging Face " +
            arch +
            " rotates exactly its sliding layers with its local base; export "
            "to HDF5 instead");
      }
    }
  }
}

// Gemma 2 and 3's keys: the attention scale, the caps, the layer pattern and Gemma 3's local base.
void write_gemma(const ModelConfig& m, const HfFamily& f, nlohmann::ordered_json* j) {
  auto cap = [](double v) { return v > 0 ? nlohmann::ordered_json(v) : nlohmann::ordered_json(); };
  const bool g3 = f.family == ModelFamily::gemma3;
  if (!g3) (*j)["hidden_act"] = "gelu_pytorch_tanh";  // Gemma 2's files write both keys
  (*j)["hidden_activation"] = "gelu_pytorch_tanh";
  const double scalar =
      m.query_pre_attn_scalar > 0 ? m.query_pre_attn_scalar : static_cast<double>(m.head_dim());
  if (scalar == std::floor(scalar) && scalar < 1e15) {  // the files' integer
    (*j)["query_pre_attn_scalar"] = static_cast<int64_t>(scalar);
  } else {
    (*j)["query_pre_attn_scalar"] = scalar;
  }
  (*j)["attn_logit_softcapping"] = cap(m.attn_logit_softcapping);
  (*j)["final_logit_softcapping"] = cap(m.final_logit_softcapping);
  (*j)["sliding_window"] = m.sliding_window > 0 ? m.sliding_window : 4096;
  nlohmann::ordered_json types = nlohmann::ordered_json::array();
  bool gemma2_pattern = true;
  for (int64_t l = 0; l < m.num_layers; ++l) {
    const bool slides = m.window_of(l) > 0;
    types.push_back(slides ? "sliding_attention" : "full_attention");
    gemma2_pattern = gemma2_pattern && slides == (l % 2 == 0);
  }
  if (!g3 && !gemma2_pattern) {
    throw UsageError(
        "a Hugging Face Gemma2ForCausalLM slides on every other layer from the "
        "first, and model.layer_types (or model.sliding_window) says otherwise; "
        "export to HDF5 instead");
  }
  (*j)["layer_types"] = types;
  if (g3) {
    (*j)["rope_local_base_freq"] = m.rope_local_theta > 0 ? m.rope_local_theta : 10000.0;
    // Older transformers read the pattern instead of layer_types: written when one fits.
    for (int64_t p = 1; p <= m.num_layers + 1; ++p) {
      bool fits = true;
      for (int64_t l = 0; l < m.num_layers; ++l) {
        fits = fits && (m.window_of(l) > 0) == ((l + 1) % p != 0);
      }
      if (fits) {
        (*j)["sliding_window_pattern"] = p;
        break;
      }
    }
  }
  (*j)["cache_implementation"] = "hybrid";
}

// The window keys of family f for m's sliding window and layer types.
void write_window(const ModelConfig& m, const HfFamily& f, nlohmann::ordered_json* j) {
  const bool any = m.sliding_window > 0;
  auto window = [&]() { return any ? nlohmann::ordered_json(m.sliding_window) : nullptr; };
  bool every = true;  // every layer slides
  for (int64_t l = 0; l < m.num_layers; ++l) every = every && m.window_of(l) > 0;
  if (f.window == WindowKeys::qwen || f.window == WindowKeys::smollm3) {
    // Qwen2Config derives layer types from max_window_layers (the full layers first), SmolLM3's
    // from its layers without RoPE: both read layer_types first, written whenever a layer slides.
    int64_t first = m.num_layers;
    for (int64_t l = m.num_layers - 1; l >= 0 && m.window_of(l) > 0; --l) first = l;
    (*j)["use_sliding_window"] = any;
    (*j)["sliding_window"] = window();
    // (SmolLM3's files carry max_window_layers, which nothing reads: the layer count.)
    const bool qwen = f.window == WindowKeys::qwen;
    (*j)["max_window_layers"] = any && qwen ? first : m.num_layers;
    if (any) {
      nlohmann::ordered_json types = nlohmann::ordered_json::array();
      for (int64_t l = 0; l < m.num_layers; ++l) {
        types.push_back(m.window_of(l) > 0 ? "sliding_attention" : "full_attention");
      }
      (*j)["layer_types"] = types;
    }
    return;
  }
  const bool llama = f.family == ModelFamily::llama && !f.sparse;
  if (any && (llama || !every)) {
    throw UsageError("model.sliding_window is " + std::to_string(m.sliding_window) +
                     (llama ? std::string(", and a Hugging Face LlamaForCausalLM has no sliding "
                                          "window")
                            : " on some layers only (model.layer_types), and a Hugging Face " +
                                  std::string(f.architecture) + " slides on every layer") +
                     "; export to HDF5 instead");
  }
  if (!llama) (*j)["sliding_window"] = window();
}

// Phi-3's keys: original_max_position_embeddings, partial_rotary_factor, longrope's factor lists
// (attention_factor only where it is not the one Phi3Config derives), the dropouts (0).
void write_phi3(const ModelConfig& m, nlohmann::ordered_json* j) {
  const RopeScaling& r = m.rope_scaling;
  const int64_t original = r.longrope() ? r.original_max_position_embeddings : m.max_seq_len;
  (*j)["original_max_position_embeddings"] = original;
  const int64_t R = m.rotary_dim(), D = m.head_dim();
  double partial = static_cast<double>(R) / static_cast<double>(D);
  // Phi3Config takes int(head_dim * partial_rotary_factor): never a value below R
  while (static_cast<int64_t>(static_cast<double>(D) * partial) < R) {
    partial = std::nextafter(partial, 2.0);
  }
  (*j)["partial_rotary_factor"] = partial;
  if (r.longrope()) {
    nlohmann::ordered_json rs;
    rs["type"] = "longrope";
    rs["short_factor"] = r.short_factor;
    rs["long_factor"] = r.long_factor;
    const double derived = longrope_attention_factor(
        static_cast<double>(m.max_seq_len) / static_cast<double>(original), original);
    if (r.attention_factor != derived) rs["attention_factor"] = r.attention_factor;
    (*j)["rope_scaling"] = rs;
  }
  (*j)["resid_pdrop"] = 0.0;
  (*j)["embd_pdrop"] = 0.0;
  (*j)["attention_bias"] = false;  // Phi3Attention has none whatever it says; the hub's files
                                   // write false
}

}  // namespace

std::string hf_config_json(const ModelConfig& m, DType dtype) {
  nlohmann::ordered_json j;
  const MoeConfig& e = m.moe;
  const bool qwen_moe = m.family == ModelFamily::qwen3_moe;
  if (e.enabled() && qwen_moe && e.shared_expert_intermediate_size > 0) {
    throw UsageError(
        "a Hugging Face Qwen3MoeForCausalLM has no shared expert (model.moe."
        "shared_expert_intermediate_size is " +
        std::to_string(e.shared_expert_intermediate_size) + "); export to HDF5 instead");
  }
  if (e.enabled() && !qwen_moe && (e.shared_expert_intermediate_size > 0 || !e.norm_topk_prob)) {
    throw UsageError(std::string("a Hugging Face export of a mixture of experts is a Mixtral, "
                                 "which has ") +
                     (e.norm_topk_prob ? "no shared expert (model.moe."
                                         "shared_expert_intermediate_size is " +
                                             std::to_string(e.shared_expert_intermediate_size) + ")"
                                       : "renormalized top-k weights (model.moe.norm_topk_prob "
                                         "is false)") +
                     "; export to HDF5 instead");
  }
  const HfFamily& f = export_family(m);
  if (m.final_logit_softcapping > 0 && f.window != WindowKeys::gemma) {
    throw UsageError("model.final_logit_softcapping is " +
                     format_double(m.final_logit_softcapping) + ", and a Hugging Face " +
                     f.architecture +
                     " has no soft-capped logits (it would compute other outputs); export to "
                     "HDF5 instead");
  }
  check_expressible(m, f);
  j["architectures"] = {f.architecture};
  j["model_type"] = f.model_type;
  j["vocab_size"] = m.vocab_size;
  j["hidden_size"] = m.hidden_size;
  j["intermediate_size"] = e.enabled() && !qwen_moe ? e.intermediate_size : m.intermediate_size;
  if (e.enabled() && qwen_moe) {
    j["num_experts"] = e.num_experts;
    j["num_experts_per_tok"] = e.top_k;
    j["moe_intermediate_size"] = e.intermediate_size;
    j["norm_topk_prob"] = e.norm_topk_prob;
    j["decoder_sparse_step"] = 1;
    j["mlp_only_layers"] = nlohmann::ordered_json::array();
    j["output_router_logits"] = e.aux_loss_coef > 0;
    j["router_aux_loss_coef"] = e.aux_loss_coef > 0 ? e.aux_loss_coef : 0.001;
  } else if (e.enabled()) {
    j["num_local_experts"] = e.num_experts;
    j["num_experts_per_tok"] = e.top_k;
    j["router_aux_loss_coef"] = e.aux_loss_coef;
    j["router_jitter_noise"] = 0.0;
    j["output_router_logits"] = false;
  }
  j["num_hidden_layers"] = m.num_layers;
  j["num_attention_heads"] = m.num_heads;
  j["num_key_value_heads"] = m.num_kv_heads;
  j["head_dim"] = m.head_dim();
  if (f.window != WindowKeys::gemma) j["hidden_act"] = "silu";
  j["rms_norm_eps"] = m.rms_norm_eps;
  j["rope_theta"] = m.rope_theta;
  j["rope_scaling"] = m.rope_scaling.scaled()
                          ? nlohmann::ordered_json::parse(rope_scaling_json(m.rope_scaling))
                          : nlohmann::ordered_json();
  j["max_position_embeddings"] = m.max_seq_len;
  j["tie_word_embeddings"] = m.tie_word_embeddings;
  if (f.bias_when_true != AttentionBias::none) {
    j["attention_bias"] = m.attention_bias == f.bias_when_true;
  }
  j["attention_dropout"] = 0.0;
  if ((f.family == ModelFamily::llama && !f.sparse) || f.family == ModelFamily::smollm3) {
    j["mlp_bias"] = false;
  }
  if (f.window == WindowKeys::gemma) {
    write_gemma(m, f, &j);
  } else if (f.window != WindowKeys::none) {
    write_window(m, f, &j);
  } else if (m.sliding_window > 0) {
    throw UsageError("model.sliding_window is " + std::to_string(m.sliding_window) +
                     ", and a Hugging Face " + std::string(f.architecture) +
                     " has no sliding window; export to HDF5 instead");
  }
  if (f.family == ModelFamily::phi3) write_phi3(m, &j);
  if (f.family == ModelFamily::smollm3) {
    nlohmann::ordered_json no_rope = nlohmann::ordered_json::array();
    for (int64_t l = 0; l < m.num_layers; ++l) no_rope.push_back(m.rotates(l) ? 1 : 0);
    j["no_rope_layers"] = no_rope;
  }
  j["torch_dtype"] = dtype_name(dtype);
  j["use_cache"] = true;
  return j.dump(2) + "\n";
}

YAML::Node rope_scaling_node(const RopeScaling& r) {
  YAML::Node rs(YAML::NodeType::Map);
  rs["rope_type"] = rope_type_name(r.rope_type);
  if (r.rope_type == RopeType::linear) rs["factor"] = r.factor;
  if (r.longrope()) {
    for (const auto& [key, list] :
         {std::pair<const char*, const std::vector<double>*>{"short_factor", &r.short_factor},
          {"long_factor", &r.long_factor}}) {
      YAML::Node l(YAML::NodeType::Sequence);
      for (double x : *list) l.push_back(x);
      l.SetStyle(YAML::EmitterStyle::Flow);
      rs[key] = l;
    }
    rs["original_max_position_embeddings"] = r.original_max_position_embeddings;
    rs["attention_factor"] = r.attention_factor;
  }
  if (r.llama3()) {
    rs["factor"] = r.factor;
    rs["low_freq_factor"] = r.low_freq_factor;
    rs["high_freq_factor"] = r.high_freq_factor;
    rs["original_max_position_embeddings"] = r.original_max_position_embeddings;
  }
  return rs;
}

ModelFileArchitecture hf_model_file_architecture(const HfArchitecture& a) {
  const ModelConfig& m = a.model;
  ModelFileArchitecture f;
  f.source = a.file;
  f.values = {
      {"vocab_size", "vocab_size", YAML::Node(m.vocab_size)},
      {"hidden_size", "hidden_size", YAML::Node(m.hidden_size)},
      {"intermediate_size", "intermediate_size", YAML::Node(m.intermediate_size)},
      {"num_layers", "num_hidden_layers", YAML::Node(m.num_layers)},
      {"num_heads", "num_attention_heads", YAML::Node(m.num_heads)},
      {"num_kv_heads", "num_key_value_heads", YAML::Node(m.num_kv_heads)},
      {"rms_norm_eps", "rms_norm_eps", YAML::Node(m.rms_norm_eps)},
      {"rope_theta", a.rope_theta_key, YAML::Node(m.rope_theta)},
      {"max_seq_len", "max_position_embeddings", YAML::Node(m.max_seq_len)},
      {"tie_word_embeddings", "tie_word_embeddings", YAML::Node(m.tie_word_embeddings)},
  };
  f.values.push_back({"rope_scaling", a.rope_scaling_key, rope_scaling_node(m.rope_scaling)});
  f.values.push_back({"family", "architectures", YAML::Node(model_family_name(m.family))});
  f.values.push_back({"head_dim", "head_dim",
                      m.explicit_head_dim > 0 ? YAML::Node(m.explicit_head_dim)
                                              : YAML::Node(YAML::NodeType::Null)});
  f.values.push_back(
      {"rotary_dim",
       m.family == ModelFamily::phi3 ? "partial_rotary_factor" : "(" + a.architecture + ")",
       m.explicit_rotary_dim > 0 ? YAML::Node(m.explicit_rotary_dim)
                                 : YAML::Node(YAML::NodeType::Null)});
  f.values.push_back(
      {"attention_bias", "attention_bias", YAML::Node(attention_bias_name(m.attention_bias))});
  f.values.push_back({"qk_norm", "(" + a.architecture + ")", YAML::Node(qk_norm_name(m.qk_norm))});
  f.values.push_back(
      {"sliding_window", "sliding_window",
       m.sliding_window > 0 ? YAML::Node(m.sliding_window) : YAML::Node(YAML::NodeType::Null)});
  YAML::Node types(YAML::NodeType::Sequence);  // empty: null (the config prints [])
  for (auto t : m.layer_types) types.push_back(layer_attention_name(t));
  f.values.push_back({"layer_types", "layer_types", types});
  YAML::Node ropes(YAML::NodeType::Sequence);  // empty: null
  for (auto r : m.layer_rope) ropes.push_back(layer_rope_name(r));
  f.values.push_back(
      {"layer_rope", m.family == ModelFamily::gemma3 ? "layer_types" : "no_rope_layers", ropes});
  const std::string arch = "(" + a.architecture + ")";
  f.values.push_back({"norm_weight", arch, YAML::Node(norm_weight_name(m.norm_weight))});
  f.values.push_back({"norm_placement", arch, YAML::Node(norm_placement_name(m.norm_placement))});
  f.values.push_back({"mlp_activation",
                      m.mlp_activation == MlpActivation::silu ? "hidden_act" : "hidden_activation",
                      YAML::Node(mlp_activation_name(m.mlp_activation))});
  f.values.push_back({"embed_scale", arch, YAML::Node(embed_scale_name(m.embed_scale))});
  auto number_or_null = [](double v) {
    return v > 0 ? YAML::Node(v) : YAML::Node(YAML::NodeType::Null);
  };
  f.values.push_back(
      {"query_pre_attn_scalar", "query_pre_attn_scalar", number_or_null(m.query_pre_attn_scalar)});
  f.values.push_back({"attn_logit_softcapping", "attn_logit_softcapping",
                      number_or_null(m.attn_logit_softcapping)});
  f.values.push_back({"final_logit_softcapping", "final_logit_softcapping",
                      number_or_null(m.final_logit_softcapping)});
  f.values.push_back(
      {"rope_local_theta", "rope_local_base_freq", number_or_null(m.rope_local_theta)});
  if (m.moe.enabled() && m.family == ModelFamily::qwen3_moe) {
    f.values.push_back({"moe.num_experts", "num_experts", YAML::Node(m.moe.num_experts)});
    f.values.push_back({"moe.top_k", "num_experts_per_tok", YAML::Node(m.moe.top_k)});
    f.values.push_back(
        {"moe.intermediate_size", "moe_intermediate_size", YAML::Node(m.moe.intermediate_size)});
    f.values.push_back({"moe.aux_loss_coef",
                        "router_aux_loss_coef (0 without output_router_logits)",
                        YAML::Node(m.moe.aux_loss_coef)});
    f.values.push_back({"moe.norm_topk_prob", "norm_topk_prob", YAML::Node(m.moe.norm_topk_prob)});
    f.values.push_back(
        {"moe.shared_expert_intermediate_size", "(Qwen3-MoE: none)", YAML::Node(int64_t{0})});
  } else if (m.moe.enabled()) {
    f.values.push_back({"moe.num_experts", "num_local_experts", YAML::Node(m.moe.num_experts)});
    f.values.push_back({"moe.top_k", "num_experts_per_tok", YAML::Node(m.moe.top_k)});
    f.values.push_back(
        {"moe.aux_loss_coef", "router_aux_loss_coef", YAML::Node(m.moe.aux_loss_coef)});
    f.values.push_back({"moe.norm_topk_prob", "(Mixtral)", YAML::Node(true)});
    f.values.push_back(
        {"moe.shared_expert_intermediate_size", "(Mixtral: none)", YAML::Node(int64_t{0})});
  }
  return f;
}

}  // namespace kktrain
