// Transformer setup: parameter registration (canonical names, ties, protected fp32), precision
// flags, deterministic initialization, compute-weight casts and buffer management.
#include "model/transformer.hpp"

#include <algorithm>
#include <cmath>

#include "core/errors.hpp"
#include "core/glob.hpp"
#include "core/random.hpp"
#include "model/kernels.hpp"
#include "model/transformer_buffers.hpp"

namespace kktrain {

Transformer::Transformer(const ModelConfig& cfg, const ResolvedPrecision& precision, bool allocate,
                         const PeftConfig& peft)
    : cfg_(cfg), prec_(precision), peft_(peft), buf_(std::make_unique<Buffers>()) {
  rc_ = prec_.compute == DType::bfloat16;
  register_params();
  const ParamInfo& emb = params_.info(embed_);
  if (prec_.world_size == 1) {
    // Autocast semantics: the stream keeps the storage dtype promoted with the compute dtype.
    rs_ = rc_ && emb.dtype == DType::bfloat16;
  } else {
    rs_ = prec_.output_applied ? *prec_.output == DType::bfloat16 : rc_;
  }
  round_compute_.resize(params_.size());
  for (int i = 0; i < params_.size(); ++i) {
    const ParamInfo& p = params_.info(i);
    bool r = false;
    if (!p.keep_fp32) {
      switch (p.role) {
        case ParamRole::linear:
        case ParamRole::lora_a:
        case ParamRole::lora_b:
          r = rc_;
          break;
        case ParamRole::embedding:
          r = lm_head_ == embed_ ? rc_ : rs_;  // a tied embedding is also the LM head's weight
          break;
        case ParamRole::norm:
          r = rs_;
          break;
      }
    }
    round_compute_[i] = r;
  }
  if (!allocate) return;
  params_.allocate();
  staged_grad_.resize(params_.size());
  const bool multi_use_embed = lm_head_ == embed_ || !mtp_.empty();
  if (multi_use_embed) staged_grad_[embed_] = DView<float>("staged_grad_embed", emb.numel);
  if (lm_head_ != embed_ && !mtp_.empty()) {
    staged_grad_[lm_head_] = DView<float>("staged_grad_lm_head", params_.info(lm_head_).numel);
  }
  wcompute_ = DView<float>("compute_weights", params_.total_numel());
  if (lm_head_ == embed_ && rs_ != round_compute_[embed_]) {
    embed_stream_ = DView<float>("embed_stream", emb.numel);
  }
  const int64_t half = cfg_.head_dim() / 2;
  rope_cos_ = DView<float>("rope_cos", cfg_.max_seq_len * half);
  rope_sin_ = DView<float>("rope_sin", cfg_.max_seq_len * half);
  rope_tables(rope_cos_.data(), rope_sin_.data(), cfg_.max_seq_len, cfg_.head_dim(),
              static_cast<float>(cfg_.rope_theta));
}

Transformer::~Transformer() = default;

int Transformer::add_param(const std::string& module, std::vector<int64_t> shape, ParamRole role,
                           DType dtype) {
  const std::string name = module + ".weight";
  // Model-protected parameters (model.keep_in_fp32 globs) are fp32 in storage and compute.
  const bool keep = glob_match_any(cfg_.keep_in_fp32, name);
  const int i = params_.add(name, module, std::move(shape), role, keep ? DType::float32 : dtype);
  params_.info_mut(i).keep_fp32 = keep;
  return i;
}

Transformer::LayerParams Transformer::register_block(const std::string& prefix, DType dtype) {
  const int64_t C = cfg_.hidden_size, D = cfg_.head_dim();
  const int64_t F = cfg_.intermediate_size;
  auto add = [&](const std::string& module, std::vector<int64_t> shape, ParamRole role) {
    return add_param(prefix + "." + module, std::move(shape), role, dtype);
  };
  LayerParams p;
  p.ln1 = add("input_layernorm", {C}, ParamRole::norm);
  // q, k, v registered back to back: their compute copies form one ((H + 2 KV) D, C) matrix.
  p.q = add("self_attn.q_proj", {cfg_.num_heads * D, C}, ParamRole::linear);
  p.k = add("self_attn.k_proj", {cfg_.num_kv_heads * D, C}, ParamRole::linear);
  p.v = add("self_attn.v_proj", {cfg_.num_kv_heads * D, C}, ParamRole::linear);
  p.o = add("self_attn.o_proj", {C, cfg_.num_heads * D}, ParamRole::linear);
  p.ln2 = add("post_attention_layernorm", {C}, ParamRole::norm);
  // gate and up back to back: one (2F, C) matrix.
  p.gate = add("mlp.gate_proj", {F, C}, ParamRole::linear);
  p.up = add("mlp.up_proj", {F, C}, ParamRole::linear);
  p.down = add("mlp.down_proj", {C, F}, ParamRole::linear);
  return p;
}

void Transformer::register_params() {
  const DType st = prec_.storage;
  const int64_t C = cfg_.hidden_size, V = cfg_.vocab_size;
  embed_ = add_param("model.embed_tokens", {V, C}, ParamRole::embedding, st);
  for (int64_t l = 0; l < cfg_.num_layers; ++l) {
    layers_.push_back(register_block("model.layers." + std::to_string(l), st));
  }
  final_norm_ = add_param("model.norm", {C}, ParamRole::norm, st);
  if (cfg_.tie_word_embeddings) {
    lm_head_ = embed_;
    params_.add_alias(embed_, "lm_head.weight");
  } else {
    lm_head_ = add_param("lm_head", {V, C}, ParamRole::linear, st);
  }
  for (int64_t k = 0; k < cfg_.mtp_num_layers; ++k) {
    const std::string pre = "mtp.layers." + std::to_string(k);
    MtpParams m;
    m.enorm = add_param(pre + ".enorm", {C}, ParamRole::norm, st);
    m.hnorm = add_param(pre + ".hnorm", {C}, ParamRole::norm, st);
    m.eh_proj = add_param(pre + ".eh_proj", {C, 2 * C}, ParamRole::linear, st);
    m.block = register_block(pre, st);
    m.norm = add_param(pre + ".norm", {C}, ParamRole::norm, st);
    mtp_.push_back(m);
  }
  // LoRA adapters are registered after every base parameter, so the base layout (and the fused
  // q/k/v and gate/up compute weights) does not change.
  if (peft_.enabled) {
    for (auto& l : layers_) register_lora(l);
    for (auto& m : mtp_) register_lora(m.block);
    bool any = false;
    for (auto& pi : params_.all()) any = any || pi.role == ParamRole::lora_a;
    if (!any) {
      throw ConfigError("peft.target_modules",
                        "selects no projection (q_proj, k_proj, v_proj, o_proj, gate_proj, "
                        "up_proj, down_proj of any layer)");
    }
    // Adapters train; the base model starts frozen (freeze_config may unfreeze parts of it).
    for (int i = 0; i < params_.size(); ++i) {
      const ParamRole role = params_.info(i).role;
      params_.info_mut(i).trainable = role == ParamRole::lora_a || role == ParamRole::lora_b;
    }
  }
}

void Transformer::init_weights() {
  const double std = cfg_.init_std;
  const double out_std = std / std::sqrt(2.0 * std::max<int64_t>(1, cfg_.num_layers));
  for (int i = 0; i < params_.size(); ++i) {
    const ParamInfo& p = params_.info(i);
    const uint64_t seed = cfg_.seed, stream = name_stream(p.name);
    const bool is_out =
        p.name.find("o_proj") != std::string::npos || p.name.find("down_proj") != std::string::npos;
    const float s = static_cast<float>(is_out ? out_std : std);
    const bool ones = p.role == ParamRole::norm;
    dispatch_dtype(p.dtype, [&](auto tag) {
      using T = decltype(tag);
      if (p.role == ParamRole::lora_a) {
        // PEFT's kaiming_uniform_(a = sqrt(5)): U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
        const float bound = 1.0f / std::sqrt(static_cast<float>(p.shape[1]));
        init_uniform<T>(params_.data<T>(i).data(), p.numel, seed, stream, -bound, bound);
      } else if (p.role == ParamRole::lora_b) {
        init_normal<T>(params_.data<T>(i).data(), p.numel, seed, stream, 0.0f, 0.0f);  // zeros
      } else {
        init_normal<T>(params_.data<T>(i).data(), p.numel, seed, stream, ones ? 0.0f : s,
                       ones ? 1.0f : 0.0f);
      }
    });
  }
  Kokkos::fence();
}

void Transformer::refresh_compute_weights() {
  for (int i = 0; i < params_.size(); ++i) {
    const ParamInfo& p = params_.info(i);
    dispatch_dtype(p.dtype, [&](auto tag) {
      using T = decltype(tag);
      cast_to_float<T>(wcompute_.data() + p.index_offset, params_.data<T>(i).data(), p.numel,
                       round_compute_[i]);
      if (i == embed_ && embed_stream_.extent(0) > 0) {
        cast_to_float<T>(embed_stream_.data(), params_.data<T>(i).data(), p.numel, rs_);
      }
    });
  }
}

const float* Transformer::w(int param) const {
  return wcompute_.data() + params_.info(param).index_offset;
}

void Transformer::accumulate(int param, const float* dw, bool round_dw) {
  const ParamInfo& p = params_.info(param);
  if (!p.trainable) return;
  if (staged_grad_[param].extent(0) > 0) {  // fp32 sum now, one rounding in flush_staged_grads
    accumulate_grad<float>(staged_grad_[param].data(), dw, p.numel, round_dw && !p.keep_fp32);
    return;
  }
  dispatch_dtype(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    accumulate_grad<T>(params_.grad<T>(param).data(), dw, p.numel, round_dw && !p.keep_fp32);
  });
}

