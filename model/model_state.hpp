// The model as data (llm.c's one struct of parameters, activations and sizes): the parameters by
// role (indices into the registry, which holds every tensor), the roles' roundings, the unit
// layout over ranks and the working buffers. Each feature keeps its part here and works on it
// through free functions in its own file; model/transformer.cpp is the unit loop that calls them.
//
//   model/params.cpp        registration (canonical names, ties, protected fp32), roundings, init
//   model/dense_block.cpp   a decoder block: its parameters, weights, scratch, gradient routing
//   model/sparse_mlp.cpp    mixture of experts: experts, routing statistics, load-balancing
//                           loss, expert parallelism (SparseMlpState)
//   model/mtp_head.cpp      the multi-token-prediction head (MtpParams, MtpActs)
//   model/lora.cpp          LoRA adapters on a block's projections
//   model/lm_head.cpp       the embedding lookup; final norm -> LM head -> loss
//   model/units.cpp         units over ranks: layout, gather/reduce, boundary roundings, gradient
//                           accumulation
//   model/model_buffers.cpp the working buffers of a micro-batch shape, the batch upload
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/config.hpp"
#include "core/kokkos_compat.hpp"
#include "core/param_registry.hpp"
#include "core/upload_staging.hpp"
#include "model/block.hpp"
#include "model/model_types.hpp"
#include "parallel/communicator.hpp"
#include "parallel/fsdp.hpp"

namespace kktrain {

// A block's parameters (registry indices), projections in Proj order (model/block.hpp).
struct LayerParams {
  int ln1 = -1, q = -1, k = -1, v = -1, o = -1, ln2 = -1;
  // model.attention_bias: the q, k, v (one fused group) and o biases; model.qk_norm: the per-head
  // query and key norm weights (-1: the model has none).
  int q_bias = -1, k_bias = -1, v_bias = -1, o_bias = -1, q_norm = -1, k_norm = -1;
  // model.norm_placement sandwich / post: the norms of the attention's and the MLP's outputs
  // (ln1 and ln2, the sub-layers' input norms, are -1 where the placement has none).
  int attn_out_norm = -1, mlp_out_norm = -1;
  // The layer's sliding window (model.sliding_window, model.layer_types; 0: none) and whether
  // it rotates q and k (model.layer_rope).
  int64_t window = 0;
  LayerRope rope = LayerRope::rope;
  int gate = -1, up = -1, down = -1;  // the dense MLP (-1 in a sparse layer)
  // A sparse MLP (model.moe): the fp32 router, each expert's w1 (gate), w3 (up), w2 (down), and
  // the optional shared expert.
  int router = -1, shared_gate = -1, shared_up = -1, shared_down = -1;
  std::vector<int> w1, w3, w2;
  int lora_a[kNumProj] = {-1, -1, -1, -1, -1, -1, -1};  // LoRA adapters (model/lora.cpp)
  int lora_b[kNumProj] = {-1, -1, -1, -1, -1, -1, -1};
  int weight(int proj) const {
    const int w[kNumProj] = {q, k, v, o, gate, up, down};
    return w[proj];
  }
};

// A multi-token-prediction depth's parameters (model/mtp_head.cpp).
struct MtpParams {
  int enorm = -1, hnorm = -1, eh_proj = -1, norm = -1;
  LayerParams block;
};

// Mixture of experts (model/sparse_mlp.cpp): each layer's routing statistics from the last
// forward (host), the load-balancing loss's gradient factor for backward, and expert parallelism:
// the group size, this rank's first expert, the group's communicator (the token exchange) and
// that of the ranks holding the same experts (their shards' collectives), and each layer's unit
// of this rank's experts (-1 when the experts are in the layer's unit).
struct SparseMlpState {
  std::vector<std::vector<int64_t>> counts;    // per layer, (E) assignments per expert
  std::vector<std::vector<double>> prob_sums;  // per layer, (E) summed router probabilities
  std::vector<std::vector<int32_t>> choices;   // per layer, (N, K) with keep_routing
  DView<float> aux_grad;                       // (E) or empty
  int ep = 1;
  int64_t expert0 = 0;
  std::unique_ptr<Communicator> ep_comm, edp_comm;
  std::vector<int> expert_unit;
};

struct ModelBuffers;  // model/model_buffers.hpp

struct ModelState {
  ModelState(const ModelConfig& c, const ResolvedPrecision& p, const PeftConfig& f);
  ~ModelState();
  ModelConfig cfg;
  ResolvedPrecision prec;
  PeftConfig peft;
  Roundings round;
  ExecSpace space;   // the instance compute kernels run on
  GemmOptions gemm;  // how every matrix product runs (model.gemm, model.gemm_fp32)

  // Parameters by role (lm_head == embed when tied).
  ParamRegistry params;
  int embed = -1, final_norm = -1, lm_head = -1;
  std::vector<LayerParams> layers;
  std::vector<MtpParams> mtp;
  std::vector<Rounding> round_compute;  // per parameter: its compute copy's rounding
  // Parameters with several gradient contributions per backward (the embedding when tied or read
  // by the MTP head, an untied LM head shared with MTP depths) sum them in fp32 here and are
  // rounded into their storage-dtype gradient once, at the end of backward (one rank).
  std::vector<DView<float>> staged_grad;  // per parameter; empty when not staged

  // Units: 0 the embedding, 1..L the layers, then the head (final norm + untied LM head), the MTP
  // head when there is one, and under expert parallelism each layer's experts.
  SingleCommunicator single;
  Communicator* comm = &single;
  bool reshard = false;  // several ranks and reshard_after_forward
  std::unique_ptr<FsdpUnits> units;
  int embed_unit = 0, head_unit = 0, mtp_unit = -1;
  bool sync = true;  // the pending backward reduces (ForwardOptions::sync_grads)

  DView<float> rope_cos, rope_sin;  // (max_seq_len, R/2), R = model.rotary_dim
  // longrope's tables of the long factors (rope_cos/rope_sin hold the short ones): a batch whose
  // positions reach past original_max_position_embeddings uses these.
  DView<float> rope_cos_long, rope_sin_long;
  // model.rope_local_theta's tables, unscaled, for the layers model.layer_rope calls local.
  DView<float> rope_cos_local, rope_sin_local;
  std::unique_ptr<ModelBuffers> buf;  // the current micro-batch shape's
  UploadStaging staging;              // the micro-batches' ids and other host inputs, pinned
  SparseMlpState moe;

  int64_t local_experts() const { return cfg.moe.num_experts / moe.ep; }
  // Full compute weights: typed (GEMM operands, the embedding) and fp32 (norm weights).
  CRef w(int param) const { return units->compute_weight(param); }
  const float* wf(int param) const { return units->weight(param); }
};

}  // namespace kktrain
