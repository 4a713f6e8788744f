// Causal multi-head attention with grouped KV heads, on head-major tensors.
//
// Scores and probabilities are fp32 (B, H, T, T); the probabilities fed to the PV product are
// rounded to the compute dtype, as a bf16 autocast attention does. With GQA, query head h reads KV
// head h / (H / KV); K and V gradients sum over the heads of a group. The G = H / KV query heads
// of a (batch, KV head) group are one (G*T, D) block, so each product is a batched GEMM over
// groups: on GPUs one strided-batched call over all B*KV groups, on CPUs one group per call (its
// (G*T, T) scores stay in cache from the product through the softmax to the next products).
//
// The probabilities are not kept between forward and backward: the backward recomputes them with
// the same GEMMs and the same softmax launch (so the same values) into the same one-layer scratch.
// q, k, v, the output and dout are compute-dtype tensors (TC = float or bf16).
#pragma once

#include <cstdint>

namespace kktrain {

struct AttentionDims {
  int64_t B, T, H, KV, D;
  float scale;  // 1 / sqrt(D)
};

// Groups per batched call: B*KV on GPU builds, 1 on CPU builds. The pc and dp scratch hold
// attention_groups_per_call(d) * (H / KV) * T * T elements.
int64_t attention_groups_per_call(const AttentionDims& d);

// att (B, H, T, T) = causal_softmax(scale q k^T), fp32 scratch
// out (B, H, T, D) = rnd(rnd(att, rc) @ v, rc)
// pc_scratch (per-call groups, G*T, T) holds the rounded probabilities when rc (unused otherwise).
template <class TC>
void attention_forward(TC* out, float* att, TC* pc_scratch, const TC* q, const TC* k, const TC* v,
                       const AttentionDims& d, bool rc);

// From dout (B, H, T, D) (already in the compute dtype): dq (B, H, T, D), dk, dv (B, KV, T, D),
// fp32 sums rounded to the compute dtype at the end. The gradient of the probabilities (dP) and of
// the scores (dS, after the fp32 softmax backward) are rounded to the compute dtype, as the
// gradients of compute-dtype matmul outputs are under autocast. Scratch: att (B, H, T, T) (the
// recomputed probabilities), pc (when rc) and dp (per-call groups, G*T, T).
template <class TC>
void attention_backward(float* dq, float* dk, float* dv, float* att, TC* pc_scratch,
                        float* dp_scratch, const TC* dout, const TC* q, const TC* k, const TC* v,
                        const AttentionDims& d, bool rc);

}  // namespace kktrain
