// A Llama-style decoder (Hugging Face LlamaForCausalLM semantics) with hand-written forward and
// backward passes on Kokkos.
//
//   embed -> L x [ RMSNorm -> GQA attention (rotary, causal) -> + residual,
//                  RMSNorm -> SwiGLU MLP -> + residual ] -> RMSNorm -> LM head -> cross-entropy
//
// Parameters live in a ParamRegistry under their canonical names, resident in their storage
// dtype, sharded along dim 0 over the ranks (FSDP2, parallel/fsdp.hpp). The model runs in units
// (the embedding; each decoder layer; the final norm + LM head; the MTP head): before a unit runs
// its weights are gathered into a compute buffer in the compute dtype (2-byte bf16 when it is bf16;
// norm weights and model-protected fp32 parameters fp32), with q/k/v and gate/up adjacent so they
// are single fused GEMMs; on one rank a parameter whose storage already is its compute copy is
// used in place, and the others are cast one unit at a time. Activations of compute-dtype tensors
// are bf16 Views when the compute dtype is bf16 (model/transformer_buffers.hpp). Weight gradients
// are computed in fp32 and rounded to the dtype of the tensor they belong to. On one rank they
// accumulate into
// the storage-dtype gradient buffers (so several backward calls accumulate); on several ranks
// each unit's full gradient is reduce-scattered into the shards after its backward.
//
// Precision roles (see ops/kernels.hpp): the compute dtype (matmuls, attention, MLP) and the
// residual-stream dtype. On one rank the compute dtype acts as autocast, so the stream keeps the
// storage dtype promoted with the compute dtype (fp32 storage -> fp32 stream). On several ranks
// each unit computes in the compute dtype (its inputs are cast to it: cast_forward_inputs) and
// its output is cast to mp_policy.output_dtype at the unit boundary; frozen ordinary parameters
// are lowered to the compute dtype before sharding.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/device_sums.hpp"
#include "core/kokkos_compat.hpp"
#include "core/param_registry.hpp"
#include "core/tensor_probe.hpp"
#include "core/upload_staging.hpp"
#include "model/block.hpp"
#include "parallel/communicator.hpp"
#include "parallel/fsdp.hpp"

