// Inference with a KV cache (model/generate.hpp).
#include "model/generate.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>

#include "core/errors.hpp"
#include "core/random.hpp"
#include "model/dense_block.hpp"
#include "ops/gemm.hpp"
#include "ops/kernels.hpp"
#include "ops/rope.hpp"

namespace kktrain {

namespace {

// A matrix on the device in its kept dtype.
struct Matrix {
  DView<float> f;
  DView<bf16> h;
  int64_t rows = 0, cols = 0;
  CRef ref() const {
    return h.extent(0) ? CRef{h.data(), DType::bfloat16} : CRef{f.data(), DType::float32};
  }
};

Matrix upload_matrix(const ExecSpace& space, const std::string& name, const std::vector<float>& v,
                     int64_t rows, int64_t cols, DType dtype) {
  if (static_cast<int64_t>(v.size()) != rows * cols) {
    throw InputError("generate: tensor " + name + " has " + std::to_string(v.size()) +
                     " values, the model expects " + std::to_string(rows) + " x " +
                     std::to_string(cols));
  }
  Matrix m;
  m.rows = rows;
  m.cols = cols;
  DView<float> tmp(name, v.size());
  Kokkos::deep_copy(tmp, HViewU<const float>(v.data(), v.size()));
  if (dtype == DType::bfloat16) {
    m.h = DView<bf16>(name, v.size());
    cast_from_float(space, m.h.data(), tmp.data(), static_cast<int64_t>(v.size()));
  } else {
    m.f = tmp;
  }
  return m;
}

DView<float> upload_vector(const std::string& name, const std::vector<float>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) != n) {
    throw InputError("generate: tensor " + name + " has " + std::to_string(v.size()) +
                     " values, the model expects " + std::to_string(n));
  }
  DView<float> d(name, v.size());
  Kokkos::deep_copy(d, HViewU<const float>(v.data(), v.size()));
  return d;
}

// rows (R, P) of scores in place -> softmax probabilities (fp32, exp as the training softmax).
void softmax_rows(const ExecSpace& space, float* s, int64_t R, int64_t P) {
  Kokkos::parallel_for(
      "decode_softmax", TeamPolicy(space, R, Kokkos::AUTO), KOKKOS_LAMBDA(const TeamMember& m) {
        float* row = s + m.league_rank() * P;
        float mx = -FLT_MAX;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(m, P),
            [&](const int64_t j, float& acc) { acc = math::max_f(acc, row[j]); },
            Kokkos::Max<float>(mx));
        float sum = 0.0f;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(m, P),
            [&](const int64_t j, float& acc) {
              const float e = exp_fast(row[j] - mx);
              row[j] = e;
              acc += e;
            },
            sum);
        const float inv = 1.0f / sum;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(m, P),
                             [&](const int64_t j) { row[j] *= inv; });
      });
}

// cache (KV, Tmax, D) at position p = x (KV, D)
void cache_put(const ExecSpace& space, float* cache, const float* x, int64_t KV, int64_t Tmax,
               int64_t D, int64_t p) {
  Kokkos::parallel_for(
      "decode_cache_put", RangePolicy(space, 0, KV * D), KOKKOS_LAMBDA(const int64_t i) {
        const int64_t g = i / D, d = i % D;
        cache[(g * Tmax + p) * D + d] = x[i];
      });
}

}  // namespace

