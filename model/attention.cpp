#include "model/attention.hpp"

#include <type_traits>

#include "core/bf16.hpp"
#include "model/gemm.hpp"
#include "model/kernels.hpp"

namespace kktrain {

namespace {

// The products of one (batch, KV head) pair as one matrix: the H / KV query heads of a group are
// consecutive in the head layout, so their rows form one (G*T, D) block of q (and of out, dq,
// dout), their scores one (G*T, T) block of att, while K and V are (T, D) blocks. Every attention
// product is then a batch of B*KV identical products over contiguous matrices: one gemm_batched
// call each, with the sums over a group's heads (dK, dV) inside the product.
struct Blocks {
  int64_t batch, GT, T, D;
};

Blocks blocks_of(const AttentionDims& d) {
  return Blocks{d.B * d.KV, (d.H / d.KV) * d.T, d.T, d.D};
}

// att (B, H, T, T) = causal_softmax(scale q k^T): every head's scores in one batched product,
// then one softmax launch over all B*H*T rows. Forward and backward call this, so both see the
// same probabilities.
template <class TC>
void attention_probs(float* att, const TC* q, const TC* k, const AttentionDims& d) {
  const Blocks g = blocks_of(d);
  // att_g (G*T, T) = scale * q_g (G*T, D) @ k_g (T, D)^T
  gemm_batched(g.batch, 'N', 'T', d.scale, gin(q, g.GT, g.D), gin(k, g.T, g.D), 0.0f,
               gout(att, g.GT, g.T));
  causal_softmax_forward(att, d.B * d.H, d.T);
}

}  // namespace

template <class TC>
void attention_forward(TC* out, float* att, TC* pc_scratch, const TC* q, const TC* k, const TC* v,
                       const AttentionDims& d, bool rc) {
  const Blocks g = blocks_of(d);
  attention_probs(att, q, k, d);
  const TC* p = compute_copy(pc_scratch, att, d.B * d.H * d.T * d.T, rc);
  // out_g (G*T, D) = p_g (G*T, T) @ v_g (T, D), rounded once when out is bf16
  gemm_batched(g.batch, 'N', 'N', 1.0f, gin(p, g.GT, g.T), gin(v, g.T, g.D), 0.0f,
               gout(out, g.GT, g.D));
  if constexpr (std::is_same<TC, float>::value) {  // fp32 containers: round after the sum
    if (rc) round_copy(out, out, d.B * d.H * d.T * d.D, true);
  }
}

template <class TC>
void attention_backward(float* dq, float* dk, float* dv, float* att, TC* pc_scratch,
                        float* dp_scratch, const TC* dout, const TC* q, const TC* k, const TC* v,
                        const AttentionDims& d, bool rc) {
  const Blocks g = blocks_of(d);
  const int64_t n_att = d.B * d.H * d.T * d.T;
  attention_probs(att, q, k, d);
  const TC* p = compute_copy(pc_scratch, att, n_att, rc);
  // dv_g (T, D) = p_g^T (T, G*T) @ dout_g (G*T, D): the sum over the group's heads is inside
  gemm_batched(g.batch, 'T', 'N', 1.0f, gin(p, g.GT, g.T), gin(dout, g.GT, g.D), 0.0f,
               gout(dv, g.T, g.D));
  // dp_g (G*T, T) = dout_g (G*T, D) @ v_g (T, D)^T, the gradient of the compute-dtype probabilities
  gemm_batched(g.batch, 'N', 'T', 1.0f, gin(dout, g.GT, g.D), gin(v, g.T, g.D), 0.0f,
               gout(dp_scratch, g.GT, g.T));
  if (rc) round_copy(dp_scratch, dp_scratch, n_att, true);
  // dp -> dscores through the fp32 softmax (uses the unrounded probabilities), then rounded to the
  // compute dtype as the gradient of the scores product's output (autocast's bf16 matmul output)
  // before the dQ/dK products; pc is free again (p was used for dV).
  causal_softmax_backward(dp_scratch, att, d.B * d.H, d.T);
  const TC* ds = compute_copy(pc_scratch, dp_scratch, n_att, rc);
  // dq_g (G*T, D) = scale * ds_g (G*T, T) @ k_g (T, D)
  gemm_batched(g.batch, 'N', 'N', d.scale, gin(ds, g.GT, g.T), gin(k, g.T, g.D), 0.0f,
               gout(dq, g.GT, g.D));
  // dk_g (T, D) = scale * ds_g^T (T, G*T) @ q_g (G*T, D)
  gemm_batched(g.batch, 'T', 'N', d.scale, gin(ds, g.GT, g.T), gin(q, g.GT, g.D), 0.0f,
               gout(dk, g.T, g.D));
  if (rc) {
    round_copy(dq, dq, d.B * d.H * d.T * d.D, true);
    round_copy(dk, dk, d.B * d.KV * d.T * d.D, true);
    round_copy(dv, dv, d.B * d.KV * d.T * d.D, true);
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