namespace kktrain {

// The rounding of each tensor role, fixed when the model is built (see the header comment): the
// compute dtype (matmuls, attention, MLP), the residual stream inside a unit, and (several ranks)
// what passes between units (mp_policy.output_dtype).
struct Roundings {
  Rounding compute = Rounding::fp32;
  Rounding stream = Rounding::fp32;
  Rounding between = Rounding::fp32;
};
inline Rounding rounding_for(DType d) {
  return d == DType::bfloat16 ? Rounding::bf16 : Rounding::fp32;
}

struct ForwardOptions {
  bool compute_logits = true;         // false: stop after the final norm (no logits, no loss)
  bool output_hidden_states = false;  // keep the final-norm hidden states for hidden_states()
  // Also copy the main head's (B*T, V) logits, fp32, for logits(): a debugging aid that allocates
  // B*T*V*4 bytes (the head itself only ever holds model.loss_chunk_tokens rows of them).
  bool keep_logits = false;
  bool compute_mtp = true;        // run the multi-token-prediction head if the model has one
  bool prepare_backward = false;  // also compute dlogits so backward() can run
  float grad_scale = 1.0f;        // multiplies the gradient of the mean loss (accumulation)
  // Several ranks: the backward of this forward ends the step's gradient accumulation and
  // reduce-scatters (the last micro-batch); false keeps gradients unsharded and accumulated.
  bool sync_grads = true;
  // Set: the losses are not read back (no host wait; ForwardResult's losses are NaN) but added
  // on the device: slot kLossSlot += the mean loss, kMtpSlot += the MTP loss (kMtpScratchSlot is
  // the forward's own). Null: read back into ForwardResult.
  DeviceSums* loss_sums = nullptr;
  static constexpr int kLossSlot = 0, kMtpSlot = 1, kMtpScratchSlot = 2;
  static constexpr int kForwardSlots = 3;  // the slots above: a caller's own come after them
  // Mixture of experts: keep each layer's chosen experts for routing() (a host copy per layer).
  bool keep_routing = false;
  // Tests: shown the tensors at the boundaries core/tensor_probe.hpp names (null: none).
  TensorProbe* probe = nullptr;
};

// How the model is laid out over ranks; see Transformer::prepare().
struct ShardOptions {
  Communicator* comm = nullptr;       // null: one rank
  bool reshard_after_forward = true;  // several ranks: gather layers again for backward
  GradSync grad_sync = GradSync::every_micro_batch;  // several ranks: parallel/fsdp.hpp
  // Mixture of experts: split the experts over groups of this many consecutive ranks
  // (distributed.expert_parallel_size; docs/moe.md).
  int expert_parallel = 1;
};

// One buffer of the model's working memory for a micro-batch shape (Transformer::buffer_plan).
struct BufferSpec {
  std::string name;
  // "batch" (token ids), "activations" (kept from forward to backward), "recompute" (one layer's
  // activations with activation checkpointing), "head" (final norm, one chunk of logits),
  // "scratch" (one layer's working tensors and gradients, the attention's tiles), "mtp" (the
  // multi-token-prediction head's per-depth tensors).
  std::string group;
  int64_t bytes = 0;  // of one copy
  int64_t copies = 1;
};

struct ForwardResult {
  double loss = 0.0;      // mean cross-entropy over counted tokens (main head)
  double mtp_loss = 0.0;  // mean over MTP depths of their mean losses (0 without MTP)
  // The gradient is that of loss + model.mtp_loss_weight * mtp_loss.
  int64_t tokens = 0;  // counted (non-ignored) target tokens of the main head
  // Mixture of experts: the load-balancing loss (unweighted; the gradient is that of
  // loss + model.moe.aux_loss_coef * aux_loss), 0 for a dense model.
  double aux_loss = 0.0;
};

class Transformer {
 public:
  // Registers the parameters (names, shapes, dtypes). allocate = true also prepares a one-rank
  // model ready to run; otherwise call prepare() after setting trainability (freeze_config).
  Transformer(const ModelConfig& cfg, const ResolvedPrecision& precision, bool allocate = true,
              const PeftConfig& peft = PeftConfig());
  // After freezing: lays the parameters out for opts.comm's rank and size (plan_layout), then
  // allocates storage, gradients of the trainable parameters and the unit machinery.
  void prepare(const ShardOptions& opts);
  // After freezing, without allocating (planning tools such as the audit): on several ranks
  // lowers frozen ordinary parameters to the compute dtype (not trainable, model-protected fp32
  // or LoRA ones) and shards the registry for rank `rank` of `world`, which must be the world
  // size the precision was resolved for.
  void plan_layout(int rank, int world, int expert_parallel = 1);
  ~Transformer();
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;

  const ModelConfig& config() const { return cfg_; }
  ParamRegistry& params() { return params_; }
  const ParamRegistry& params() const { return params_; }

  // Deterministic init from cfg.seed: N(0, init_std) for embeddings and projections, scaled by
  // 1/sqrt(2 L) for o_proj and down_proj; norms at 1. `which(name)`, when given, picks the
  // parameters to initialize (a model file provides the others).
  void init_weights(const std::function<bool(const std::string& name)>& which = nullptr);

  // One micro-batch: ids and targets are host arrays of B*T tokens (targets < 0 are ignored).
  ForwardResult forward(const int32_t* ids, const int32_t* targets, int64_t B, int64_t T,
                        const ForwardOptions& opts);
  // Backward of the last forward (which must have had prepare_backward); accumulates gradients
  // (one rank) or reduces them into the shards (several ranks, ForwardOptions::sync_grads).
  void backward();
  // Zeroes the shard gradients and drops unreduced gradient accumulation (start of a step).
  void zero_grads();

  // (B*T, C) final hidden states (after the final norm, stream dtype) of the last forward with
  // output_hidden_states; (B*T, V) fp32 logits of the last forward with keep_logits (values in
  // the compute dtype), else empty.
  DView<float> hidden_states() const { return hidden_; }
  DView<float> logits() const { return kept_logits_; }
  // (B*T, top_k) experts each token of layer l chose, best first, in the last forward with
  // keep_routing (empty otherwise or for a dense model).
  const std::vector<int32_t>& routing(int64_t layer) const { return moe_choices_.at(layer); }
  int64_t mtp_depth() const { return cfg_.mtp_num_layers; }