struct Decoder::Impl {
  ExecSpace space;  // the instance every kernel of the decoder runs on (the default one)
  ModelConfig cfg;
  GemmOptions gemm;  // model.gemm, model.gemm_fp32
  int64_t C, H, KV, D, F, V, Q;
  Matrix embed, lm_head;
  DView<float> final_norm;
  struct Layer {
    DView<float> ln1, ln2;  // the sub-layers' input norms (empty: none, norm_placement post)
    DView<float> attn_out_norm, mlp_out_norm;  // their output norms (sandwich, post)
    Matrix q, k, v, o, gate, up, down;
    Matrix qkv, gate_up;  // Phi-3's fused qkv_proj (Q, C) and gate_up_proj (2F, C) instead
    DView<float> qkv_bias, o_bias;  // (Q), (C) with model.attention_bias (else empty)
    DView<float> q_norm, k_norm;    // (D) or (H*D), (KV*D) with model.qk_norm (else empty)
  };
  std::vector<Layer> layers;
  DView<float> cos, sin;              // (Tmax, R/2), R = model.rotary_dim
  DView<float> cos_local, sin_local;  // model.rope_local_theta's (layer_rope local)
  // longrope: the long factors' tables, used (every position recomputed with them) once the
  // sequence passes original_max_position_embeddings
  DView<float> cos_long, sin_long;
  bool long_factors = false;
  std::vector<int32_t> seen;  // the tokens run so far (longrope's replay)
  // Per layer (KV, len, D): len = Tmax positions, or on a sliding layer its window's W (a ring:
  // position p in slot p % W; the attention's sum over keys does not depend on their order).
  DView<float> kcache, vcache;
  std::vector<int64_t> cache_len, cache_off;
  DView<float> x, xn, qkv, q, k, v, att, o, proj, gu, a, logits, rstd;
  DView<float> qk_pre, qk_rstd;  // the q/k norm's kept rows and statistics (unused after)
  DView<int32_t> id;
};

