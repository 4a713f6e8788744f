// The Transformer's side of the layer functions (model/block.hpp): it hands a block its gathered
// compute weights, this micro-batch's buffers and sizes, and routes the block's weight gradients
// to the parameters they belong to. Nothing here computes.
#include "model/block.hpp"
#include "model/transformer.hpp"
#include "model/transformer_buffers.hpp"

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

}  // namespace

BlockWeights Transformer::block_weights(const LayerParams& p) const {
  BlockWeights bw;
  bw.ln1 = wf(p.ln1);
  bw.ln2 = wf(p.ln2);
  bw.qkv = w(p.q);  // q, k, v are one fused group: adjacent rows of the compute buffer
  bw.o = w(p.o);
  if (p.router < 0) {
    bw.gate_up = w(p.gate);  // gate, up likewise
    bw.down = w(p.down);
  } else {  // a sparse MLP: the experts' w1/w3 and w2 are fused stacks (compute_layout)
    bw.moe.router = wf(p.router);
    bw.moe.w13 = w(p.w1[expert0_]);  // this rank's first expert
    bw.moe.w2 = w(p.w2[expert0_]);
    if (p.shared_gate >= 0) {
      bw.moe.shared_gate_up = w(p.shared_gate);
      bw.moe.shared_down = w(p.shared_down);
    }
  }
  for (int k = 0; k < kNumProj; ++k) {
    if (p.lora_a[k] < 0) continue;
    LoraWeights& l = bw.lora[k];
    l.a = w(p.lora_a[k]);
    l.b = w(p.lora_b[k]);
    l.r = params_.info(p.lora_a[k]).shape[0];
    l.scale = static_cast<float>(peft_.alpha / static_cast<double>(peft_.dim));
  }
  bw.rope_cos = rope_cos_.data();
  bw.rope_sin = rope_sin_.data();
  return bw;
}

template <class TC>
BlockScratch<TC> Transformer::block_scratch() const {
  const Buffers& b = *buf_;
  BlockScratch<TC> s;
  s.qkv = b.qkv.p<TC>();
  s.proj = b.proj.p<TC>();
  s.att.scores = b.att_scores.data();
  s.att.dprobs = b.att_dprobs.data();
  s.att.probs = b.att_probs.empty() ? nullptr : b.att_probs.p<TC>();
  s.att.dscores = b.att_dscores.empty() ? nullptr : b.att_dscores.p<TC>();
  s.att.out_acc = b.att_out_acc.data();
  s.att.row_max = b.att_row_max.data();
  s.att.row_sum = b.att_row_sum.data();
  s.att.delta = b.att_delta.data();
  s.dc = b.dc.p<TC>();
  s.dgu = b.dgu.p<TC>();
  s.da = b.da.data();
  s.dqkv = b.dqkv.p<TC>();
  s.dq = b.dq.data();
  s.dk = b.dk.data();
  s.dv = b.dv.data();
  s.dtok = b.dtok.data();
  s.dheads = b.dheads.p<TC>();
  s.dxn = b.dxn.data();
  s.dw = b.dw.data();
  s.norm_partial = b.norm_partial.data();
  s.lora_t = b.lora_t.p<TC>();
  s.lora_dt = b.lora_dt.p<TC>();
  s.lora_y = b.lora_y.p<TC>();
  if (cfg_.moe.enabled()) {
    MoeScratch<TC>& m = s.moe;
    m.logits = b.moe_logits.data();
    m.y = b.moe_y.data();
    m.dye = b.moe_dye.p<TC>();
    m.da = b.moe_da.data();
    m.dh = b.moe_dh.p<TC>();
    m.dxs = b.moe_dxs.p<TC>();
    auto opt = [](const TBuf& t) { return t.empty() ? nullptr : t.p<TC>(); };
    m.ye_local = opt(b.moe_ye_local);
    m.dye_local = opt(b.moe_dye_local);
    m.dx_local = opt(b.moe_dx_local);
    m.peer = opt(b.moe_peer);
    m.dweight = b.moe_dweight.data();
    m.dlogits = b.moe_dlogits.data();
    m.sy = b.moe_sy.empty() ? nullptr : b.moe_sy.p<TC>();
    m.sdgu = b.moe_sdgu.empty() ? nullptr : b.moe_sdgu.p<TC>();
    m.sda = b.moe_sda.data();
    m.dc = b.dc.p<TC>();
  }
  return s;
}

