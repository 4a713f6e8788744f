// One transformer block, forward and backward:
//   x1 = x + o_proj(attention(rope(qkv_proj(rmsnorm(x)))))
//   out = x1 + down_proj(silu(gate_proj(h)) * up_proj(h)),  h = rmsnorm(x1)
#include "model/attention.hpp"
#include "model/gemm.hpp"
#include "model/kernels.hpp"
#include "model/transformer.hpp"
#include "model/transformer_buffers.hpp"

namespace kktrain {

void Transformer::block_forward(const LayerParams& p, float* out, const float* inp, LayerActs& a) {
  Buffers& b = *buf_;
  const int64_t B = b.B, T = b.T, N = B * T, C = cfg_.hidden_size;
  const int64_t H = cfg_.num_heads, KV = cfg_.num_kv_heads, D = cfg_.head_dim();
  const int64_t F = cfg_.intermediate_size, Q = (H + 2 * KV) * D;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  const AttentionDims ad{B, T, H, KV, D, 1.0f / std::sqrt(static_cast<float>(D))};

  rmsnorm_forward(a.xn1.data(), nullptr, a.rstd1.data(), inp, w(p.ln1), N, C, eps, rs_, rc_);
  matmul_forward(b.qkv.data(), a.xn1.data(), w(p.q), N, C, Q);  // (N, Q): q, k, v fused
  if (rc_) round_copy(b.qkv.data(), b.qkv.data(), N * Q, true);
  lora_forward(p, kQ, b.qkv.data(), Q, 0, a.xn1.data());
  lora_forward(p, kK, b.qkv.data(), Q, H * D, a.xn1.data());
  lora_forward(p, kV, b.qkv.data(), Q, (H + KV) * D, a.xn1.data());
  rope_forward(a.q.data(), a.k.data(), a.v.data(), b.qkv.data(), rope_cos_.data(), rope_sin_.data(),
               B, T, H, KV, D, rc_);
  attention_forward(b.oheads.data(), a.att.data(), b.pc.data(), a.q.data(), a.k.data(), a.v.data(),
                    ad, rc_);                                       // (B, H, T, D)
  heads_to_tokens(a.o.data(), b.oheads.data(), B, H, T, D, false);  // (N, H*D)
  matmul_forward(b.proj.data(), a.o.data(), w(p.o), N, H * D, C);
  if (rc_) round_copy(b.proj.data(), b.proj.data(), N * C, true);
  lora_forward(p, kO, b.proj.data(), C, 0, a.o.data());
  add_forward(a.x1.data(), inp, b.proj.data(), N * C, rs_);

  rmsnorm_forward(a.xn2.data(), nullptr, a.rstd2.data(), a.x1.data(), w(p.ln2), N, C, eps, rs_,
                  rc_);
  matmul_forward(a.gu.data(), a.xn2.data(), w(p.gate), N, C, 2 * F);  // (N, 2F): gate, up fused
  if (rc_) round_copy(a.gu.data(), a.gu.data(), N * 2 * F, true);
  lora_forward(p, kGate, a.gu.data(), 2 * F, 0, a.xn2.data());
  lora_forward(p, kUp, a.gu.data(), 2 * F, F, a.xn2.data());
  swiglu_forward(a.a.data(), a.gu.data(), N, F, rc_);
  matmul_forward(b.proj.data(), a.a.data(), w(p.down), N, F, C);
  if (rc_) round_copy(b.proj.data(), b.proj.data(), N * C, true);
  lora_forward(p, kDown, b.proj.data(), C, 0, a.a.data());
  add_forward(out, a.x1.data(), b.proj.data(), N * C, rs_);
}

void Transformer::block_backward(const LayerParams& p, float* dres, const float* inp,
                                 const LayerActs& a) {
  Buffers& b = *buf_;
  const int64_t B = b.B, T = b.T, N = B * T, C = cfg_.hidden_size;
  const int64_t H = cfg_.num_heads, KV = cfg_.num_kv_heads, D = cfg_.head_dim();
  const int64_t F = cfg_.intermediate_size, Q = (H + 2 * KV) * D;
  const AttentionDims ad{B, T, H, KV, D, 1.0f / std::sqrt(static_cast<float>(D))};
  float* dw = b.dw.data();
  auto trainable = [&](int i) { return params_.info(i).trainable; };

  // The gradient of a compute-dtype output is dres rounded to the compute dtype (a copy only
  // when rounding is needed).
  auto to_compute = [&](const float* g) -> const float* {
    if (!rc_) return g;
    round_copy(b.dc.data(), g, N * C, true);
    return b.dc.data();
  };
  // ---- MLP: dres holds d(out); the residual passes it straight to x1.
  const float* dd = to_compute(dres);  // gradient of the down_proj output (N, C)
  if (trainable(p.down)) {
    matmul_backward_weight(dw, dd, a.a.data(), N, F, C);
    accumulate(p.down, dw, rc_);
  }
  matmul_backward_input(b.da.data(), dd, w(p.down), N, F, C, false);  // (N, F)
  lora_backward(p, kDown, dd, C, 0, a.a.data(), b.da.data());
  if (rc_) round_copy(b.da.data(), b.da.data(), N * F, true);
  swiglu_backward(b.dgu.data(), b.da.data(), a.gu.data(), N, F, rc_);  // (N, 2F)
  if (trainable(p.gate) || trainable(p.up)) {
    matmul_backward_weight(dw, b.dgu.data(), a.xn2.data(), N, C, 2 * F);  // (2F, C)
    accumulate(p.gate, dw, rc_);
    accumulate(p.up, dw + F * C, rc_);
  }
  matmul_backward_input(b.dxn.data(), b.dgu.data(), w(p.gate), N, C, 2 * F, false);
  lora_backward(p, kGate, b.dgu.data(), 2 * F, 0, a.xn2.data(), b.dxn.data());
  lora_backward(p, kUp, b.dgu.data(), 2 * F, F, a.xn2.data(), b.dxn.data());
  if (rc_) round_copy(b.dxn.data(), b.dxn.data(), N * C, true);
  rmsnorm_backward(dres, dw, b.dxn.data(), a.x1.data(), w(p.ln2), a.rstd2.data(), N, C, rs_);
  accumulate(p.ln2, dw, round_compute_[p.ln2]);

  // ---- attention: dres now holds d(x1).
  const float* dproj = to_compute(dres);  // gradient of the o_proj output
  if (trainable(p.o)) {
    matmul_backward_weight(dw, dproj, a.o.data(), N, H * D, C);
    accumulate(p.o, dw, rc_);
  }
  matmul_backward_input(b.dtok.data(), dproj, w(p.o), N, H * D, C, false);  // (N, H*D)
  lora_backward(p, kO, dproj, C, 0, a.o.data(), b.dtok.data());
  tokens_to_heads(b.dheads.data(), b.dtok.data(), B, H, T, D, rc_);  // (B, H, T, D)
  attention_backward(b.dq.data(), b.dk.data(), b.dv.data(), b.pc.data(), b.dp.data(),
                     b.dheads.data(), a.att.data(), a.q.data(), a.k.data(), a.v.data(), ad, rc_);
  rope_backward(b.dqkv.data(), b.dq.data(), b.dk.data(), b.dv.data(), rope_cos_.data(),
                rope_sin_.data(), B, T, H, KV, D, rc_);  // (N, Q)
  if (trainable(p.q) || trainable(p.k) || trainable(p.v)) {
    matmul_backward_weight(dw, b.dqkv.data(), a.xn1.data(), N, C, Q);  // (Q, C)
    accumulate(p.q, dw, rc_);
    accumulate(p.k, dw + H * D * C, rc_);
    accumulate(p.v, dw + (H + KV) * D * C, rc_);
  }
  matmul_backward_input(b.dxn.data(), b.dqkv.data(), w(p.q), N, C, Q, false);
  lora_backward(p, kQ, b.dqkv.data(), Q, 0, a.xn1.data(), b.dxn.data());
  lora_backward(p, kK, b.dqkv.data(), Q, H * D, a.xn1.data(), b.dxn.data());
  lora_backward(p, kV, b.dqkv.data(), Q, (H + KV) * D, a.xn1.data(), b.dxn.data());
  if (rc_) round_copy(b.dxn.data(), b.dxn.data(), N * C, true);
  rmsnorm_backward(dres, dw, b.dxn.data(), inp, w(p.ln1), a.rstd1.data(), N, C, rs_);
  accumulate(p.ln1, dw, round_compute_[p.ln1]);
}

}  // namespace kktrain
