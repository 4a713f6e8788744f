// The sparse MLP of a mixture-of-experts block (Mixtral semantics, docs/moe.md) as free functions
// over explicit buffers, like model/block.hpp, which calls them in place of the dense MLP:
//
//   logits = h W_r^T                      fp32 (N, E): the router reads h widened to fp32 and its
//                                          weight is a protected fp32 parameter
//   p = softmax(logits)                   fp32
//   top-k experts per token, weights w = p of the chosen (divided by their sum: norm_topk_prob)
//   tokens sorted by expert (counting sort in token order: the same order on every backend and
//   in every recompute), one grouped GEMM per projection over all experts (ops/gemm.hpp):
//     y_e = w2_e (silu(w1_e x) * w3_e x)  compute dtype, every token its k experts (dropless)
//   y = shared(h) + sum_k w_k y_{e_k}     fp32: the combine weights never round
//
// The load-balancing loss (Switch Transformer, as Mixtral computes it over all MoE layers pooled)
// is E * sum_e f_e P_e with f_e the fraction of (token, choice) assignments to expert e and P_e
// the mean router probability of e; the forward returns each layer's counts and probability sums
// (MoeActs), the caller pools them, and the backward adds its gradient with respect to p from the
// per-expert factor the caller passes (MoeDims::aux_grad).
#pragma once

#include <cstdint>
#include <vector>

#include "core/bf16.hpp"
#include "core/dtype.hpp"
#include "core/kokkos_compat.hpp"
#include "model/moe_exchange.hpp"
#include "ops/gemm.hpp"
#include "ops/tbuf.hpp"

namespace kktrain {

// Sizes of one sparse MLP over N tokens.
struct MoeDims {
  int64_t N = 0, C = 0;
  int64_t E = 0;   // experts (0: a dense MLP)
  int64_t K = 0;   // experts per token
  int64_t F = 0;   // intermediate size of each expert
  int64_t Fs = 0;  // of the shared expert (0: none)
  bool norm_topk = true;
  // Expert parallelism (model/moe_exchange.hpp): the group the experts are split over (null: this
  // rank holds every expert), and the first of this rank's E / P experts.
  Communicator* ep = nullptr;
  int64_t expert0 = 0;
  int64_t local_experts() const { return ep ? E / ep->size() : E; }
  // (E) device, fp32: d(total loss)/d p[n, e] from the load-balancing loss (the same for every
  // token; null: no auxiliary loss in this backward).
  const float* aux_grad = nullptr;
  GemmOptions gemm{};  // how the router's and the experts' products run (model.gemm, gemm_fp32)
  bool enabled() const { return E > 0; }
  int64_t NK() const { return N * K; }
};

// The compute weights one sparse MLP reads (full, gathered).
struct MoeWeights {
  const float* router = nullptr;  // (E, C) fp32
  // This rank's experts (all E, or its E / P under expert parallelism), local expert le:
  CRef w13;             // (El, 2F, C): expert le's w1 (gate) rows, then its w3 (up) rows
  CRef w2;              // (El, C, F)
  CRef shared_gate_up;  // (2Fs, C) shared expert's gate, up rows (no data: none)
  CRef shared_down;     // (C, Fs)
};

// What a sparse MLP keeps from its forward for its backward (K assignments per token).
struct MoeActs {
  DView<float> xf;                   // (N, C)     router input, h widened to fp32
  DView<float> probs;                // (N, E)     router softmax, fp32
  DView<int32_t> choice;             // (N, K)     expert of each assignment, best first
  DView<float> weight;               // (N, K)     combine weights, fp32
  DView<int32_t> slot;               // (N, K)     row of each assignment in the expert-sorted order
  DView<int32_t> counts;             // (E)        assignments per expert
  DView<float> prob_sums;            // (E)        sum over tokens of p[:, e] (load-balancing loss)
  std::vector<int64_t> host_counts;  // (E) assignments per expert (the group sizes at P = 1)
  TBuf xs;                           // (NK, C)   tokens sorted by expert, compute dtype
  TBuf ye;                           // (NK, C)   their experts' outputs, in the same order
  // The rows this rank's experts run, R of them: xs itself at P = 1 (R = NK); under expert
  // parallelism the rows every peer sent, expert-major (R <= P NK), and the exchange's plan.
  MoePlan plan;
  TBuf xe;   // (R, C)    P > 1 only
  TBuf h;    // (R, 2F)   [w1 x | w3 x] per row
  TBuf act;  // (R, F)    silu(w1 x) * w3 x
  TBuf sgu;  // (N, 2Fs)  shared expert's [gate | up]
  TBuf sa;   // (N, Fs)
};

// Scratch of a sparse MLP, reused by every layer (device pointers).
template <class TC>
struct MoeScratch {
  float* logits = nullptr;  // (N, E)
  TC* sy = nullptr;         // (N, C)    shared expert output
  float* y = nullptr;       // (N, C)    combined output, fp32
  TC* dye = nullptr;        // (NK, C)   the expert outputs' gradient, sorted order
  TC* dxs = nullptr;        // (NK, C)   the expert inputs' gradient, sorted order
  // R rows (MoeActs): at P > 1 the local experts' output and gradients, and the exchange's
  // peer-major buffer.
  TC* ye_local = nullptr;    // (R, C)
  TC* dye_local = nullptr;   // (R, C)
  TC* dx_local = nullptr;    // (R, C)
  TC* peer = nullptr;        // (R, C)
  float* da = nullptr;       // (R, F)    fp32 until its rounding in swiglu_backward
  TC* dh = nullptr;          // (R, 2F)
  float* dweight = nullptr;  // (N, K)
  float* dlogits = nullptr;  // (N, E)
  TC* sdgu = nullptr;        // (N, 2Fs)
  float* sda = nullptr;      // (N, Fs)
  TC* dc = nullptr;          // (N, C)    the output gradient in the compute dtype
};

// Gradient destinations of a sparse MLP, beside the dense block's (model/block.hpp BlockWeight):
// the router, the shared expert's three projections, and local expert le's w1, w3, w2 at
// kMoeExpert0 + 3 le + {0, 1, 2} (global expert expert0 + le).
enum MoeWeight : int {
  kMoeRouter = 1000,
  kMoeSharedGate,
  kMoeSharedUp,
  kMoeSharedDown,
  kMoeExpert0
};

class BlockGrads;

// y (N, C) fp32 from h (N, C) in the compute dtype; fills `a` (host_counts included: the one
// device-to-host copy of a layer, the group sizes).
template <class TC>
void moe_forward(const ExecSpace& space, float* y, const TC* h, MoeActs& a, const MoeWeights& w,
                 const MoeScratch<TC>& s, const MoeDims& d);
// dh (N, C) fp32 (written) from dy (N, C) fp32, the gradient of y; weight gradients to grads.
// dw holds the largest stacked expert gradient, El * 2F * C floats. The experts' input gradient
// is rounded to the compute dtype (the dtype of the rows they read) before the sum over a
// token's k choices, so every expert-parallel size computes the same values.
template <class TC>
void moe_backward(const ExecSpace& space, float* dh, const float* dy, const TC* h, const MoeActs& a,
                  const MoeWeights& w, const MoeScratch<TC>& s, const MoeDims& d, float* dw,
                  BlockGrads& grads);

}  // namespace kktrain
