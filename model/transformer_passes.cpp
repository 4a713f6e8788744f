// Transformer forward and backward passes (main model and the multi-token-prediction head).
//
// The LM head's backward runs right after the loss (llm.c style): its gradient at the logits is
// known as soon as the loss is, so the (N, V) logits buffer is reused and only the (N, C)
// gradient of the final hidden state is kept for backward().
#include <algorithm>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "model/attention.hpp"
#include "model/gemm.hpp"
#include "model/kernels.hpp"
#include "model/transformer.hpp"
#include "model/transformer_buffers.hpp"

namespace kktrain {

namespace {

using HostInts = Kokkos::View<const int32_t*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

void upload(const DView<int32_t>& dst, const std::vector<int32_t>& src) {
  Kokkos::deep_copy(Kokkos::subview(dst, std::make_pair<std::size_t, std::size_t>(0, src.size())),
                    HostInts(src.data(), src.size()));
}

// Token positions grouped by token id (counting sort): row_start (V + 1), positions (N).
void token_csr(const std::vector<int32_t>& ids, int64_t V, std::vector<int32_t>* row_start,
               std::vector<int32_t>* positions) {
  row_start->assign(V + 1, 0);
  for (int32_t id : ids) ++(*row_start)[id + 1];
  for (int64_t v = 0; v < V; ++v) (*row_start)[v + 1] += (*row_start)[v];
  positions->assign(ids.size(), 0);
  std::vector<int32_t> next(row_start->begin(), row_start->end() - 1);
  for (std::size_t n = 0; n < ids.size(); ++n)
    (*positions)[next[ids[n]]++] = static_cast<int32_t>(n);
}

}  // namespace

void Transformer::upload_batch(const int32_t* ids, const int32_t* targets, int64_t B, int64_t T) {
  const int64_t N = B * T, V = cfg_.vocab_size;
  std::vector<int32_t> hid(ids, ids + N), ht(N, -1);
  if (targets) std::copy(targets, targets + N, ht.begin());
  int64_t count = 0;
  for (int64_t n = 0; n < N; ++n) {
    if (hid[n] < 0 || hid[n] >= V) {
      throw InputError("token id " + std::to_string(hid[n]) + " at batch position " +
                       std::to_string(n) + " is outside the vocabulary [0, " + std::to_string(V) +
                       ")");
    }
    if (ht[n] >= V) {
      throw InputError("target id " + std::to_string(ht[n]) + " at batch position " +
                       std::to_string(n) + " is outside the vocabulary");
    }
    count += ht[n] >= 0;
  }
  Buffers& b = *buf_;
  b.count = count;
  std::vector<int32_t> row_start, positions;
  token_csr(hid, V, &row_start, &positions);
  upload(b.ids, hid);
  upload(b.targets, ht);
  upload(b.row_start, row_start);
  upload(b.positions, positions);
  // MTP depth k (1-based) at position t reads token t + k (= targets[t + k - 1]) and predicts
  // token t + k + 1 (= targets[t + k]); positions past the end of the window are ignored.
  for (std::size_t d = 0; d < b.mtp.size(); ++d) {
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
    MtpActs& m = b.mtp[d];
    m.count = mcount;
    token_csr(mid, V, &row_start, &positions);
    upload(m.ids, mid);
    upload(m.targets, mt);
    upload(m.row_start, row_start);
    upload(m.positions, positions);
  }
}

CRef Transformer::lookup_weights() const {
  // One rank, tied embedding whose compute copy is rounded for the LM head while the stream is
  // not: the lookup reads the storage itself (embed_lookup rounds to the stream dtype per row).
  const ParamInfo& e = params_.info(embed_);
  if (!units_->sharded() && lm_head_ == embed_ && rs_ != round_compute_[embed_]) {
    if (e.dtype == DType::bfloat16) return CRef{params_.data<bf16>(embed_).data(), e.dtype};
    return CRef{params_.data<float>(embed_).data(), e.dtype};
  }
  return w(embed_);
}

void Transformer::embed_lookup(float* out, const int32_t* ids, const CRef& wte, int64_t N) {
  const int64_t C = cfg_.hidden_size, V = cfg_.vocab_size;
  dispatch_dtype(wte.dtype, [&](auto tag) {
    using W = decltype(tag);
    embedding_forward(out, ids, static_cast<const W*>(wte.data), N, C, V, rs_);
  });
}

ForwardResult Transformer::forward(const int32_t* ids, const int32_t* targets, int64_t B, int64_t T,
                                   const ForwardOptions& opts) {
  ensure_buffers(B, T);
  upload_batch(ids, targets, B, T);
  return rc_ ? forward_impl<bf16>(targets, opts) : forward_impl<float>(targets, opts);
}

void Transformer::backward() {
  if (rc_) {
    backward_impl<bf16>();
  } else {
    backward_impl<float>();
  }
}

template <class TC>
ForwardResult Transformer::forward_impl(const int32_t* targets, const ForwardOptions& opts) {
  Buffers& b = *buf_;
  const int64_t N = b.B * b.T, C = cfg_.hidden_size, L = cfg_.num_layers;
  const bool loss = opts.compute_logits && targets != nullptr;
  const bool backward = opts.prepare_backward && loss;
  const bool mtp = loss && opts.compute_mtp && !mtp_.empty();
  units_->release_all();  // weights change between passes (optimizer steps, loads)
  if (backward) {         // drop contributions collected by a forward whose backward never ran
    for (auto& st : staged_grad_) {
      if (st.extent(0) > 0) Kokkos::deep_copy(st, 0.0f);
    }
    units_->drop_collected();
  }
  sync_ = opts.sync_grads;
  logits_valid_ = false;

  gather(embed_unit_);
  const CRef emb = lookup_weights();
  embed_lookup(b.res[0].data(), b.ids.data(), emb, N);  // (N, C)
  boundary_output(b.res[0].data(), N * C);
  // The embedding is read again by a tied LM head and by the MTP head.
  if (lm_head_ != embed_ && !mtp) release_after_forward(embed_unit_);
  for (int64_t l = 0; l < L; ++l) {
    const int unit = 1 + static_cast<int>(l);
    gather(unit);
    BlockActs& a = b.acts[cfg_.activation_checkpointing ? 0 : l];
    block_forward<TC>(layers_[l], b.res[l + 1].data(), b.res[l].data(), a);
    boundary_output(b.res[l + 1].data(), N * C);
    release_after_forward(unit);
  }
  ForwardResult r;
  r.tokens = b.count;
  gather(head_unit_);
  if (!opts.compute_logits) {
    // Final hidden states only: no (N, V) logits are materialized.
    rmsnorm_forward(b.xf.p<TC>(), hidden_.data(), b.rstd_f.data(), b.res[L].data(), wf(final_norm_),
                    N, C, static_cast<float>(cfg_.rms_norm_eps), rs_, rc_);
  } else {
    const float scale = b.count > 0 ? opts.grad_scale / static_cast<float>(b.count) : 0.0f;
    const double sum =
        head_forward<TC>(final_norm_, b.res[L].data(), b.xf.p<TC>(), b.rstd_f.data(),
                         opts.output_hidden_states ? hidden_.data() : nullptr, b.logits.p<TC>(),
                         b.losses.data(), b.targets.data(), loss, scale, backward, b.dxf.data());
    logits_valid_ = !backward;
    r.loss = b.count > 0 ? sum / static_cast<double>(b.count) : 0.0;
  }
  last_compute_mtp_ = mtp;
  if (mtp) {
    gather(mtp_unit_);
    mtp_forward<TC>(opts, backward, &r);
    release_after_forward(mtp_unit_);
  }
  release_after_forward(head_unit_);
  release_after_forward(embed_unit_);
  if (!backward) units_->release_all();
  have_backward_ = backward;
  Kokkos::fence();
  return r;
}

template <class TC>
double Transformer::head_forward(int norm, const float* inp, TC* xf, float* rstd, float* hidden_out,
                                 TC* logits, float* losses, const int32_t* targets, bool loss,
                                 float scale, bool backward, float* dxf) {
  const int64_t N = buf_->B * buf_->T, C = cfg_.hidden_size, V = cfg_.vocab_size;
  rmsnorm_forward(xf, hidden_out, rstd, inp, wf(norm), N, C, static_cast<float>(cfg_.rms_norm_eps),
                  rs_, rc_);
  matmul_forward(logits, xf, w(lm_head_), N, C, V);  // (N, V), rounded on the store when bf16
  if (!loss) return 0.0;
  cross_entropy_forward_backward(losses, logits, targets, N, V, scale, backward, rc_);
  const double sum = sum_to_host(losses, N);
  if (backward) {
    // logits now hold dlogits (N, V) in the compute dtype.
    if (params_.info(lm_head_).trainable) {
      matmul_backward_weight(buf_->dw.data(), logits, xf, N, C, V);
      accumulate(lm_head_, buf_->dw.data(), rc_);
    }
    matmul_backward_input(dxf, logits, w(lm_head_), N, C, V, false);
    if (rc_) round_copy(dxf, dxf, N * C, true);
  }
  return sum;
}

template <class TC>
void Transformer::backward_impl() {
  if (!have_backward_) {
    throw InternalError("backward() without a forward(prepare_backward = true) before it");
  }
  have_backward_ = false;
  Buffers& b = *buf_;
  const int64_t N = b.B * b.T, C = cfg_.hidden_size, V = cfg_.vocab_size, L = cfg_.num_layers;
  Kokkos::deep_copy(b.dres, 0.0f);
  if (last_compute_mtp_) {
    gather(mtp_unit_);
    mtp_backward<TC>(b.dres.data());  // adds d(res[L]) from the MTP head
    reduce(mtp_unit_);
    release_after_forward(mtp_unit_);
  }
  // The head unit's LM-head gradient was computed with the loss; its norm's is computed here.
  gather(head_unit_);
  rmsnorm_backward(b.dres.data(), b.dw.data(), b.norm_partial.data(), b.dxf.data(), b.res[L].data(),
                   wf(final_norm_), b.rstd_f.data(), N, C, rs_);
  accumulate(final_norm_, b.dw.data(), round_compute_[final_norm_]);
  reduce(head_unit_);
  release_after_forward(head_unit_);
  boundary_grad_out_of_unit(b.dres.data(), N * C);
  for (int64_t l = L - 1; l >= 0; --l) {
    const int unit = 1 + static_cast<int>(l);
    gather(unit);
    BlockActs& a = b.acts[cfg_.activation_checkpointing ? 0 : l];
    if (cfg_.activation_checkpointing) {
      // Recompute this block's activations under the same compute dtype; same kernels, same
      // inputs, so the gradients are bitwise those of the stored-activation run.
      block_forward<TC>(layers_[l], b.recompute_out.data(), b.res[l].data(), a);
    }
    boundary_grad_into_unit(b.dres.data(), N * C);
    block_backward<TC>(layers_[l], b.dres.data(), b.res[l].data(), a);
    boundary_grad_out_of_unit(b.dres.data(), N * C);
    reduce(unit);
    release_after_forward(unit);
  }
  if (params_.info(embed_).trainable) {
    embedding_backward(b.dw.data(), b.dres.data(), b.row_start.data(), b.positions.data(), V, C);
    accumulate(embed_, b.dw.data(), rs_);
  }
  reduce(embed_unit_);
  flush_staged_grads();
  units_->release_all();
  Kokkos::fence();
}

DView<float> Transformer::logits() const {
  const Buffers& b = *buf_;
  if (!logits_valid_) return DView<float>();
  if (!rc_) return b.logits.f;
  DView<float> out("logits_fp32", b.logits.h.extent(0));
  round_copy(out.data(), static_cast<const bf16*>(b.logits.h.data()),
             static_cast<int64_t>(out.extent(0)), false);
  Kokkos::fence();
  return out;
}

}  // namespace kktrain
