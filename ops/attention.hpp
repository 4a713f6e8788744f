// Causal multi-head attention with grouped KV heads, tiled (the FlashAttention-2 algorithm): no
// T x T tensor exists at any time, memory is linear in T.
//
// Forward, per query tile of a head: the key/value blocks up to the causal diagonal are streamed
// (blocks entirely above the diagonal are never touched), scores S = scale q k^T in fp32, an
// online softmax keeps each row's running max m and sum l in fp32 and rescales the fp32 output
// accumulator when the max grows, P~ = exp(S - m) is rounded to the compute dtype for the P~ V
// product (as a bf16 autocast attention rounds its probabilities), and the output is rounded once,
// out = rnd(acc / l). Only the row log-sum-exp lse = m + log(l) is kept for backward.
//
// Backward recomputes each tile's probabilities from q, k and lse, P = exp(S - lse), and with
// D = rowsum(dout * out): dP = rnd(dout v^T), dS = rnd(P * (dP - D)), dV += rnd(P)^T dout,
// dQ += scale dS k, dK += scale dS^T q, accumulated in fp32 (rounded to the compute dtype once,
// by their consumer). With GQA, query head h reads KV head h / (H / KV); K and V gradients sum over
// the heads of a group (in a fixed order: results are deterministic, so activation-checkpoint
// recompute gives the same bits). Repeated K/V are never materialized.
//
// Packed rows (AttentionDims::starts): several examples in one row, and query i of a row sees key
// j iff start[i] <= j <= i (a block-diagonal causal mask). Both kernels start a query tile's key
// loop at the block holding the smallest start of its rows (earlier blocks are never computed,
// like those above the diagonal; the team kernel's dK/dV pass likewise skips query tiles whose
// every row starts after its key tile) and mask the keys before a row's start in the blocks they
// compute (score -inf: probability 0, and dS 0). Without starts the results are bit for bit those
// of the plain causal attention (and all-zero starts give the same bits).
//
// Sliding window (AttentionDims::window = W > 0; Mistral, Qwen2, Gemma 2's local layers): query i
// sees key j iff i - W < j <= i (W keys, itself included) and start[i] <= j: the first key query i
// sees is attention_first_key(i, start[i], W). A query tile's key loop starts at the block holding
// the smallest first key of its rows, and the team kernel's dK/dV pass ends a key tile's query
// tiles at the last query that sees one of its keys (and skips those whose every row's first key
// lies after it): blocks wholly outside the window are never computed, partly covered ones are
// masked as above. W >= T is no window (the same bits as W = 0).
//
// Soft-capping (AttentionDims::softcap = cap > 0; Gemma 2): the scores are s = scale q k^T, then
// cap * tanh(s / cap) (in fp32, before the mask and the softmax); backward recomputes t =
// tanh(s / cap) from the recomputed s and multiplies dS by 1 - t^2 before its rounding:
// dS = rnd(P (dP - D) (1 - t^2)). cap = 0 leaves every bit as without it.
//
// Two kernels compute this (AttentionOptions::kernel; the default is chosen per build):
//   tiled_gemm  host builds: the tile products are batched GEMMs (ops/gemm.hpp; oneDNN or BLAS),
//               one call per product for a query tile of every (batch, KV head) group at once
//               (strided batches), with vectorized row kernels (online softmax, dS) in between.
//   team        GPU builds: one Kokkos team per (batch, head, query tile) (forward, dQ) or per
//               (batch, KV head, key tile) (dK, dV), tiles in team scratch memory, no GEMM calls.
// Both run on every build (AttentionDims::options.kernel: a run's model.attention), and tests
// compare them.
// q, k, v, the output and dout are compute-dtype tensors (TC = float or bf16). Both passes launch
// every kernel and product on the execution-space instance given first.
#pragma once

#include <cstdint>

#include "core/bf16.hpp"
#include "core/kokkos_compat.hpp"
#include "core/launch.hpp"
#include "ops/gemm.hpp"

