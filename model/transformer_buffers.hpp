// Activation and scratch buffers of the Transformer, private to model/. Sized for one
// micro-batch shape (B, T) and reallocated when the shape changes.
#pragma once

#include <vector>

#include "core/kokkos_compat.hpp"
#include "model/transformer.hpp"

namespace kktrain {

// What one block keeps from its forward for its backward (shapes with N = B*T tokens).
struct Transformer::LayerActs {
  DView<float> rstd1;  // (N)           fp32
  DView<float> xn1;    // (N, C)        attention-norm output, compute dtype
  DView<float> q;      // (B, H, T, D)  rotated queries, compute dtype
  DView<float> k;      // (B, KV, T, D) rotated keys
  DView<float> v;      // (B, KV, T, D) values
  DView<float> att;    // (B, H, T, T)  softmax probabilities, fp32
  DView<float> o;      // (N, H*D)      attention output in token layout, compute dtype
  DView<float> x1;     // (N, C)        residual after attention, stream dtype
  DView<float> rstd2;  // (N)
  DView<float> xn2;    // (N, C)        MLP-norm output, compute dtype
  DView<float> gu;     // (N, 2F)       [gate | up] projections, compute dtype
  DView<float> a;      // (N, F)        silu(gate) * up, compute dtype
};

// The multi-token-prediction head's per-depth activations.
struct MtpActs {
  DView<int32_t> ids, targets;          // (N) shifted inputs / targets (-1 where unavailable)
  DView<int32_t> row_start, positions;  // CSR of ids by token value (embedding backward)
  DView<float> emb;                     // (N, C) embedding lookup, stream dtype
  DView<float> rstd_e, rstd_h;          // (N)
  DView<float> cat;                     // (N, 2C) [enorm(emb) | hnorm(h_prev)], compute dtype
  DView<float> h_in;                    // (N, C) eh_proj output = block input, stream dtype
  DView<float> h_out;                   // (N, C) block output
  DView<float> xf, rstd_f;              // (N, C), (N) final norm of this depth
  DView<float> dxf;                     // (N, C) gradient of xf (LM head backward, at forward)
  DView<float> losses;                  // (N)
  double loss = 0.0;
  int64_t count = 0;
};

struct Transformer::Buffers {
  int64_t B = 0, T = 0;
  DView<int32_t> ids, targets;          // (N)
  DView<int32_t> row_start, positions;  // (V + 1), (N): token positions grouped by id
  int64_t count = 0;                    // non-ignored targets
  std::vector<DView<float>> res;        // L + 1 residual-stream tensors (N, C)
  std::vector<LayerActs> acts;          // L blocks (1 shared set with checkpointing)
  DView<float> recompute_out;           // (N, C) block output during recompute
  DView<float> qkv;                     // (N, (H + 2 KV) * D)
  DView<float> oheads;                  // (B, H, T, D)
  DView<float> proj;                    // (N, C)
  DView<float> pc, dp;                  // (T, T) per-head scratch
  DView<float> xf, rstd_f, losses;      // (N, C), (N), (N) final norm and per-token loss
  DView<float> dxf;                     // (N, C) gradient of xf, computed right after the loss
  // backward scratch
  DView<float> dw;             // largest weight (group): one dW at a time
  DView<float> dres, dc, dxn;  // (N, C)
  DView<float> dgu, da;        // (N, 2F), (N, F)
  DView<float> dqkv;           // (N, (H + 2 KV) * D)
  DView<float> dq, dk, dv;     // head layout
  DView<float> dtok;           // (N, H * D)
  DView<float> dheads;         // (B, H, T, D)
  // MTP only: (N, 2C) eh_proj input gradient; (N, C) gradients of h_out/h_prev, the two normed
  // halves, and the embedding lookup; (N, V) logits of the current depth.
  DView<float> dcat, dh, dh_prev, den, dhn, demb, mtp_logits;
  DView<float> en, hn;  // (N, C) MTP forward: the two normed halves
  // LoRA scratch: (N, r) adapter activations and their gradient; (N, out) delta / gradient.
  DView<float> lora_t, lora_dt, lora_y;
  std::vector<MtpActs> mtp;          // one per MTP depth
  std::vector<LayerActs> mtp_block;  // one per MTP depth
};

}  // namespace kktrain
