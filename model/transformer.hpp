// A Llama-style decoder (Hugging Face LlamaForCausalLM semantics) with hand-written forward and
// backward passes on Kokkos.
//
//   embed -> L x [ RMSNorm -> GQA attention (rotary, causal) -> + residual,
//                  RMSNorm -> SwiGLU MLP -> + residual ] -> RMSNorm -> LM head -> cross-entropy
//
// Parameters live in a ParamRegistry under their canonical names, resident in their storage
// dtype. Each forward casts them once into an fp32 compute buffer (bf16-rounded when the compute
// dtype is bf16), laid out in registration order so q/k/v and gate/up are single fused GEMMs.
// Gradients are computed in fp32, rounded to the dtype of the tensor they belong to, and
// accumulated into storage-dtype gradient buffers (so several backward calls accumulate).
//
// Precision roles (see model/kernels.hpp): the compute dtype (matmuls, attention, MLP) and the
// residual-stream dtype. On one rank the compute dtype acts as autocast, so the stream keeps the
// storage dtype promoted with the compute dtype (fp32 storage -> fp32 stream).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/kokkos_compat.hpp"
#include "core/param_registry.hpp"

namespace kktrain {

struct ForwardOptions {
  bool compute_logits = true;         // false: stop after the final norm (no logits, no loss)
  bool output_hidden_states = false;  // keep the final-norm hidden states for hidden_states()
  bool compute_mtp = true;            // run the multi-token-prediction head if the model has one
  bool prepare_backward = false;      // also compute dlogits so backward() can run
  float grad_scale = 1.0f;            // multiplies the gradient of the mean loss (accumulation)
};

struct ForwardResult {
  double loss = 0.0;      // mean cross-entropy over counted tokens (main head)
  double mtp_loss = 0.0;  // mean over MTP depths of their mean losses (0 without MTP)
  // The gradient is that of loss + model.mtp_loss_weight * mtp_loss.
  int64_t tokens = 0;  // counted (non-ignored) target tokens of the main head
};

class Transformer {
 public:
  // allocate = false only registers the parameters (names, shapes, dtypes), for planning tools
  // such as the precision audit; such a model cannot run.
  Transformer(const ModelConfig& cfg, const ResolvedPrecision& precision, bool allocate = true,
              const PeftConfig& peft = PeftConfig());
  ~Transformer();
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;

  const ModelConfig& config() const { return cfg_; }
  ParamRegistry& params() { return params_; }
  const ParamRegistry& params() const { return params_; }

  // Deterministic init from cfg.seed: N(0, init_std) for embeddings and projections, scaled by
  // 1/sqrt(2 L) for o_proj and down_proj; norms at 1.
  void init_weights();

  // One micro-batch: ids and targets are host arrays of B*T tokens (targets < 0 are ignored).
  ForwardResult forward(const int32_t* ids, const int32_t* targets, int64_t B, int64_t T,
                        const ForwardOptions& opts);
  // Backward of the last forward (which must have had prepare_backward); accumulates gradients.
  void backward();

  // (B*T, C) final hidden states (after the final norm, stream dtype) of the last forward with
  // output_hidden_states; (B*T, V) logits of the last forward with compute_logits (before any
  // backward overwrote them with their gradient).
  DView<float> hidden_states() const { return hidden_; }
  DView<float> logits() const { return logits_; }
  int64_t mtp_depth() const { return cfg_.mtp_num_layers; }

  bool compute_bf16() const { return rc_; }
  bool stream_bf16() const { return rs_; }

 private:
  // The seven projections of a block, in the order of their weights.
  enum Proj { kQ, kK, kV, kO, kGate, kUp, kDown, kNumProj };
  struct LayerParams {
    int ln1, q, k, v, o, ln2, gate, up, down;
    int lora_a[kNumProj] = {-1, -1, -1, -1, -1, -1, -1};  // LoRA adapters (model/lora.cpp)
    int lora_b[kNumProj] = {-1, -1, -1, -1, -1, -1, -1};
    int weight(int proj) const {
      const int w[kNumProj] = {q, k, v, o, gate, up, down};
      return w[proj];
    }
  };
  struct MtpParams {
    int enorm, hnorm, eh_proj, norm;
    LayerParams block;
  };

 public:
  struct LayerActs;  // public for the CUDA extended-lambda rules; defined in transformer_buffers
  struct Buffers;

 private:
  int add_param(const std::string& module, std::vector<int64_t> shape, ParamRole role, DType dtype);
  LayerParams register_block(const std::string& prefix, DType dtype);
  void register_params();
  void refresh_compute_weights();
  const float* w(int param) const;  // compute-dtype fp32 view of a parameter
  void ensure_buffers(int64_t B, int64_t T);
  void upload_batch(const int32_t* ids, const int32_t* targets, int64_t B, int64_t T);

  void block_forward(const LayerParams& p, float* out, const float* inp, LayerActs& a);
  // dres (N, C): gradient of the block output on entry, of the block input on return.
  void block_backward(const LayerParams& p, float* dres, const float* inp, const LayerActs& a);
  // Norm -> LM head -> loss over inp (N, C); with `backward` also the LM head's weight gradient
  // and dxf (N, C). Returns the sum of per-token losses.
  double head_forward(int norm, const float* inp, float* xf, float* rstd, float* hidden_out,
                      float* logits, float* losses, const int32_t* targets, bool loss, float scale,
                      bool backward, float* dxf);
  void mtp_forward(const ForwardOptions& opts, bool backward, ForwardResult* r);
  // LoRA (model/lora.cpp). Adds the adapter of projection `proj` to y (N, out) at column `col`
  // of rows `ld` wide, given the projection's input x (N, in).
  void register_lora(LayerParams& p);
  void lora_forward(const LayerParams& p, int proj, float* y, int64_t ld, int64_t col,
                    const float* x);
  // From the projection's output gradient dy (rows `ld` wide, at column `col`): the adapter
  // gradients, and dx (N, in) += the input gradient through the adapter (fp32, unrounded).
  void lora_backward(const LayerParams& p, int proj, const float* dy, int64_t ld, int64_t col,
                     const float* x, float* dx);
  // Adds the MTP head's gradient with respect to the main model's last residual into dres.
  void mtp_backward(float* dres);
  void accumulate(int param, const float* dw, bool round_dw);
  void flush_staged_grads();

  ModelConfig cfg_;
  ResolvedPrecision prec_;
  bool rc_ = false;  // compute dtype is bf16
  bool rs_ = false;  // residual-stream dtype is bf16
  ParamRegistry params_;
  int embed_ = -1, final_norm_ = -1, lm_head_ = -1;  // lm_head_ == embed_ when tied
  std::vector<LayerParams> layers_;
  std::vector<MtpParams> mtp_;
  PeftConfig peft_;
  std::vector<bool> round_compute_;  // per parameter: rounded to bf16 in the compute buffer
  // Parameters with several gradient contributions per backward (the embedding when tied or
  // read by the MTP head, an untied LM head shared with MTP depths) sum them in fp32 here and
  // are rounded into their storage-dtype gradient once, at the end of backward().
  std::vector<DView<float>> staged_grad_;  // per parameter; empty when not staged
  DView<float> wcompute_;      // (total params) compute-dtype copies, registration order
  DView<float> embed_stream_;  // (V, C) lookup copy of a tied embedding (stream dtype)
  DView<float> rope_cos_, rope_sin_;
  DView<float> hidden_, logits_;
  std::unique_ptr<Buffers> buf_;
  bool have_backward_ = false;
  bool last_compute_mtp_ = false;
  int64_t B_ = 0, T_ = 0;
};

}  // namespace kktrain
