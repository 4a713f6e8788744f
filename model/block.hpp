// One transformer block and its LoRA adapters as free functions over explicit buffers (llm.c's
// layer_forward(out, in..., dims) style): the caller passes the compute weights, the activations
// kept for backward, the scratch, the sizes, and where the weight gradients go. Transformer only
// orchestrates: it gathers the weights, owns the buffers and routes the gradients.
//
//   x1 = x + o_proj(attention(rope(qk_norm(qkv_proj(rmsnorm(x))))))
//        (qkv_proj and o_proj with biases under model.attention_bias; qk_norm, each query and key
//        head's RMSNorm or the whole projection's, under model.qk_norm: a plain norm's weight
//        multiply is done by the rotary kernel)
//   out = x1 + down_proj(act(gate_proj(h)) * up_proj(h)),  h = rmsnorm(x1), act SiLU or GELU
//         or x1 + the sparse MLP of h (mixture of experts, model/moe.hpp)
//   model.norm_placement sandwich (Gemma) adds a norm on each sub-layer's output before its
//   residual add, x1 = x + rmsnorm(o_proj(...)); post (OLMo 2) keeps only those (no rmsnorm(x),
//   h = x1).
//   each projection y = x W^T [+ (alpha / r) (x A^T) B^T with a LoRA adapter]
//
// TC is the compute dtype's container (bf16 when the compute dtype is bf16, else float): the
// outputs of matmuls, attention and SwiGLU are stored in it directly, so a GEMM's fp32 result is
// rounded exactly once, on its store. Gradients that sum a GEMM and LoRA contributions stay fp32
// until their one rounding.
#pragma once

#include <cstdint>

#include "core/bf16.hpp"
#include "core/dtype.hpp"
#include "core/kokkos_compat.hpp"
#include "model/moe.hpp"
#include "ops/attention.hpp"
#include "ops/gemm.hpp"
#include "ops/kernels.hpp"
#include "ops/tbuf.hpp"