Decoder::Decoder(const ModelConfig& cfg, DType dtype,
                 const std::function<std::vector<float>(const std::string&)>& read,
                 int64_t max_positions)
    : impl_(std::make_unique<Impl>()), max_pos_(max_positions) {
  if (cfg.moe.enabled()) {
    throw UsageError("generate: a mixture-of-experts model (model.moe.num_experts " +
                     std::to_string(cfg.moe.num_experts) +
                     ") has no KV-cache decoder yet; only dense models generate");
  }
  Impl& m = *impl_;
  const ExecSpace& space = m.space;
  m.cfg = cfg;
  m.gemm = gemm_options(cfg);
  m.C = cfg.hidden_size;
  m.H = cfg.num_heads;
  m.KV = cfg.num_kv_heads;
  m.D = cfg.head_dim();
  m.F = cfg.intermediate_size;
  m.V = cfg.vocab_size;
  m.Q = (m.H + 2 * m.KV) * m.D;
  if (max_positions < 1 || max_positions > cfg.max_seq_len) {
    throw UsageError("generate: " + std::to_string(max_positions) +
                     " positions do not fit the model's max_seq_len " +
                     std::to_string(cfg.max_seq_len));
  }
  auto mat = [&](const std::string& n, int64_t r, int64_t c) {
    Matrix w = upload_matrix(space, n, read(n), r, c, dtype);
    weight_bytes_ += r * c * static_cast<int64_t>(dtype_size(dtype));
    return w;
  };
  auto vec_n = [&](const std::string& n, int64_t size) {
    weight_bytes_ += 4 * size;
    return upload_vector(n, read(n), size);
  };
  auto vec = [&](const std::string& n) { return vec_n(n, m.C); };
  // The q, k and v biases as one (Q) vector, in the fused projection's order.
  auto qkv_bias = [&](const std::string& p) {
    std::vector<float> all;
    for (const char* x : {"q", "k", "v"}) {
      const std::string n = p + "self_attn." + x + "_proj.bias";
      const std::vector<float> part = read(n);
      const int64_t want = (x[0] == 'q' ? m.H : m.KV) * m.D;
      if (static_cast<int64_t>(part.size()) != want) {
        throw InputError("generate: tensor " + n + " has " + std::to_string(part.size()) +
                         " values, the model expects " + std::to_string(want));
      }
      all.insert(all.end(), part.begin(), part.end());
    }
    weight_bytes_ += 4 * m.Q;
    return upload_vector(p + "self_attn.qkv_bias", all, m.Q);
  };
  m.embed = mat("model.embed_tokens.weight", m.V, m.C);
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    Impl::Layer L;
    const NormPlacement place = cfg.norm_placement;
    if (place != NormPlacement::post) L.ln1 = vec(p + "input_layernorm.weight");
    const bool fused = cfg.fused_projections();
    if (fused) {
      L.qkv = mat(p + "self_attn.qkv_proj.weight", m.Q, m.C);
    } else {
      L.q = mat(p + "self_attn.q_proj.weight", m.H * m.D, m.C);
      L.k = mat(p + "self_attn.k_proj.weight", m.KV * m.D, m.C);
      L.v = mat(p + "self_attn.v_proj.weight", m.KV * m.D, m.C);
    }
    L.o = mat(p + "self_attn.o_proj.weight", m.C, m.H * m.D);
    if (place == NormPlacement::pre) {
      L.ln2 = vec(p + "post_attention_layernorm.weight");
    } else {
      L.attn_out_norm = vec(p + "post_attention_layernorm.weight");
      if (place == NormPlacement::sandwich) L.ln2 = vec(p + "pre_feedforward_layernorm.weight");
      L.mlp_out_norm = vec(p + "post_feedforward_layernorm.weight");
    }
    if (fused) {
      L.gate_up = mat(p + "mlp.gate_up_proj.weight", 2 * m.F, m.C);
    } else {
      L.gate = mat(p + "mlp.gate_proj.weight", m.F, m.C);
      L.up = mat(p + "mlp.up_proj.weight", m.F, m.C);
    }
    L.down = mat(p + "mlp.down_proj.weight", m.C, m.F);
    if (cfg.attention_bias != AttentionBias::none) L.qkv_bias = qkv_bias(p);
    if (cfg.attention_bias == AttentionBias::qkvo) L.o_bias = vec(p + "self_attn.o_proj.bias");
    if (cfg.qk_norm != QkNorm::none) {
      const bool whole = cfg.qk_norm == QkNorm::whole;
      L.q_norm = vec_n(p + "self_attn.q_norm.weight", whole ? m.H * m.D : m.D);
      L.k_norm = vec_n(p + "self_attn.k_norm.weight", whole ? m.KV * m.D : m.D);
    }
    m.layers.push_back(std::move(L));
  }
  m.final_norm = vec("model.norm.weight");
  m.lm_head = cfg.tie_word_embeddings ? m.embed : mat("lm_head.weight", m.V, m.C);

  const int64_t R = cfg.rotary_dim(), half = R / 2, T = max_positions;
  const RopeScaling& rs = cfg.rope_scaling;
  const float attention = rs.longrope() ? static_cast<float>(rs.attention_factor) : 1.0f;
  m.cos = DView<float>("decode_cos", T * half);
  m.sin = DView<float>("decode_sin", T * half);
  rope_tables(m.cos.data(), m.sin.data(), T, R, rope_inv_freq(R, cfg.rope_theta, rs), attention);
  if (rs.longrope()) {
    m.cos_long = DView<float>("decode_cos_long", T * half);
    m.sin_long = DView<float>("decode_sin_long", T * half);
    rope_tables(m.cos_long.data(), m.sin_long.data(), T, R,
                rope_inv_freq(R, cfg.rope_theta, rs, true), attention);
  }
  if (cfg.rope_local_theta > 0) {
    m.cos_local = DView<float>("decode_cos_local", T * half);
    m.sin_local = DView<float>("decode_sin_local", T * half);
    rope_tables(m.cos_local.data(), m.sin_local.data(), T, R,
                rope_inv_freq(R, cfg.rope_local_theta, RopeScaling()));
  }
  int64_t cache = 0;
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    const int64_t w = cfg.window_of(l);
    m.cache_off.push_back(cache);
    m.cache_len.push_back(w > 0 ? std::min(w, T) : T);
    cache += m.KV * m.cache_len.back() * m.D;
  }
  m.kcache = DView<float>("decode_k", cache);
  m.vcache = DView<float>("decode_v", cache);
  m.x = DView<float>("decode_x", m.C);
  m.xn = DView<float>("decode_xn", m.C);
  m.qkv = DView<float>("decode_qkv", m.Q);
  m.q = DView<float>("decode_q", m.H * m.D);
  m.k = DView<float>("decode_k1", m.KV * m.D);
  m.v = DView<float>("decode_v1", m.KV * m.D);
  m.att = DView<float>("decode_att", m.H * T);
  m.o = DView<float>("decode_o", m.H * m.D);
  m.proj = DView<float>("decode_proj", m.C);
  m.gu = DView<float>("decode_gu", 2 * m.F);
  m.a = DView<float>("decode_a", m.F);
  m.logits = DView<float>("decode_logits", m.V);
  m.rstd = DView<float>("decode_rstd", 1);
  if (cfg.qk_norm != QkNorm::none) {
    m.qk_pre = DView<float>("decode_qk_pre", (m.H + m.KV) * m.D);
    m.qk_rstd = DView<float>("decode_qk_rstd", m.H + m.KV);
  }
  m.id = DView<int32_t>("decode_id", 1);
}

