// A Llama-style decoder (Hugging Face LlamaForCausalLM semantics) with hand-written forward and
// backward passes on Kokkos.
//
//   embed -> L x [ RMSNorm -> GQA attention (rotary, causal) -> + residual,
//                  RMSNorm -> SwiGLU MLP -> + residual ] -> RMSNorm -> LM head -> cross-entropy
//
// The model is data (model/model_state.hpp: parameters by role, buffers, the unit layout) with each
// feature in its own file of free functions; this class is the unit loop that calls them.
//
// Parameters live in a ParamRegistry under their canonical names, resident in their storage
// dtype, sharded along dim 0 over the ranks (FSDP2, parallel/fsdp.hpp). The model runs in units
// (the embedding; each decoder layer; the final norm + LM head; the MTP head): before a unit runs
// its weights are gathered into a compute buffer in the compute dtype (2-byte bf16 when it is bf16;
// norm weights and model-protected fp32 parameters fp32), with q/k/v and gate/up adjacent so they
// are single fused GEMMs; on one rank a parameter whose storage already is its compute copy is
// used in place, and the others are cast one unit at a time. Activations of compute-dtype tensors
// are bf16 Views when the compute dtype is bf16 (model/model_buffers.hpp). Weight gradients
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
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/param_registry.hpp"
#include "model/model_state.hpp"
#include "model/model_types.hpp"
#include "model/preference_loss.hpp"
#include "model/units.hpp"

namespace kktrain {

template <class TC>
struct HeadTensors;  // model/lm_head.hpp

// When the constructor lays the model out: at once on one rank, or after freezing (prepare()).
enum class Allocation : uint8_t { one_rank_now, after_prepare };

class Transformer {
 public:
  // Registers the parameters (names, shapes, dtypes); Allocation::one_rank_now also prepares a
  // one-rank model ready to run, otherwise call prepare() after setting trainability.
  Transformer(const ModelConfig& cfg, const ResolvedPrecision& precision,
              Allocation allocation = Allocation::one_rank_now,
              const PeftConfig& peft = PeftConfig());
  // After freezing: lays the parameters out for opts.comm's rank and size (plan_layout), then
  // allocates storage, gradients of the trainable parameters and the unit machinery.
  void prepare(const ShardOptions& opts);
  // After freezing, without allocating (planning tools such as the audit): on several ranks
  // lowers frozen ordinary parameters to the compute dtype and shards the registry for rank
  // `rank` of `world`, which must be the world size the precision was resolved for.
  void plan_layout(int rank, int world, int expert_parallel = 1);
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;

  const ModelConfig& config() const { return s_.cfg; }
  ParamRegistry& params() { return s_.params; }
  const ParamRegistry& params() const { return s_.params; }
  // The roles' roundings, fixed when the model is built.
  const Roundings& roundings() const { return s_.round; }

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
  DView<float> hidden_states() const;
  DView<float> logits() const { return kept_logits_; }
  // (B*T, top_k) experts each token of layer l chose, best first, in the last forward with
  // keep_routing (empty otherwise or for a dense model).
  const std::vector<int32_t>& routing(int64_t layer) const { return s_.moe.choices.at(layer); }
  // Per pair of the last forward with ForwardOptions::pairs and no loss_sums: what its loss gave
  // (host values), in the order of PairBatch::pairs.
  const std::vector<PairResult>& pair_results() const { return pair_host_; }
  int64_t mtp_depth() const { return s_.cfg.mtp_num_layers; }

  // The activation and scratch buffers a forward + backward of micro-batch (B, T) allocates, by
  // the same code that allocates them (nothing is allocated here).
  std::vector<BufferSpec> buffer_plan(int64_t B, int64_t T) const;
  // The bytes of each host-to-device upload of one training micro-batch (B, T), in the order
  // the batch upload and the load-balancing loss issue them: what the pinned staging holds.
  std::vector<std::size_t> upload_plan(int64_t B, int64_t T) const;
  // The unit machinery's buffers (FsdpUnits::plan: "compute_weights" slots; "units": gradient
  // slots, wires, accumulators) and the model-level fp32 buffers prepare() allocates ("model":
  // staged gradients, rope tables), for the layout set by plan_layout() or prepare(); nothing is
  // allocated.
  std::vector<BufferSpec> unit_buffer_plan(const UnitPlanOptions& o) const;
  // How each parameter's compute copy is held (dtype, rounding, fused groups).
  ComputeLayout compute_layout() const;
  // The units, for buffer accounting and tests (valid after prepare(allocate = true)).
  const FsdpUnits& units() const { return *s_.units; }
  // Traffic of the expert-parallel communicators (docs/moe.md) since prepare(): the token
  // all-to-alls, and everything they sent (the all-to-alls and the experts' shard collectives).
  CommStats moe_comm_stats() const;

 private:
  // The passes, templates over TC, the compute dtype's container (bf16 or float): the embedding
  // and the layers, the head (and MTP head), and the backward through them in reverse.
  // What a forward computes, from its options and whether it has targets.
  struct ForwardPlan {
    bool loss = false;  // logits and the loss
    Pass pass = Pass::forward_only;
    bool mtp = false;  // the MTP head too
  };
  template <class TC>
  ForwardResult forward_impl(const int32_t* targets, const ForwardOptions& opts);
  template <class TC>
  void forward_layers(const ForwardOptions& opts, const ForwardPlan& plan);
  template <class TC>
  void forward_heads(const ForwardOptions& opts, const ForwardPlan& plan, ForwardResult* r);
  template <class TC>
  void backward_impl();
  template <class TC>
  void backward_layers();

  ModelState s_;
  DView<float> kept_logits_;  // (B*T, V) of the last forward with keep_logits
  // Preference pairs (ForwardOptions::pairs): the pairs' spans, each token loss's gradient weight
  // (B*T), the per-pair results (P x kPairResultColumns) and their host copies.
  DView<PairSpan> pair_spans_;
  DView<float> pair_scale_;
  DView<double> pair_out_;
  std::vector<PairResult> pair_host_;
  template <class TC>
  void pair_head(const ForwardOptions& opts, const ForwardPlan& plan, HeadTensors<TC>& h,
                 ForwardResult* r);
  bool have_backward_ = false;
  bool last_compute_mtp_ = false;
};

}  // namespace kktrain