namespace kktrain {

// The seven projections of a block, in the order of their weights. Phi-3's fused qkv_proj is
// kQ (kK and kV absent), its gate_up_proj kGate (kUp absent).
enum Proj { kQ, kK, kV, kO, kGate, kUp, kDown, kNumProj };

// The block's weights as gradient destinations: the two norms, the seven projections, and the
// A and B matrices of each projection's adapter.
enum BlockWeight {
  kLn1,
  kLn2,
  kProj0,                        // kProj0 + proj
  kLoraA0 = kProj0 + kNumProj,   // kLoraA0 + proj
  kLoraB0 = kLoraA0 + kNumProj,  // kLoraB0 + proj
  kQBias = kLoraB0 + kNumProj,   // model.attention_bias
  kKBias,
  kVBias,
  kOBias,
  kQNorm,  // model.qk_norm
  kKNorm,
  kAttnOutNorm,  // model.norm_placement sandwich / post: the sub-layers' output norms
  kMlpOutNorm,
  kNumBlockWeights
};

// Sizes and the residual-stream rounding of one block over a micro-batch of B sequences of T
// tokens (the compute dtype is the passes' template parameter TC).
struct BlockDims {
  int64_t B, T, C, H, KV, D, F;
  float eps;                // RMSNorm epsilon
  Rounding stream;          // the residual-stream dtype
  float attn_scale = 0.0f;  // the attention's score scale (0: 1 / sqrt(D))
  int64_t window = 0;       // the layer's sliding window (AttentionDims::window; 0: none)
  float softcap = 0.0f;     // the scores' soft cap (AttentionDims::softcap; 0: none)
  NormForm norm;            // every norm's weight multiply (model.norm_weight)
  NormPlacement placement = NormPlacement::pre;    // model.norm_placement
  MlpActivation activation = MlpActivation::silu;  // model.mlp_activation
  QkNorm qk_norm = QkNorm::none;                   // model.qk_norm's rows
  int64_t R = 0;  // the rotated values of each query and key head (model.rotary_dim; 0: D)
  // Phi-3's fused projections: one adapter on qkv_proj (the kQ slot, (Q) wide) and one on
  // gate_up_proj (the kGate slot, 2F wide) instead of one per q, k, v and gate, up.
  bool fused = false;
  MoeDims moe;  // a sparse MLP in place of the dense one when moe.enabled() (model/moe.hpp)
  // Packed rows (ForwardOptions::row_starts): (B, T) example starts on the device and the host
  // (AttentionDims::starts, host_starts); null: every row is one sequence.
  const int32_t* starts = nullptr;
  const int32_t* host_starts = nullptr;
  // Shared prefixes (ForwardOptions::row_gaps): (B, T, 2) gaps (AttentionDims::gaps) and the
  // (B, T) starts rotary positions count from (null: starts).
  const int32_t* gaps = nullptr;
  const int32_t* rope_starts = nullptr;
  AttentionOptions attention{};  // the attention's kernel and tiles (AttentionDims::options)
  GemmOptions gemm{};            // how the block's products run (model.gemm, model.gemm_fp32)
  int64_t N() const { return B * T; }
  int64_t Q() const { return (H + 2 * KV) * D; }
};

// A LoRA adapter's compute weights: A (r, in), B (out, r), scale alpha / r. No data: no adapter.
struct LoraWeights {
  CRef a, b;
  int64_t r = 0;
  float scale = 0.0f;
  bool present() const { return a.data != nullptr; }
};

// The compute weights one block reads (full, gathered; each GEMM weight in its compute-copy
// dtype), and the rotary tables.
struct BlockWeights {
  const float* ln1 = nullptr;  // (C) fp32; null: no input norm (model.norm_placement post)
  const float* ln2 = nullptr;  // (C) the MLP's input norm; null likewise
  const float* attn_out_norm = nullptr;  // (C) sandwich / post: the attention output's norm
  const float* mlp_out_norm = nullptr;   // (C) the MLP output's
  CRef qkv;                              // (Q, C): q, k, v rows adjacent
  CRef o;                                // (C, H*D)
  CRef gate_up;                          // (2F, C): gate, up rows adjacent
  CRef down;                             // (C, F)
  LoraWeights lora[kNumProj];
  MoeWeights moe;                   // a sparse MLP's (gate_up and down unused)
  const float* rope_cos = nullptr;  // (T_max, R/2); null: no rotation (model.layer_rope none)
  const float* rope_sin = nullptr;
  CRef qkv_bias;                  // (Q) q, k, v biases adjacent (no data: none)
  CRef o_bias;                    // (C)
  const float* q_norm = nullptr;  // (D) per-head query norm weight, (H*D) whole (null: none)
  const float* k_norm = nullptr;  // (D), (KV*D)
};

// What one block keeps from its forward for its backward (shapes with N = B*T tokens).
struct BlockActs {
  DView<float> rstd1;    // (N)           fp32
  TBuf xn1;              // (N, C)        attention-norm output, compute dtype
  TBuf qk_pre;           // (N, H+KV, D)  query and key heads before their norm (model.qk_norm)
  DView<float> qk_rstd;  // (N, H+KV)   their norm statistics
  TBuf q;                // (B, H, T, D)  rotated queries, compute dtype
  TBuf k;                // (B, KV, T, D) rotated keys
  TBuf v;                // (B, KV, T, D) values
  DView<float> lse;      // (B, H, T)     log-sum-exp of each attention row's scores, fp32
  TBuf o;                // (N, H*D)      attention output in token layout, compute dtype
  DView<float> x1;       // (N, C)        residual after attention, stream dtype
  DView<float> rstd2;    // (N)
  TBuf xn2;              // (N, C)        MLP-norm output, compute dtype
  TBuf gu;               // (N, 2F)       [gate | up] projections, compute dtype
  TBuf a;                // (N, F)        silu(gate) * up, compute dtype
  MoeActs moe;           // a sparse MLP's instead of gu and a
  // model.norm_placement sandwich / post: each sub-layer's output (the compute-dtype value,
  // widened) before its norm, and that norm's statistics.
  DView<float> attn_out, rstd3;  // (N, C), (N)
  DView<float> mlp_out, rstd4;   // (N, C), (N)
  // The attention probabilities are never kept: backward recomputes each tile's from q, k and
  // lse (ops/attention.hpp), so no (B, H, T, T) tensor exists.
};

// The block's scratch, reused by every block (device pointers; sizes with N = B*T tokens).
template <class TC>
struct BlockScratch {
  TC* qkv;                        // (N, Q)
  TC* proj;                       // (N, C)
  AttentionScratch<TC> att;       // the tiled attention's tiles and row statistics
  TC* dc;                         // (N, C) the stream gradient in the compute dtype
  TC* dgu;                        // (N, 2F)
  float* da;                      // (N, F) fp32 until its one rounding
  TC* dqkv;                       // (N, Q)
  float *dq, *dk, *dv;            // head layout, fp32
  float* dtok;                    // (N, H*D)
  TC* dheads;                     // (B, H, T, D)
  float* dxn;                     // (N, C) norm-output gradient (GEMM + LoRA contributions)
  float* dbranch;                 // (N, C) sandwich / post: a sub-layer output's gradient
  float* dw;                      // the largest weight (group) gradient, one at a time
  float* norm_partial;            // rmsnorm_partial_size(N, C)
  TC *lora_t, *lora_dt, *lora_y;  // (N, r), (N, r), (N, widest projection output)
  MoeScratch<TC> moe;             // a sparse MLP's
};

// Where a block's weight gradients go. trainable(w): compute w's gradient at all; accumulate(w,
// dw): dw (numel of w, fp32) is w's gradient from this backward (the receiver rounds it to the
// dtype it was computed in and adds it to the parameter's).
class BlockGrads {
 public:
  virtual ~BlockGrads() = default;
  virtual bool trainable(int weight) const = 0;
  virtual void accumulate(int weight, const float* dw) = 0;
};

// out (N, C) from inp (N, C); fills `a` for the backward.
template <class TC>
void block_forward(const ExecSpace& space, float* out, const float* inp, BlockActs& a,
                   const BlockWeights& w, const BlockScratch<TC>& s, const BlockDims& d);
// dres (N, C): gradient of the block output on entry, of the block input on return; weight
// gradients to `grads`.
template <class TC>
void block_backward(const ExecSpace& space, float* dres, const float* inp, const BlockActs& a,
                    const BlockWeights& w, const BlockScratch<TC>& s, const BlockDims& d,
                    BlockGrads& grads);

// y (N, out) at column col of rows ld wide += the adapter's output for x (N, in):
// t = rnd(x A^T), delta = rnd(t B^T), y = rnd(y + rnd(delta * scale)) (PEFT under autocast).
// t (N, r) and delta (N, out) are scratch. No-op without an adapter.
template <class TC>
void lora_forward(const ExecSpace& space, const GemmOptions& gemm, TC* y, int64_t ld, int64_t col,
                  const TC* x, const LoraWeights& l, int64_t N, int64_t in, int64_t out, TC* t,
                  TC* delta);
// From the projection's output gradient dy (rows ld wide, at column col): the adapter's weight
// gradients to grads (weights wa, wb), and dx (N, in) += the input gradient through the adapter
// (fp32, unrounded). t, dt (N, r), g (N, out) and dw (out * r or r * in) are scratch.
template <class TC>
void lora_backward(const ExecSpace& space, const GemmOptions& gemm, float* dx, const TC* dy,
                   int64_t ld, int64_t col, const TC* x, const LoraWeights& l, int64_t N,
                   int64_t in, int64_t out, TC* t, TC* dt, TC* g, float* dw, BlockGrads& grads,
                   int wa, int wb);

}  // namespace kktrain
