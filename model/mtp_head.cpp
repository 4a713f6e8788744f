// The multi-token-prediction head (model/mtp_head.hpp).
#include "model/mtp_head.hpp"

#include <utility>

#include "model/dense_block.hpp"
#include "model/lm_head.hpp"
#include "model/model_buffers.hpp"
#include "model/params.hpp"
#include "model/units.hpp"
#include "ops/gemm.hpp"
#include "ops/kernels.hpp"

namespace kktrain {

void register_mtp_head(ModelState& s) {
  const DType st = s.prec.storage;
  const int64_t C = s.cfg.hidden_size;
  for (int64_t k = 0; k < s.cfg.mtp_num_layers; ++k) {
    const std::string pre = "mtp.layers." + std::to_string(k);
    MtpParams m;
    m.enorm = add_param(s, pre + ".enorm", {C}, ParamRole::norm, st);
    m.hnorm = add_param(s, pre + ".hnorm", {C}, ParamRole::norm, st);
    m.eh_proj = add_param(s, pre + ".eh_proj", {C, 2 * C}, ParamRole::linear, st);
    m.block = register_block(s, pre, st);
    m.norm = add_param(s, pre + ".norm", {C}, ParamRole::norm, st);
    s.mtp.push_back(m);
  }
}

std::vector<int> mtp_unit_params(const ModelState& s) {
  std::vector<int> m;
  for (const auto& d : s.mtp) {
    m.insert(m.end(), {d.enorm, d.hnorm, d.eh_proj});
    const auto b = block_unit_params(s, d.block);
    m.insert(m.end(), b.begin(), b.end());
    m.push_back(d.norm);
  }
  return m;
}

void make_mtp_buffers(BufferMaker& mk, MtpBuffers& b, int64_t B, int64_t T, const ModelConfig& c) {
  const int64_t N = B * T, C = c.hidden_size, V = c.vocab_size, K = c.mtp_num_layers;
  if (K == 0) return;
  b.dcat = mk.view<float>("dcat", N * 2 * C);
  b.dh = mk.view<float>("dh", N * C);
  b.dh_prev = mk.view<float>("dh_prev", N * C);
  b.den = mk.view<float>("den", N * C);
  b.dhn = mk.view<float>("dhn", N * C);
  b.demb = mk.view<float>("demb", N * C);
  b.en = mk.compute("mtp_en", N * C);
  b.hn = mk.compute("mtp_hn", N * C);
  b.depth.resize(K);
  b.block.resize(K);
  for (int64_t k = 0; k < K; ++k) {
    mk.group("mtp");
    MtpActs& m = b.depth[k];
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
    make_block_acts(mk, b.block[k], B, T, c, 1);
  }
}

void append_mtp_upload_plan(const ModelState& s, int64_t N, std::vector<std::size_t>* plan) {
  const std::size_t n = static_cast<std::size_t>(N), V = static_cast<std::size_t>(s.cfg.vocab_size);
  for (std::size_t d = 0; d < s.mtp.size(); ++d) {  // ids, targets, row_start, positions
    for (std::size_t k : {n, n, V + 1, n}) plan->push_back(k * sizeof(int32_t));
  }
}

void upload_mtp_batch(ModelState& s, const std::vector<int32_t>& ht, int64_t B, int64_t T) {
  ModelBuffers& b = *s.buf;
  const int64_t N = B * T, V = s.cfg.vocab_size;
  std::vector<int32_t> row_start, positions;
  // MTP depth k (1-based) at position t reads token t + k (= targets[t + k - 1]) and predicts
  // token t + k + 1 (= targets[t + k]); positions past the end of the window are ignored.
  for (std::size_t d = 0; d < b.mtp.depth.size(); ++d) {
    const int64_t k = static_cast<int64_t>(d) + 1;
    std::vector<int32_t> mid(N, 0), mt(N, -1);
    int64_t mcount = 0;
    for (int64_t bb = 0; bb < B; ++bb) {
      for (int64_t t = 0; t < T; ++t) {
        const int64_t n = bb * T + t;
        if (t + k - 1 < T && ht[bb * T + t + k - 1] >= 0) mid[n] = ht[bb * T + t + k - 1];
        if (t + k < T && ht[bb * T + t + k - 1] >= 0) mt[n] = ht[bb * T + t + k];
        mcount += mt[n] >= 0;
      }
    }
    MtpActs& m = b.mtp.depth[d];
    m.count = mcount;
    token_csr(mid, V, &row_start, &positions);
    s.staging.upload(m.ids, mid);
    s.staging.upload(m.targets, mt);
    s.staging.upload(m.row_start, row_start);
    s.staging.upload(m.positions, positions);
  }
}

template <class TC>
void mtp_forward(ModelState& s, const ForwardOptions& opts, Pass pass, ForwardResult* r) {
  ModelBuffers& b = *s.buf;
  MtpBuffers& x = b.mtp;
  const int64_t N = b.B * b.T, C = s.cfg.hidden_size;
  const int64_t K = static_cast<int64_t>(s.mtp.size());
  const float eps = static_cast<float>(s.cfg.rms_norm_eps);
  const CRef emb = lookup_weights(s);
  r->mtp_loss = 0.0;
  if (opts.loss_sums) opts.loss_sums->zero(ForwardOptions::kMtpScratchSlot);
  for (int64_t d = 0; d < K; ++d) {
    const MtpParams& P = s.mtp[d];
    MtpActs& m = x.depth[d];
    const float* h_prev = d == 0 ? b.res[s.cfg.num_layers].data() : x.depth[d - 1].h_out.data();
    embed_lookup(s, m.emb.data(), m.ids.data(), emb, N);
    rmsnorm_forward(s.space, x.en.p<TC>(), nullptr, m.rstd_e.data(), m.emb.data(), s.wf(P.enorm), N,
                    C, eps, s.round.stream);
    rmsnorm_forward(s.space, x.hn.p<TC>(), nullptr, m.rstd_h.data(), h_prev, s.wf(P.hnorm), N, C,
                    eps, s.round.stream);
    concat2(s.space, m.cat.p<TC>(), x.en.p<TC>(), x.hn.p<TC>(), N, C);  // (N, 2C)
    matmul_forward(s.space, s.gemm, m.h_in.data(), m.cat.p<TC>(), s.w(P.eh_proj), N, 2 * C, C);
    if (s.round.compute == Rounding::bf16) {
      round_copy(s.space, m.h_in.data(), m.h_in.data(), N * C, Rounding::bf16);
    }
    run_block_forward<TC>(s, P.block, m.h_out.data(), m.h_in.data(), x.block[d]);
    const float scale =
        m.count > 0 ? static_cast<float>(opts.grad_scale * s.cfg.mtp_loss_weight / K / m.count)
                    : 0.0f;
    HeadTensors<TC> h;
    h.norm = P.norm;
    h.inp = m.h_out.data();
    h.xf = m.xf.p<TC>();
    h.rstd = m.rstd_f.data();
    h.losses = m.losses.data();
    h.targets = m.targets.data();
    h.dxf = m.dxf.data();
    head_forward<TC>(s, h, HeadLoss::mean, scale, pass);
    if (opts.probe != nullptr && pass == Pass::with_backward) {
      opts.probe->seen("mtp.dxf", m.dxf.data(), N * C);
    }
    r->mtp_loss += mean_loss(s, m.losses.data(), m.count, opts, ForwardOptions::kMtpScratchSlot,
                             static_cast<double>(K));
  }
  if (opts.loss_sums) {
    opts.loss_sums->add_slot(ForwardOptions::kMtpSlot, ForwardOptions::kMtpScratchSlot);
  }
}

template <class TC>
void mtp_backward(ModelState& s, float* dres) {
  ModelBuffers& b = *s.buf;
  MtpBuffers& x = b.mtp;
  const int64_t N = b.B * b.T, C = s.cfg.hidden_size, V = s.cfg.vocab_size;
  float* dw = b.dw.data();
  Kokkos::deep_copy(s.space, x.dh,
                    0.0f);  // gradient of h_out of the deepest depth (nothing reads it)
  for (int64_t d = static_cast<int64_t>(s.mtp.size()) - 1; d >= 0; --d) {
    const MtpParams& P = s.mtp[d];
    const MtpActs& m = x.depth[d];
    const float* h_prev = d == 0 ? b.res[s.cfg.num_layers].data() : x.depth[d - 1].h_out.data();
    // dh: d(h_out) from the next depth; add this depth's head, then go through the block.
    rmsnorm_backward(s.space, x.dh.data(), dw, b.norm_partial.data(), m.dxf.data(), m.h_out.data(),
                     s.wf(P.norm), m.rstd_f.data(), N, C, s.round.stream);
    accumulate(s, P.norm, dw, s.round_compute[P.norm]);
    run_block_backward<TC>(s, P.block, x.dh.data(), m.h_in.data(), x.block[d]);  // dh = d(h_in)
    const TC* dc = compute_copy(s.space, b.dc.p<TC>(), x.dh.data(), N * C);
    if (s.params.info(P.eh_proj).trainable) {
      matmul_backward_weight(s.space, s.gemm, dw, dc, m.cat.p<TC>(), N, 2 * C, C);
      accumulate(s, P.eh_proj, dw, s.round.compute);
    }
    matmul_backward_input(s.space, s.gemm, x.dcat.data(), dc, s.w(P.eh_proj), N, 2 * C, C,
                          Into::overwrite);
    if (s.round.compute == Rounding::bf16) {
      round_copy(s.space, x.dcat.data(), x.dcat.data(), N * 2 * C, Rounding::bf16);
    }
    split2(s.space, x.den.data(), x.dhn.data(), x.dcat.data(), N, C);
    // enorm -> embedding lookup of the shifted tokens
    Kokkos::deep_copy(s.space, x.demb, 0.0f);
    rmsnorm_backward(s.space, x.demb.data(), dw, b.norm_partial.data(), x.den.data(), m.emb.data(),
                     s.wf(P.enorm), m.rstd_e.data(), N, C, s.round.stream);
    accumulate(s, P.enorm, dw, s.round_compute[P.enorm]);
    if (s.params.info(s.embed).trainable) {
      embedding_backward(s.space, dw, x.demb.data(), m.row_start.data(), m.positions.data(), V, C);
      accumulate(s, s.embed, dw, s.round.stream);
    }
    // hnorm -> the previous depth's output (or the main model's last residual)
    Kokkos::deep_copy(s.space, x.dh_prev, 0.0f);
    rmsnorm_backward(s.space, x.dh_prev.data(), dw, b.norm_partial.data(), x.dhn.data(), h_prev,
                     s.wf(P.hnorm), m.rstd_h.data(), N, C, s.round.stream);
    accumulate(s, P.hnorm, dw, s.round_compute[P.hnorm]);
    std::swap(x.dh, x.dh_prev);
  }
  add_forward(s.space, dres, dres, x.dh.data(), N * C, s.round.stream);
}

template void mtp_forward<float>(ModelState&, const ForwardOptions&, Pass, ForwardResult*);
template void mtp_forward<bf16>(ModelState&, const ForwardOptions&, Pass, ForwardResult*);
template void mtp_backward<float>(ModelState&, float*);
template void mtp_backward<bf16>(ModelState&, float*);

}  // namespace kktrain
