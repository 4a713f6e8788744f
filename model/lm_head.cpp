// The embedding lookup and the head: final norm -> LM head -> loss (model/lm_head.hpp).
#include "model/lm_head.hpp"

#include <algorithm>
#include <cmath>

#include "model/model_buffers.hpp"
#include "model/units.hpp"
#include "ops/gemm.hpp"
#include "ops/kernels.hpp"

namespace kktrain {

CRef lookup_weights(const ModelState& s) {
  // One rank, tied embedding whose compute copy is rounded for the LM head while the stream is
  // not: the lookup reads the storage itself (embed_lookup rounds to the stream dtype per row).
  const ParamInfo& e = s.params.info(s.embed);
  if (!s.units->sharded() && s.lm_head == s.embed && s.round.stream != s.round_compute[s.embed]) {
    if (e.dtype == DType::bfloat16) return CRef{s.params.data<bf16>(s.embed).data(), e.dtype};
    return CRef{s.params.data<float>(s.embed).data(), e.dtype};
  }
  return s.w(s.embed);
}

float embed_factor(const ModelState& s) {
  const float f = static_cast<float>(std::sqrt(static_cast<double>(s.cfg.hidden_size)));
  return rnd(f, s.round.stream);
}

void embed_lookup(const ModelState& s, float* out, const int32_t* ids, const CRef& wte, int64_t N) {
  const int64_t C = s.cfg.hidden_size, V = s.cfg.vocab_size;
  dispatch_dtype(wte.dtype, [&](auto tag) {
    using W = decltype(tag);
    embedding_forward(s.space, out, ids, static_cast<const W*>(wte.data), N, C, V, s.round.stream);
  });
}

template <class TC>
void head_forward(ModelState& s, const HeadTensors<TC>& h, HeadLoss loss, float scale, Pass pass) {
  const int64_t N = s.buf->B * s.buf->T, C = s.cfg.hidden_size, V = s.cfg.vocab_size;
  const float eps = static_cast<float>(s.cfg.rms_norm_eps);
  rmsnorm_forward(s.space, h.xf, h.hidden_out, h.rstd, h.inp, s.wf(h.norm), N, C, eps,
                  s.round.stream, norm_form(s.cfg.norm_weight));
  if (loss == HeadLoss::none && h.keep == nullptr) return;  // nothing would read the logits
  const bool backward = pass == Pass::with_backward && loss == HeadLoss::mean;
  TC* logits = s.buf->logits.p<TC>();
  const bool head_grad = backward && s.params.info(s.lm_head).trainable;
  const int64_t chunk = std::min(N, s.cfg.loss_chunk_tokens);
  const LogitSoftcap softcap{static_cast<float>(s.cfg.final_logit_softcapping)};
  for (int64_t n0 = 0; n0 < N; n0 += chunk) {
    const int64_t rows = std::min(chunk, N - n0);
    // logits (rows, V) = xf rows (rows, C) @ lm_head (V, C)^T, rounded on the store when bf16;
    // then soft-capped in place (model.final_logit_softcapping): cap * tanh(l / cap) in fp32,
    // rounded once on the store to the compute dtype. The kept copy and the loss see those.
    matmul_forward(s.space, s.gemm, logits, h.xf + n0 * C, s.w(s.lm_head), rows, C, V);
    logit_softcap_forward(s.space, logits, rows * V, softcap);
    if (h.keep != nullptr) round_copy(s.space, h.keep + n0 * V, logits, rows * V, Rounding::fp32);
    if (loss == HeadLoss::none) continue;
    cross_entropy_forward_backward(s.space, h.losses + n0, logits, h.targets + n0, rows, V, scale,
                                   backward ? LossPass::forward_backward : LossPass::forward,
                                   softcap, h.row_scale ? h.row_scale + n0 : nullptr);
    if (!backward) continue;
    // logits now hold dlogits (rows, V) in the compute dtype (the gradient of the uncapped
    // logits: the loss kernel applies the cap's chain rule). dW (V, C) (+)= dlogits^T @ xf rows:
    // fp32, the chunks summed in order, rounded once by accumulate() below.
    if (head_grad) {
      gemm(s.space, s.gemm, 'T', 'N', 1.0f, gin(logits, rows, V), gin(h.xf + n0 * C, rows, C),
           n0 == 0 ? 0.0f : 1.0f, gout(s.buf->dw.data(), V, C));
    }
    matmul_backward_input(s.space, s.gemm, h.dxf + n0 * C, logits, s.w(s.lm_head), rows, C, V,
                          Into::overwrite);  // (rows, C)
  }
  if (head_grad) accumulate(s, s.lm_head, s.buf->dw.data(), s.round.compute);
  if (backward && s.round.compute == Rounding::bf16) {
    round_copy(s.space, h.dxf, h.dxf, N * C, Rounding::bf16);
  }
}
template void head_forward<float>(ModelState&, const HeadTensors<float>&, HeadLoss, float, Pass);
template void head_forward<bf16>(ModelState&, const HeadTensors<bf16>&, HeadLoss, float, Pass);

double mean_loss(const ModelState& s, const float* losses, int64_t count,
                 const ForwardOptions& opts, int slot, double then) {
  const int64_t N = s.buf->B * s.buf->T;
  if (opts.loss_sums != nullptr) {
    opts.loss_sums->add_mean(slot, losses, N, static_cast<double>(count), then);
    return NAN;
  }
  return count > 0 ? sum_to_host(s.space, losses, N) / static_cast<double>(count) / then : 0.0;
}

}  // namespace kktrain
