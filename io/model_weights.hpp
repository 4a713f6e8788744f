// A model's weights in a file, read as fp32 values a row range at a time: what model.init_from,
// the export and `kktrain generate` read. kktrain's own HDF5 files sit behind this interface
// (training checkpoints, where a parameter's value is its fp32 master when the checkpoint keeps
// one; exports; `kktrain grads` dumps), and so do Hugging Face directories (safetensors).
//
// Rows are dim 0 of a tensor (row-major), so every rank reads exactly the rows of its shard and
// nothing else: loading a model on W ranks reads each byte of the file once in total.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/dtype.hpp"
#include "core/strings.hpp"  // printable_name
#include "io/h5_rows.hpp"
#include "parallel/communicator.hpp"

namespace kktrain {

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // The file (or directory) for messages.
  virtual const std::string& path() const = 0;
  // "kktrain checkpoint", "kktrain export", ... (for messages).
  virtual std::string kind() const = 0;
  // Canonical names of the tensors the file holds, in the file's order.
  virtual std::vector<std::string> names() const = 0;
  // The shape of a tensor; nullopt when the file has none by that name.
  virtual std::optional<std::vector<int64_t>> shape(const std::string& name) const = 0;
  // The dtype a tensor is stored in (its master's, float32, when the file keeps one).
  virtual DType stored_dtype(const std::string& name) const = 0;
  // Collective over the communicator the source was opened on: this rank's rows [row_begin,
  // row_begin + rows) of tensor `name` as fp32 (bf16 widened exactly). Every rank calls this for
  // the same tensors in the same order; together their rows cover the tensor (so a checksum over
  // the whole tensor can be checked). InputError names the file and the tensor.
  virtual std::vector<float> read_rows_f32(const std::string& name, int64_t row_begin,
                                           int64_t rows) = 0;
  // One process: the whole tensor in pieces of at most `piece_rows` rows, in order, each given
  // to `take(row_begin, rows, values)`; the tensor's checksum is checked after the last piece
  // (InputError then: whatever `take` wrote from it must be thrown away).
  virtual void stream_rows_f32(
      const std::string& name, int64_t piece_rows,
      const std::function<void(int64_t row_begin, int64_t rows, const float* values)>& take) = 0;
  // The file's root attributes (format, the architecture, lora_dim, ...).
  virtual const FileAttrs& attributes() const = 0;
  // A per-tensor attribute as text ("" when absent): keep_in_fp32, aliases, trainable.
  virtual std::string tensor_attribute(const std::string& name, const std::string& attr) const = 0;
};

// A WeightSource over another (a decorator: LoRA adapters merged in, values checked finite): it
// passes every call on to `src`; a wrapper overrides what it changes.
class WeightSourceOver : public WeightSource {
 public:
  explicit WeightSourceOver(std::unique_ptr<WeightSource> src) : src_(std::move(src)) {}
  const std::string& path() const override { return src_->path(); }
  std::string kind() const override { return src_->kind(); }
  std::vector<std::string> names() const override { return src_->names(); }
  std::optional<std::vector<int64_t>> shape(const std::string& name) const override {
    return src_->shape(name);
  }
  DType stored_dtype(const std::string& name) const override { return src_->stored_dtype(name); }
  std::vector<float> read_rows_f32(const std::string& name, int64_t row_begin,
                                   int64_t rows) override {
    return src_->read_rows_f32(name, row_begin, rows);
  }
  void stream_rows_f32(const std::string& name, int64_t piece_rows,
                       const std::function<void(int64_t, int64_t, const float*)>& take) override {
    src_->stream_rows_f32(name, piece_rows, take);
  }
  const FileAttrs& attributes() const override { return src_->attributes(); }
  std::string tensor_attribute(const std::string& name, const std::string& attr) const override {
    return src_->tensor_attribute(name, attr);
  }

 protected:
  std::unique_ptr<WeightSource> src_;
};

// Opens what a user named as a model file: a Hugging Face model directory (config.json with
// safetensors weights, io/hf_weights.hpp), an HDF5 file, a checkpoint step directory, a
// checkpoint root with a `latest` pointer, or a run directory (collective over comm; errors
// agreed on and named after `what`, e.g. "model.init_from").
std::unique_ptr<WeightSource> open_weights(const std::string& path, const std::string& what,
                                           Communicator& comm);

// Refuses, naming `what` and the path, a path that is part of a Hugging Face model rather than
// one (model.safetensors, config.json, the index: the directory holding it is meant) and a
// directory of safetensors without config.json. Returns normally for anything else (open_weights
// checks it first; readers of HDF5 files alone call it before resolving a checkpoint).
void check_model_path(const std::string& path, const std::string& what);

// The model a file holds, from its attributes (kktrain's architecture attributes, which a
// Hugging Face directory provides from config.json): vocab_size, hidden_size, num_layers,
// num_heads, num_kv_heads, intermediate_size, max_seq_len, tie_word_embeddings, mtp_num_layers,
// rope_theta, rms_norm_eps, rope_scaling, and the optional final_logit_softcapping and moe_*.
// InputError naming the file and a missing attribute.
ModelConfig architecture_of(const WeightSource& src);

// A sparse model's model.moe as file attributes (moe_num_experts, moe_top_k,
// moe_intermediate_size, moe_norm_topk_prob, moe_shared_expert_intermediate_size integers,
// moe_aux_loss_coef), written only for a sparse model, and read back (absent: dense).
void moe_to_attrs(const MoeConfig& e, FileAttrs* a);
MoeConfig moe_from_attrs(const FileAttrs& a);
// model.final_logit_softcapping as the f64 file attribute final_logit_softcapping, written only
// when the cap is on (files without it are unchanged), and read back (absent: 0, off).
void softcap_to_attrs(double cap, FileAttrs* a);
double softcap_from_attrs(const FileAttrs& a);
// The family fields of model m (core/config.hpp: family, head_dim, attention_bias, qk_norm) as
// file attributes, written only where they differ from Llama's (a Llama file is unchanged): the
// strings family, attention_bias, qk_norm and the integer head_dim; read back into *m (absent:
// Llama's), InputError naming the file for a value this kktrain does not know.
void family_to_attrs(const ModelConfig& m, FileAttrs* a);
// model.layer_types as a string of one '0' (full_attention) or '1' (sliding_attention) a layer
// (the file attribute layer_types; "" when null). With the integer sliding_window, written by
// family_to_attrs when set.
std::string layer_types_text(const ModelConfig& m);
// model.layer_rope likewise: '1' where a layer rotates q and k, '0' where not ("" when null).
std::string layer_rope_text(const ModelConfig& m);
void family_from_attrs(const FileAttrs& a, const std::string& file, ModelConfig* m);
// Why a file with attributes `a` cannot hold model `m` because one is a mixture of experts and
// the other dense ("" when both are of one kind), for messages after the file's name.
std::string moe_kind_mismatch(const FileAttrs& a, const ModelConfig& m);

// Rows of at most this many bytes of fp32 values per piece when a process streams a tensor.
constexpr int64_t kStreamPieceBytes = int64_t(16) << 20;

}  // namespace kktrain
