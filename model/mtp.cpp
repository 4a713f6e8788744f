// Multi-token-prediction head (DeepSeek-V3 style), depth k = 1..K:
//   h_in_k  = eh_proj([enorm(embed(t_{i+k})) | hnorm(h_{k-1})])     h_0 = last main residual
//   h_k     = block_k(h_in_k)
//   loss_k  = CE(lm_head(norm_k(h_k)), t_{i+k+1})                     lm_head/embed shared
// total loss = main + model.mtp_loss_weight * mean_k loss_k. With compute_mtp = false the head is
// skipped at run time; its parameters stay registered for load and save.
#include "model/transformer.hpp"
#include "model/transformer_buffers.hpp"
#include "ops/gemm.hpp"
#include "ops/kernels.hpp"

namespace kktrain {

template <class TC>
void Transformer::mtp_forward(const ForwardOptions& opts, bool backward, ForwardResult* r) {
  Buffers& b = *buf_;
  const int64_t N = b.B * b.T, C = cfg_.hidden_size;
  const int64_t K = static_cast<int64_t>(mtp_.size());
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  const CRef emb = lookup_weights();
  r->mtp_loss = 0.0;
  if (opts.loss_sums) opts.loss_sums->zero(ForwardOptions::kMtpScratchSlot);
  for (int64_t d = 0; d < K; ++d) {
    const MtpParams& P = mtp_[d];
    MtpActs& m = b.mtp[d];
    const float* h_prev = d == 0 ? b.res[cfg_.num_layers].data() : b.mtp[d - 1].h_out.data();
    embed_lookup(m.emb.data(), m.ids.data(), emb, N);
    rmsnorm_forward(space_, b.en.p<TC>(), nullptr, m.rstd_e.data(), m.emb.data(), wf(P.enorm), N, C,
                    eps, round_.stream);
    rmsnorm_forward(space_, b.hn.p<TC>(), nullptr, m.rstd_h.data(), h_prev, wf(P.hnorm), N, C, eps,
                    round_.stream);
    concat2(space_, m.cat.p<TC>(), b.en.p<TC>(), b.hn.p<TC>(), N, C);  // (N, 2C)
    matmul_forward(space_, m.h_in.data(), m.cat.p<TC>(), w(P.eh_proj), N, 2 * C, C);
    if (round_.compute == Rounding::bf16) {
      round_copy(space_, m.h_in.data(), m.h_in.data(), N * C, Rounding::bf16);
    }
    block_forward<TC>(P.block, m.h_out.data(), m.h_in.data(), b.mtp_block[d]);
    const float scale =
        m.count > 0 ? static_cast<float>(opts.grad_scale * cfg_.mtp_loss_weight / K / m.count)
                    : 0.0f;
    head_forward<TC>(P.norm, m.h_out.data(), m.xf.p<TC>(), m.rstd_f.data(), nullptr,
                     m.losses.data(), m.targets.data(), true, scale, backward, m.dxf.data(),
                     nullptr);
    if (opts.probe != nullptr && backward) opts.probe->seen("mtp.dxf", m.dxf.data(), N * C);
    r->mtp_loss += mean_loss(m.losses.data(), m.count, opts, ForwardOptions::kMtpScratchSlot,
                             static_cast<double>(K));
  }
  if (opts.loss_sums) {
    opts.loss_sums->add_slot(ForwardOptions::kMtpSlot, ForwardOptions::kMtpScratchSlot);
  }
}

template <class TC>
void Transformer::mtp_backward(float* dres) {
  Buffers& b = *buf_;
  const int64_t N = b.B * b.T, C = cfg_.hidden_size, V = cfg_.vocab_size;
  float* dw = b.dw.data();
  Kokkos::deep_copy(ExecSpace(), b.dh,
                    0.0f);  // gradient of h_out of the deepest depth (nothing reads it)
  for (int64_t d = static_cast<int64_t>(mtp_.size()) - 1; d >= 0; --d) {
    const MtpParams& P = mtp_[d];
    const MtpActs& m = b.mtp[d];
    const float* h_prev = d == 0 ? b.res[cfg_.num_layers].data() : b.mtp[d - 1].h_out.data();
    // dh: d(h_out) from the next depth; add this depth's head, then go through the block.
    rmsnorm_backward(space_, b.dh.data(), dw, b.norm_partial.data(), m.dxf.data(), m.h_out.data(),
                     wf(P.norm), m.rstd_f.data(), N, C, round_.stream);
    accumulate(P.norm, dw, round_compute_[P.norm]);
    block_backward<TC>(P.block, b.dh.data(), m.h_in.data(), b.mtp_block[d]);  // dh = d(h_in)
    const TC* dc = compute_copy(space_, b.dc.p<TC>(), b.dh.data(), N * C);
    if (params_.info(P.eh_proj).trainable) {
      matmul_backward_weight(space_, dw, dc, m.cat.p<TC>(), N, 2 * C, C);
      accumulate(P.eh_proj, dw, round_.compute);
    }
    matmul_backward_input(space_, b.dcat.data(), dc, w(P.eh_proj), N, 2 * C, C, Into::overwrite);
    if (round_.compute == Rounding::bf16) {
      round_copy(space_, b.dcat.data(), b.dcat.data(), N * 2 * C, Rounding::bf16);
    }
    split2(space_, b.den.data(), b.dhn.data(), b.dcat.data(), N, C);
    // enorm -> embedding lookup of the shifted tokens
    Kokkos::deep_copy(ExecSpace(), b.demb, 0.0f);
    rmsnorm_backward(space_, b.demb.data(), dw, b.norm_partial.data(), b.den.data(), m.emb.data(),
                     wf(P.enorm), m.rstd_e.data(), N, C, round_.stream);
    accumulate(P.enorm, dw, round_compute_[P.enorm]);
    if (params_.info(embed_).trainable) {
      embedding_backward(space_, dw, b.demb.data(), m.row_start.data(), m.positions.data(), V, C);
      accumulate(embed_, dw, round_.stream);
    }
    // hnorm -> the previous depth's output (or the main model's last residual)
    Kokkos::deep_copy(ExecSpace(), b.dh_prev, 0.0f);
    rmsnorm_backward(space_, b.dh_prev.data(), dw, b.norm_partial.data(), b.dhn.data(), h_prev,
                     wf(P.hnorm), m.rstd_h.data(), N, C, round_.stream);
    accumulate(P.hnorm, dw, round_compute_[P.hnorm]);
    std::swap(b.dh, b.dh_prev);
  }
  add_forward(space_, dres, dres, b.dh.data(), N * C, round_.stream);
}

template void Transformer::mtp_forward<float>(const ForwardOptions&, bool, ForwardResult*);
template void Transformer::mtp_forward<bf16>(const ForwardOptions&, bool, ForwardResult*);
template void Transformer::mtp_backward<float>(float*);
template void Transformer::mtp_backward<bf16>(float*);

}  // namespace kktrain
