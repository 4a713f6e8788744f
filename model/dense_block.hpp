// The decoder block as a feature of the model: its parameters (attention, norms, and the dense
// MLP or model/sparse_mlp.hpp's), its unit membership and fused compute groups, its activations,
// and running it (model/block.hpp's layer functions) with the model's gathered weights, this
// micro-batch's buffers and sizes, its weight gradients routed to the parameters they belong to.
#pragma once

#include <string>
#include <vector>

#include "model/model_state.hpp"

namespace kktrain {

// Registers a block under `prefix` (model.layers.<l>, or an MTP depth's): input_layernorm,
// self_attn.{q,k,v,o}_proj, post_attention_layernorm and mlp.{gate,up,down}_proj (or the sparse
// MLP's parameters). q, k, v and gate, up are registered back to back: their compute copies are
// single fused matrices (model.family phi3: one parameter each, self_attn.qkv_proj in q's place
// and mlp.gate_up_proj in gate's; LayerParams k, v, up are -1).
LayerParams register_block(ModelState& s, const std::string& prefix, DType dtype);
// The attention's kernel and tile sizes of model.attention and model.attention_tiles (auto: the
// build's kernel).
AttentionOptions attention_options(const ModelConfig& m);
// How the model's matrix products run: model.gemm (auto: native bf16 products; widened) and
// model.gemm_fp32 (auto, kokkos-kernels, onednn), with the production limits.
GemmOptions gemm_options(const ModelConfig& m);
// The block's parameters in its unit (LoRA adapters included).
std::vector<int> block_unit_params(const ModelState& s, const LayerParams& p);
// The block's fused compute groups (q/k/v, gate/up or the sparse MLP's).
std::vector<std::vector<int>> block_fused_groups(const ModelState& s, const LayerParams& p);

class BufferMaker;
// One block's activations (a sparse MLP's in a sparse layer); ep: expert-parallel group size.
void make_block_acts(BufferMaker& mk, BlockActs& a, int64_t B, int64_t T, const ModelConfig& c,
                     int64_t ep);

// out (N, C) from inp (N, C); fills `a` for the backward.
template <class TC>
void run_block_forward(ModelState& s, const LayerParams& p, float* out, const float* inp,
                       BlockActs& a);
// dres (N, C): gradient of the block output on entry, of the block input on return.
template <class TC>
void run_block_backward(ModelState& s, const LayerParams& p, float* dres, const float* inp,
                        const BlockActs& a);

}  // namespace kktrain
