// The unit loop (model/transformer.hpp): set-up through the features' free functions, then the
// forward (embedding, layers, head, MTP head) and the backward in reverse, each unit gathered
// before it runs, released after, and its gradients reduced after its backward.
#include "model/transformer.hpp"

#include "core/errors.hpp"
#include "core/host_sync.hpp"
#include "model/dense_block.hpp"
#include "model/lm_head.hpp"
#include "model/model_buffers.hpp"
#include "model/mtp_head.hpp"
#include "model/params.hpp"
#include "model/sparse_mlp.hpp"
#include "ops/kernels.hpp"

namespace kktrain {

Transformer::Transformer(const ModelConfig& cfg, const ResolvedPrecision& precision,
                         Allocation allocation, const PeftConfig& peft)
    : s_(cfg, precision, peft) {
  register_params(s_);
  size_routing_state(s_);
  assign_roundings(s_);
  if (allocation == Allocation::one_rank_now) prepare(ShardOptions());
}

void Transformer::prepare(const ShardOptions& opts) {
  prepare_units(s_, opts);
}

void Transformer::plan_layout(int rank, int world, int expert_parallel) {
  kktrain::plan_layout(s_, rank, world, expert_parallel);
}

void Transformer::init_weights(const std::function<bool(const std::string&)>& which) {
  kktrain::init_weights(s_, which);
}

DView<float> Transformer::hidden_states() const {
  return s_.buf->hidden;
}

std::vector<BufferSpec> Transformer::buffer_plan(int64_t B, int64_t T) const {
  std::vector<BufferSpec> plan;
  ModelBuffers scratch;
  BufferMaker mk(BufferMaker::Mode::plan_only, s_.round.compute, &plan);
  make_buffers(s_, scratch, B, T, mk);
  return plan;
}

std::vector<std::size_t> Transformer::upload_plan(int64_t B, int64_t T) const {
  return kktrain::upload_plan(s_, B, T);
}

std::vector<BufferSpec> Transformer::unit_buffer_plan(const UnitPlanOptions& o) const {
  return kktrain::unit_buffer_plan(s_, o);
}

ComputeLayout Transformer::compute_layout() const {
  return kktrain::compute_layout(s_);
}

CommStats Transformer::moe_comm_stats() const {
  return kktrain::moe_comm_stats(s_);
}

void Transformer::zero_grads() {
  s_.params.zero_grads();
  s_.units->discard_gradients();
}

ForwardResult Transformer::forward(const int32_t* ids, const int32_t* targets, int64_t B, int64_t T,
                                   const ForwardOptions& opts) {
  ensure_buffers(s_, B, T);
  upload_batch(s_, ids, targets, opts.row_starts, B, T, opts.row_gaps);
  return s_.round.compute == Rounding::bf16 ? forward_impl<bf16>(targets, opts)
                                            : forward_impl<float>(targets, opts);
}

void Transformer::backward() {
  if (s_.round.compute == Rounding::bf16) {
    backward_impl<bf16>();
  } else {
    backward_impl<float>();
  }
}

template <class TC>
ForwardResult Transformer::forward_impl(const int32_t* targets, const ForwardOptions& opts) {
  ForwardPlan plan;
  plan.loss = opts.compute_logits && targets != nullptr;
  plan.pass = opts.prepare_backward && plan.loss ? Pass::with_backward : Pass::forward_only;
  plan.mtp = plan.loss && opts.compute_mtp && !s_.mtp.empty();
  if (plan.mtp && opts.row_starts != nullptr) {
    throw InternalError("packed rows (row_starts) with the multi-token-prediction head computing");
  }
  s_.units->release_all();                 // weights change between passes (optimizer steps, loads)
  if (plan.pass == Pass::with_backward) {  // drop what a forward without its backward collected
    drop_staged_grads(s_);
    s_.units->drop_collected();
  }
  s_.sync = opts.sync_grads;
  if (!opts.keep_logits || !opts.compute_logits) kept_logits_ = DView<float>();
  forward_layers<TC>(opts, plan);
  ForwardResult r;
  r.tokens = s_.buf->count;
  r.aux_loss = moe_aux_loss(s_, opts.grad_scale, plan.pass);
  forward_heads<TC>(opts, plan, &r);
  if (plan.pass == Pass::forward_only) s_.units->release_all();
  have_backward_ = plan.pass == Pass::with_backward;
  last_compute_mtp_ = plan.mtp;
  // No fence: what reads the results next is a kernel (ordered after these) or a host copy
  // (which waits for them); the step's waits are its own (core/host_sync.hpp).
  return r;
}

template <class TC>
void Transformer::forward_layers(const ForwardOptions& opts, const ForwardPlan& plan) {
  ModelState& s = s_;
  ModelBuffers& b = *s.buf;
  const int64_t N = b.B * b.T, C = s.cfg.hidden_size, L = s.cfg.num_layers;
  gather(s, s.embed_unit, L > 0 ? 1 : s.head_unit);
  embed_lookup(s, b.res[0].data(), b.ids.data(), lookup_weights(s), N);  // (N, C)
  if (s.cfg.embed_scale == EmbedScale::sqrt_hidden) {
    scale_values(s.space, b.res[0].data(), N * C, embed_factor(s), s.round.stream);
  }
  boundary_output(s, b.res[0].data(), N * C);
  // The embedding is read again by a tied LM head and by the MTP head.
  if (s.lm_head != s.embed && !plan.mtp) release_after_forward(s, s.embed_unit);
  for (int64_t l = 0; l < L; ++l) {
    const int unit = 1 + static_cast<int>(l), experts = s.moe.expert_unit[l];
    const int next = l + 1 < L ? unit + 1 : s.head_unit;
    gather(s, unit, experts >= 0 ? experts : next);
    if (experts >= 0) gather(s, experts, next);
    BlockActs& a = b.acts[s.cfg.activation_checkpointing ? 0 : l];
    // A sparse layer waits for its routing (the token counts per expert size its products and
    // exchange: dropless); a dense one never waits.
    SyncScope why(SyncCause::routing);
    run_block_forward<TC>(s, s.layers[l], b.res[l + 1].data(), b.res[l].data(), a);
    if (s.cfg.moe.enabled()) {  // the routing statistics of the load-balancing loss
      keep_routing(s, l, a.moe,
                   opts.keep_routing ? RoutingCopy::with_choices : RoutingCopy::statistics);
    }
    boundary_output(s, b.res[l + 1].data(), N * C);
    if (opts.probe != nullptr) opts.probe->seen("block.out", b.res[l + 1].data(), N * C);
    release_after_forward(s, unit);
    if (experts >= 0) release_after_forward(s, experts);
  }
}

template <class TC>
void Transformer::forward_heads(const ForwardOptions& opts, const ForwardPlan& plan,
                                ForwardResult* r) {
  ModelState& s = s_;
  ModelBuffers& b = *s.buf;
  const int64_t N = b.B * b.T, C = s.cfg.hidden_size, L = s.cfg.num_layers, V = s.cfg.vocab_size;
  gather(s, s.head_unit, plan.mtp ? s.mtp_unit : -1);
  HeadTensors<TC> h;
  h.norm = s.final_norm;
  h.inp = b.res[L].data();
  h.xf = b.xf.p<TC>();
  h.rstd = b.rstd_f.data();
  if (!opts.compute_logits) {  // final hidden states only: no (N, V) logits are materialized
    h.hidden_out = b.hidden.data();
    head_forward<TC>(s, h, HeadLoss::none, 0.0f, Pass::forward_only);
  } else {
    // The loss's denominator: the caller's global count of loss tokens, or this micro-batch's.
    const int64_t denom = opts.loss_tokens > 0 ? opts.loss_tokens : b.count;
    const float scale = denom > 0 ? opts.grad_scale / static_cast<float>(denom) : 0.0f;
    if (opts.keep_logits && kept_logits_.extent(0) != static_cast<size_t>(N * V)) {
      kept_logits_ = DView<float>("kept_logits", N * V);
    }
    h.hidden_out = opts.output_hidden_states ? b.hidden.data() : nullptr;
    h.losses = b.losses.data();
    h.targets = b.targets.data();
    h.dxf = b.dxf.data();
    h.keep = opts.keep_logits ? kept_logits_.data() : nullptr;
    if (plan.loss && opts.pairs != nullptr) {
      if (opts.token_losses != nullptr) {
        throw InternalError("ForwardOptions::token_losses with preference pairs");
      }
      pair_head<TC>(opts, plan, h, r);
    } else {
      head_forward<TC>(s, h, plan.loss ? HeadLoss::mean : HeadLoss::none, scale, plan.pass);
      if (plan.loss) {
        r->loss = mean_loss(s, b.losses.data(), denom, opts, ForwardOptions::kLossSlot);
      }
      if (plan.loss && opts.token_losses != nullptr) {
        Kokkos::deep_copy(s.space,
                          Kokkos::View<float*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
                              opts.token_losses, static_cast<size_t>(N)),
                          Kokkos::subview(b.losses, std::make_pair<size_t, size_t>(0, N)));
        s.space.fence();
        count_host_sync();
      }
    }
  }
  if (opts.probe != nullptr && plan.pass == Pass::with_backward) {
    opts.probe->seen("head.dxf", b.dxf.data(), N * C);
  }
  if (opts.probe != nullptr && opts.output_hidden_states) {
    opts.probe->seen("head.hidden", b.hidden.data(), N * C);
  }
  if (plan.mtp) {
    gather(s, s.mtp_unit);
    mtp_forward<TC>(s, opts, plan.pass, r);
    release_after_forward(s, s.mtp_unit);
  }
  release_after_forward(s, s.head_unit);
  release_after_forward(s, s.embed_unit);
}

