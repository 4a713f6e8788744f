// The decoder block in the model (model/dense_block.hpp): registration, unit membership, fused
// groups, activations, and the bridge to model/block.hpp's layer functions.
#include "model/dense_block.hpp"

#include <cmath>

#include "model/lora.hpp"
#include "model/model_buffers.hpp"
#include "model/params.hpp"
#include "model/sparse_mlp.hpp"
#include "model/units.hpp"

namespace kktrain {

namespace {

// BlockGrads over two callables (they reach the Transformer's private gradient routing).
template <class Trainable, class Accumulate>
class GradRouter final : public BlockGrads {
 public:
  GradRouter(Trainable t, Accumulate a) : trainable_(t), accumulate_(a) {}
  bool trainable(int weight) const override { return trainable_(weight); }
  void accumulate(int weight, const float* dw) override { accumulate_(weight, dw); }

 private:
  Trainable trainable_;
  Accumulate accumulate_;
};
template <class Trainable, class Accumulate>
GradRouter<Trainable, Accumulate> grad_router(Trainable t, Accumulate a) {
  return GradRouter<Trainable, Accumulate>(t, a);
}

BlockWeights block_weights(const ModelState& s, const LayerParams& p) {
  BlockWeights bw;
  if (p.ln1 >= 0) bw.ln1 = s.wf(p.ln1);  // none with model.norm_placement post
  if (p.ln2 >= 0) bw.ln2 = s.wf(p.ln2);
  if (p.attn_out_norm >= 0) bw.attn_out_norm = s.wf(p.attn_out_norm);
  if (p.mlp_out_norm >= 0) bw.mlp_out_norm = s.wf(p.mlp_out_norm);
  bw.qkv = s.w(p.q);  // q, k, v are one fused group: adjacent rows of the compute buffer
  bw.o = s.w(p.o);
  if (p.router < 0) {
    bw.gate_up = s.w(p.gate);  // gate, up likewise
    bw.down = s.w(p.down);
  } else {
    bw.moe = sparse_mlp_weights(s, p);
  }
  add_lora_weights(s, p, &bw);
  const int64_t positions = s.buf->rotary_positions > 0 ? s.buf->rotary_positions : s.buf->T;
  if (p.rope == LayerRope::rope && s.cfg.rope_scaling.uses_long(positions)) {
    bw.rope_cos = s.rope_cos_long.data();  // longrope: a position beyond the short factors'
    bw.rope_sin = s.rope_sin_long.data();
  } else if (p.rope == LayerRope::rope) {  // null tables: the layer attends without positions
    bw.rope_cos = s.rope_cos.data();
    bw.rope_sin = s.rope_sin.data();
  } else if (p.rope == LayerRope::local) {
    bw.rope_cos = s.rope_cos_local.data();
    bw.rope_sin = s.rope_sin_local.data();
  }
  if (p.q_bias >= 0) bw.qkv_bias = s.w(p.q_bias);  // q, k, v biases: one fused group too
  if (p.o_bias >= 0) bw.o_bias = s.w(p.o_bias);
  if (p.q_norm >= 0) {
    bw.q_norm = s.wf(p.q_norm);
    bw.k_norm = s.wf(p.k_norm);
  }
  return bw;
}

template <class TC>
BlockScratch<TC> block_scratch(const ModelState& s) {
  const ModelBuffers& b = *s.buf;
  BlockScratch<TC> x;
  x.qkv = b.qkv.p<TC>();
  x.proj = b.proj.p<TC>();
  x.att.scores = b.att_scores.data();
  x.att.dprobs = b.att_dprobs.data();
  x.att.probs = b.att_probs.empty() ? nullptr : b.att_probs.p<TC>();
  x.att.dscores = b.att_dscores.empty() ? nullptr : b.att_dscores.p<TC>();
  x.att.out_acc = b.att_out_acc.data();
  x.att.row_max = b.att_row_max.data();
  x.att.row_sum = b.att_row_sum.data();
  x.att.delta = b.att_delta.data();
  x.dc = b.dc.p<TC>();
  x.dgu = b.dgu.p<TC>();
  x.da = b.da.data();
  x.dqkv = b.dqkv.p<TC>();
  x.dq = b.dq.data();
  x.dk = b.dk.data();
  x.dv = b.dv.data();
  x.dtok = b.dtok.data();
  x.dheads = b.dheads.p<TC>();
  x.dxn = b.dxn.data();
  x.dbranch = b.dbranch.data();
  x.dw = b.dw.data();
  x.norm_partial = b.norm_partial.data();
  x.lora_t = b.lora.t.p<TC>();
  x.lora_dt = b.lora.dt.p<TC>();
  x.lora_y = b.lora.y.p<TC>();
  if (s.cfg.moe.enabled()) x.moe = sparse_mlp_scratch<TC>(b);
  return x;
}

BlockDims block_dims(const ModelState& s, const LayerParams& p) {
  BlockDims d;
  d.B = s.buf->B;
  d.T = s.buf->T;
  d.C = s.cfg.hidden_size;
  d.H = s.cfg.num_heads;
  d.KV = s.cfg.num_kv_heads;
  d.D = s.cfg.head_dim();
  d.F = s.cfg.intermediate_size;
  d.eps = static_cast<float>(s.cfg.rms_norm_eps);
  d.stream = s.round.stream;
  d.attn_scale = s.cfg.attn_scale();
  d.window = p.window;
  d.softcap = static_cast<float>(s.cfg.attn_logit_softcapping);
  d.norm = norm_form(s.cfg.norm_weight);
  d.placement = s.cfg.norm_placement;
  d.activation = s.cfg.mlp_activation;
  d.qk_norm = s.cfg.qk_norm;
  d.R = s.cfg.rotary_dim();
  d.fused = s.cfg.fused_projections();
  if (s.cfg.moe.enabled()) d.moe = sparse_mlp_dims(s, d.N());
  if (s.buf->packed) {
    d.starts = s.buf->starts.data();
    d.host_starts = s.buf->host_starts.data();
  }
  d.rope_starts = d.starts;
  if (s.buf->gapped) {
    d.gaps = s.buf->gaps.data();
    d.rope_starts = s.buf->rope_starts.data();
  }
  d.attention = attention_options(s.cfg);
  d.attention.gemm = s.gemm;
  d.gemm = s.gemm;
  return d;
}

}  // namespace

AttentionOptions attention_options(const ModelConfig& m) {
  AttentionOptions o;
  if (m.attention.kernel == AttentionChoice::tiled_gemm) o.kernel = AttentionKernel::tiled_gemm;
  if (m.attention.kernel == AttentionChoice::team) o.kernel = AttentionKernel::team;
  o.q_rows = m.attention.q_rows;
  o.k_cols = m.attention.k_cols;
  return o;
}

GemmOptions gemm_options(const ModelConfig& m) {
  GemmOptions o;
  if (m.gemm.bf16 == GemmChoice::widened) o.bf16 = Bf16Products::widened;
  if (m.gemm.fp32 == GemmFp32Choice::kokkos_kernels) o.fp32 = Fp32Backend::kokkos_kernels;
  if (m.gemm.fp32 == GemmFp32Choice::onednn) o.fp32 = Fp32Backend::onednn;
  return o;
}

LayerParams register_block(ModelState& s, const std::string& prefix, DType dtype) {
  const int64_t C = s.cfg.hidden_size, D = s.cfg.head_dim();
  const int64_t F = s.cfg.intermediate_size;
  auto add = [&](const std::string& module, std::vector<int64_t> shape, ParamRole role) {
    return add_param(s, prefix + "." + module, std::move(shape), role, dtype);
  };
  LayerParams p;
  const NormPlacement place = s.cfg.norm_placement;
  const bool fused = s.cfg.fused_projections();
  if (place != NormPlacement::post) p.ln1 = add("input_layernorm", {C}, ParamRole::norm);
  // q, k, v registered back to back: their compute copies form one ((H + 2 KV) D, C) matrix;
  // Phi-3's is one parameter, qkv_proj (rows [q | k | v]), in q's place (k and v: -1).
  if (fused) {
    p.q = add("self_attn.qkv_proj", {(s.cfg.num_heads + 2 * s.cfg.num_kv_heads) * D, C},
              ParamRole::linear);
  } else {
    p.q = add("self_attn.q_proj", {s.cfg.num_heads * D, C}, ParamRole::linear);
    p.k = add("self_attn.k_proj", {s.cfg.num_kv_heads * D, C}, ParamRole::linear);
    p.v = add("self_attn.v_proj", {s.cfg.num_kv_heads * D, C}, ParamRole::linear);
  }
  p.o = add("self_attn.o_proj", {C, s.cfg.num_heads * D}, ParamRole::linear);
  if (s.cfg.attention_bias != AttentionBias::none) {  // q, k, v back to back: one (Q) vector
    p.q_bias = add("self_attn.q_proj", {s.cfg.num_heads * D}, ParamRole::bias);
    p.k_bias = add("self_attn.k_proj", {s.cfg.num_kv_heads * D}, ParamRole::bias);
    p.v_bias = add("self_attn.v_proj", {s.cfg.num_kv_heads * D}, ParamRole::bias);
  }
  if (s.cfg.attention_bias == AttentionBias::qkvo) {
    p.o_bias = add("self_attn.o_proj", {C}, ParamRole::bias);
  }
  if (s.cfg.qk_norm == QkNorm::per_head) {
    p.q_norm = add("self_attn.q_norm", {D}, ParamRole::norm);
    p.k_norm = add("self_attn.k_norm", {D}, ParamRole::norm);
  } else if (s.cfg.qk_norm == QkNorm::whole) {
    p.q_norm = add("self_attn.q_norm", {s.cfg.num_heads * D}, ParamRole::norm);
    p.k_norm = add("self_attn.k_norm", {s.cfg.num_kv_heads * D}, ParamRole::norm);
  }
  // Llama's MLP input norm is its post_attention_layernorm; with norms on the sub-layers'
  // outputs (Gemma, OLMo 2) that name is the attention output's, and Gemma's MLP input norm is
  // pre_feedforward_layernorm.
  if (place == NormPlacement::pre) {
    p.ln2 = add("post_attention_layernorm", {C}, ParamRole::norm);
  } else {
    p.attn_out_norm = add("post_attention_layernorm", {C}, ParamRole::norm);
    if (place == NormPlacement::sandwich) {
      p.ln2 = add("pre_feedforward_layernorm", {C}, ParamRole::norm);
    }
    p.mlp_out_norm = add("post_feedforward_layernorm", {C}, ParamRole::norm);
  }
  if (s.cfg.moe.enabled()) {
    register_sparse_mlp(s, p, prefix, dtype);
    return p;
  }
  // gate and up back to back: one (2F, C) matrix (Phi-3: one parameter, gate_up_proj, rows
  // [gate | up], in gate's place).
  if (fused) {
    p.gate = add("mlp.gate_up_proj", {2 * F, C}, ParamRole::linear);
  } else {
    p.gate = add("mlp.gate_proj", {F, C}, ParamRole::linear);
    p.up = add("mlp.up_proj", {F, C}, ParamRole::linear);
  }
  p.down = add("mlp.down_proj", {C, F}, ParamRole::linear);
  return p;
}

std::vector<int> block_unit_params(const ModelState& s, const LayerParams& p) {
  std::vector<int> v;
  for (int i : {p.q, p.k, p.v, p.o, p.ln1, p.ln2, p.attn_out_norm, p.mlp_out_norm, p.q_bias,
                p.k_bias, p.v_bias, p.o_bias, p.q_norm, p.k_norm}) {
    if (i >= 0) v.push_back(i);  // -1: absent (Phi-3's fused q/k/v, the placement's norms)
  }
  if (p.router < 0) {
    for (int i : {p.gate, p.up, p.down}) {
      if (i >= 0) v.push_back(i);
    }
  } else {
    append_sparse_unit_params(s, p, &v);
  }
  for (int k = 0; k < kNumProj; ++k) {
    if (p.lora_a[k] >= 0) v.insert(v.end(), {p.lora_a[k], p.lora_b[k]});
  }
  return v;
}

std::vector<std::vector<int>> block_fused_groups(const ModelState& s, const LayerParams& p) {
  // Phi-3's qkv_proj and gate_up_proj are one parameter each: no group to form.
  std::vector<std::vector<int>> g;
  if (p.k >= 0) g.push_back({p.q, p.k, p.v});
  if (p.q_bias >= 0) g.push_back({p.q_bias, p.k_bias, p.v_bias});
  if (p.router < 0) {
    if (p.up >= 0) g.push_back({p.gate, p.up});
    return g;
  }
  for (auto& x : sparse_fused_groups(s, p)) g.push_back(std::move(x));
  return g;
}

void make_block_acts(BufferMaker& mk, BlockActs& a, int64_t B, int64_t T, const ModelConfig& c,
                     int64_t ep) {
  const int64_t N = B * T, C = c.hidden_size, H = c.num_heads, KV = c.num_kv_heads;
  const int64_t D = c.head_dim(), F = c.intermediate_size;
  a.rstd1 = mk.view<float>("rstd1", N);
  a.xn1 = mk.compute("xn1", N * C);
  if (c.qk_norm != QkNorm::none) {
    a.qk_pre = mk.compute("qk_pre", N * (H + KV) * D);
    a.qk_rstd = mk.view<float>("qk_rstd", N * (H + KV));
  }
  if (c.norm_placement != NormPlacement::pre) {
    a.attn_out = mk.view<float>("attn_out", N * C);
    a.rstd3 = mk.view<float>("rstd3", N);
    a.mlp_out = mk.view<float>("mlp_out", N * C);
    a.rstd4 = mk.view<float>("rstd4", N);
  }
  a.q = mk.compute("q", N * H * D);
  a.k = mk.compute("k", N * KV * D);
  a.v = mk.compute("v", N * KV * D);
  a.lse = mk.view<float>("lse", N * H);
  a.o = mk.compute("o", N * H * D);
  a.x1 = mk.view<float>("x1", N * C);
  a.rstd2 = mk.view<float>("rstd2", N);
  a.xn2 = mk.compute("xn2", N * C);
  if (c.moe.enabled()) {
    make_sparse_mlp_acts(mk, a.moe, N, C, c.moe, ep);
    return;
  }
  a.gu = mk.compute("gu", N * 2 * F);
  a.a = mk.compute("a", N * F);
}

template <class TC>
void run_block_forward(ModelState& s, const LayerParams& p, float* out, const float* inp,
                       BlockActs& a) {
  block_forward<TC>(s.space, out, inp, a, block_weights(s, p), block_scratch<TC>(s),
                    block_dims(s, p));
}

template <class TC>
void run_block_backward(ModelState& s, const LayerParams& p, float* dres, const float* inp,
                        const BlockActs& a) {
  // The registry index of a block weight (-1: an adapter the block does not have).
  auto param_of = [&](int weight) {
    const int moe = sparse_mlp_param(s, p, weight);
    if (moe != -2) return moe;
    if (weight == kLn1) return p.ln1;
    if (weight == kLn2) return p.ln2;
    if (weight >= kQBias) {
      const int extra[] = {p.q_bias, p.k_bias, p.v_bias,        p.o_bias,
                           p.q_norm, p.k_norm, p.attn_out_norm, p.mlp_out_norm};
      return extra[weight - kQBias];
    }
    if (weight < kLoraA0) return p.weight(weight - kProj0);
    if (weight < kLoraB0) return p.lora_a[weight - kLoraA0];
    return p.lora_b[weight - kLoraB0];
  };
  auto router = grad_router(
      [&](int weight) {
        const int i = param_of(weight);
        return i >= 0 && s.params.info(i).trainable;
      },
      [&](int weight, const float* dw) {
        const int i = param_of(weight);
        if (i < 0) return;  // Phi-3's k, v, up: part of the fused parameter kQ / kGate took
        // Norm weights keep their own compute dtype; projections and adapters compute in the
        // compute dtype.
        const bool norm = weight == kLn1 || weight == kLn2 || weight == kQNorm ||
                          weight == kKNorm || weight == kAttnOutNorm || weight == kMlpOutNorm;
        accumulate(s, i, dw, norm ? s.round_compute[i] : s.round.compute);
      });
  block_backward<TC>(s.space, dres, inp, a, block_weights(s, p), block_scratch<TC>(s),
                     block_dims(s, p), router);
}

#define KKTRAIN_INST_LAYERS(TC)                                                               \
  template void run_block_forward<TC>(ModelState&, const LayerParams&, float*, const float*,  \
                                      BlockActs&);                                            \
  template void run_block_backward<TC>(ModelState&, const LayerParams&, float*, const float*, \
                                       const BlockActs&);
KKTRAIN_INST_LAYERS(float)
KKTRAIN_INST_LAYERS(bf16)
#undef KKTRAIN_INST_LAYERS

}  // namespace kktrain