Decoder::~Decoder() = default;

int64_t Decoder::cache_bytes() const {
  return 2 * 4 * static_cast<int64_t>(impl_->kcache.extent(0));
}

std::vector<float> Decoder::step(int32_t token) {
  Impl& m = *impl_;
  if (pos_ >= max_pos_) {
    throw UsageError("generate: the KV cache holds " + std::to_string(max_pos_) + " positions");
  }
  if (token < 0 || token >= m.V) {
    throw UsageError("generate: token id " + std::to_string(token) + " is not below vocab_size " +
                     std::to_string(m.V));
  }
  if (!m.long_factors && m.cfg.rope_scaling.uses_long(pos_ + 1)) {
    // longrope: the sequence passes original_max_position_embeddings. transformers'
    // Phi3ForCausalLM.prepare_inputs_for_generation then drops the KV cache and recomputes every
    // position with the long factors; so does this: the tokens seen so far run again (their
    // logits unused), the cache rewritten.
    m.long_factors = true;
    pos_ = 0;
    for (int32_t t : m.seen) forward(t);
    m.seen.clear();
  }
  if (m.cfg.rope_scaling.longrope() && !m.long_factors) m.seen.push_back(token);
  return forward(token);
}

std::vector<float> Decoder::forward(int32_t token) {
  Impl& m = *impl_;
  const int64_t C = m.C, H = m.H, KV = m.KV, D = m.D, F = m.F, p = pos_;
  const int64_t G = H / KV, R = m.cfg.rotary_dim(), half = R / 2;
  const float eps = static_cast<float>(m.cfg.rms_norm_eps);
  const float scale = m.cfg.attn_scale();
  const NormForm form = norm_form(m.cfg.norm_weight);
  const ExecSpace& space = m.space;
  Kokkos::deep_copy(m.id, token);
  const CRef e = m.embed.ref();
  if (e.dtype == DType::bfloat16) {
    embedding_forward(space, m.x.data(), m.id.data(), static_cast<const bf16*>(e.data), 1, C, m.V,
                      Rounding::fp32);
  } else {
    embedding_forward(space, m.x.data(), m.id.data(), static_cast<const float*>(e.data), 1, C, m.V,
                      Rounding::fp32);
  }
  if (m.cfg.embed_scale == EmbedScale::sqrt_hidden) {
    scale_values(space, m.x.data(), C, static_cast<float>(std::sqrt(static_cast<double>(C))),
                 Rounding::fp32);
  }
  // A sub-layer's input: its norm into xn, or (no norm) x itself.
  auto sub_in = [&](const DView<float>& w) -> const float* {
    if (w.extent(0) == 0) return m.x.data();
    rmsnorm_forward<float>(space, m.xn.data(), nullptr, m.rstd.data(), m.x.data(), w.data(), 1, C,
                           eps, Rounding::fp32, form);
    return m.xn.data();
  };
  // x += the sub-layer's output in proj, through its output norm when it has one.
  auto residual = [&](const DView<float>& w) {
    if (w.extent(0) > 0) {
      Kokkos::deep_copy(space, m.xn, m.proj);
      rmsnorm_forward<float>(space, m.proj.data(), nullptr, m.rstd.data(), m.xn.data(), w.data(), 1,
                             C, eps, Rounding::fp32, form);
    }
    add_forward<float>(space, m.x.data(), m.x.data(), m.proj.data(), C, Rounding::fp32);
  };
  for (std::size_t l = 0; l < m.layers.size(); ++l) {
    const Impl::Layer& L = m.layers[l];
    float* kc = m.kcache.data() + m.cache_off[l];
    float* vc = m.vcache.data() + m.cache_off[l];
    // T cache rows a group; P of them hold the keys position p sees (its window's, or all so far)
    const int64_t T = m.cache_len[l], P = std::min(p + 1, T), slot = p % T;
    const float* xin = sub_in(L.ln1);
    // qkv (1, Q) = [q | k | v] projections, then rotary at position p (tables offset to p)
    const Into qkv_into = L.qkv_bias.extent(0) ? Into::accumulate : Into::overwrite;
    if (L.qkv_bias.extent(0)) {
      bias_fill<float, float>(space, m.qkv.data(), L.qkv_bias.data(), 1, m.Q);
    }
    if (L.qkv.rows > 0) {  // Phi-3's fused qkv_proj
      matmul_forward(space, m.gemm, m.qkv.data(), xin, L.qkv.ref(), 1, C, m.Q, qkv_into);
    } else {
      matmul_forward(space, m.gemm, m.qkv.data(), xin, L.q.ref(), 1, C, H * D, qkv_into);
      matmul_forward(space, m.gemm, m.qkv.data() + H * D, xin, L.k.ref(), 1, C, KV * D, qkv_into);
      matmul_forward(space, m.gemm, m.qkv.data() + (H + KV) * D, xin, L.v.ref(), 1, C, KV * D,
                     qkv_into);
    }
    HeadScale norm;
    if (L.q_norm.extent(0)) {
      const HeadNormDims hd = m.cfg.qk_norm == QkNorm::whole
                                  ? HeadNormDims::whole(1, H, KV, D, eps, form)
                                  : HeadNormDims::per_head(1, H, KV, D, eps, form);
      head_rmsnorm_forward<float>(space, m.qkv.data(), m.qk_pre.data(), m.qk_rstd.data(), hd,
                                  L.q_norm.data(), L.k_norm.data());
      if (!form.fp32_product) norm = HeadScale{L.q_norm.data(), L.k_norm.data(), Rounding::fp32};
    }
    const LayerRope rope = m.cfg.rope_of(static_cast<int64_t>(l));
    const bool long_tables = rope == LayerRope::rope && m.long_factors;
    const float* cos = long_tables                ? m.cos_long.data()
                       : rope == LayerRope::rope  ? m.cos.data()
                       : rope == LayerRope::local ? m.cos_local.data()
                                                  : nullptr;
    const float* sin = long_tables                ? m.sin_long.data()
                       : rope == LayerRope::rope  ? m.sin.data()
                       : rope == LayerRope::local ? m.sin_local.data()
                                                  : nullptr;
    rope_forward<float>(space, m.q.data(), m.k.data(), m.v.data(), m.qkv.data(),
                        cos ? cos + p * half : nullptr, sin ? sin + p * half : nullptr, 1, 1, H, KV,
                        D, nullptr, norm, R);
    cache_put(space, kc, m.k.data(), KV, T, D, slot);
    cache_put(space, vc, m.v.data(), KV, T, D, slot);
    // Per KV group: scores (G, P) = scale q_g K_g^T, softmax, o_g (G, D) = probs V_g
    for (int64_t g = 0; g < KV; ++g) {
      gemm(space, m.gemm, 'N', 'T', scale, gin(m.q.data() + g * G * D, G, D),
           gin(kc + g * T * D, P, D), 0.0f, gout(m.att.data() + g * G * P, G, P));
    }
    // Gemma 2's attention soft cap, on the scaled scores before the softmax
    logit_softcap_forward(space, m.att.data(), H * P,
                          LogitSoftcap{static_cast<float>(m.cfg.attn_logit_softcapping)});
    softmax_rows(space, m.att.data(), H, P);
    for (int64_t g = 0; g < KV; ++g) {
      gemm(space, m.gemm, 'N', 'N', 1.0f, gin(m.att.data() + g * G * P, G, P),
           gin(vc + g * T * D, P, D), 0.0f, gout(m.o.data() + g * G * D, G, D));
    }
    if (L.o_bias.extent(0)) bias_fill<float, float>(space, m.proj.data(), L.o_bias.data(), 1, C);
    matmul_forward(space, m.gemm, m.proj.data(), m.o.data(), L.o.ref(), 1, H * D, C,
                   L.o_bias.extent(0) ? Into::accumulate : Into::overwrite);
    residual(L.attn_out_norm);
    const float* hin = sub_in(L.ln2);
    if (L.gate_up.rows > 0) {  // Phi-3's fused gate_up_proj: [gate | up]
      matmul_forward(space, m.gemm, m.gu.data(), hin, L.gate_up.ref(), 1, C, 2 * F);
    } else {
      matmul_forward(space, m.gemm, m.gu.data(), hin, L.gate.ref(), 1, C, F);
      matmul_forward(space, m.gemm, m.gu.data() + F, hin, L.up.ref(), 1, C, F);
    }
    swiglu_forward<float>(space, m.a.data(), m.gu.data(), 1, F, m.cfg.mlp_activation);
    matmul_forward(space, m.gemm, m.proj.data(), m.a.data(), L.down.ref(), 1, F, C);
    residual(L.mlp_out_norm);
  }
  rmsnorm_forward<float>(space, m.xn.data(), nullptr, m.rstd.data(), m.x.data(),
                         m.final_norm.data(), 1, C, eps, Rounding::fp32, form);
  matmul_forward(space, m.gemm, m.logits.data(), m.xn.data(), m.lm_head.ref(), 1, C, m.V);
  logit_softcap_forward(space, m.logits.data(), m.V,
                        LogitSoftcap{static_cast<float>(m.cfg.final_logit_softcapping)});
  std::vector<float> out(m.V);
  Kokkos::deep_copy(HViewU<float>(out.data(), out.size()), m.logits);
  ++pos_;
  return out;
}