  // The roles' roundings, fixed when the model is built.
  const Roundings& roundings() const { return round_; }
  // The activation and scratch buffers a forward + backward of micro-batch (B, T) allocates, by
  // the same code that allocates them (nothing is allocated here).
  std::vector<BufferSpec> buffer_plan(int64_t B, int64_t T) const;
  // The bytes of each host-to-device upload of one training micro-batch (B, T), in the order
  // upload_batch() and the load-balancing loss issue them: what the pinned staging holds.
  std::vector<std::size_t> upload_plan(int64_t B, int64_t T) const;
  // The unit machinery's buffers (FsdpUnits::plan: "compute_weights" slots; "units": gradient
  // slots, wires, accumulators) and the model-level fp32 buffers prepare() allocates ("model":
  // staged gradients, rope tables), for the layout set by plan_layout() or prepare(); nothing is
  // allocated. `accumulates`: steps of several micro-batches; `overlapped`: reduce-scatters
  // overlap the backward (distributed.nonblocking_collectives).
  std::vector<BufferSpec> unit_buffer_plan(bool reshard_after_forward, bool accumulates,
                                           GradSync sync = GradSync::every_micro_batch,
                                           bool overlapped = false) const;
  // How each parameter's compute copy is held (dtype, rounding, fused groups).
  ComputeLayout compute_layout() const;
  // The units, for buffer accounting and tests (valid after prepare(allocate = true)).
  const FsdpUnits& units() const { return *units_; }
  // Traffic of the expert-parallel communicators (docs/moe.md) since prepare(): the token
  // all-to-alls, and everything they sent (the all-to-alls and the experts' shard collectives).
  CommStats moe_comm_stats() const;

 private:
  // A block's parameters (registry indices), projections in Proj order (model/block.hpp).
  struct LayerParams {
    int ln1, q, k, v, o, ln2, gate = -1, up = -1, down = -1;  // gate/up/down: dense MLP only
    // A sparse MLP (model.moe): the fp32 router, each expert's w1 (gate), w3 (up), w2 (down),
    // and the optional shared expert.
    int router = -1, shared_gate = -1, shared_up = -1, shared_down = -1;
    std::vector<int> w1, w3, w2;
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
  struct Buffers;

 private:
  int add_param(const std::string& module, std::vector<int64_t> shape, ParamRole role, DType dtype);
  LayerParams register_block(const std::string& prefix, DType dtype);
  void register_sparse_mlp(LayerParams& p, const std::string& prefix, DType dtype);
  // The load-balancing loss of this forward from each layer's routing statistics, and the
  // per-expert gradient factor the backward adds (moe_aux_grad_).
  double moe_aux_loss(float grad_scale, bool backward);
  void register_params();
  void lower_frozen_storage();
  std::vector<UnitSpec> unit_specs(bool reshard) const;
  // A sparse layer's experts this rank holds, in their compute-buffer order.
  std::vector<int> expert_params(const LayerParams& p) const;
  std::vector<BufferSpec> model_buffer_plan() const;  // allocated by prepare()
  // Full compute weights: typed (GEMM operands, the embedding) and fp32 (norm weights).
  CRef w(int param) const { return units_->compute_weight(param); }
  const float* wf(int param) const { return units_->weight(param); }
  // Unit scheduling: gather before use; after a unit's forward, release it when sharded runs
  // reshard after forward; after its backward, reduce its gradients (sharded runs).
  // ... and starts the all-gather of `next` (-1: none), the unit that runs after it.
  void gather(int unit, int next = -1) {
    units_->gather(unit);
    if (next >= 0) units_->prefetch(next);
  }
  void release_after_forward(int unit);
  void reduce(int unit);
  // Rounding at unit boundaries on several ranks (outputs cast to output_dtype, gradients to
  // the dtype of the tensor they are the gradient of).
  void boundary_output(float* x, int64_t n) const;
  void boundary_grad_into_unit(float* g, int64_t n) const;
  void boundary_grad_out_of_unit(float* g, int64_t n) const;
  void ensure_buffers(int64_t B, int64_t T);
  void make_buffers(Buffers& b, int64_t B, int64_t T, bool allocate,
                    std::vector<BufferSpec>* plan) const;
  void upload_batch(const int32_t* ids, const int32_t* targets, int64_t B, int64_t T);