// The head of a micro-batch of preference pairs (ForwardOptions::pairs): the token losses (no
// gradient), the pairs' losses and each token loss's weight from them (model/preference_loss.hpp),
// then with a backward the head again, its gradient weighed per token. The second pass recomputes
// the logits: the head never holds more than a chunk of them.
template <class TC>
void Transformer::pair_head(const ForwardOptions& opts, const ForwardPlan& plan, HeadTensors<TC>& h,
                            ForwardResult* r) {
  ModelState& s = s_;
  ModelBuffers& b = *s.buf;
  const PairBatch& pb = *opts.pairs;
  const int64_t N = b.B * b.T, P = static_cast<int64_t>(pb.pairs.size());
  for (const PairSpan& p : pb.pairs) {
    if (p.chosen < 0 || p.chosen >= p.rejected || p.rejected >= p.end || p.end > N) {
      throw InternalError("a preference pair's span lies outside its micro-batch");
    }
  }
  if (pair_scale_.extent(0) != static_cast<size_t>(N)) pair_scale_ = DView<float>("pair_scale", N);
  if (pair_spans_.extent(0) != static_cast<size_t>(P)) {
    pair_spans_ = DView<PairSpan>("pair_spans", P);
  }
  if (pair_out_.extent(0) != static_cast<size_t>(P * kPairResultColumns)) {
    pair_out_ = DView<double>("pair_results", P * kPairResultColumns);
  }
  if (P > 0) {
    Kokkos::deep_copy(
        s.space, pair_spans_,
        Kokkos::View<const PairSpan*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
            pb.pairs.data(), static_cast<size_t>(P)));
  }
  const double denom = static_cast<double>(pb.global_pairs > 0 ? pb.global_pairs : P);
  const bool backward = plan.pass == Pass::with_backward;
  float* keep = h.keep;
  h.keep = backward ? nullptr : keep;
  head_forward<TC>(s, h, HeadLoss::mean, 0.0f, Pass::forward_only);
  pair_objective(s.space, pb.params, pair_spans_, b.losses.data(), b.targets.data(), N,
                 static_cast<double>(opts.grad_scale), denom, pair_scale_.data(), pair_out_);
  if (backward) {
    h.keep = keep;
    h.row_scale = pair_scale_.data();
    head_forward<TC>(s, h, HeadLoss::mean, 0.0f, Pass::with_backward);
    h.row_scale = nullptr;
  }
  r->pairs = P;
  pair_host_.clear();
  if (opts.loss_sums != nullptr) {
    DeviceSums& sums = *opts.loss_sums;
    const double* out = pair_out_.data();
    constexpr int64_t c = kPairResultColumns;
    sums.add_column_mean(ForwardOptions::kLossSlot, out, P, c, denom);
    if (opts.pair_slots >= 0) {  // PairMeans' order: S_c, S_r, rewards, accuracy
      const int64_t column[kPairMeans] = {1, 2, 5, 6, 7};
      for (int k = 0; k < kPairMeans; ++k) {
        sums.add_column_mean(opts.pair_slots + k, out + column[k], P, c, denom);
      }
    }
    r->loss = NAN;
    return;
  }
  std::vector<double> host(static_cast<size_t>(P * kPairResultColumns));
  if (P > 0) {
    Kokkos::deep_copy(Kokkos::View<double*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
                          host.data(), host.size()),
                      pair_out_);
    count_host_sync();
  }
  double total = 0;
  for (int64_t p = 0; p < P; ++p) {
    const double* v = host.data() + p * kPairResultColumns;
    PairResult x;
    x.loss = v[0];
    x.logps_chosen = v[1];
    x.logps_rejected = v[2];
    x.tokens_chosen = static_cast<int64_t>(v[3]);
    x.tokens_rejected = static_cast<int64_t>(v[4]);
    x.reward_chosen = v[5];
    x.reward_rejected = v[6];
    pair_host_.push_back(x);
    total += x.loss;
  }
  r->loss = denom > 0 ? total / denom : 0.0;
}

