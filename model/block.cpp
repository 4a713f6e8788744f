// One transformer block and its LoRA adapters, forward and backward (model/block.hpp).
#include "model/block.hpp"

#include <cmath>
#include <type_traits>

#include "model/moe.hpp"
#include "ops/attention.hpp"
#include "ops/gemm.hpp"
#include "ops/kernels.hpp"

namespace kktrain {

namespace {

// The projection's adapter added to y, its input x; sizes of the projection.
template <class TC>
void adapter_forward(const ExecSpace& space, const GemmOptions& gemm, const BlockWeights& w,
                     const BlockScratch<TC>& s, int proj, TC* y, int64_t ld, int64_t col,
                     const TC* x, int64_t N, int64_t in, int64_t out) {
  lora_forward(space, gemm, y, ld, col, x, w.lora[proj], N, in, out, s.lora_t, s.lora_y);
}

template <class TC>
void adapter_backward(const ExecSpace& space, const GemmOptions& gemm, const BlockWeights& w,
                      const BlockScratch<TC>& s, BlockGrads& grads, int proj, float* dx,
                      const TC* dy, int64_t ld, int64_t col, const TC* x, int64_t N, int64_t in,
                      int64_t out) {
  lora_backward(space, gemm, dx, dy, ld, col, x, w.lora[proj], N, in, out, s.lora_t, s.lora_dt,
                s.lora_y, s.dw, grads, kLoraA0 + proj, kLoraB0 + proj);
}

// The dense SwiGLU MLP's backward: s.dxn (N, C) = the norm output's gradient from dres (N, C),
// the gradient of the block output (whose compute-dtype copy is that of the down_proj output).
template <class TC>
void dense_mlp_backward(const ExecSpace& space, const float* dres, const BlockActs& a,
                        const TC* xn2, const BlockWeights& w, const BlockScratch<TC>& s,
                        const BlockDims& d, BlockGrads& grads) {
  const int64_t N = d.N(), C = d.C, F = d.F;
  float* dw = s.dw;
  auto trainable = [&](int proj) { return grads.trainable(kProj0 + proj); };
  auto accumulate = [&](int proj, const float* g) { grads.accumulate(kProj0 + proj, g); };
  const TC* act = a.a.p<TC>();
  const TC* dc = compute_copy(space, s.dc, dres, N * C);
  if (trainable(kDown)) {
    matmul_backward_weight(space, d.gemm, dw, dc, act, N, F, C);
    accumulate(kDown, dw);
  }
  matmul_backward_input(space, d.gemm, s.da, dc, w.down, N, F, C, Into::overwrite);  // (N, F)
  adapter_backward(space, d.gemm, w, s, grads, kDown, s.da, dc, C, 0, act, N, F, C);
  swiglu_backward(space, s.dgu, s.da, a.gu.p<TC>(), N, F, d.activation);  // rounds da on load
  if (trainable(kGate) || trainable(kUp)) {
    matmul_backward_weight(space, d.gemm, dw, s.dgu, xn2, N, C, 2 * F);  // (2F, C)
    accumulate(kGate, dw);
    accumulate(kUp, dw + F * C);
  }
  matmul_backward_input(space, d.gemm, s.dxn, s.dgu, w.gate_up, N, C, 2 * F, Into::overwrite);
  adapter_backward(space, d.gemm, w, s, grads, kGate, s.dxn, s.dgu, 2 * F, 0, xn2, N, C,
                   d.fused ? 2 * F : F);  // Phi-3: gate_up_proj's adapter
  adapter_backward(space, d.gemm, w, s, grads, kUp, s.dxn, s.dgu, 2 * F, F, xn2, N, C, F);
}

// y (N, n) = a bias in its compute copy's dtype (model.keep_in_fp32 may keep it fp32) broadcast
// over the rows; returns how the product then goes into y (added to the bias, or replacing y).
template <class TC>
Into fill_bias(const ExecSpace& space, TC* y, const CRef& b, int64_t N, int64_t n) {
  if (!b.data) return Into::overwrite;
  if constexpr (std::is_same_v<TC, bf16>) {
    if (b.dtype == DType::bfloat16) {
      bias_fill(space, y, static_cast<const bf16*>(b.data), N, n);
      return Into::accumulate;
    }
  }
  bias_fill(space, y, static_cast<const float*>(b.data), N, n);
  return Into::accumulate;
}

// The q/k norm's rows: per head, or each whole projection (model.qk_norm).
HeadNormDims qk_norm_dims(const BlockDims& d) {
  return d.qk_norm == QkNorm::whole ? HeadNormDims::whole(d.N(), d.H, d.KV, d.D, d.eps, d.norm)
                                    : HeadNormDims::per_head(d.N(), d.H, d.KV, d.D, d.eps, d.norm);
}

// A sub-layer's input: rmsnorm(x) in the compute dtype (into xn, statistics into rstd), or with
// no norm (model.norm_placement post) x itself as a compute-dtype operand (its copy in xn, or x
// for fp32 compute).
template <class TC>
const TC* norm_in(const ExecSpace& space, TBuf& xn, DView<float>& rstd, const float* x,
                  const float* weight, const BlockDims& d) {
  if (weight == nullptr) return compute_copy(space, xn.p<TC>(), x, d.N() * d.C);
  rmsnorm_forward(space, xn.p<TC>(), nullptr, rstd.data(), x, weight, d.N(), d.C, d.eps, d.stream,
                  d.norm);
  return xn.p<TC>();
}
// The residual add x = rnd(a + b, stream) into x, then norm_in of x: with a norm, one pass.
template <class TC>
const TC* add_norm_in(const ExecSpace& space, TBuf& xn, DView<float>& rstd, float* x,
                      const float* a, const TC* b, const float* weight, const BlockDims& d) {
  if (weight == nullptr) {
    add_forward(space, x, a, b, d.N() * d.C, d.stream);
    return norm_in<TC>(space, xn, rstd, x, weight, d);
  }
  add_rmsnorm_forward(space, xn.p<TC>(), rstd.data(), x, a, b, weight, d.N(), d.C, d.eps, d.stream,
                      d.norm);
  return xn.p<TC>();
}
template <class TC>
const TC* norm_in_kept(const TBuf& xn, const float* x, const float* weight) {
  if constexpr (std::is_same_v<TC, float>) {
    if (weight == nullptr) return x;
  }
  return xn.p<TC>();
}

// A sub-layer's output y (N, C), compute dtype, replaced by its norm (model.norm_placement
// sandwich / post): kept widened in `kept` (the norm's input for backward), normalized in fp32 and
// rounded to the compute dtype (the norm returns its input's dtype). No weight: y unchanged.
template <class TC>
void norm_out(const ExecSpace& space, TC* y, DView<float>& kept, DView<float>& rstd,
              const float* weight, const BlockDims& d) {
  if (weight == nullptr) return;
  const int64_t n = d.N() * d.C;
  round_copy(space, kept.data(), y, n, Rounding::fp32);
  rmsnorm_forward(space, y, nullptr, rstd.data(), kept.data(), weight, d.N(), d.C, d.eps,
                  rounding_of<TC>(), d.norm);
}

// The backward of norm_out: from dy (the gradient of the normalized output, fp32, rounded to
// the compute dtype on load) into s.dbranch (the gradient of the sub-layer's output), its weight
// gradient to `grad_weight`. Returns the sub-layer output's gradient: s.dbranch, or dy itself
// without the norm.
template <class TC>
const float* norm_out_backward(const ExecSpace& space, const float* dy, const DView<float>& kept,
                               const DView<float>& rstd, const float* weight,
                               const BlockScratch<TC>& s, const BlockDims& d, BlockGrads& grads,
                               int grad_weight) {
  if (weight == nullptr) return dy;
  const int64_t n = d.N() * d.C;
  Kokkos::deep_copy(space, DViewU<float>(s.dbranch, n), 0.0f);
  rmsnorm_backward(space, s.dbranch, s.dw, s.norm_partial, dy, kept.data(), weight, rstd.data(),
                   d.N(), d.C, rounding_of<TC>(), rounding_of<TC>(), d.norm);
  grads.accumulate(grad_weight, s.dw);
  return s.dbranch;
}

// The backward of norm_in: dres += the input's gradient from s.dxn, the norm output's (through
// the norm, its weight gradient to `grad_weight`; without a norm, the compute-dtype copy's
// gradient, rounded to the compute dtype). With `copy` (bf16 compute and a norm), the norm's pass
// also writes copy = TC(dres), the compute-dtype copy the next product reads; returns whether it
// did.
template <class TC>
bool norm_in_backward(const ExecSpace& space, float* dres, const float* x, const float* weight,
                      const DView<float>& rstd, const BlockScratch<TC>& s, const BlockDims& d,
                      BlockGrads& grads, int grad_weight, TC* copy = nullptr) {
  if (weight == nullptr) {
    round_copy(space, s.dc, s.dxn, d.N() * d.C, rounding_of<TC>());
    add_forward(space, dres, dres, s.dc, d.N() * d.C, d.stream);
    return false;
  }
  if constexpr (std::is_same_v<TC, float>) copy = nullptr;  // fp32 compute reads dres itself
  if (copy != nullptr) {
    rmsnorm_backward_copy(space, dres, copy, s.dw, s.norm_partial, s.dxn, x, weight, rstd.data(),
                          d.N(), d.C, d.stream, rounding_of<TC>(), d.norm);
  } else {
    rmsnorm_backward(space, dres, s.dw, s.norm_partial, s.dxn, x, weight, rstd.data(), d.N(), d.C,
                     d.stream, rounding_of<TC>(), d.norm);
  }
  grads.accumulate(grad_weight, s.dw);
  return copy != nullptr;
}

}  // namespace

template <class TC>
void block_forward(const ExecSpace& space, float* out, const float* inp, BlockActs& a,
                   const BlockWeights& w, const BlockScratch<TC>& s, const BlockDims& d) {
  const int64_t B = d.B, T = d.T, N = d.N(), C = d.C, H = d.H, KV = d.KV, D = d.D, F = d.F;
  const int64_t Q = d.Q();
  const Rounding rs = d.stream;
  const float scale = d.attn_scale > 0 ? d.attn_scale : 1.0f / std::sqrt(static_cast<float>(D));
  AttentionDims ad{B, T, H, KV, D, scale, d.starts, d.host_starts, d.attention};
  ad.window = d.window;
  ad.softcap = d.softcap;
  ad.gaps = d.gaps;
  TC* o = a.o.p<TC>();
  TC* gu = d.moe.enabled() ? nullptr : a.gu.p<TC>();
  TC* act = d.moe.enabled() ? nullptr : a.a.p<TC>();

  const TC* xn1 = norm_in<TC>(space, a.xn1, a.rstd1, inp, w.ln1, d);
  // (N, Q): q, k, v fused (+ their biases)
  matmul_forward(space, d.gemm, s.qkv, xn1, w.qkv, N, C, Q,
                 fill_bias(space, s.qkv, w.qkv_bias, N, Q));
  // Phi-3: qkv_proj's one adapter, Q wide, in kQ's slot
  adapter_forward(space, d.gemm, w, s, kQ, s.qkv, Q, 0, xn1, N, C, d.fused ? Q : H * D);
  adapter_forward(space, d.gemm, w, s, kK, s.qkv, Q, H * D, xn1, N, C, KV * D);
  adapter_forward(space, d.gemm, w, s, kV, s.qkv, Q, (H + KV) * D, xn1, N, C, KV * D);
  HeadScale norm;  // a plain q/k norm's weight multiply, done by the rotary kernel
  if (w.q_norm) {
    const HeadNormDims hd = qk_norm_dims(d);
    head_rmsnorm_forward(space, s.qkv, a.qk_pre.p<TC>(), a.qk_rstd.data(), hd, w.q_norm, w.k_norm);
    if (!hd.form.fp32_product) norm = HeadScale{w.q_norm, w.k_norm, rs};
  }
  rope_forward(space, a.q.p<TC>(), a.k.p<TC>(), a.v.p<TC>(), s.qkv, w.rope_cos, w.rope_sin, B, T, H,
               KV, D, d.rope_starts ? d.rope_starts : d.starts, norm, d.R);
  attention_forward(space, o, a.lse.data(), a.q.p<TC>(), a.k.p<TC>(), a.v.p<TC>(), ad,
                    s.att);  // (N, H*D) token layout
  matmul_forward(space, d.gemm, s.proj, o, w.o, N, H * D, C,
                 fill_bias(space, s.proj, w.o_bias, N, C));
  adapter_forward(space, d.gemm, w, s, kO, s.proj, C, 0, o, N, H * D, C);
  norm_out(space, s.proj, a.attn_out, a.rstd3, w.attn_out_norm, d);
  const TC* xn2 = add_norm_in<TC>(space, a.xn2, a.rstd2, a.x1.data(), inp, s.proj, w.ln2, d);
  if (d.moe.enabled()) {  // the experts' combined output is fp32 until the residual add
    moe_forward(space, s.moe.y, xn2, a.moe, w.moe, s.moe, d.moe);
    add_forward(space, out, a.x1.data(), s.moe.y, N * C, rs);
    return;
  }
  matmul_forward(space, d.gemm, gu, xn2, w.gate_up, N, C, 2 * F);  // (N, 2F): gate, up fused
  adapter_forward(space, d.gemm, w, s, kGate, gu, 2 * F, 0, xn2, N, C, d.fused ? 2 * F : F);
  adapter_forward(space, d.gemm, w, s, kUp, gu, 2 * F, F, xn2, N, C, F);
  swiglu_forward(space, act, gu, N, F, d.activation);
  matmul_forward(space, d.gemm, s.proj, act, w.down, N, F, C);
  adapter_forward(space, d.gemm, w, s, kDown, s.proj, C, 0, act, N, F, C);
  norm_out(space, s.proj, a.mlp_out, a.rstd4, w.mlp_out_norm, d);
  add_forward(space, out, a.x1.data(), s.proj, N * C, rs);
}

template <class TC>
void block_backward(const ExecSpace& space, float* dres, const float* inp, const BlockActs& a,
                    const BlockWeights& w, const BlockScratch<TC>& s, const BlockDims& d,
                    BlockGrads& grads) {
  const int64_t B = d.B, T = d.T, N = d.N(), C = d.C, H = d.H, KV = d.KV, D = d.D;
  const int64_t Q = d.Q();
  const float scale = d.attn_scale > 0 ? d.attn_scale : 1.0f / std::sqrt(static_cast<float>(D));
  AttentionDims ad{B, T, H, KV, D, scale, d.starts, d.host_starts, d.attention};
  ad.window = d.window;
  ad.softcap = d.softcap;
  ad.gaps = d.gaps;
  float* dw = s.dw;
  auto trainable = [&](int proj) { return grads.trainable(kProj0 + proj); };
  auto accumulate = [&](int proj, const float* g) { grads.accumulate(kProj0 + proj, g); };
  const TC* xn1 = norm_in_kept<TC>(a.xn1, inp, w.ln1);
  const TC* xn2 = norm_in_kept<TC>(a.xn2, a.x1.data(), w.ln2);
  const TC* o = a.o.p<TC>();

  // ---- MLP: dres holds d(out); the residual passes it straight to x1. s.dxn gets the gradient
  // of the norm output.
  const float* dmlp =
      norm_out_backward(space, dres, a.mlp_out, a.rstd4, w.mlp_out_norm, s, d, grads, kMlpOutNorm);
  if (d.moe.enabled()) {
    moe_backward(space, s.dxn, dmlp, xn2, a.moe, w.moe, s.moe, d.moe, dw, grads);
  } else {
    dense_mlp_backward(space, dmlp, a, xn2, w, s, d, grads);
  }
  // dxn rounded to the compute dtype on load; without an attention output norm, d(x1) is the
  // o_proj output's gradient, and its compute-dtype copy comes from the same pass
  const bool copied = norm_in_backward(space, dres, a.x1.data(), w.ln2, a.rstd2, s, d, grads, kLn2,
                                       w.attn_out_norm ? nullptr : s.dc);

  // ---- attention: dres now holds d(x1); the compute-dtype copy of the attention output's
  // gradient is the o_proj output gradient.
  const float* dattn = norm_out_backward(space, dres, a.attn_out, a.rstd3, w.attn_out_norm, s, d,
                                         grads, kAttnOutNorm);
  const TC* dc = copied ? s.dc : compute_copy(space, s.dc, dattn, N * C);
  if (w.o_bias.data && grads.trainable(kOBias)) {
    bias_backward(space, dw, dc, N, C);
    grads.accumulate(kOBias, dw);
  }
  if (trainable(kO)) {
    matmul_backward_weight(space, d.gemm, dw, dc, o, N, H * D, C);
    accumulate(kO, dw);
  }
  matmul_backward_input(space, d.gemm, s.dtok, dc, w.o, N, H * D, C, Into::overwrite);  // (N, H*D)
  adapter_backward(space, d.gemm, w, s, grads, kO, s.dtok, dc, C, 0, o, N, H * D, C);
  tokens_to_heads(space, s.dheads, s.dtok, B, H, T, D, rounding_of<TC>());  // (B, H, T, D)
  attention_backward(space, s.dq, s.dk, s.dv, s.dheads, o, a.lse.data(), a.q.p<TC>(), a.k.p<TC>(),
                     a.v.p<TC>(), ad, s.att);
  // (N, Q); dq, dk, dv rounded to the compute dtype on load
  rope_backward(space, s.dqkv, s.dq, s.dk, s.dv, w.rope_cos, w.rope_sin, B, T, H, KV, D,
                d.rope_starts ? d.rope_starts : d.starts, d.R);
  if (w.q_norm) {  // dqkv's query and key rows: d(norm output) -> d(projection output)
    const HeadNormDims hd = qk_norm_dims(d);
    head_rmsnorm_backward(space, s.dqkv, dw, dw + hd.q_width, a.qk_pre.p<TC>(), a.qk_rstd.data(),
                          w.q_norm, w.k_norm, hd, d.stream);
    grads.accumulate(kQNorm, dw);
    grads.accumulate(kKNorm, dw + hd.q_width);
  }
  if (w.qkv_bias.data &&
      (grads.trainable(kQBias) || grads.trainable(kKBias) || grads.trainable(kVBias))) {
    bias_backward(space, dw, s.dqkv, N, Q);
    grads.accumulate(kQBias, dw);
    grads.accumulate(kKBias, dw + H * D);
    grads.accumulate(kVBias, dw + (H + KV) * D);
  }
  if (trainable(kQ) || trainable(kK) || trainable(kV)) {
    matmul_backward_weight(space, d.gemm, dw, s.dqkv, xn1, N, C, Q);  // (Q, C)
    accumulate(kQ, dw);
    accumulate(kK, dw + H * D * C);
    accumulate(kV, dw + (H + KV) * D * C);
  }
  matmul_backward_input(space, d.gemm, s.dxn, s.dqkv, w.qkv, N, C, Q, Into::overwrite);
  adapter_backward(space, d.gemm, w, s, grads, kQ, s.dxn, s.dqkv, Q, 0, xn1, N, C,
                   d.fused ? Q : H * D);
  adapter_backward(space, d.gemm, w, s, grads, kK, s.dxn, s.dqkv, Q, H * D, xn1, N, C, KV * D);
  adapter_backward(space, d.gemm, w, s, grads, kV, s.dxn, s.dqkv, Q, (H + KV) * D, xn1, N, C,
                   KV * D);
  norm_in_backward(space, dres, inp, w.ln1, a.rstd1, s, d, grads, kLn1);
}

#define KKTRAIN_INST_BLOCK(TC)                                                                     \
  template void block_forward<TC>(const ExecSpace&, float*, const float*, BlockActs&,              \
                                  const BlockWeights&, const BlockScratch<TC>&, const BlockDims&); \
  template void block_backward<TC>(const ExecSpace&, float*, const float*, const BlockActs&,       \
                                   const BlockWeights&, const BlockScratch<TC>&, const BlockDims&, \
                                   BlockGrads&);
KKTRAIN_INST_BLOCK(float)
KKTRAIN_INST_BLOCK(bf16)
#undef KKTRAIN_INST_BLOCK

}  // namespace kktrain
