#include "model/attention.hpp"

#include <type_traits>

#include "core/bf16.hpp"
#include "model/gemm.hpp"
#include "model/kernels.hpp"

namespace kktrain {

namespace {

// att (B, H, T, T) = causal_softmax(scale q k^T): scores for every head, then one softmax launch
// over all B*H*T rows. Forward and backward call this, so both see the same probabilities.
template <class TC>
void attention_probs(float* att, const TC* q, const TC* k, const AttentionDims& d) {
  const int64_t T = d.T, D = d.D, group = d.H / d.KV;
  for (int64_t b = 0; b < d.B; ++b) {
    for (int64_t h = 0; h < d.H; ++h) {
      const int64_t bh = b * d.H + h, bkv = b * d.KV + h / group;
      // att_bh (T, T) = scale * q_bh (T, D) @ k_bkv (T, D)^T
      gemm('N', 'T', d.scale, gin(q + bh * T * D, T, D), gin(k + bkv * T * D, T, D), 0.0f,
           gout(att + bh * T * T, T, T));
    }
  }
  causal_softmax_forward(att, d.B * d.H, T);
}

}  // namespace

template <class TC>
void attention_forward(TC* out, float* att, TC* pc_scratch, const TC* q, const TC* k, const TC* v,
                       const AttentionDims& d, bool rc) {
  const int64_t T = d.T, D = d.D, group = d.H / d.KV;
  attention_probs(att, q, k, d);
  for (int64_t b = 0; b < d.B; ++b) {
    for (int64_t h = 0; h < d.H; ++h) {
      const int64_t bh = b * d.H + h, bkv = b * d.KV + h / group;
      const TC* p = compute_copy(pc_scratch, att + bh * T * T, T * T, rc);
      // out_bh (T, D) = p (T, T) @ v_bkv (T, D), rounded once when out is bf16
      gemm('N', 'N', 1.0f, gin(p, T, T), gin(v + bkv * T * D, T, D), 0.0f,
           gout(out + bh * T * D, T, D));
    }
  }
  if constexpr (std::is_same<TC, float>::value) {  // fp32 containers: round after the sum
    if (rc) round_copy(out, out, d.B * d.H * T * D, true);
  }
}

template <class TC>
void attention_backward(float* dq, float* dk, float* dv, float* att, TC* pc_scratch,
                        float* dp_scratch, const TC* dout, const TC* q, const TC* k, const TC* v,
                        const AttentionDims& d, bool rc) {
  const int64_t T = d.T, D = d.D, group = d.H / d.KV;
  attention_probs(att, q, k, d);
  for (int64_t b = 0; b < d.B; ++b) {
    for (int64_t kv = 0; kv < d.KV; ++kv) {
      const int64_t bkv = b * d.KV + kv;
      for (int64_t j = 0; j < group; ++j) {
        const int64_t h = kv * group + j, bh = b * d.H + h;
        // The first head of a group writes dK/dV, the others accumulate (fp32 sums).
        const float beta = j == 0 ? 0.0f : 1.0f;
        const TC* p = compute_copy(pc_scratch, att + bh * T * T, T * T, rc);
        const TC* go = dout + bh * T * D;
        // dv_bkv (T, D) += pc^T (T, T) @ dout_bh (T, D)
        gemm('T', 'N', 1.0f, gin(p, T, T), gin(go, T, D), beta, gout(dv + bkv * T * D, T, D));
        // dp (T, T) = dout_bh (T, D) @ v_bkv^T, the gradient of the compute-dtype probabilities
        gemm('N', 'T', 1.0f, gin(go, T, D), gin(v + bkv * T * D, T, D), 0.0f,
             gout(dp_scratch, T, T));
        if (rc) round_copy(dp_scratch, dp_scratch, T * T, true);
        // dp -> dscores through the fp32 softmax (uses the unrounded probabilities), then
        // rounded to the compute dtype as the gradient of the scores product's output (autocast's
        // bf16 matmul output) before the dQ/dK products; pc is free again (p was used for dV).
        causal_softmax_backward(dp_scratch, att + bh * T * T, 1, T);
        const TC* ds = compute_copy(pc_scratch, dp_scratch, T * T, rc);
        // dq_bh (T, D) = scale * ds (T, T) @ k_bkv (T, D)
        gemm('N', 'N', d.scale, gin(ds, T, T), gin(k + bkv * T * D, T, D), 0.0f,
             gout(dq + bh * T * D, T, D));
        // dk_bkv (T, D) += scale * ds^T (T, T) @ q_bh (T, D)
        gemm('T', 'N', d.scale, gin(ds, T, T), gin(q + bh * T * D, T, D), beta,
             gout(dk + bkv * T * D, T, D));
      }
    }
  }
  if (rc) {
    round_copy(dq, dq, d.B * d.H * T * D, true);
    round_copy(dk, dk, d.B * d.KV * T * D, true);
    round_copy(dv, dv, d.B * d.KV * T * D, true);
  }
}

template void attention_forward<float>(float*, float*, float*, const float*, const float*,
                                       const float*, const AttentionDims&, bool);
template void attention_forward<bf16>(bf16*, float*, bf16*, const bf16*, const bf16*, const bf16*,
                                      const AttentionDims&, bool);
template void attention_backward<float>(float*, float*, float*, float*, float*, float*,
                                        const float*, const float*, const float*, const float*,
                                        const AttentionDims&, bool);
template void attention_backward<bf16>(float*, float*, float*, float*, bf16*, float*, const bf16*,
                                       const bf16*, const bf16*, const bf16*, const AttentionDims&,
                                       bool);

}  // namespace kktrain