BlockDims Transformer::block_dims() const {
  BlockDims d;
  d.B = buf_->B;
  d.T = buf_->T;
  d.C = cfg_.hidden_size;
  d.H = cfg_.num_heads;
  d.KV = cfg_.num_kv_heads;
  d.D = cfg_.head_dim();
  d.F = cfg_.intermediate_size;
  d.eps = static_cast<float>(cfg_.rms_norm_eps);
  d.stream = round_.stream;
  const MoeConfig& e = cfg_.moe;
  if (e.enabled()) {
    d.moe.N = d.N();
    d.moe.C = d.C;
    d.moe.E = e.num_experts;
    d.moe.K = e.top_k;
    d.moe.F = e.intermediate_size;
    d.moe.Fs = e.shared_expert_intermediate_size;
    d.moe.norm_topk = e.norm_topk_prob;
    d.moe.aux_grad = moe_aux_grad_.extent(0) > 0 ? moe_aux_grad_.data() : nullptr;
    d.moe.ep = ep_ > 1 ? ep_comm_.get() : nullptr;
    d.moe.expert0 = expert0_;
  }
  return d;
}

template <class TC>
void Transformer::block_forward(const LayerParams& p, float* out, const float* inp, BlockActs& a) {
  kktrain::block_forward<TC>(space_, out, inp, a, block_weights(p), block_scratch<TC>(),
                             block_dims());
}

template <class TC>
void Transformer::block_backward(const LayerParams& p, float* dres, const float* inp,
                                 const BlockActs& a) {
  // The registry index of a block weight (-1: an adapter the block does not have).
  auto param_of = [&p, this](int weight) {
    if (weight >= kMoeExpert0) {  // local expert -> its global index
      const int e = static_cast<int>(expert0_) + (weight - kMoeExpert0) / 3;
      const int which = (weight - kMoeExpert0) % 3;
      return which == 0 ? p.w1[e] : which == 1 ? p.w3[e] : p.w2[e];
    }
    if (weight == kMoeRouter) return p.router;
    if (weight == kMoeSharedGate) return p.shared_gate;
    if (weight == kMoeSharedUp) return p.shared_up;
    if (weight == kMoeSharedDown) return p.shared_down;
    if (weight == kLn1) return p.ln1;
    if (weight == kLn2) return p.ln2;
    if (weight < kLoraA0) return p.weight(weight - kProj0);
    if (weight < kLoraB0) return p.lora_a[weight - kLoraA0];
    return p.lora_b[weight - kLoraB0];
  };
  auto router = grad_router(
      [&](int weight) {
        const int i = param_of(weight);
        return i >= 0 && params_.info(i).trainable;
      },
      [&](int weight, const float* dw) {
        const int i = param_of(weight);
        // Norm weights keep their own compute dtype; projections and adapters compute in the
        // compute dtype.
        accumulate(i, dw, weight == kLn1 || weight == kLn2 ? round_compute_[i] : round_.compute);
      });
  kktrain::block_backward<TC>(space_, dres, inp, a, block_weights(p), block_scratch<TC>(),
                              block_dims(), router);
}

#define KKTRAIN_INST_LAYERS(TC)                                                           \
  template BlockScratch<TC> Transformer::block_scratch<TC>() const;                       \
  template void Transformer::block_forward<TC>(const LayerParams&, float*, const float*,  \
                                               BlockActs&);                               \
  template void Transformer::block_backward<TC>(const LayerParams&, float*, const float*, \
                                                const BlockActs&);
KKTRAIN_INST_LAYERS(float)
KKTRAIN_INST_LAYERS(bf16)
#undef KKTRAIN_INST_LAYERS

}  // namespace kktrain