namespace kktrain {

enum class AttentionKernel { tiled_gemm, team };
// The build's default kernel: tiled_gemm on host builds, team on GPU builds.
constexpr AttentionKernel kDefaultAttentionKernel =
    kHostKernels ? AttentionKernel::tiled_gemm : AttentionKernel::team;
const char* attention_kernel_name(AttentionKernel k);

// How the attention computes, passed in with its dims (a run's model.attention and
// model.attention_tiles): the kernel, and tile sizes replacing the kernel's defaults where > 0
// (query rows per tile, keys per block, and (tiled_gemm) the (batch, KV head) groups one batched
// GEMM call covers). Tests use small tiles so that short sequences cross many tile and block
// boundaries, and few groups per call so that the groups split into chunks.
struct AttentionOptions {
  AttentionKernel kernel = kDefaultAttentionKernel;
  int64_t q_rows = 0, k_cols = 0, groups = 0;
  GemmOptions gemm{};  // how the tiled_gemm kernel's tile products run
};

struct AttentionDims {
  int64_t B, T, H, KV, D;
  float scale;  // 1 / sqrt(D)
  // Packed rows (several examples in one row): starts (B, T) int32, device memory, for each token
  // the position in its row where its example begins (starts[b*T + t] <= t). Query t sees keys
  // [starts[b*T + t], t] only (a block-diagonal causal mask). Null: every row is one sequence.
  const int32_t* starts = nullptr;
  // The same starts in host memory (or null): the tiled_gemm kernel's host loop reads them to
  // skip key blocks before every start of a query tile (without them it computes those blocks
  // and masks them: the same results). The team kernel reads `starts` only.
  const int32_t* host_starts = nullptr;
  AttentionOptions options{};  // the kernel and tile sizes (defaults: the build's)
  // Sliding window: query t sees keys t - window < j <= t only (with the causal mask and
  // starts). <= 0: none; >= T: none in effect (the same bits).
  int64_t window = 0;
  // Attention-logit soft-capping: scores s -> softcap * tanh(s / softcap) before the mask and the
  // softmax. <= 0: off.
  float softcap = 0.0f;
  // Shared prefixes (a preference pair's rejected side after its chosen side, both seeing their
  // prompt once): gaps (B, T, 2) int32, device memory, for each token a range [begin, end) of
  // keys it does not see although they lie in [start, t] (begin == end: none). Null: no gaps.
  // Not with softcap (refused by the caller).
  const int32_t* gaps = nullptr;
};

// The first key position query t sees, whose example begins at `start` (0 without packed rows),
// with a sliding window of `window` keys (<= 0: none): max(start, t - window + 1). Query t sees
// keys [attention_first_key(t, start, window), t]; a decoder at position t needs only those of
// its KV cache.
KOKKOS_INLINE_FUNCTION int64_t attention_first_key(int64_t t, int64_t start, int64_t window) {
  const int64_t w = window > 0 ? t - window + 1 : 0;
  return start > w ? start : w;
}

// Tile sizes of kernel k for these dims: the kernel's defaults, replaced by d.options' sizes > 0,
// each clamped to [1, T] (groups to [1, B * KV]).
struct AttentionTiles {
  int64_t q_rows = 0, k_cols = 0, groups = 0;
};
AttentionTiles attention_tiles(const AttentionDims& d, AttentionKernel k);

// The working buffers the caller provides (device memory; element counts from
// attention_workspace_sizes for the same dims, kernel and TC). TC buffers are only needed when
// the products' operands are rounded (TC = bf16): otherwise they may be null.
template <class TC>
struct AttentionScratch {
  float* scores = nullptr;   // (groups, q_rows, k_cols) fp32: S, then P
  float* dprobs = nullptr;   // (groups, q_rows, k_cols) fp32: dP (backward)
  TC* probs = nullptr;       // (groups, q_rows, k_cols) rnd(P~) / rnd(P): the product operand
  TC* dscores = nullptr;     // (groups, q_rows, k_cols) rnd(dS) (backward)
  float* out_acc = nullptr;  // (groups, q_rows, D) fp32 output accumulator (forward)
  float* row_max = nullptr;  // (groups, q_rows) running max m (forward)
  float* row_sum = nullptr;  // (groups, q_rows) running sum l (forward)
  float* delta = nullptr;    // (B, H, T) D = rowsum(dout * out) (backward)
};
struct AttentionWorkspaceSizes {
  int64_t scores = 0, dprobs = 0, probs = 0, dscores = 0, out_acc = 0, row_stats = 0, delta = 0;
};
// For d.options' kernel and tiles; operands: whether P and dS are rounded copies
// (rounding_of<TC>()).
AttentionWorkspaceSizes attention_workspace_sizes(const AttentionDims& d, Rounding operands);

// out (B*T, H*D) token layout = rnd(softmax(cap(scale q k^T) + mask) v), lse (B, H, T) fp32 (the
// causal mask, block-diagonal with d.starts, banded with d.window; cap: d.softcap's, or none);
// q (B, H, T, D), k and v (B, KV, T, D).
template <class TC>
void attention_forward(const ExecSpace& space, TC* out, float* lse, const TC* q, const TC* k,
                       const TC* v, const AttentionDims& d, const AttentionScratch<TC>& s);

// From dout (B, H, T, D) (already in the compute dtype), the forward's out (B*T, H*D) and lse:
// dq (B, H, T, D), dk and dv (B, KV, T, D), fp32 sums. They are the gradients of compute-dtype
// tensors, so each is rounded to the compute dtype once by its consumer (rope_backward rounds on
// load, saving a pass over them).
template <class TC>
void attention_backward(const ExecSpace& space, float* dq, float* dk, float* dv, const TC* dout,
                        const TC* out, const float* lse, const TC* q, const TC* k, const TC* v,
                        const AttentionDims& d, const AttentionScratch<TC>& s);

}  // namespace kktrain
