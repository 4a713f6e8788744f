// The Transformer's working buffers for a micro-batch shape (model/transformer_buffers.hpp):
// activations kept for backward, the scratch every layer reuses, the head's chunk of logits, the
// sparse MLPs' and the MTP head's tensors. One code path allocates them and plans their bytes
// (buffer_plan, the memory prediction), so the two cannot disagree.
#include <algorithm>

#include "core/errors.hpp"
#include "model/transformer.hpp"
#include "model/transformer_buffers.hpp"
#include "ops/attention.hpp"
#include "ops/kernels.hpp"

namespace kktrain {

namespace {

// Allocates the model's working buffers, or only records their sizes (planning), through one code
// path: Transformer::buffer_plan() and ensure_buffers() cannot disagree.
class BufferMaker {
 public:
  BufferMaker(bool allocate, bool bf16_compute, std::vector<BufferSpec>* plan)
      : allocate_(allocate), bf16_(bf16_compute), plan_(plan) {}
  void group(const char* g) { group_ = g; }
  template <class T>
  DView<T> view(const char* name, int64_t n) {
    record(name, n * static_cast<int64_t>(sizeof(T)));
    return allocate_ ? DView<T>(std::string(name), n) : DView<T>();
  }
  TBuf compute(const char* name, int64_t n) {  // compute-dtype tensor
    TBuf b;
    if (bf16_) {
      b.h = view<bf16>(name, n);
    } else {
      b.f = view<float>(name, n);
    }
    return b;
  }