template <class TC>
void Transformer::backward_impl() {
  if (!have_backward_) {
    throw InternalError("backward() without a forward(prepare_backward = true) before it");
  }
  have_backward_ = false;
  ModelState& s = s_;
  ModelBuffers& b = *s.buf;
  const int64_t N = b.B * b.T, C = s.cfg.hidden_size, V = s.cfg.vocab_size, L = s.cfg.num_layers;
  Kokkos::deep_copy(s.space, b.dres, 0.0f);
  if (last_compute_mtp_) {
    gather(s, s.mtp_unit, s.head_unit);
    mtp_backward<TC>(s, b.dres.data());  // adds d(res[L]) from the MTP head
    reduce(s, s.mtp_unit);
    release_after_forward(s, s.mtp_unit);
  }
  // The head unit's LM-head gradient was computed with the loss; its norm's is computed here.
  gather(s, s.head_unit, L > 0 ? L : -1);  // the embedding's weights are not used by backward
  rmsnorm_backward(s.space, b.dres.data(), b.dw.data(), b.norm_partial.data(), b.dxf.data(),
                   b.res[L].data(), s.wf(s.final_norm), b.rstd_f.data(), N, C, s.round.stream,
                   Rounding::fp32, norm_form(s.cfg.norm_weight));
  accumulate(s, s.final_norm, b.dw.data(), s.round_compute[s.final_norm]);
  reduce(s, s.head_unit);
  release_after_forward(s, s.head_unit);
  boundary_grad_out_of_unit(s, b.dres.data(), N * C);
  backward_layers<TC>();
  if (s.params.info(s.embed).trainable) {
    if (s.cfg.embed_scale == EmbedScale::sqrt_hidden) {
      scale_values(s.space, b.dres.data(), N * C, embed_factor(s), s.round.stream);
    }
    embedding_backward(s.space, b.dw.data(), b.dres.data(), b.row_start.data(), b.positions.data(),
                       V, C);
    accumulate(s, s.embed, b.dw.data(), s.round.stream);
  }
  reduce(s, s.embed_unit);
  s.units->complete_reductions();  // the last reduce-scatter in flight: the shards are whole now
  flush_staged_grads(s);
  s.units->release_all();
}