int32_t sample_token(const std::vector<float>& logits, const SamplingOptions& o, int64_t index) {
  const int64_t V = static_cast<int64_t>(logits.size());
  if (o.temperature <= 0.0) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  std::vector<int32_t> ids(V);
  for (int64_t i = 0; i < V; ++i) ids[i] = static_cast<int32_t>(i);
  const int64_t k = o.top_k > 0 && o.top_k < V ? o.top_k : V;
  // The k largest, ties by the smaller id (a total order: the same choice on every platform).
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  });
  std::vector<double> w(k);
  double total = 0.0;
  for (int64_t i = 0; i < k; ++i) {
    w[i] = std::exp((static_cast<double>(logits[ids[i]]) - logits[ids[0]]) / o.temperature);
    total += w[i];
  }
  const double u = static_cast<double>(
                       uniform01(o.seed, name_stream("generate"), static_cast<uint64_t>(index))) *
                   total;
  double acc = 0.0;
  for (int64_t i = 0; i < k; ++i) {
    acc += w[i];
    if (u < acc) return ids[i];
  }
  return ids[k - 1];
}

std::vector<int32_t> generate_tokens(Decoder& d, const std::vector<int32_t>& prompt,
                                     const SamplingOptions& o,
                                     const std::function<void(int32_t)>& on_token) {
  if (prompt.empty()) throw UsageError("generate: the prompt is empty");
  std::vector<float> logits;
  for (int32_t t : prompt) logits = d.step(t);
  std::vector<int32_t> out;
  for (int64_t i = 0; i < o.max_new_tokens; ++i) {
    const int32_t next = sample_token(logits, o, i);
    out.push_back(next);
    if (on_token) on_token(next);
    const bool stop =
        std::find(o.stop_tokens.begin(), o.stop_tokens.end(), next) != o.stop_tokens.end();
    if (stop || i + 1 == o.max_new_tokens) break;
    logits = d.step(next);
  }
  return out;
}

}  // namespace kktrain
