// One transformer block, forward and backward:
//   x1 = x + o_proj(attention(rope(qkv_proj(rmsnorm(x)))))
//   out = x1 + down_proj(silu(gate_proj(h)) * up_proj(h)),  h = rmsnorm(x1)
//
// TC is the compute dtype's container (bf16 when the compute dtype is bf16, else float): the
// outputs of matmuls, attention and SwiGLU are stored in it directly, so a GEMM's fp32 result is
// rounded exactly once, on its store. Gradients that sum a GEMM and LoRA contributions stay fp32
// until their one rounding.
#include <cmath>
#include <type_traits>

#include "model/attention.hpp"
#include "model/gemm.hpp"
#include "model/kernels.hpp"
#include "model/transformer.hpp"
#include "model/transformer_buffers.hpp"

namespace kktrain {

template <class TC>
void Transformer::block_forward(const LayerParams& p, float* out, const float* inp, LayerActs& a) {
  Buffers& b = *buf_;
  const int64_t B = b.B, T = b.T, N = B * T, C = cfg_.hidden_size;
  const int64_t H = cfg_.num_heads, KV = cfg_.num_kv_heads, D = cfg_.head_dim();
  const int64_t F = cfg_.intermediate_size, Q = (H + 2 * KV) * D;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  const AttentionDims ad{B, T, H, KV, D, 1.0f / std::sqrt(static_cast<float>(D))};
  TC* xn1 = a.xn1.p<TC>();
  TC* qkv = b.qkv.p<TC>();
  TC* o = a.o.p<TC>();
  TC* proj = b.proj.p<TC>();
  TC* xn2 = a.xn2.p<TC>();
  TC* gu = a.gu.p<TC>();
  TC* act = a.a.p<TC>();

  rmsnorm_forward(xn1, nullptr, a.rstd1.data(), inp, wf(p.ln1), N, C, eps, rs_, rc_);
  matmul_forward(qkv, xn1, w(p.q), N, C, Q);  // (N, Q): q, k, v fused
  lora_forward<TC>(p, kQ, qkv, Q, 0, xn1);
  lora_forward<TC>(p, kK, qkv, Q, H * D, xn1);
  lora_forward<TC>(p, kV, qkv, Q, (H + KV) * D, xn1);
  rope_forward(a.q.p<TC>(), a.k.p<TC>(), a.v.p<TC>(), qkv, rope_cos_.data(), rope_sin_.data(), B, T,
               H, KV, D, rc_);
  attention_forward(b.oheads.p<TC>(), b.att.data(), b.pc.p<TC>(), a.q.p<TC>(), a.k.p<TC>(),
                    a.v.p<TC>(), ad, rc_);                  // (B, H, T, D)
  heads_to_tokens(o, b.oheads.p<TC>(), B, H, T, D, false);  // (N, H*D)
  matmul_forward(proj, o, w(p.o), N, H * D, C);
  lora_forward<TC>(p, kO, proj, C, 0, o);
  add_forward(a.x1.data(), inp, proj, N * C, rs_);

  rmsnorm_forward(xn2, nullptr, a.rstd2.data(), a.x1.data(), wf(p.ln2), N, C, eps, rs_, rc_);
  matmul_forward(gu, xn2, w(p.gate), N, C, 2 * F);  // (N, 2F): gate, up fused
  lora_forward<TC>(p, kGate, gu, 2 * F, 0, xn2);
  lora_forward<TC>(p, kUp, gu, 2 * F, F, xn2);
  swiglu_forward(act, gu, N, F, rc_);
  matmul_forward(proj, act, w(p.down), N, F, C);
  lora_forward<TC>(p, kDown, proj, C, 0, act);
  add_forward(out, a.x1.data(), proj, N * C, rs_);
}

template <class TC>
void Transformer::block_backward(const LayerParams& p, float* dres, const float* inp,
                                 const LayerActs& a) {
  Buffers& b = *buf_;
  const int64_t B = b.B, T = b.T, N = B * T, C = cfg_.hidden_size;
  const int64_t H = cfg_.num_heads, KV = cfg_.num_kv_heads, D = cfg_.head_dim();
  const int64_t F = cfg_.intermediate_size, Q = (H + 2 * KV) * D;
  const AttentionDims ad{B, T, H, KV, D, 1.0f / std::sqrt(static_cast<float>(D))};
  float* dw = b.dw.data();
  auto trainable = [&](int i) { return params_.info(i).trainable; };
  const TC* xn1 = a.xn1.p<TC>();
  const TC* xn2 = a.xn2.p<TC>();
  const TC* act = a.a.p<TC>();
  const TC* o = a.o.p<TC>();
  TC* dcbuf = b.dc.p<TC>();
  TC* dgu = b.dgu.p<TC>();
  TC* dqkv = b.dqkv.p<TC>();

  // ---- MLP: dres holds d(out); the residual passes it straight to x1. Its compute-dtype copy
  // is the gradient of the down_proj output (N, C).
  const TC* dc = compute_copy(dcbuf, dres, N * C, rc_);
  if (trainable(p.down)) {
    matmul_backward_weight(dw, dc, act, N, F, C);
    accumulate(p.down, dw, rc_);
  }
  matmul_backward_input(b.da.data(), dc, w(p.down), N, F, C, false);  // (N, F)
  lora_backward<TC>(p, kDown, dc, C, 0, act, b.da.data());
  if (rc_) round_copy(b.da.data(), b.da.data(), N * F, true);
  swiglu_backward(dgu, b.da.data(), a.gu.p<TC>(), N, F, rc_);  // (N, 2F)
  if (trainable(p.gate) || trainable(p.up)) {
    matmul_backward_weight(dw, dgu, xn2, N, C, 2 * F);  // (2F, C)
    accumulate(p.gate, dw, rc_);
    accumulate(p.up, dw + F * C, rc_);
  }
  matmul_backward_input(b.dxn.data(), dgu, w(p.gate), N, C, 2 * F, false);
  lora_backward<TC>(p, kGate, dgu, 2 * F, 0, xn2, b.dxn.data());
  lora_backward<TC>(p, kUp, dgu, 2 * F, F, xn2, b.dxn.data());
  if (rc_) round_copy(b.dxn.data(), b.dxn.data(), N * C, true);
  rmsnorm_backward(dres, dw, b.dxn.data(), a.x1.data(), wf(p.ln2), a.rstd2.data(), N, C, rs_);
  accumulate(p.ln2, dw, round_compute_[p.ln2]);

  // ---- attention: dres now holds d(x1); its compute-dtype copy is the o_proj output gradient.
  dc = compute_copy(dcbuf, dres, N * C, rc_);
  if (trainable(p.o)) {
    matmul_backward_weight(dw, dc, o, N, H * D, C);
    accumulate(p.o, dw, rc_);
  }
  matmul_backward_input(b.dtok.data(), dc, w(p.o), N, H * D, C, false);  // (N, H*D)
  lora_backward<TC>(p, kO, dc, C, 0, o, b.dtok.data());
  tokens_to_heads(b.dheads.p<TC>(), b.dtok.data(), B, H, T, D, rc_);  // (B, H, T, D)
  attention_backward(b.dq.data(), b.dk.data(), b.dv.data(), b.att.data(), b.pc.p<TC>(), b.dp.data(),
                     b.dheads.p<TC>(), a.q.p<TC>(), a.k.p<TC>(), a.v.p<TC>(), ad, rc_);
  rope_backward(dqkv, b.dq.data(), b.dk.data(), b.dv.data(), rope_cos_.data(), rope_sin_.data(), B,
                T, H, KV, D, rc_);  // (N, Q)
  if (trainable(p.q) || trainable(p.k) || trainable(p.v)) {
    matmul_backward_weight(dw, dqkv, xn1, N, C, Q);  // (Q, C)
    accumulate(p.q, dw, rc_);
    accumulate(p.k, dw + H * D * C, rc_);
    accumulate(p.v, dw + (H + KV) * D * C, rc_);
  }
  matmul_backward_input(b.dxn.data(), dqkv, w(p.q), N, C, Q, false);
  lora_backward<TC>(p, kQ, dqkv, Q, 0, xn1, b.dxn.data());
  lora_backward<TC>(p, kK, dqkv, Q, H * D, xn1, b.dxn.data());
  lora_backward<TC>(p, kV, dqkv, Q, (H + KV) * D, xn1, b.dxn.data());
  if (rc_) round_copy(b.dxn.data(), b.dxn.data(), N * C, true);
  rmsnorm_backward(dres, dw, b.dxn.data(), inp, wf(p.ln1), a.rstd1.data(), N, C, rs_);
  accumulate(p.ln1, dw, round_compute_[p.ln1]);
}

template void Transformer::block_forward<float>(const LayerParams&, float*, const float*,
                                                LayerActs&);
template void Transformer::block_forward<bf16>(const LayerParams&, float*, const float*,
                                               LayerActs&);
template void Transformer::block_backward<float>(const LayerParams&, float*, const float*,
                                                 const LayerActs&);
template void Transformer::block_backward<bf16>(const LayerParams&, float*, const float*,
                                                const LayerActs&);

}  // namespace kktrain
