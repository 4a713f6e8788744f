// The sparse MLP, forward and backward (model/moe.hpp): router, top-k, the sort by expert, the
// grouped expert GEMMs, the fp32 combine, and their gradients.
#include "model/moe.hpp"

#include <string>

#include "core/errors.hpp"
#include "core/host_sync.hpp"
#include "model/block.hpp"
#include "ops/gemm.hpp"
#include "ops/kernels.hpp"

namespace kktrain {

namespace {

// probs (N, E) = softmax(logits) in fp32; choice, weight (N, K): the K largest probabilities,
// best first (ties to the lower expert), divided by their sum when norm_topk.
void route(const ExecSpace& space, float* probs, int32_t* choice, float* weight,
           const float* logits, int64_t N, int64_t E, int64_t K, bool norm_topk) {
  Kokkos::parallel_for(
      "moe_route", RangePolicy(space, 0, N), KOKKOS_LAMBDA(const int64_t n) {
        const float* l = logits + n * E;
        float* p = probs + n * E;
        float mx = l[0];
        for (int64_t e = 1; e < E; ++e) mx = math::max_f(mx, l[e]);
        float sum = 0.0f;
        for (int64_t e = 0; e < E; ++e) {
          p[e] = exp_fast(l[e] - mx);
          sum += p[e];
        }
        const float inv = 1.0f / sum;
        for (int64_t e = 0; e < E; ++e) p[e] *= inv;
        float total = 0.0f;
        for (int64_t k = 0; k < K; ++k) {
          int64_t best = -1;
          for (int64_t e = 0; e < E; ++e) {
            bool taken = false;
            for (int64_t j = 0; j < k; ++j) taken = taken || choice[n * K + j] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = e;
          }
          choice[n * K + k] = static_cast<int32_t>(best);
          weight[n * K + k] = p[best];
          total += p[best];
        }
        if (norm_topk) {
          for (int64_t k = 0; k < K; ++k) weight[n * K + k] /= total;
        }
      });
}

// counts (E) and prob_sums (E), each expert's sums in token order (deterministic).
void expert_stats(const ExecSpace& space, int32_t* counts, float* prob_sums, const int32_t* choice,
                  const float* probs, int64_t N, int64_t E, int64_t K) {
  Kokkos::parallel_for(
      "moe_expert_stats", RangePolicy(space, 0, E), KOKKOS_LAMBDA(const int64_t e) {
        int32_t c = 0;
        float s = 0.0f;
        for (int64_t i = 0; i < N * K; ++i) c += choice[i] == e;
        for (int64_t n = 0; n < N; ++n) s += probs[n * E + e];
        counts[e] = c;
        prob_sums[e] = s;
      });
}

// slot (N, K): the row of each assignment when the assignments are sorted by expert, each
// expert's in (token, choice) order, starting at offsets[e].
void sort_slots(const ExecSpace& space, int32_t* slot, const int32_t* choice,
                const int32_t* offsets, int64_t N, int64_t E, int64_t K) {
  Kokkos::parallel_for(
      "moe_sort_slots", RangePolicy(space, 0, E), KOKKOS_LAMBDA(const int64_t e) {
        int32_t next = offsets[e];
        for (int64_t i = 0; i < N * K; ++i) {
          if (choice[i] == e) slot[i] = next++;
        }
      });
}

// xs (NK, C): row slot[n, k] = h[n]
template <class TC>
void gather_sorted(const ExecSpace& space, TC* xs, const TC* h, const int32_t* slot, int64_t N,
                   int64_t K, int64_t C) {
  Kokkos::parallel_for(
      "moe_gather", RangePolicy(space, 0, N * K * C), KOKKOS_LAMBDA(const int64_t i) {
        const int64_t a = i / C, c = i % C;
        xs[slot[a] * C + c] = h[(a / K) * C + c];
      });
}

// y (N, C) = [float(sy)] + sum_k weight[n, k] * float(ye[slot[n, k]]), fp32, k in order.
template <class TC>
void combine(const ExecSpace& space, float* y, const TC* sy, const TC* ye, const float* weight,
             const int32_t* slot, int64_t N, int64_t K, int64_t C) {
  Kokkos::parallel_for(
      "moe_combine", RangePolicy(space, 0, N * C), KOKKOS_LAMBDA(const int64_t i) {
        const int64_t n = i / C, c = i % C;
        float acc = sy ? load_f32(sy, i) : 0.0f;
        for (int64_t k = 0; k < K; ++k) {
          acc += weight[n * K + k] * load_f32(ye, slot[n * K + k] * C + c);
        }
        y[i] = acc;
      });
}

// dweight (N, K) = sum_c dy[n] * float(ye[slot]); dye[slot[n, k]] = rnd(weight * dy[n], TC).
template <class TC>
void combine_backward(const ExecSpace& space, float* dweight, TC* dye, const float* dy,
                      const TC* ye, const float* weight, const int32_t* slot, int64_t N, int64_t K,
                      int64_t C) {
  constexpr Rounding rc = rounding_of<TC>();
  Kokkos::parallel_for(
      "moe_combine_backward", RangePolicy(space, 0, N * K), KOKKOS_LAMBDA(const int64_t a) {
        const int64_t n = a / K, row = slot[a];
        const float w = weight[a];
        float s = 0.0f;
        for (int64_t c = 0; c < C; ++c) {
          const float g = dy[n * C + c];
          s += g * load_f32(ye, row * C + c);
          store_as(dye, row * C + c, rnd(w * g, rc));
        }
        dweight[a] = s;
      });
}

// dlogits (N, E) from the combine weights' gradient dweight (N, K) and the load-balancing term
// aux_grad (E) (may be null): through the renormalization, then the softmax, fp32.
void route_backward(const ExecSpace& space, float* dlogits, const float* dweight,
                    const float* probs, const int32_t* choice, const float* aux_grad, int64_t N,
                    int64_t E, int64_t K, bool norm_topk) {
  Kokkos::parallel_for(
      "moe_route_backward", RangePolicy(space, 0, N), KOKKOS_LAMBDA(const int64_t n) {
        const float* p = probs + n * E;
        float* dl = dlogits + n * E;  // holds dp first
        for (int64_t e = 0; e < E; ++e) dl[e] = aux_grad ? aux_grad[e] : 0.0f;
        if (norm_topk) {
          // w_k = p_k / S: dp_j = (dw_j - sum_k dw_k w_k) / S
          float S = 0.0f, dot = 0.0f;
          for (int64_t k = 0; k < K; ++k) S += p[choice[n * K + k]];
          for (int64_t k = 0; k < K; ++k) dot += dweight[n * K + k] * (p[choice[n * K + k]] / S);
          for (int64_t k = 0; k < K; ++k) dl[choice[n * K + k]] += (dweight[n * K + k] - dot) / S;
        } else {
          for (int64_t k = 0; k < K; ++k) dl[choice[n * K + k]] += dweight[n * K + k];
        }
        float dot = 0.0f;
        for (int64_t e = 0; e < E; ++e) dot += p[e] * dl[e];
        for (int64_t e = 0; e < E; ++e) dl[e] = p[e] * (dl[e] - dot);
      });
}

// dh (N, C) = sum_k float(dxs[slot[n, k]]), fp32, k in order (written).
template <class TC>
void scatter_sum(const ExecSpace& space, float* dh, const TC* dxs, const int32_t* slot, int64_t N,
                 int64_t K, int64_t C) {
  Kokkos::parallel_for(
      "moe_scatter_sum", RangePolicy(space, 0, N * C), KOKKOS_LAMBDA(const int64_t i) {
        const int64_t n = i / C, c = i % C;
        float acc = 0.0f;
        for (int64_t k = 0; k < K; ++k) acc += load_f32(dxs, slot[n * K + k] * C + c);
        dh[i] = acc;
      });
}

// Copies the counts to the host and sets the slots of the sort by expert.
void sort_by_expert(const ExecSpace& space, MoeActs& a, const MoeDims& d) {
  const int64_t E = d.E;
  auto hc = Kokkos::create_mirror_view(a.counts);
  Kokkos::deep_copy(hc, a.counts);
  count_host_sync();  // dropless routing: the products and the exchange are sized on the host
  a.host_counts.assign(E, 0);
  Kokkos::View<int32_t*, HostSpace> off("moe_offsets_host", E);
  int64_t total = 0;
  for (int64_t e = 0; e < E; ++e) {
    off(e) = static_cast<int32_t>(total);
    a.host_counts[e] = hc(e);
    total += hc(e);
  }
  if (total != d.NK()) throw InternalError("moe: assignments do not add up to N * K");
  DView<int32_t> doff("moe_offsets", E);
  Kokkos::deep_copy(space, doff, off);
  sort_slots(space, a.slot.data(), a.choice.data(), doff.data(), d.N, E, d.K);
}

}  // namespace

template <class TC>
void moe_forward(const ExecSpace& space, float* y, const TC* h, MoeActs& a, const MoeWeights& w,
                 const MoeScratch<TC>& s, const MoeDims& d) {
  const int64_t N = d.N, C = d.C, E = d.E, K = d.K, F = d.F, Fs = d.Fs, NK = d.NK();
  // Router, fp32 whatever the compute dtype.
  round_copy(space, a.xf.data(), h, N * C, Rounding::fp32);                 // (N, C) exact widening
  matmul_forward(space, d.gemm, s.logits, a.xf.data(), w.router, N, C, E);  // (N, E)
  route(space, a.probs.data(), a.choice.data(), a.weight.data(), s.logits, N, E, K, d.norm_topk);
  expert_stats(space, a.counts.data(), a.prob_sums.data(), a.choice.data(), a.probs.data(), N, E,
               K);
  sort_by_expert(space, a, d);
  TC* xs = a.xs.p<TC>();
  gather_sorted(space, xs, h, a.slot.data(), N, K, C);  // (NK, C) by expert
  // The rows this rank's experts run: its own, or (expert parallelism) every peer's for them.
  const TC* x = xs;
  int64_t R = NK;
  const std::vector<int64_t>* sizes = &a.host_counts;
  if (d.ep) {
    moe_plan(a.plan, *d.ep, a.host_counts);
    moe_dispatch(space, a.xe.p<TC>(), xs, a.plan, *d.ep, C, s.peer);
    x = a.xe.p<TC>();
    R = a.plan.recv_rows;
    sizes = &a.plan.local_sizes;
  }
  // Experts: one grouped GEMM per projection over the rows sorted by expert.
  TC* hh = a.h.p<TC>();
  TC* act = a.act.p<TC>();
  TC* ye = d.ep ? s.ye_local : a.ye.p<TC>();
  gemm_grouped(space, d.gemm, *sizes, 'N', 'T', 1.0f, gin(x, R, C), gin(w.w13, 2 * F, C), 0.0f,
               gout(hh, R, 2 * F));  // (R, 2F)
  swiglu_forward(space, act, hh, R, F);
  gemm_grouped(space, d.gemm, *sizes, 'N', 'T', 1.0f, gin(act, R, F), gin(w.w2, C, F), 0.0f,
               gout(ye, R, C));  // (R, C)
  if (d.ep) moe_return(space, a.ye.p<TC>(), static_cast<const TC*>(ye), a.plan, *d.ep, C, s.peer);
  const TC* sy = nullptr;
  if (Fs > 0) {
    matmul_forward(space, d.gemm, a.sgu.p<TC>(), h, w.shared_gate_up, N, C, 2 * Fs);
    swiglu_forward(space, a.sa.p<TC>(), a.sgu.p<TC>(), N, Fs);
    matmul_forward(space, d.gemm, s.sy, a.sa.p<TC>(), w.shared_down, N, Fs, C);
    sy = s.sy;
  }
  combine(space, y, sy, a.ye.p<TC>(), a.weight.data(), a.slot.data(), N, K, C);
}

namespace {

// The experts' backward over their R rows x (expert-major, group sizes `sizes`): weight
// gradients from dye (R, C), and dx (R, C) in the compute dtype.
template <class TC>
void experts_backward(const ExecSpace& space, TC* dx, const TC* dye, const TC* x, const MoeActs& a,
                      const MoeWeights& w, const MoeScratch<TC>& s, const MoeDims& d, int64_t R,
                      const std::vector<int64_t>& sizes, float* dw, BlockGrads& grads) {
  const int64_t C = d.C, F = d.F, El = d.local_experts();
  const TC* act = a.act.p<TC>();
  auto expert = [](int64_t e, int which) { return static_cast<int>(kMoeExpert0 + 3 * e + which); };
  bool any_expert = false;
  for (int64_t e = 0; e < El; ++e) {
    for (int k = 0; k < 3; ++k) any_expert = any_expert || grads.trainable(expert(e, k));
  }
  if (any_expert) {
    gemm_grouped(space, d.gemm, sizes, 'T', 'N', 1.0f, gin(dye, R, C), gin(act, R, F), 0.0f,
                 gout(dw, C, F));  // (El, C, F)
    for (int64_t e = 0; e < El; ++e) {
      if (grads.trainable(expert(e, 2))) grads.accumulate(expert(e, 2), dw + e * C * F);
    }
  }
  gemm_grouped(space, d.gemm, sizes, 'N', 'N', 1.0f, gin(dye, R, C), gin(w.w2, C, F), 0.0f,
               gout(s.da, R, F));                         // (R, F)
  swiglu_backward(space, s.dh, s.da, a.h.p<TC>(), R, F);  // (R, 2F)
  if (any_expert) {
    gemm_grouped(space, d.gemm, sizes, 'T', 'N', 1.0f, gin(s.dh, R, 2 * F), gin(x, R, C), 0.0f,
                 gout(dw, 2 * F, C));  // (El, 2F, C)
    for (int64_t e = 0; e < El; ++e) {
      if (grads.trainable(expert(e, 0))) grads.accumulate(expert(e, 0), dw + e * 2 * F * C);
      if (grads.trainable(expert(e, 1))) {
        grads.accumulate(expert(e, 1), dw + e * 2 * F * C + F * C);
      }
    }
  }
  gemm_grouped(space, d.gemm, sizes, 'N', 'N', 1.0f, gin(s.dh, R, 2 * F), gin(w.w13, 2 * F, C),
               0.0f, gout(dx, R, C));  // (R, C), rounded to the compute dtype on the store
}

}  // namespace

template <class TC>
void moe_backward(const ExecSpace& space, float* dh, const float* dy, const TC* h, const MoeActs& a,
                  const MoeWeights& w, const MoeScratch<TC>& s, const MoeDims& d, float* dw,
                  BlockGrads& grads) {
  const int64_t N = d.N, C = d.C, E = d.E, K = d.K, Fs = d.Fs, NK = d.NK();
  // The combine: combine weights' gradient and the expert outputs' (rounded to the compute dtype).
  combine_backward(space, s.dweight, s.dye, dy, a.ye.p<TC>(), a.weight.data(), a.slot.data(), N, K,
                   C);
  // Experts, grouped, where they live.
  if (d.ep) {
    moe_dispatch(space, s.dye_local, static_cast<const TC*>(s.dye), a.plan, *d.ep, C, s.peer);
    experts_backward(space, s.dx_local, static_cast<const TC*>(s.dye_local), a.xe.p<TC>(), a, w, s,
                     d, a.plan.recv_rows, a.plan.local_sizes, dw, grads);
    moe_return(space, s.dxs, static_cast<const TC*>(s.dx_local), a.plan, *d.ep, C, s.peer);
  } else {
    experts_backward(space, s.dxs, static_cast<const TC*>(s.dye), a.xs.p<TC>(), a, w, s, d, NK,
                     a.host_counts, dw, grads);
  }
  scatter_sum(space, dh, static_cast<const TC*>(s.dxs), a.slot.data(), N, K, C);
  // The shared expert, a dense SwiGLU MLP.
  if (Fs > 0) {
    const TC* dc = compute_copy(space, s.dc, dy, N * C);
    const TC* sa = a.sa.p<TC>();
    if (grads.trainable(kMoeSharedDown)) {
      matmul_backward_weight(space, d.gemm, dw, dc, sa, N, Fs, C);
      grads.accumulate(kMoeSharedDown, dw);
    }
    matmul_backward_input(space, d.gemm, s.sda, dc, w.shared_down, N, Fs, C,
                          Into::overwrite);                       // (N, Fs)
    swiglu_backward(space, s.sdgu, s.sda, a.sgu.p<TC>(), N, Fs);  // (N, 2Fs)
    if (grads.trainable(kMoeSharedGate) || grads.trainable(kMoeSharedUp)) {
      matmul_backward_weight(space, d.gemm, dw, s.sdgu, h, N, C, 2 * Fs);
      if (grads.trainable(kMoeSharedGate)) grads.accumulate(kMoeSharedGate, dw);
      if (grads.trainable(kMoeSharedUp)) grads.accumulate(kMoeSharedUp, dw + Fs * C);
    }
    matmul_backward_input(space, d.gemm, dh, s.sdgu, w.shared_gate_up, N, C, 2 * Fs,
                          Into::accumulate);
  }
  // The router, fp32.
  route_backward(space, s.dlogits, s.dweight, a.probs.data(), a.choice.data(), d.aux_grad, N, E, K,
                 d.norm_topk);
  if (grads.trainable(kMoeRouter)) {
    matmul_backward_weight(space, d.gemm, dw, s.dlogits, a.xf.data(), N, C, E);  // (E, C)
    grads.accumulate(kMoeRouter, dw);
  }
  matmul_backward_input(space, d.gemm, dh, s.dlogits, w.router, N, C, E, Into::accumulate);
}

#define KKTRAIN_INST_MOE(TC)                                                                      \
  template void moe_forward<TC>(const ExecSpace&, float*, const TC*, MoeActs&, const MoeWeights&, \
                                const MoeScratch<TC>&, const MoeDims&);                           \
  template void moe_backward<TC>(const ExecSpace&, float*, const float*, const TC*,               \
                                 const MoeActs&, const MoeWeights&, const MoeScratch<TC>&,        \
                                 const MoeDims&, float*, BlockGrads&);
KKTRAIN_INST_MOE(float)
KKTRAIN_INST_MOE(bf16)
#undef KKTRAIN_INST_MOE

}  // namespace kktrain
