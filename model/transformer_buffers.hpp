// Activation and scratch buffers of the Transformer, private to model/. Sized for one
// micro-batch shape (B, T) and reallocated when the shape changes.
#pragma once

#include <vector>

#include "core/bf16.hpp"
#include "core/kokkos_compat.hpp"
#include "model/transformer.hpp"

namespace kktrain {

// The multi-token-prediction head's per-depth activations.
struct MtpActs {
  DView<int32_t> ids, targets;          // (N) shifted inputs / targets (-1 where unavailable)
  DView<int32_t> row_start, positions;  // CSR of ids by token value (embedding backward)
  DView<float> emb;                     // (N, C) embedding lookup, stream dtype
  DView<float> rstd_e, rstd_h;          // (N)
  TBuf cat;                             // (N, 2C) [enorm(emb) | hnorm(h_prev)], compute dtype
  DView<float> h_in;                    // (N, C) eh_proj output = block input, stream dtype
  DView<float> h_out;                   // (N, C) block output
  TBuf xf;                              // (N, C) final norm of this depth, compute dtype
  DView<float> rstd_f;                  // (N)
  DView<float> dxf;                     // (N, C) gradient of xf (LM head backward, at forward)
  DView<float> losses;                  // (N)
  int64_t count = 0;
};

struct Transformer::Buffers {
  int64_t B = 0, T = 0;
  DView<int32_t> ids, targets;          // (N)
  DView<int32_t> row_start, positions;  // (V + 1), (N): token positions grouped by id
  int64_t count = 0;                    // non-ignored targets
  std::vector<DView<float>> res;        // L + 1 residual-stream tensors (N, C)
  std::vector<BlockActs> acts;          // L blocks (1 shared set with checkpointing)
  DView<float> recompute_out;           // (N, C) block output during recompute
  TBuf qkv;                             // (N, (H + 2 KV) * D)  compute dtype
  TBuf proj;                            // (N, C)               compute dtype
  // The tiled attention's workspace (ops/attention.hpp: attention_workspace_sizes): fp32 tiles
  // of scores and their gradients, their compute-dtype copies (rc), the forward's output
  // accumulator and row statistics, and delta (B, H, T).
  DView<float> att_scores, att_dprobs, att_out_acc, att_row_max, att_row_sum, att_delta;
  TBuf att_probs, att_dscores;
  TBuf xf;                      // (N, C) final norm output, compute dtype
  DView<float> rstd_f, losses;  // (N), (N) final norm statistics and per-token loss
  // (chunk, V) compute dtype: one chunk of model.loss_chunk_tokens rows at a time, dlogits in
  // place after the loss; shared by the main and the MTP heads.
  TBuf logits;
  DView<float> hidden;  // (N, C) final hidden states (output_hidden_states)
  DView<float> dxf;     // (N, C) gradient of xf, computed right after the loss
  // backward scratch
  DView<float> dw;            // largest weight (group): one dW at a time
  DView<float> norm_partial;  // RMSNorm weight-gradient chunk sums (rmsnorm_partial_size)
  DView<float> dres, dxn;     // (N, C) fp32: the stream gradient; GEMM + LoRA input gradients
  TBuf dc;                    // (N, C) the stream gradient rounded to the compute dtype
  TBuf dgu;                   // (N, 2F) compute dtype
  DView<float> da;            // (N, F) fp32 until its one rounding (GEMM + LoRA contributions)
  TBuf dqkv;                  // (N, (H + 2 KV) * D) compute dtype
  DView<float> dq, dk, dv;    // head layout, fp32 sums over a KV group's heads
  DView<float> dtok;          // (N, H * D) fp32 (GEMM + LoRA contributions)
  TBuf dheads;                // (B, H, T, D) compute dtype
  // MTP only: (N, 2C) eh_proj input gradient; (N, C) gradients of h_out/h_prev, the two normed
  // halves, and the embedding lookup.
  DView<float> dcat, dh, dh_prev, den, dhn, demb;
  TBuf en, hn;  // (N, C) MTP forward: the two normed halves, compute dtype
  // A sparse MLP's scratch (model/moe.hpp MoeScratch): (N, E) logits, (N, C) fp32 combine and
  // shared-expert output; backward (NK, C) expert-output gradient, (NK, F) fp32, (NK, 2F),
  // (NK, C) fp32, (NK) combine-weight and (N, E) router-logit gradients; the shared expert's.
  DView<float> moe_logits, moe_y, moe_da, moe_dweight, moe_dlogits, moe_sda;
  TBuf moe_sy, moe_dye, moe_dxs, moe_dh, moe_sdgu;
  // Expert parallelism: the local experts' rows (model/moe.hpp MoeScratch).
  TBuf moe_ye_local, moe_dye_local, moe_dx_local, moe_peer;
  // LoRA scratch: (N, r) adapter activations and their gradient; (N, out) delta / gradient.
  TBuf lora_t, lora_dt, lora_y;
  std::vector<MtpActs> mtp;          // one per MTP depth
  std::vector<BlockActs> mtp_block;  // one per MTP depth
};

}  // namespace kktrain