 private:
  void record(const char* name, int64_t bytes) {
    if (!plan_) return;
    for (auto& s : *plan_) {
      if (s.name == name && s.group == group_ && s.bytes == bytes) {
        ++s.copies;
        return;
      }
    }
    plan_->push_back(BufferSpec{name, group_, bytes, 1});
  }
  bool allocate_, bf16_;
  std::vector<BufferSpec>* plan_;
  std::string group_;
};

void make_acts(BufferMaker& mk, BlockActs& a, int64_t B, int64_t T, const ModelConfig& c,
               int64_t ep = 1) {
  const int64_t N = B * T, C = c.hidden_size, H = c.num_heads, KV = c.num_kv_heads;
  const int64_t D = c.head_dim(), F = c.intermediate_size;
  a.rstd1 = mk.view<float>("rstd1", N);
  a.xn1 = mk.compute("xn1", N * C);
  a.q = mk.compute("q", N * H * D);
  a.k = mk.compute("k", N * KV * D);
  a.v = mk.compute("v", N * KV * D);
  a.lse = mk.view<float>("lse", N * H);
  a.o = mk.compute("o", N * H * D);
  a.x1 = mk.view<float>("x1", N * C);
  a.rstd2 = mk.view<float>("rstd2", N);
  a.xn2 = mk.compute("xn2", N * C);
  const MoeConfig& e = c.moe;
  if (!e.enabled()) {
    a.gu = mk.compute("gu", N * 2 * F);
    a.a = mk.compute("a", N * F);
    return;
  }
  const int64_t E = e.num_experts, NK = N * e.top_k, Fe = e.intermediate_size;
  const int64_t Fs = e.shared_expert_intermediate_size;
  MoeActs& m = a.moe;
  m.xf = mk.view<float>("moe_router_in", N * C);
  m.probs = mk.view<float>("moe_probs", N * E);
  m.choice = mk.view<int32_t>("moe_choice", NK);
  m.weight = mk.view<float>("moe_weight", NK);
  m.slot = mk.view<int32_t>("moe_slot", NK);
  m.counts = mk.view<int32_t>("moe_counts", E);
  m.prob_sums = mk.view<float>("moe_prob_sums", E);
  // The rows this rank's experts run: its own NK, or under expert parallelism up to every peer's
  // (dropless: all of the group's tokens may choose this rank's experts).
  const int64_t R = ep * NK;
  m.xs = mk.compute("moe_xs", NK * C);
  m.ye = mk.compute("moe_ye", NK * C);
  if (ep > 1) m.xe = mk.compute("moe_xe", R * C);
  m.h = mk.compute("moe_h", R * 2 * Fe);
  m.act = mk.compute("moe_act", R * Fe);
  if (Fs > 0) {
    m.sgu = mk.compute("moe_shared_gu", N * 2 * Fs);
    m.sa = mk.compute("moe_shared_a", N * Fs);
  }
}

// A sparse MLP's scratch (model/moe.hpp), reused by every layer.
void make_moe_scratch(BufferMaker& mk, Transformer::Buffers& b, int64_t N, const MoeConfig& e,
                      int64_t C, int64_t ep) {
  const int64_t E = e.num_experts, NK = N * e.top_k, Fe = e.intermediate_size, R = ep * NK;
  const int64_t Fs = e.shared_expert_intermediate_size;
  b.moe_logits = mk.view<float>("moe_logits", N * E);
  b.moe_y = mk.view<float>("moe_y", N * C);
  b.moe_dye = mk.compute("moe_dye", NK * C);
  b.moe_dxs = mk.compute("moe_dxs", NK * C);
  b.moe_da = mk.view<float>("moe_da", R * Fe);
  b.moe_dh = mk.compute("moe_dh", R * 2 * Fe);
  if (ep > 1) {
    b.moe_ye_local = mk.compute("moe_ye_local", R * C);
    b.moe_dye_local = mk.compute("moe_dye_local", R * C);
    b.moe_dx_local = mk.compute("moe_dx_local", R * C);
    b.moe_peer = mk.compute("moe_peer_major", R * C);
  }
  b.moe_dweight = mk.view<float>("moe_dweight", NK);
  b.moe_dlogits = mk.view<float>("moe_dlogits", N * E);
  if (Fs > 0) {
    b.moe_sy = mk.compute("moe_shared_y", N * C);
    b.moe_sdgu = mk.compute("moe_shared_dgu", N * 2 * Fs);
    b.moe_sda = mk.view<float>("moe_shared_da", N * Fs);
  }
}

}  // namespace

void Transformer::make_buffers(Buffers& b, int64_t B, int64_t T, bool allocate,
                               std::vector<BufferSpec>* plan) const {
  BufferMaker mk(allocate, round_.compute == Rounding::bf16, plan);
  b = Buffers();
  b.B = B;
  b.T = T;
  const int64_t N = B * T, C = cfg_.hidden_size, V = cfg_.vocab_size;
  const int64_t H = cfg_.num_heads, KV = cfg_.num_kv_heads, D = cfg_.head_dim();
  const int64_t F = cfg_.intermediate_size, Q = (H + 2 * KV) * D;
  const bool ckpt = cfg_.activation_checkpointing;
  mk.group("batch");
  b.ids = mk.view<int32_t>("ids", N);
  b.targets = mk.view<int32_t>("targets", N);
  b.row_start = mk.view<int32_t>("row_start", V + 1);
  b.positions = mk.view<int32_t>("positions", N);
  // Kept from forward to backward: the residual stream and each layer's activations (one set,
  // recomputed per layer, with activation checkpointing).
  mk.group("activations");
  for (int64_t l = 0; l <= cfg_.num_layers; ++l) b.res.push_back(mk.view<float>("res", N * C));
  const int64_t nacts = ckpt ? std::min<int64_t>(1, cfg_.num_layers) : cfg_.num_layers;
  b.acts.resize(nacts);
  mk.group(ckpt ? "recompute" : "activations");
  for (auto& a : b.acts) make_acts(mk, a, B, T, cfg_, ep_);
  mk.group("head");
  b.xf = mk.compute("xf", N * C);
  b.rstd_f = mk.view<float>("rstd_f", N);
  b.losses = mk.view<float>("losses", N);
  b.dxf = mk.view<float>("dxf", N * C);
  b.logits = mk.compute("logits", std::min(N, cfg_.loss_chunk_tokens) * V);
  b.hidden = mk.view<float>("hidden", N * C);
  mk.group("scratch");
  if (ckpt) b.recompute_out = mk.view<float>("recompute_out", N * C);
  b.qkv = mk.compute("qkv", N * Q);
  b.proj = mk.compute("proj", N * C);
  // The tiled attention's workspace: tiles and row statistics, linear in T (none of it T x T).
  const AttentionWorkspaceSizes aw = attention_workspace_sizes(AttentionDims{B, T, H, KV, D, 1.0f},
                                                               attention_kernel(), round_.compute);
  b.att_scores = mk.view<float>("att_scores", aw.scores);
  b.att_dprobs = mk.view<float>("att_dprobs", aw.dprobs);
  b.att_probs = mk.compute("att_probs", aw.probs);
  b.att_dscores = mk.compute("att_dscores", aw.dscores);
  b.att_out_acc = mk.view<float>("att_out_acc", aw.out_acc);
  b.att_row_max = mk.view<float>("att_row_max", aw.row_stats);
  b.att_row_sum = mk.view<float>("att_row_sum", aw.row_stats);
  b.att_delta = mk.view<float>("att_delta", aw.delta);
  b.dres = mk.view<float>("dres", N * C);
  b.dc = mk.compute("dc", N * C);
  b.dxn = mk.view<float>("dxn", N * C);
  if (cfg_.moe.enabled()) {
    make_moe_scratch(mk, b, N, cfg_.moe, C, ep_);
  } else {
    b.dgu = mk.compute("dgu", N * 2 * F);
    b.da = mk.view<float>("da", N * F);
  }
  b.dqkv = mk.compute("dqkv", N * Q);
  b.dq = mk.view<float>("dq", N * H * D);
  b.dk = mk.view<float>("dk", N * KV * D);
  b.dv = mk.view<float>("dv", N * KV * D);
  b.dtok = mk.view<float>("dtok", N * H * D);
  b.dheads = mk.compute("dheads", N * H * D);
  if (peft_.enabled) {
    const int64_t widest = std::max({Q, 2 * F, C});
    b.lora_t = mk.compute("lora_t", N * peft_.dim);
    b.lora_dt = mk.compute("lora_dt", N * peft_.dim);
    b.lora_y = mk.compute("lora_y", N * widest);
  }
  const MoeConfig& moe = cfg_.moe;
  const int64_t moe_dw =  // the stacked expert gradients, the router's, the shared expert's
      std::max({moe.num_experts * 2 * moe.intermediate_size * C, moe.num_experts * C,
                2 * moe.shared_expert_intermediate_size * C});
  const int64_t dw_size = std::max({Q * C, 2 * F * C, V * C, 2 * C * C, H * D * C, moe_dw});
  b.dw = mk.view<float>("dw", dw_size);
  b.norm_partial = mk.view<float>("norm_partial", rmsnorm_partial_size(N, C));
  if (!mtp_.empty()) {
    b.dcat = mk.view<float>("dcat", N * 2 * C);
    b.dh = mk.view<float>("dh", N * C);
    b.dh_prev = mk.view<float>("dh_prev", N * C);
    b.den = mk.view<float>("den", N * C);
    b.dhn = mk.view<float>("dhn", N * C);
    b.demb = mk.view<float>("demb", N * C);
    b.en = mk.compute("mtp_en", N * C);
    b.hn = mk.compute("mtp_hn", N * C);
    b.mtp.resize(mtp_.size());
    b.mtp_block.resize(mtp_.size());
    for (std::size_t k = 0; k < mtp_.size(); ++k) {
      mk.group("mtp");
      MtpActs& m = b.mtp[k];
      m.ids = mk.view<int32_t>("mtp_ids", N);
      m.targets = mk.view<int32_t>("mtp_targets", N);
      m.row_start = mk.view<int32_t>("mtp_row_start", V + 1);
      m.positions = mk.view<int32_t>("mtp_positions", N);
      m.emb = mk.view<float>("mtp_emb", N * C);
      m.rstd_e = mk.view<float>("mtp_rstd_e", N);
      m.rstd_h = mk.view<float>("mtp_rstd_h", N);
      m.cat = mk.compute("mtp_cat", N * 2 * C);
      m.h_in = mk.view<float>("mtp_h_in", N * C);
      m.h_out = mk.view<float>("mtp_h_out", N * C);
      m.xf = mk.compute("mtp_xf", N * C);
      m.rstd_f = mk.view<float>("mtp_rstd_f", N);
      m.dxf = mk.view<float>("mtp_dxf", N * C);
      m.losses = mk.view<float>("mtp_losses", N);
      make_acts(mk, b.mtp_block[k], B, T, cfg_);
    }
  }
}

void Transformer::ensure_buffers(int64_t B, int64_t T) {
  if (buf_->B == B && buf_->T == T) return;
  if (T > cfg_.max_seq_len) {
    throw InputError("sequence length " + std::to_string(T) + " exceeds model.max_seq_len " +
                     std::to_string(cfg_.max_seq_len));
  }
  *buf_ = Buffers();  // free the old shape's buffers before allocating the new ones
  make_buffers(*buf_, B, T, true, nullptr);
  hidden_ = buf_->hidden;
  kept_logits_ = DView<float>();
}

std::vector<BufferSpec> Transformer::buffer_plan(int64_t B, int64_t T) const {
  std::vector<BufferSpec> plan;
  Buffers scratch;
  make_buffers(scratch, B, T, false, &plan);
  return plan;
}

}  // namespace kktrain
