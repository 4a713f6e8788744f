// LoRA adapters in Hugging Face PEFT's format: the directory `PeftModel.save_pretrained` writes
// and PEFT, transformers and vLLM load beside their base model.
//
//   adapter_config.json        peft_type "LORA", task_type "CAUSAL_LM", r, lora_alpha (the
//                              scale is lora_alpha / r: use_rslora false), lora_dropout, bias
//                              "none", target_modules (below), base_model_name_or_path (the
//                              Hugging Face directory the base came from, else null), and the
//                              keys whose defaults say "plain LoRA": fan_in_fan_out false,
//                              use_dora false, init_lora_weights true, inference_mode true,
//                              modules_to_save / layers_to_transform / layers_pattern / revision
//                              null, rank_pattern / alpha_pattern {}
//   adapter_model.safetensors  base_model.model.<module>.lora_A.weight (r, in) and .lora_B.weight
//                              (out, r) per adapted module (kktrain's module names are the
//                              Hugging Face ones: model.layers.N.self_attn.q_proj), __metadata__
//                              {"format": "pt"}
//
// target_modules is a list, which PEFT matches by name: a module is adapted when its name equals
// an entry or ends with "." + entry. Written from the modules that carry adapters (not from
// peft.target_modules' globs, which PEFT does not read): a projection adapted in every layer is
// its short name ("q_proj"), one adapted in some layers only is listed by its full names.
// Adapters of the multi-token-prediction head are left out (no Hugging Face model has it).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/dtype.hpp"

namespace kktrain {

class StReader;

struct PeftExportOptions {
  std::optional<DType> dtype;  // bfloat16 or float32; null: each adapter's own storage dtype
};

// Writes the PEFT directory `out` (new, or a previous adapter directory, replaced whole but for
// the user's README.md, which the new one keeps; `out` a symbolic link to a directory: its
// target, the link kept) from the
// kktrain training checkpoint file `checkpoint`: adapter values from its fp32 master where it
// keeps one, rounded once to nearest even for bf16. Built under a temporary name beside `out`
// and renamed into place (a kill leaves the previous directory or none; the next export puts a
// stepped-aside previous one back, io/durable.hpp). Returns the bytes of tensor data. InputError
// for a checkpoint without adapters, naming it; a non-finite adapter value, naming the tensor.
int64_t export_peft(const std::string& checkpoint, const std::string& out,
                    const PeftExportOptions& options);

// Why directory `out` may not be replaced by a PEFT export ("" when it may): a symbolic link that
// leads nowhere, it exists and is not a directory, or holds anything but adapter_config.json,
// adapter_model.safetensors, README.md.
std::string peft_out_refusal(const std::string& out);

// True for a block projection outside the MTP head ("model.layers.3.mlp.up_proj"): what PEFT's
// target_modules may select in a Hugging Face model.
bool peft_projection_module(const std::string& module);

// PEFT's name of a kktrain adapter ("X.lora_A.weight" -> "base_model.model.X.lora_A.weight").
std::string peft_tensor_name(const std::string& canonical);

// The largest LoRA rank read (peft.dim's bound). PEFT's target_modules string is matched with at
// most kPeftRegexMatchLimit backtracking steps per module name and kPeftRegexHeapKiB of
// backtracking memory: seven real patterns (suffix alternations, layer ranges, a negative
// look-ahead) need at most 113 steps on names of up to 128 layers, while "(.|.)*[XY]" on a name of
// 30 characters needs 2^30, which the limit cuts short (bench/README.md, "PEFT target_modules
// patterns").
constexpr int64_t kMaxLoraRank = int64_t(1) << 16;
constexpr uint32_t kPeftRegexMatchLimit = 100000;
constexpr uint32_t kPeftRegexHeapKiB = 16384;

// The LoRA settings of the PEFT adapter directory `dir` for a peft section that names it in
// init_from and leaves dim, alpha or target_modules unset (core/config.hpp
// LoadOptions::peft_adapter): r (1 .. kMaxLoraRank), lora_alpha (finite, >= 0), and
// target_modules as peft.target_modules: a list's names as they are (PEFT's rule for a name, equal
// or a suffix after '.', is kktrain's for a name without wildcards; a name with them is refused),
// a regular expression string or "all-linear" as the full names of the projections it selects in
// a model of `num_layers` layers. adapter_config.json is checked as PeftAdapterDir checks it
// (plain LoRA), and must select some projection. InputError, one line naming the file and the
// key, prefixed "peft.init_from: ". The run's model is checked against the directory again once
// it is built (PeftAdapterDir).
// `fused`: the model's projections are Phi-3's qkv_proj, o_proj, gate_up_proj, down_proj.
PeftAdapterSettings read_peft_adapter_settings(const std::string& dir, int64_t num_layers,
                                               bool fused);

// What a run's model holds, for reading a PEFT directory into it.
struct PeftExpectation {
  int64_t r = 0;
  double alpha = 0.0;
  // Every projection module of the model that PEFT could target (MTP head excluded).
  std::vector<std::string> modules;
  // The adapters the run has (outside the MTP head): canonical name -> full shape.
  std::map<std::string, std::vector<int64_t>> adapters;
};

// A PEFT adapter directory, read and checked against a run: the config's keys (peft_type,
// r = peft.dim, lora_alpha = peft.alpha, the plain-LoRA keys above, target_modules selecting
// exactly the run's adapted modules: a list by PEFT's name rule, a string as PEFT's full-match
// regular expression, re.fullmatch, within kPeftRegexMatchLimit steps a name), the safetensors
// header (io/safetensors.hpp) holding exactly the run's adapters under PEFT's names with their
// shapes. InputError, one line naming the file and the key or tensor: prefixed "peft.init_from: ".
class PeftAdapterDir {
 public:
  PeftAdapterDir(const std::string& dir, const PeftExpectation& expect);
  ~PeftAdapterDir();
  // Rows [row_begin, row_begin + rows) of the adapter with canonical name `name` as fp32
  // (widened exactly); InputError for a non-finite value or a file shorter than its header.
  std::vector<float> read_rows_f32(const std::string& name, int64_t row_begin, int64_t rows) const;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::unique_ptr<StReader> reader_;
};

}  // namespace kktrain
