// Transformer forward and backward passes (main model and the multi-token-prediction head).
//
// The LM head's backward runs right after the loss (llm.c style), chunk by chunk: a chunk's
// gradient at the logits is known as soon as its loss is, so one (chunk, V) logits buffer serves
// every chunk (head GEMM, log-softmax and loss, dlogits in place, the head's weight gradient added
// in fp32, the chunk's rows of dxf) and only the (N, C) gradient of the final hidden state is kept
// for backward(). (N, V) logits never exist.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "core/host_sync.hpp"
#include "model/transformer.hpp"
#include "model/transformer_buffers.hpp"
#include "ops/attention.hpp"
#include "ops/gemm.hpp"
#include "ops/kernels.hpp"

namespace kktrain {

namespace {

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

std::vector<std::size_t> Transformer::upload_plan(int64_t B, int64_t T) const {
  const std::size_t N = static_cast<std::size_t>(B * T),
                    V = static_cast<std::size_t>(cfg_.vocab_size);
  std::vector<std::size_t> plan;
  // ids, targets, row_start, positions: the main head's and each MTP depth's.
  for (int64_t d = 0; d <= static_cast<int64_t>(mtp_.size()); ++d) {
    for (std::size_t n : {N, N, V + 1, N}) plan.push_back(n * sizeof(int32_t));
  }
  if (cfg_.moe.enabled() && cfg_.moe.aux_loss_coef != 0.0) {
    plan.push_back(static_cast<std::size_t>(cfg_.moe.num_experts) * sizeof(float));
  }
  return plan;
}

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
  // Through pinned staging: queued behind the kernels still reading the previous micro-batch's
  // ids, with no wait of the host (core/upload_staging.hpp).
  staging_.upload(b.ids, hid);
  staging_.upload(b.targets, ht);
  staging_.upload(b.row_start, row_start);
  staging_.upload(b.positions, positions);
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
    staging_.upload(m.ids, mid);
    staging_.upload(m.targets, mt);
    staging_.upload(m.row_start, row_start);
    staging_.upload(m.positions, positions);
  }
}

CRef Transformer::lookup_weights() const {
  // One rank, tied embedding whose compute copy is rounded for the LM head while the stream is
  // not: the lookup reads the storage itself (embed_lookup rounds to the stream dtype per row).
  const ParamInfo& e = params_.info(embed_);
  if (!units_->sharded() && lm_head_ == embed_ && round_.stream != round_compute_[embed_]) {
    if (e.dtype == DType::bfloat16) return CRef{params_.data<bf16>(embed_).data(), e.dtype};
    return CRef{params_.data<float>(embed_).data(), e.dtype};
  }
  return w(embed_);
}

void Transformer::embed_lookup(float* out, const int32_t* ids, const CRef& wte, int64_t N) {
  const int64_t C = cfg_.hidden_size, V = cfg_.vocab_size;
  dispatch_dtype(wte.dtype, [&](auto tag) {
    using W = decltype(tag);
    embedding_forward(space_, out, ids, static_cast<const W*>(wte.data), N, C, V, round_.stream);
  });
}

ForwardResult Transformer::forward(const int32_t* ids, const int32_t* targets, int64_t B, int64_t T,
                                   const ForwardOptions& opts) {
  ensure_buffers(B, T);
  upload_batch(ids, targets, B, T);
  return round_.compute == Rounding::bf16 ? forward_impl<bf16>(targets, opts)
                                          : forward_impl<float>(targets, opts);
}

void Transformer::backward() {
  if (round_.compute == Rounding::bf16) {
    backward_impl<bf16>();
  } else {
    backward_impl<float>();
  }
}