void Transformer::flush_staged_grads() {
  for (int i = 0; i < params_.size(); ++i) {
    DView<float>& st = staged_grad_[i];
    if (st.extent(0) == 0 || !params_.info(i).trainable) continue;
    dispatch_dtype(params_.info(i).dtype, [&](auto tag) {
      using T = decltype(tag);
      accumulate_grad<T>(params_.grad<T>(i).data(), st.data(), params_.info(i).numel, false);
    });
    Kokkos::deep_copy(st, 0.0f);
  }
}

namespace {
void alloc_acts(Transformer::LayerActs& a, int64_t B, int64_t T, const ModelConfig& c);
}  // namespace

void Transformer::ensure_buffers(int64_t B, int64_t T) {
  if (buf_->B == B && buf_->T == T) return;
  if (T > cfg_.max_seq_len) {
    throw InputError("sequence length " + std::to_string(T) + " exceeds model.max_seq_len " +
                     std::to_string(cfg_.max_seq_len));
  }
  Buffers& b = *buf_;
  b = Buffers();
  b.B = B;
  b.T = T;
  const int64_t N = B * T, C = cfg_.hidden_size, V = cfg_.vocab_size;
  const int64_t H = cfg_.num_heads, KV = cfg_.num_kv_heads, D = cfg_.head_dim();
  const int64_t F = cfg_.intermediate_size, Q = (H + 2 * KV) * D;
  b.ids = DView<int32_t>("ids", N);
  b.targets = DView<int32_t>("targets", N);
  b.row_start = DView<int32_t>("row_start", V + 1);
  b.positions = DView<int32_t>("positions", N);
  for (int64_t l = 0; l <= cfg_.num_layers; ++l) b.res.emplace_back("res", N * C);
  const int64_t nacts =
      cfg_.activation_checkpointing ? std::min<int64_t>(1, cfg_.num_layers) : cfg_.num_layers;
  b.acts.resize(nacts);
  for (auto& a : b.acts) alloc_acts(a, B, T, cfg_);
  if (cfg_.activation_checkpointing) b.recompute_out = DView<float>("recompute_out", N * C);
  b.qkv = DView<float>("qkv", N * Q);
  b.oheads = DView<float>("oheads", N * H * D);
  b.proj = DView<float>("proj", N * C);
  b.pc = DView<float>("pc", T * T);
  b.dp = DView<float>("dp", T * T);
  b.xf = DView<float>("xf", N * C);
  b.rstd_f = DView<float>("rstd_f", N);
  b.losses = DView<float>("losses", N);
  b.dxf = DView<float>("dxf", N * C);
  b.dres = DView<float>("dres", N * C);
  b.dc = DView<float>("dc", N * C);
  b.dxn = DView<float>("dxn", N * C);
  b.dgu = DView<float>("dgu", N * 2 * F);
  b.da = DView<float>("da", N * F);
  b.dqkv = DView<float>("dqkv", N * Q);
  b.dq = DView<float>("dq", N * H * D);
  b.dk = DView<float>("dk", N * KV * D);
  b.dv = DView<float>("dv", N * KV * D);
  b.dtok = DView<float>("dtok", N * H * D);
  b.dheads = DView<float>("dheads", N * H * D);
  if (peft_.enabled) {
    const int64_t widest = std::max({H * D, F, C});
    b.lora_t = DView<float>("lora_t", N * peft_.dim);
    b.lora_dt = DView<float>("lora_dt", N * peft_.dim);
    b.lora_y = DView<float>("lora_y", N * widest);
  }
  const int64_t dw_size = std::max({Q * C, 2 * F * C, V * C, 2 * C * C, H * D * C});
  b.dw = DView<float>("dw", dw_size);
  logits_ = DView<float>("logits", N * V);
  hidden_ = DView<float>("hidden", N * C);
  if (!mtp_.empty()) {
    b.dcat = DView<float>("dcat", N * 2 * C);
    b.dh = DView<float>("dh", N * C);
    b.dh_prev = DView<float>("dh_prev", N * C);
    b.den = DView<float>("den", N * C);
    b.dhn = DView<float>("dhn", N * C);
    b.demb = DView<float>("demb", N * C);
    b.mtp_logits = DView<float>("mtp_logits", N * V);
    b.en = DView<float>("mtp_en", N * C);
    b.hn = DView<float>("mtp_hn", N * C);
    b.mtp.resize(mtp_.size());
    b.mtp_block.resize(mtp_.size());
    for (std::size_t k = 0; k < mtp_.size(); ++k) {
      MtpActs& m = b.mtp[k];
      m.ids = DView<int32_t>("mtp_ids", N);
      m.targets = DView<int32_t>("mtp_targets", N);
      m.row_start = DView<int32_t>("mtp_row_start", V + 1);
      m.positions = DView<int32_t>("mtp_positions", N);
      m.emb = DView<float>("mtp_emb", N * C);
      m.rstd_e = DView<float>("mtp_rstd_e", N);
      m.rstd_h = DView<float>("mtp_rstd_h", N);
      m.cat = DView<float>("mtp_cat", N * 2 * C);
      m.h_in = DView<float>("mtp_h_in", N * C);
      m.h_out = DView<float>("mtp_h_out", N * C);
      m.xf = DView<float>("mtp_xf", N * C);
      m.rstd_f = DView<float>("mtp_rstd_f", N);
      m.dxf = DView<float>("mtp_dxf", N * C);
      m.losses = DView<float>("mtp_losses", N);
      alloc_acts(b.mtp_block[k], B, T, cfg_);
    }
  }
}

namespace {
void alloc_acts(Transformer::LayerActs& a, int64_t B, int64_t T, const ModelConfig& c) {
  const int64_t N = B * T, C = c.hidden_size, H = c.num_heads, KV = c.num_kv_heads;
  const int64_t D = c.head_dim(), F = c.intermediate_size;
  a.rstd1 = DView<float>("rstd1", N);
  a.xn1 = DView<float>("xn1", N * C);
  a.q = DView<float>("q", N * H * D);
  a.k = DView<float>("k", N * KV * D);
  a.v = DView<float>("v", N * KV * D);
  a.att = DView<float>("att", B * H * T * T);
  a.o = DView<float>("o", N * H * D);
  a.x1 = DView<float>("x1", N * C);
  a.rstd2 = DView<float>("rstd2", N);
  a.xn2 = DView<float>("xn2", N * C);
  a.gu = DView<float>("gu", N * 2 * F);
  a.a = DView<float>("a", N * F);
}
}  // namespace

}  // namespace kktrain
