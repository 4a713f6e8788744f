// The model's working buffers and the batch upload (model/model_buffers.hpp).
#include "model/model_buffers.hpp"

#include <algorithm>

#include "core/errors.hpp"
#include "model/dense_block.hpp"
#include "ops/attention.hpp"
#include "ops/kernels.hpp"

namespace kktrain {

ModelState::ModelState(const ModelConfig& c, const ResolvedPrecision& p, const PeftConfig& f)
    : cfg(c), prec(p), peft(f), gemm(gemm_options(c)), buf(std::make_unique<ModelBuffers>()) {}
ModelState::~ModelState() = default;

TBuf BufferMaker::compute(const char* name, int64_t n) {
  TBuf b;
  if (compute_ == Rounding::bf16) {
    b.h = view<bf16>(name, n);
  } else {
    b.f = view<float>(name, n);
  }
  return b;
}

void BufferMaker::record(const char* name, int64_t bytes) {
  if (!plan_) return;
  for (auto& s : *plan_) {
    if (s.name == name && s.group == group_ && s.bytes == bytes) {
      ++s.copies;
      return;
    }
  }
  plan_->push_back(BufferSpec{name, group_, bytes, 1});
}

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

void make_buffers(const ModelState& s, ModelBuffers& b, int64_t B, int64_t T, BufferMaker& mk) {
  b = ModelBuffers();
  b.B = B;
  b.T = T;
  const int64_t N = B * T, C = s.cfg.hidden_size, V = s.cfg.vocab_size;
  const int64_t H = s.cfg.num_heads, KV = s.cfg.num_kv_heads, D = s.cfg.head_dim();
  const int64_t F = s.cfg.intermediate_size, Q = (H + 2 * KV) * D;
  const bool ckpt = s.cfg.activation_checkpointing;
  mk.group("batch");
  b.ids = mk.view<int32_t>("ids", N);
  b.targets = mk.view<int32_t>("targets", N);
  b.row_start = mk.view<int32_t>("row_start", V + 1);
  b.positions = mk.view<int32_t>("positions", N);
  b.starts = mk.view<int32_t>("example_starts", N);  // packed rows (4 bytes a token)
  // Kept from forward to backward: the residual stream and each layer's activations (one set,
  // recomputed per layer, with activation checkpointing).
  mk.group("activations");
  for (int64_t l = 0; l <= s.cfg.num_layers; ++l) b.res.push_back(mk.view<float>("res", N * C));
  const int64_t nacts = ckpt ? std::min<int64_t>(1, s.cfg.num_layers) : s.cfg.num_layers;
  b.acts.resize(nacts);
  mk.group(ckpt ? "recompute" : "activations");
  for (auto& a : b.acts) make_block_acts(mk, a, B, T, s.cfg, s.moe.ep);
  mk.group("head");
  b.xf = mk.compute("xf", N * C);
  b.rstd_f = mk.view<float>("rstd_f", N);
  b.losses = mk.view<float>("losses", N);
  b.dxf = mk.view<float>("dxf", N * C);
  b.logits = mk.compute("logits", std::min(N, s.cfg.loss_chunk_tokens) * V);
  b.hidden = mk.view<float>("hidden", N * C);
  mk.group("scratch");
  if (ckpt) b.recompute_out = mk.view<float>("recompute_out", N * C);
  b.qkv = mk.compute("qkv", N * Q);
  b.proj = mk.compute("proj", N * C);
  // The tiled attention's workspace: tiles and row statistics, linear in T (none of it T x T).
  AttentionDims ad{B, T, H, KV, D, 1.0f};
  ad.options = attention_options(s.cfg);
  const AttentionWorkspaceSizes aw = attention_workspace_sizes(ad, s.round.compute);
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
  if (s.cfg.norm_placement != NormPlacement::pre) b.dbranch = mk.view<float>("dbranch", N * C);
  if (s.cfg.moe.enabled()) {
    make_sparse_mlp_buffers(mk, b.moe, N, C, s.cfg.moe, s.moe.ep);
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
  make_lora_buffers(mk, b.lora, s, N);
  const MoeConfig& moe = s.cfg.moe;
  const int64_t moe_dw =  // the stacked expert gradients, the router's, the shared expert's
      std::max({moe.num_experts * 2 * moe.intermediate_size * C, moe.num_experts * C,
                2 * moe.shared_expert_intermediate_size * C});
  const int64_t dw_size = std::max({Q * C, 2 * F * C, V * C, 2 * C * C, H * D * C, moe_dw});
  b.dw = mk.view<float>("dw", dw_size);
  b.norm_partial = mk.view<float>("norm_partial", rmsnorm_partial_size(N, C));
  make_mtp_buffers(mk, b.mtp, B, T, s.cfg);
}

void ensure_buffers(ModelState& s, int64_t B, int64_t T) {
  if (s.buf->B == B && s.buf->T == T) return;
  if (T > s.cfg.max_seq_len) {
    throw InputError("sequence length " + std::to_string(T) + " exceeds model.max_seq_len " +
                     std::to_string(s.cfg.max_seq_len));
  }
  *s.buf = ModelBuffers();  // free the old shape's buffers before allocating the new ones
  BufferMaker mk(BufferMaker::Mode::allocate, s.round.compute, nullptr);
  make_buffers(s, *s.buf, B, T, mk);
}

std::vector<std::size_t> upload_plan(const ModelState& s, int64_t B, int64_t T) {
  const std::size_t N = static_cast<std::size_t>(B * T),
                    V = static_cast<std::size_t>(s.cfg.vocab_size);
  std::vector<std::size_t> plan;
  // ids, targets, row_start, positions, the packed rows' starts: the main head's, then each MTP
  // depth's.
  for (std::size_t n : {N, N, V + 1, N, N}) plan.push_back(n * sizeof(int32_t));
  append_mtp_upload_plan(s, B * T, &plan);
  if (s.cfg.moe.enabled() && s.cfg.moe.aux_loss_coef != 0.0) {
    plan.push_back(static_cast<std::size_t>(s.cfg.moe.num_experts) * sizeof(float));
  }
  return plan;
}

namespace {

// Checks 0 <= starts[b*T + t] <= t for every token.
void check_row_starts(const int32_t* starts, int64_t B, int64_t T) {
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      const int32_t st = starts[b * T + t];
      if (st < 0 || st > t) {
        throw InputError("row start " + std::to_string(st) + " of position " + std::to_string(t) +
                         " in row " + std::to_string(b) + " is outside [0, " + std::to_string(t) +
                         "] (a packed example begins at or before each of its tokens)");
      }
    }
  }
}

}  // namespace

