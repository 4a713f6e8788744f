// A Hugging Face model directory's config.json: the architecture of a Llama-style model (and
// Mistral without a sliding window, the same math) read into kktrain's model settings, and
// written for an export.
//
//   config.json key              kktrain            notes
//   vocab_size                   vocab_size
//   hidden_size                  hidden_size
//   intermediate_size            intermediate_size
//   num_hidden_layers            num_layers
//   num_attention_heads          num_heads
//   num_key_value_heads          num_kv_heads       absent: num_attention_heads
//   head_dim                     -                  must be hidden_size / num_attention_heads
//   rms_norm_eps                 rms_norm_eps       absent: 1e-6 (Hugging Face's default)
//   rope_theta                   rope_theta         absent: 10000
//   max_position_embeddings      max_seq_len        absent: 2048
//   tie_word_embeddings          tie_word_embeddings  absent: false (LlamaConfig's default)
//   rope_scaling                 rope_scaling       null, {rope_type: default} or llama3
//   torch_dtype                  (model.dtype: auto)
//
// Phi3ForCausalLM (Phi-3, Phi-4-mini; model.family phi3, fused qkv_proj / gate_up_proj):
//   partial_rotary_factor        rotary_dim         int(head_dim * factor), even
//   original_max_position_embeddings  rope_scaling.original_max_position_embeddings (longrope)
//   rope_scaling longrope        rope_scaling       short_factor / long_factor (rotary_dim / 2
//                                                   each), attention_factor resolved
//   sliding_window               sliding_window     null, or every layer
//   resid_pdrop, embd_pdrop, attention_dropout      0 only
//
// Anything kktrain's model does not compute is refused with one line naming the key and its
// value: another architecture or model_type, attention_bias or mlp_bias true, hidden_act other
// than silu, a sliding window shorter than the context, attention dropout, an unknown
// rope_scaling type, final_logit_softcapping (Gemma 2's; null is accepted).
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "core/config.hpp"
#include "core/dtype.hpp"

namespace kktrain {

struct HfArchitecture {
  std::string file;          // DIR/config.json
  std::string architecture;  // "LlamaForCausalLM" or "MistralForCausalLM"
  ModelConfig model;         // the shape keys above (other fields at their defaults)
  std::optional<DType> torch_dtype;
  std::string torch_dtype_text;  // torch_dtype or dtype as written ("" when absent)
  // Where the rotary settings came from: rope_theta / rope_scaling, or transformers 5's
  // rope_parameters (for `kktrain config`'s "# from" marks).
  std::string rope_theta_key = "rope_theta";
  std::string rope_scaling_key = "rope_scaling";
  // Gemma3ForConditionalGeneration: the model is its language model (text_config; weights under
  // language_model.model.* or model.language_model.*), the vision tower is not read, and exports
  // are text-only Gemma3ForCausalLM.
  bool multimodal = false;
};

// True when `path` is a directory holding config.json (a Hugging Face model directory).
bool is_hf_directory(const std::string& path);

// Reads and checks DIR/config.json. InputError naming the file, the key and its value.
HfArchitecture read_hf_config(const std::string& dir);
// The same for the text of `file`, already read.
HfArchitecture parse_hf_config(const std::string& file, const std::string& text);
// A small regular file's bytes (config.json, an index, adapter_config.json, a tokenizer file
// copied into an export). InputError naming it; refused unread when over kMaxSmallFileBytes (a
// tokenizer.json's bound, text/tokenizer_load.cpp; config.json and indexes are KBs).
constexpr std::size_t kMaxSmallFileBytes = std::size_t(64) << 20;
std::string read_small_file(const std::string& file);

// Refuses (InputError naming `file`) JSON nested deeper than kMaxJsonDepth (core/json_text.hpp),
// and (naming the dotted key) JSON text in which an object holds a key
// twice: JSON parsers disagree on which value wins, so neither is taken. Invalid JSON passes
// (the parse itself refuses it).
void refuse_duplicate_keys(const std::string& file, const std::string& text);

// The config.json of a model with kktrain's settings `m`, tensors stored in `dtype`. UsageError
// for a model the Hugging Face architecture cannot hold (a Mixtral with a shared expert or
// without renormalized weights; soft-capped logits, model.final_logit_softcapping).
std::string hf_config_json(const ModelConfig& m, DType dtype);

// The values model.* takes from the file (core/config.hpp), for load_config.
ModelFileArchitecture hf_model_file_architecture(const HfArchitecture& a);
// A rotary scaling as the value of model.rope_scaling ({rope_type, and llama3's four numbers or
// longrope's lists, original_max_position_embeddings and attention_factor}).
YAML::Node rope_scaling_node(const RopeScaling& r);

// rope_scaling as the text of a JSON object ("" for none), and back (InputError naming `where`).
std::string rope_scaling_json(const RopeScaling& r);
RopeScaling rope_scaling_from_json(const std::string& text, const std::string& where);

}  // namespace kktrain