double Transformer::moe_aux_loss(float grad_scale, bool backward) {
  const MoeConfig& moe = cfg_.moe;
  if (!moe.enabled()) return 0.0;
  // Pooled over the layers as Mixtral's loss pools their router outputs: f_e, the fraction of
  // all (token, choice) assignments that chose e, over L N tokens; P_e the mean probability.
  const int64_t E = moe.num_experts, L = cfg_.num_layers;
  const double tokens = static_cast<double>(L * buf_->B * buf_->T);
  std::vector<double> f(E, 0.0), prob(E, 0.0);
  for (int64_t l = 0; l < L; ++l) {
    for (int64_t e = 0; e < E; ++e) {
      f[e] += static_cast<double>(moe_counts_[l][e]) / tokens;
      prob[e] += moe_prob_sums_[l][e] / tokens;
    }
  }
  double aux = 0.0;
  for (int64_t e = 0; e < E; ++e) aux += f[e] * prob[e];
  aux *= static_cast<double>(E);
  if (backward) {
    // d(coef * aux)/d p[l, n, e] = coef * E * f_e / (L N), times the accumulation scale.
    if (moe.aux_loss_coef == 0.0) {
      moe_aux_grad_ = DView<float>();
    } else {
      std::vector<float> g(E);
      for (int64_t e = 0; e < E; ++e) {
        g[e] = static_cast<float>(moe.aux_loss_coef * grad_scale * static_cast<double>(E) * f[e] /
                                  tokens);
      }
      if (moe_aux_grad_.extent(0) != static_cast<std::size_t>(E)) {
        moe_aux_grad_ = DView<float>("moe_aux_grad", E);
      }
      staging_.upload(moe_aux_grad_, g);  // on the queue, no wait
    }
  }
  return aux;
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
      if (st.extent(0) > 0) Kokkos::deep_copy(ExecSpace(), st, 0.0f);
    }
    units_->drop_collected();
  }
  sync_ = opts.sync_grads;
  if (!opts.keep_logits || !opts.compute_logits) kept_logits_ = DView<float>();

  gather(embed_unit_, L > 0 ? 1 : head_unit_);
  const CRef emb = lookup_weights();
  embed_lookup(b.res[0].data(), b.ids.data(), emb, N);  // (N, C)
  boundary_output(b.res[0].data(), N * C);
  // The embedding is read again by a tied LM head and by the MTP head.
  if (lm_head_ != embed_ && !mtp) release_after_forward(embed_unit_);
  for (int64_t l = 0; l < L; ++l) {
    const int unit = 1 + static_cast<int>(l);
    const int next = l + 1 < L ? unit + 1 : head_unit_;
    gather(unit, expert_unit_[l] >= 0 ? expert_unit_[l] : next);
    if (expert_unit_[l] >= 0) gather(expert_unit_[l], next);
    BlockActs& a = b.acts[cfg_.activation_checkpointing ? 0 : l];
    // A sparse layer waits for its routing (the token counts per expert size its products and
    // exchange: dropless); a dense one never waits.
    SyncScope why(SyncCause::routing);
    block_forward<TC>(layers_[l], b.res[l + 1].data(), b.res[l].data(), a);
    if (cfg_.moe.enabled()) {  // the routing statistics of the load-balancing loss
      moe_counts_[l] = a.moe.host_counts;
      auto ps = Kokkos::create_mirror_view(a.moe.prob_sums);
      Kokkos::deep_copy(ps, a.moe.prob_sums);
      count_host_sync();
      moe_prob_sums_[l].assign(ps.data(), ps.data() + ps.extent(0));
      moe_choices_[l].clear();
      if (opts.keep_routing) {
        auto ch = Kokkos::create_mirror_view(a.moe.choice);
        Kokkos::deep_copy(ch, a.moe.choice);
        count_host_sync();
        moe_choices_[l].assign(ch.data(), ch.data() + ch.extent(0));
      }
    }
    boundary_output(b.res[l + 1].data(), N * C);
    if (opts.probe != nullptr) opts.probe->seen("block.out", b.res[l + 1].data(), N * C);
    release_after_forward(unit);
    if (expert_unit_[l] >= 0) release_after_forward(expert_unit_[l]);
  }
  ForwardResult r;
  r.tokens = b.count;
  r.aux_loss = moe_aux_loss(opts.grad_scale, backward);
  gather(head_unit_, mtp ? mtp_unit_ : -1);
  if (!opts.compute_logits) {
    // Final hidden states only: no (N, V) logits are materialized.
    rmsnorm_forward(space_, b.xf.p<TC>(), hidden_.data(), b.rstd_f.data(), b.res[L].data(),
                    wf(final_norm_), N, C, static_cast<float>(cfg_.rms_norm_eps), round_.stream);
  } else {
    const float scale = b.count > 0 ? opts.grad_scale / static_cast<float>(b.count) : 0.0f;
    if (opts.keep_logits && kept_logits_.extent(0) != static_cast<size_t>(N * cfg_.vocab_size)) {
      kept_logits_ = DView<float>("kept_logits", N * cfg_.vocab_size);
    }
    head_forward<TC>(final_norm_, b.res[L].data(), b.xf.p<TC>(), b.rstd_f.data(),
                     opts.output_hidden_states ? hidden_.data() : nullptr, b.losses.data(),
                     b.targets.data(), loss, scale, backward, b.dxf.data(),
                     opts.keep_logits ? kept_logits_.data() : nullptr);
    if (loss) r.loss = mean_loss(b.losses.data(), b.count, opts, ForwardOptions::kLossSlot);
  }
  if (opts.probe != nullptr && backward) opts.probe->seen("head.dxf", b.dxf.data(), N * C);
  if (opts.probe != nullptr && opts.output_hidden_states)
    opts.probe->seen("head.hidden", hidden_.data(), N * C);
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
  // No fence: what reads the results next is a kernel (ordered after these) or a host copy
  // (which waits for them); the step's waits are its own (core/host_sync.hpp).
  return r;
}

