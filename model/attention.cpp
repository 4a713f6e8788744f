#include "model/attention.hpp"

#include <type_traits>

#include "core/bf16.hpp"
#include "model/gemm.hpp"
#include "model/kernels.hpp"

namespace kktrain {

namespace {

// The products of one (batch, KV head) group as one matrix: the H / KV query heads of a group are
// consecutive in the head layout, so their rows form one (G*T, D) block of q (and of out, dq,
// dout), their scores one (G*T, T) block of att, while K and V are (T, D) blocks. Every attention
// product is then a batch of identical products over contiguous matrices, one gemm_batched call
// per chunk of attention_groups_per_call() groups, with the sums over a group's heads (dK, dV)
// inside the product.
struct Chunk {
  int64_t groups, GT, T, D;        // groups in this call; one group's matrix sizes
  int64_t q_off, kv_off, att_off;  // element offsets of the chunk's first group
};

template <class Fn>
void for_each_chunk(const AttentionDims& d, const Fn& fn) {
  const int64_t total = d.B * d.KV, per = attention_groups_per_call(d);
  const int64_t GT = (d.H / d.KV) * d.T;
  for (int64_t g0 = 0; g0 < total; g0 += per) {
    const int64_t n = total - g0 < per ? total - g0 : per;
    fn(Chunk{n, GT, d.T, d.D, g0 * GT * d.D, g0 * d.T * d.D, g0 * GT * d.T});
  }
}

// att_c (groups, G*T, T) = causal_softmax(scale q_c k_c^T): the chunk's scores in one batched
// product, then one softmax launch over its rows. Forward and backward call this, so both see the
// same probabilities.
template <class TC>
void attention_probs(float* att, const TC* q, const TC* k, const AttentionDims& d, const Chunk& c) {
  gemm_batched(c.groups, 'N', 'T', d.scale, gin(q + c.q_off, c.GT, c.D),
               gin(k + c.kv_off, c.T, c.D), 0.0f, gout(att + c.att_off, c.GT, c.T));
  causal_softmax_forward(att + c.att_off, c.groups * c.GT / c.T, c.T);  // heads in the chunk
}

}  // namespace

int64_t attention_groups_per_call(const AttentionDims& d) {
  // GPUs: every group in one call (one launch per product). CPUs: one group at a time, so its
  // scores and their gradient stay in cache between the products and the softmax (the host BLAS
  // runs one product at a time either way).
  if (!Kokkos::SpaceAccessibility<HostSpace, MemSpace>::accessible) return d.B * d.KV;
  return 1;
}

template <class TC>
void attention_forward(TC* out, float* att, TC* pc_scratch, const TC* q, const TC* k, const TC* v,
                       const AttentionDims& d, bool rc) {
  for_each_chunk(d, [&](const Chunk& c) {
    attention_probs(att, q, k, d, c);
    const TC* p = compute_copy(pc_scratch, att + c.att_off, c.groups * c.GT * c.T, rc);
    // out_g (G*T, D) = p_g (G*T, T) @ v_g (T, D), rounded once when out is bf16
    gemm_batched(c.groups, 'N', 'N', 1.0f, gin(p, c.GT, c.T), gin(v + c.kv_off, c.T, c.D), 0.0f,
                 gout(out + c.q_off, c.GT, c.D));
  });
  if constexpr (std::is_same<TC, float>::value) {  // fp32 containers: round after the sum
    if (rc) round_copy(out, out, d.B * d.H * d.T * d.D, true);
  }
}

template <class TC>
void attention_backward(float* dq, float* dk, float* dv, float* att, TC* pc_scratch,
                        float* dp_scratch, const TC* dout, const TC* q, const TC* k, const TC* v,
                        const AttentionDims& d, bool rc) {
  for_each_chunk(d, [&](const Chunk& c) {
    const int64_t n_att = c.groups * c.GT * c.T;
    const TC* go = dout + c.q_off;
    attention_probs(att, q, k, d, c);
    const TC* p = compute_copy(pc_scratch, att + c.att_off, n_att, rc);
    // dv_g (T, D) = p_g^T (T, G*T) @ dout_g (G*T, D): the sum over the group's heads is inside
    gemm_batched(c.groups, 'T', 'N', 1.0f, gin(p, c.GT, c.T), gin(go, c.GT, c.D), 0.0f,
                 gout(dv + c.kv_off, c.T, c.D));
    // dp_g (G*T, T) = dout_g (G*T, D) @ v_g (T, D)^T, the gradient of the compute-dtype
    // probabilities
    gemm_batched(c.groups, 'N', 'T', 1.0f, gin(go, c.GT, c.D), gin(v + c.kv_off, c.T, c.D), 0.0f,
                 gout(dp_scratch, c.GT, c.T));
    if (rc) round_copy(dp_scratch, dp_scratch, n_att, true);
    // dp -> dscores through the fp32 softmax (uses the unrounded probabilities), then rounded to
    // the compute dtype as the gradient of the scores product's output (autocast's bf16 matmul
    // output) before the dQ/dK products; pc is free again (p was used for dV).
    causal_softmax_backward(dp_scratch, att + c.att_off, c.groups * c.GT / c.T, c.T);
    const TC* ds = compute_copy(pc_scratch, dp_scratch, n_att, rc);
    // dq_g (G*T, D) = scale * ds_g (G*T, T) @ k_g (T, D)
    gemm_batched(c.groups, 'N', 'N', d.scale, gin(ds, c.GT, c.T), gin(k + c.kv_off, c.T, c.D), 0.0f,
                 gout(dq + c.q_off, c.GT, c.D));
    // dk_g (T, D) = scale * ds_g^T (T, G*T) @ q_g (G*T, D)
    gemm_batched(c.groups, 'T', 'N', d.scale, gin(ds, c.GT, c.T), gin(q + c.q_off, c.GT, c.D), 0.0f,
                 gout(dk + c.kv_off, c.T, c.D));
  });
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