void upload_batch(ModelState& s, const int32_t* ids, const int32_t* targets,
                  const int32_t* row_starts, int64_t B, int64_t T, const int32_t* row_gaps) {
  if (row_starts != nullptr) check_row_starts(row_starts, B, T);
  if (row_gaps != nullptr && row_starts == nullptr) {
    throw InternalError("row gaps without row starts");
  }
  const int64_t N = B * T, V = s.cfg.vocab_size;
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
  ModelBuffers& b = *s.buf;
  b.count = count;
  std::vector<int32_t> row_start, positions;
  token_csr(hid, V, &row_start, &positions);
  // Through pinned staging: queued behind the kernels still reading the previous micro-batch's
  // ids, with no wait of the host (core/upload_staging.hpp).
  s.staging.upload(b.ids, hid);
  s.staging.upload(b.targets, ht);
  s.staging.upload(b.row_start, row_start);
  s.staging.upload(b.positions, positions);
  b.packed = row_starts != nullptr;
  b.rotary_positions = T;
  if (b.packed) {
    b.host_starts.assign(row_starts, row_starts + N);
    s.staging.upload(b.starts, b.host_starts);
    int64_t longest = 0;  // the largest position + 1 of any packed example
    for (int64_t n = 0; n < N; ++n) {
      longest = std::max<int64_t>(longest, n % T - b.host_starts[n] + 1);
    }
    b.rotary_positions = longest;
  } else {
    b.host_starts.clear();
  }
  b.gapped = row_gaps != nullptr;
  if (b.gapped) {
    std::vector<int32_t> rope(static_cast<size_t>(N));
    int64_t longest = 0;
    for (int64_t n = 0; n < N; ++n) {
      const int64_t t = n % T, st = row_starts[n], g0 = row_gaps[2 * n], g1 = row_gaps[2 * n + 1];
      if (g1 != g0 && !(st <= g0 && g0 < g1 && g1 <= t)) {
        throw InputError("the gap [" + std::to_string(g0) + ", " + std::to_string(g1) +
                         ") of position " + std::to_string(t) + " in row " + std::to_string(n / T) +
                         " is outside its example's [" + std::to_string(st) + ", " +
                         std::to_string(t) + "]");
      }
      rope[static_cast<size_t>(n)] = static_cast<int32_t>(st + (g1 - g0));
      longest = std::max<int64_t>(longest, t - rope[static_cast<size_t>(n)] + 1);
    }
    b.rotary_positions = longest;
    if (b.gaps.extent(0) != static_cast<size_t>(2 * N)) {
      b.gaps = DView<int32_t>("row_gaps", 2 * N);
      b.rope_starts = DView<int32_t>("rope_starts", N);
    }
    using HostIn = Kokkos::View<const int32_t*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
    Kokkos::deep_copy(s.space, b.gaps, HostIn(row_gaps, static_cast<size_t>(2 * N)));
    const auto host_rope = Kokkos::create_mirror_view(b.rope_starts);
    for (int64_t n = 0; n < N; ++n) host_rope(n) = rope[static_cast<size_t>(n)];
    Kokkos::deep_copy(s.space, b.rope_starts, host_rope);
    s.space.fence();  // the host copies go out of scope
  }
  upload_mtp_batch(s, ht, B, T);
}

}  // namespace kktrain