template <class TC>
void Transformer::head_forward(int norm, const float* inp, TC* xf, float* rstd, float* hidden_out,
                               float* losses, const int32_t* targets, bool loss, float scale,
                               bool backward, float* dxf, float* keep) {
  const int64_t N = buf_->B * buf_->T, C = cfg_.hidden_size, V = cfg_.vocab_size;
  rmsnorm_forward(space_, xf, hidden_out, rstd, inp, wf(norm), N, C,
                  static_cast<float>(cfg_.rms_norm_eps), round_.stream);
  if (!loss && keep == nullptr) return;  // nothing would read the logits
  TC* logits = buf_->logits.p<TC>();
  const bool head_grad = backward && params_.info(lm_head_).trainable;
  const int64_t chunk = std::min(N, cfg_.loss_chunk_tokens);
  for (int64_t n0 = 0; n0 < N; n0 += chunk) {
    const int64_t rows = std::min(chunk, N - n0);
    // logits (rows, V) = xf rows (rows, C) @ lm_head (V, C)^T, rounded on the store when bf16
    matmul_forward(space_, logits, xf + n0 * C, w(lm_head_), rows, C, V);
    if (keep != nullptr) round_copy(space_, keep + n0 * V, logits, rows * V, Rounding::fp32);
    if (!loss) continue;
    cross_entropy_forward_backward(space_, losses + n0, logits, targets + n0, rows, V, scale,
                                   backward ? LossPass::forward_backward : LossPass::forward);
    if (!backward) continue;
    // logits now hold dlogits (rows, V) in the compute dtype. dW (V, C) (+)= dlogits^T @ xf rows:
    // fp32, the chunks summed in order, rounded once by accumulate() below.
    if (head_grad) {
      gemm(space_, 'T', 'N', 1.0f, gin(logits, rows, V), gin(xf + n0 * C, rows, C),
           n0 == 0 ? 0.0f : 1.0f, gout(buf_->dw.data(), V, C));
    }
    matmul_backward_input(space_, dxf + n0 * C, logits, w(lm_head_), rows, C, V,
                          Into::overwrite);  // (rows, C)
  }
  if (head_grad) accumulate(lm_head_, buf_->dw.data(), round_.compute);
  if (backward && round_.compute == Rounding::bf16)
    round_copy(space_, dxf, dxf, N * C, Rounding::bf16);
}

double Transformer::mean_loss(const float* losses, int64_t count, const ForwardOptions& opts,
                              int slot, double then) {
  const int64_t N = buf_->B * buf_->T;
  if (opts.loss_sums != nullptr) {
    opts.loss_sums->add_mean(slot, losses, N, static_cast<double>(count), then);
    return NAN;
  }
  return count > 0 ? sum_to_host(space_, losses, N) / static_cast<double>(count) / then : 0.0;
}

template <class TC>
void Transformer::backward_impl() {
  if (!have_backward_) {
    throw InternalError("backward() without a forward(prepare_backward = true) before it");
  }
  have_backward_ = false;
  Buffers& b = *buf_;
  const int64_t N = b.B * b.T, C = cfg_.hidden_size, V = cfg_.vocab_size, L = cfg_.num_layers;
  Kokkos::deep_copy(ExecSpace(), b.dres, 0.0f);
  if (last_compute_mtp_) {
    gather(mtp_unit_, head_unit_);
    mtp_backward<TC>(b.dres.data());  // adds d(res[L]) from the MTP head
    reduce(mtp_unit_);
    release_after_forward(mtp_unit_);
  }
  // The head unit's LM-head gradient was computed with the loss; its norm's is computed here.
  gather(head_unit_, L > 0 ? L : -1);  // the embedding's weights are not used by backward
  rmsnorm_backward(space_, b.dres.data(), b.dw.data(), b.norm_partial.data(), b.dxf.data(),
                   b.res[L].data(), wf(final_norm_), b.rstd_f.data(), N, C, round_.stream);
  accumulate(final_norm_, b.dw.data(), round_compute_[final_norm_]);
  reduce(head_unit_);
  release_after_forward(head_unit_);
  boundary_grad_out_of_unit(b.dres.data(), N * C);
  for (int64_t l = L - 1; l >= 0; --l) {
    const int unit = 1 + static_cast<int>(l);
    gather(unit, expert_unit_[l] >= 0 ? expert_unit_[l] : (l > 0 ? unit - 1 : -1));
    if (expert_unit_[l] >= 0) gather(expert_unit_[l], l > 0 ? unit - 1 : -1);
    BlockActs& a = b.acts[cfg_.activation_checkpointing ? 0 : l];
    SyncScope why(SyncCause::routing);  // a sparse layer's recompute and exchange plan
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
    if (expert_unit_[l] >= 0) {
      reduce(expert_unit_[l]);
      release_after_forward(expert_unit_[l]);
    }
  }
  if (params_.info(embed_).trainable) {
    embedding_backward(space_, b.dw.data(), b.dres.data(), b.row_start.data(), b.positions.data(),
                       V, C);
    accumulate(embed_, b.dw.data(), round_.stream);
  }
  reduce(embed_unit_);
  units_->complete_reductions();  // the last reduce-scatter in flight: the shards are whole now
  flush_staged_grads();
  units_->release_all();
}

}  // namespace kktrain