  // The passes are templates over TC, the compute dtype's container (bf16 or float).
  template <class TC>
  ForwardResult forward_impl(const int32_t* targets, const ForwardOptions& opts);
  template <class TC>
  void backward_impl();
  // out (N, C) = the stream-dtype embedding rows of ids (N), from weights of either dtype.
  void embed_lookup(float* out, const int32_t* ids, const CRef& wte, int64_t N);
  // The weights the embedding lookup reads (the compute copy, or the storage on one rank when
  // the compute copy of a tied embedding is rounded and the stream is not).
  CRef lookup_weights() const;
  // A block's layer functions (model/block.hpp) with this model's weights, buffers and gradient
  // routing (model/transformer_layers.cpp).
  template <class TC>
  void block_forward(const LayerParams& p, float* out, const float* inp, BlockActs& a);
  // dres (N, C): gradient of the block output on entry, of the block input on return.
  template <class TC>
  void block_backward(const LayerParams& p, float* dres, const float* inp, const BlockActs& a);
  BlockWeights block_weights(const LayerParams& p) const;
  template <class TC>
  BlockScratch<TC> block_scratch() const;
  BlockDims block_dims() const;
  // Norm -> LM head -> loss over inp (N, C), the head in chunks of model.loss_chunk_tokens rows
  // (one (chunk, V) logits buffer); with `backward` also the LM head's weight gradient
  // (accumulated chunk by chunk in fp32, rounded once) and dxf (N, C). keep: copy the logits
  // there (N, V) fp32. Per-token losses land in `losses` (N) when `loss`.
  template <class TC>
  void head_forward(int norm, const float* inp, TC* xf, float* rstd, float* hidden_out,
                    float* losses, const int32_t* targets, bool loss, float scale, bool backward,
                    float* dxf, float* keep);
  // The mean of a head's per-token losses (N) over its `count` counted tokens, divided by `then`
  // (0 without counted tokens): read back, or (opts.loss_sums) added into `slot` on the device,
  // returning NaN.
  double mean_loss(const float* losses, int64_t count, const ForwardOptions& opts, int slot,
                   double then = 1.0);
  template <class TC>
  void mtp_forward(const ForwardOptions& opts, bool backward, ForwardResult* r);
  // LoRA (model/lora.cpp): registers the adapters of a block's targeted projections.
  void register_lora(LayerParams& p);
  // Adds the MTP head's gradient with respect to the main model's last residual into dres.
  template <class TC>
  void mtp_backward(float* dres);
  void accumulate(int param, const float* dw, Rounding round_dw);
  void flush_staged_grads();

  ExecSpace space_;  // the instance every kernel of the model runs on (the default one)
  ModelConfig cfg_;
  ResolvedPrecision prec_;
  Roundings round_;
  ParamRegistry params_;
  int embed_ = -1, final_norm_ = -1, lm_head_ = -1;  // lm_head_ == embed_ when tied
  std::vector<LayerParams> layers_;
  std::vector<MtpParams> mtp_;
  PeftConfig peft_;
  std::vector<Rounding> round_compute_;  // per parameter: its compute copy's rounding
  // Parameters with several gradient contributions per backward (the embedding when tied or
  // read by the MTP head, an untied LM head shared with MTP depths) sum them in fp32 here and
  // are rounded into their storage-dtype gradient once, at the end of backward().
  std::vector<DView<float>> staged_grad_;  // per parameter; empty when not staged
  // Units: 0 the embedding, 1..L the layers, then the head (final norm + untied LM head) and the
  // MTP head when there is one.
  SingleCommunicator single_;
  Communicator* comm_ = &single_;
  bool reshard_ = false;  // several ranks and reshard_after_forward
  std::unique_ptr<FsdpUnits> units_;
  int embed_unit_ = 0, head_unit_ = 0, mtp_unit_ = -1;
  bool sync_ = true;  // the pending backward reduces (ForwardOptions::sync_grads)
  DView<float> rope_cos_, rope_sin_;
  DView<float> hidden_;
  DView<float> kept_logits_;  // (B*T, V) of the last forward with keep_logits
  std::unique_ptr<Buffers> buf_;
  UploadStaging staging_;  // the micro-batches' ids and other host-made inputs, pinned
  // Mixture of experts: each layer's assignments per expert and summed router probabilities
  // from the last forward (host), and the load-balancing loss's gradient factor (E) for backward.
  std::vector<std::vector<int64_t>> moe_counts_;
  std::vector<std::vector<double>> moe_prob_sums_;
  DView<float> moe_aux_grad_;
  std::vector<std::vector<int32_t>> moe_choices_;
  // Expert parallelism: the group size, this rank's first expert, the group's communicator (the
  // token exchange) and that of the ranks holding the same experts (their shards' collectives),
  // and each layer's unit of this rank's experts (-1 when the experts are in the layer's unit).
  int ep_ = 1;
  int64_t expert0_ = 0;
  std::unique_ptr<Communicator> ep_comm_, edp_comm_;
  std::vector<int> expert_unit_;
  int64_t local_experts() const { return cfg_.moe.num_experts / ep_; }
  bool have_backward_ = false;
  bool last_compute_mtp_ = false;
  int64_t B_ = 0, T_ = 0;
};

}  // namespace kktrain
