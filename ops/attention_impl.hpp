// Pieces shared by the two attention kernels (ops/attention.cpp: tiled GEMM products;
// ops/attention_team.cpp: Kokkos teams with scratch tiles). Private to model/.
#pragma once

#include <cstdint>

#include "core/kokkos_compat.hpp"
#include "ops/attention.hpp"
#include "ops/kernels.hpp"

namespace kktrain {

// How many keys of the block [k0, k0 + kw) query position t attends to (keys <= t): the causal
// mask of a tile.
KOKKOS_INLINE_FUNCTION int64_t causal_width(int64_t t, int64_t k0, int64_t kw) {
  const int64_t n = t - k0 + 1;
  return n < 0 ? 0 : (n > kw ? kw : n);
}

// Packed rows (AttentionDims::starts): where the example of token t of row b begins (0 without
// starts: the row is one sequence).
KOKKOS_INLINE_FUNCTION int64_t example_start(const int32_t* starts, int64_t b, int64_t t,
                                             int64_t T) {
  return starts != nullptr ? starts[b * T + t] : 0;
}

// The first key token t of row b sees: its example's start and the first key of its sliding
// window (AttentionDims::window; <= 0: none), attention_first_key of ops/attention.hpp.
KOKKOS_INLINE_FUNCTION int64_t row_first_key(const int32_t* starts, int64_t b, int64_t t, int64_t T,
                                             int64_t window) {
  return attention_first_key(t, example_start(starts, b, t, T), window);
}

// How many keys of the block [k0, k0 + kw) lie before `start` (masked for a query whose first
// visible key is there: its example's start or its window's first key): the query sees keys
// [start_width, causal_width) of the block. 0 without starts and window.
KOKKOS_INLINE_FUNCTION int64_t start_width(int64_t start, int64_t k0, int64_t kw) {
  const int64_t n = start - k0;
  return n < 0 ? 0 : (n > kw ? kw : n);
}

// The keys of the block [k0, k0 + kw) in token t's gap (AttentionDims::gaps), as columns
// [*g0, *g1) of the block (empty without gaps).
KOKKOS_INLINE_FUNCTION void gap_columns(const int32_t* gaps, int64_t b, int64_t t, int64_t T,
                                        int64_t k0, int64_t kw, int64_t* g0, int64_t* g1) {
  if (gaps == nullptr) {
    *g0 = *g1 = 0;
    return;
  }
  const int64_t i = 2 * (b * T + t);
  int64_t a = gaps[i] - k0, e = gaps[i + 1] - k0;
  a = a < 0 ? 0 : (a > kw ? kw : a);
  e = e < a ? a : (e > kw ? kw : e);
  *g0 = a;
  *g1 = e;
}
// Whether key `key` lies in token t's gap.
KOKKOS_INLINE_FUNCTION bool in_gap(const int32_t* gaps, int64_t b, int64_t t, int64_t T,
                                   int64_t key) {
  if (gaps == nullptr) return false;
  const int64_t i = 2 * (b * T + t);
  return key >= gaps[i] && key < gaps[i + 1];
}

// Attention-logit soft-capping (AttentionDims::softcap = cap > 0): a score s becomes
// cap * tanh(s / cap), in fp32. Its derivative, 1 - tanh(s / cap)^2, multiplies dS in backward.
KOKKOS_INLINE_FUNCTION float softcap_score(float s, float cap) {
  return cap * math::tanh(s / cap);
}

// The element index of (b, h, t, e) in a token-layout tensor (B*T, H*D) and a head-layout tensor
// (B, H, T, D); row (b*H + h)*T + t of a (B, H, T) statistic is the head-layout row.
KOKKOS_INLINE_FUNCTION int64_t token_index(int64_t b, int64_t h, int64_t t, int64_t e, int64_t T,
                                           int64_t H, int64_t D) {
  return ((b * T + t) * H + h) * D + e;
}

// delta (B, H, T) = rowsum(dout * out): dout in head layout, out in token layout, fp32 sums in a
// fixed order.
template <class TC>
void attention_delta(const ExecSpace& space, float* delta, const TC* dout, const TC* out,
                     const AttentionDims& d);

// The team kernel (ops/attention_team.cpp); same contract as attention_forward/backward.
template <class TC>
void team_attention_forward(const ExecSpace& space, TC* out, float* lse, const TC* q, const TC* k,
                            const TC* v, const AttentionDims& d, Rounding rc);
template <class TC>
void team_attention_backward(const ExecSpace& space, float* dq, float* dk, float* dv,
                             const TC* dout, const float* lse, const float* delta, const TC* q,
                             const TC* k, const TC* v, const AttentionDims& d, Rounding rc);

}  // namespace kktrain
