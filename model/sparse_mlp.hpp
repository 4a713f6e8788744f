// The mixture-of-experts feature of the model (Mixtral semantics, docs/moe.md): its parameters
// in a block, its routing state (SparseMlpState in model/model_state.hpp), the load-balancing
// loss, expert parallelism (each rank holds E / P experts of every layer, in units of their own)
// and its buffers. The sparse MLP's math is model/moe.hpp; the block calls it in place of the
// dense MLP (model/block.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "model/model_state.hpp"
#include "model/moe.hpp"

namespace kktrain {

class BufferMaker;
struct ModelBuffers;

// A sparse MLP's scratch, reused by every layer: (N, E) logits, (N, C) fp32 combine and
// shared-expert output; backward (NK, C) expert-output gradient, (R, F) fp32, (R, 2F), (NK, C),
// (NK) combine-weight and (N, E) router-logit gradients; the shared expert's; under expert
// parallelism the local experts' rows (MoeScratch).
struct SparseMlpBuffers {
  DView<float> logits, y, da, dweight, dlogits, sda;
  TBuf sy, dye, dxs, dh, sdgu;
  TBuf ye_local, dye_local, dx_local, peer;
};

// Registers the router, every expert's w1, w3 (back to back, expert after expert) then every w2,
// and the shared expert, into p under `prefix`.block_sparse_moe (Hugging Face Mixtral names).
void register_sparse_mlp(ModelState& s, LayerParams& p, const std::string& prefix, DType dtype);
// One routing-statistics slot per layer (after the layers are registered).
void size_routing_state(ModelState& s);
// Expert parallelism over groups of ep consecutive ranks: the owner of each expert's parameters,
// this rank's first expert (before sharding).
void assign_experts(ModelState& s, int rank, int world, int ep);
// The group communicators (collective over s.comm, the same order on every rank).
void connect_expert_groups(ModelState& s);
// Each layer's unit of this rank's experts (under expert parallelism), after the others.
void assign_expert_units(ModelState& s);

// This rank's experts of a layer in their compute-buffer order: w1, w3 interleaved (one
// (El, 2F, C) stack), then the w2 (El, C, F).
std::vector<int> expert_params(const ModelState& s, const LayerParams& p);
// The sparse MLP's parameters in the layer's unit: the router, the experts (unless they have
// units of their own) and the shared expert.
void append_sparse_unit_params(const ModelState& s, const LayerParams& p, std::vector<int>* v);
// The fused compute groups: the w1/w3 stack, the w2 stack, the shared expert's gate/up.
std::vector<std::vector<int>> sparse_fused_groups(const ModelState& s, const LayerParams& p);

MoeWeights sparse_mlp_weights(const ModelState& s, const LayerParams& p);
MoeDims sparse_mlp_dims(const ModelState& s, int64_t N);
template <class TC>
MoeScratch<TC> sparse_mlp_scratch(const ModelBuffers& b);
// The registry index of a sparse-MLP gradient destination (model/moe.hpp MoeWeight), or -2 when
// `weight` is not one.
int sparse_mlp_param(const ModelState& s, const LayerParams& p, int weight);

void make_sparse_mlp_acts(BufferMaker& mk, MoeActs& m, int64_t N, int64_t C, const MoeConfig& e,
                          int64_t ep);
void make_sparse_mlp_buffers(BufferMaker& mk, SparseMlpBuffers& b, int64_t N, int64_t C,
                             const MoeConfig& e, int64_t ep);

// After layer l's forward: its routing statistics (and RoutingCopy::with_choices its chosen
// experts) to the host for the load-balancing loss (host waits, cause routing).
void keep_routing(ModelState& s, int64_t l, const MoeActs& a, RoutingCopy copy);
// The load-balancing loss of this forward pooled over the layers, and (backward) the per-expert
// gradient factor the layers' backward adds (s.moe.aux_grad).
double moe_aux_loss(ModelState& s, float grad_scale, Pass pass);
// Traffic of the expert-parallel communicators since they were made.
CommStats moe_comm_stats(const ModelState& s);

}  // namespace kktrain