template <class TC>
void Transformer::backward_layers() {
  ModelState& s = s_;
  ModelBuffers& b = *s.buf;
  const int64_t N = b.B * b.T, C = s.cfg.hidden_size, L = s.cfg.num_layers;
  for (int64_t l = L - 1; l >= 0; --l) {
    const int unit = 1 + static_cast<int>(l), experts = s.moe.expert_unit[l];
    const int prev = l > 0 ? unit - 1 : -1;
    gather(s, unit, experts >= 0 ? experts : prev);
    if (experts >= 0) gather(s, experts, prev);
    BlockActs& a = b.acts[s.cfg.activation_checkpointing ? 0 : l];
    SyncScope why(SyncCause::routing);  // a sparse layer's recompute and exchange plan
    if (s.cfg.activation_checkpointing) {
      // Recompute this block's activations under the same compute dtype; same kernels, same
      // inputs, so the gradients are bitwise those of the stored-activation run.
      run_block_forward<TC>(s, s.layers[l], b.recompute_out.data(), b.res[l].data(), a);
    }
    boundary_grad_into_unit(s, b.dres.data(), N * C);
    run_block_backward<TC>(s, s.layers[l], b.dres.data(), b.res[l].data(), a);
    boundary_grad_out_of_unit(s, b.dres.data(), N * C);
    reduce(s, unit);
    release_after_forward(s, unit);
    if (experts >= 0) {
      reduce(s, experts);
      release_after_forward(s, experts);
    }
  }
}

}  // namespace kktrain
