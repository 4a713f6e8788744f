// Tiled causal attention (ops/attention.hpp): kernel choice, tile sizes, and the tiled_gemm
// kernel, whose tile products are batched GEMM calls with row kernels in between.
//
// tiled_gemm loops on the host over (query head within a KV group g, query tile, chunk of
// (batch, KV head) groups, key block). The query tile of head g of every group in the chunk is one
// strided batch (groups G*T rows apart in the head layout), its key block another (T rows apart),
// so each product is one gemm_batched call whatever B and KV are; the causal bound ends the key
// blocks at the tile's last query row, and they begin at the block of the smallest first key of
// its rows (packed starts read from host_starts, the sliding window's first key). Every sum runs in
// a fixed order (the GEMM's, then the host loop's), so results are deterministic.
#include "ops/attention.hpp"

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cfloat>
#include <type_traits>

#include "core/bf16.hpp"
#include "ops/attention_impl.hpp"
#include "ops/gemm.hpp"
#include "ops/kernels.hpp"

namespace kktrain {

namespace {

// ---- tile sizes ----------------------------------------------------------------------------
// tiled_gemm (CPUs). Query tile: 64 rows. The diagonal tile computes its masked upper half too, an
// overhead of q_rows / (2 T) of the causal work (12.5% at T = 256, 0.8% at T = 4096), and a
// smaller tile doubles the calls and halves each product's rows (M = 64 per head keeps oneDNN's and
// BLAS' kernels near their rate; 32, 64, 128 and 256 measured within the noise of each other at
// T = 256 and 2048, bench/README.md).
constexpr int64_t kCpuQueryRows = 64;
// Key block: 1024 keys. Up to T = 1024 a query tile's keys are one block (one product per step,
// the softmax exact in one pass); beyond, the online softmax streams blocks of 1024, whose fp32
// scores (64 x 1024 x 4 bytes = 256 KiB per group) stay within a core's L2.
constexpr int64_t kCpuKeyCols = 1024;
// Groups per call: as many (batch, KV head) groups as keep one call's fp32 scores within 2 MiB
// (a server core's L2), so the scores stay in cache from the product through the row kernel to
// the next product; at least one.
constexpr int64_t kCpuScoreBytes = int64_t(2) << 20;
// team (GPUs): square tiles, the largest of 64, 32, 16, 8 whose largest kernel (dK/dV: q and dO
// tiles, K^T and V^T, two accumulators, P and dS, in fp32: (6 D + 2 t + 2) t floats) fits the
// 48 KiB of shared memory a CUDA block gets without opting in (HIP's LDS is 64 KiB): 32 for D = 32,
// 16 for D = 64, 8 for D = 128. Tiles that do not fit (larger D, or set by hand) run from level-1
// (global) scratch: slower, still correct.
constexpr int64_t kGpuScratchBytes = int64_t(48) << 10;
int64_t gpu_tile(int64_t D) {
  for (int64_t t : {64, 32, 16}) {
    if ((6 * D + 2 * t + 2) * t * static_cast<int64_t>(sizeof(float)) <= kGpuScratchBytes) return t;
  }
  return 8;
}

// The operand the P~ V (and dV) products read: the rounded copy, or the fp32 values themselves
// when nothing is rounded (TC = float, no rc).
template <class TC>
const TC* operand(const TC* rounded, const float* raw) {
  if constexpr (std::is_same<TC, float>::value) {
    return rounded != nullptr ? rounded : raw;
  } else {
    (void)raw;
    return rounded;
  }
}

// Row kernels' inner loops, written so that they vectorize on CPUs: no branch in the loop
// (the causal mask splits a row into [0, valid) and [valid, kw)), restrict-qualified distinct
// arrays (in-place updates have their own loops).

// x[c] = cap * tanh(x[c] / cap) for lo <= c < valid (the soft-capped scores a row sees).
KOKKOS_INLINE_FUNCTION void softcap_row(float* x, int64_t lo, int64_t valid, float cap) {
  for (int64_t c = lo; c < valid; ++c) x[c] = softcap_score(x[c], cap);
}

// x[c] = exp(x[c] - m) for lo <= c < valid, 0 for c < lo (before the example's start or the
// window) and for valid <= c < kw (after the query).
KOKKOS_INLINE_FUNCTION void exp_row(float* x, int64_t lo, int64_t valid, int64_t kw, float m) {
  for (int64_t c = 0; c < lo; ++c) x[c] = 0.0f;
  for (int64_t c = lo; c < valid; ++c) x[c] = exp_fast(x[c] - m);
  for (int64_t c = valid; c < kw; ++c) x[c] = 0.0f;
}

// out[c] = in[c] rounded to the compute dtype.
template <class TC>
KOKKOS_INLINE_FUNCTION void round_row(TC* __restrict out, const float* __restrict in, int64_t n) {
  for (int64_t c = 0; c < n; ++c) store_rounded(out, c, in[c]);
}

// The backward's P = exp(S - lse) (0 where masked: c < lo or c >= valid) and
// dS = rnd(P (rnd(dP) - delta)) of a row, into p and ds (rnd(P) there), or in place of S and dP.
// kCap (soft-capping, cap > 0): S is the raw score s, P = exp(cap t - lse) with t = tanh(s / cap),
// and dS = rnd(P (rnd(dP) - delta) (1 - t^2)).
template <bool kCap, class TC>
KOKKOS_INLINE_FUNCTION void dscores_row(TC* __restrict p, TC* __restrict ds,
                                        const float* __restrict s, const float* __restrict dp,
                                        int64_t lo, int64_t valid, int64_t kw, float lse,
                                        float delta, float cap, Rounding rc) {
  for (int64_t c = 0; c < lo; ++c) {
    store_as(p, c, 0.0f);
    store_as(ds, c, 0.0f);
  }
  for (int64_t c = lo; c < valid; ++c) {
    if constexpr (kCap) {
      const float t = math::tanh(s[c] / cap);
      const float e = exp_fast(cap * t - lse);
      store_rounded(p, c, e);
      store_rounded(ds, c, e * (rnd(dp[c], rc) - delta) * (1.0f - t * t));
    } else {
      const float e = exp_fast(s[c] - lse);
      store_rounded(p, c, e);
      store_rounded(ds, c, e * (rnd(dp[c], rc) - delta));
    }
  }
  for (int64_t c = valid; c < kw; ++c) {
    store_as(p, c, 0.0f);
    store_as(ds, c, 0.0f);
  }
}
template <bool kCap>
KOKKOS_INLINE_FUNCTION void dscores_row_in_place(float* s, float* dp, int64_t lo, int64_t valid,
                                                 int64_t kw, float lse, float delta, float cap) {
  for (int64_t c = 0; c < lo; ++c) s[c] = dp[c] = 0.0f;
  for (int64_t c = lo; c < valid; ++c) {
    if constexpr (kCap) {
      const float t = math::tanh(s[c] / cap);
      const float e = exp_fast(cap * t - lse);
      s[c] = e;
      dp[c] = e * (dp[c] - delta) * (1.0f - t * t);
    } else {
      const float e = exp_fast(s[c] - lse);
      s[c] = e;
      dp[c] = e * (dp[c] - delta);
    }
  }
  for (int64_t c = valid; c < kw; ++c) s[c] = dp[c] = 0.0f;
}

// One step of a tile's loop: rows (nc groups, nr query rows) of query head g, query tile at i0,
// key block [k0, k0 + kw); k_first is the tile's first key block (0, or later with packed rows or
// a window: the blocks before every row's first key are skipped).
struct Step {
  int64_t c0, nc, g, i0, nr, k0, kw, k_first = 0;
};

// The first key block of a query tile (rows [i0, i0 + nr) of groups [c0, c0 + nc)): the block
// holding the smallest first key of its rows (attention_first_key: their starts, from the host
// starts, and their windows). Without host starts, the first row's window's first key (every row's
// window begins there or later; 0 without a window). Blocks before it are seen by no row of the
// tile.
int64_t first_key_block(const AttentionDims& d, int64_t c0, int64_t nc, int64_t i0, int64_t nr,
                        int64_t k_cols) {
  int64_t lo = attention_first_key(i0, 0, d.window);
  if (d.host_starts != nullptr) {
    lo = i0;
    for (int64_t b = c0 / d.KV; b <= (c0 + nc - 1) / d.KV; ++b) {
      for (int64_t t = i0; t < i0 + nr; ++t)
        lo = std::min(lo, attention_first_key(t, d.host_starts[b * d.T + t], d.window));
    }
  }
  return (lo / k_cols) * k_cols;
}

// Online-softmax update of the forward over scores (nc, nr, kw): running max m and sum l per row,
// the block's P~ = exp(S - m) (0 where masked) into probs (rounded to rc; TC) or in place, and the
// output accumulator (nc, nr, D) rescaled by exp(m_old - m_new) before this block's product adds
// to it. The first block starts the row.
// Packed rows and windows: a row whose keys in the block are all masked (before its example's
// start or its window) keeps m = -FLT_MAX, l = 0 and a zero accumulator, which its first visible
// block rescales (still 0). With a softcap the scores a row sees are capped first.
template <class TC>
void softmax_block(const ExecSpace& space, const AttentionScratch<TC>& s, const Step& st,
                   const AttentionDims& d) {
  float* scores = s.scores;
  TC* probs = s.probs;
  float *m = s.row_max, *l = s.row_sum, *acc = s.out_acc;
  const int64_t nr = st.nr, kw = st.kw, i0 = st.i0, k0 = st.k0, c0 = st.c0;
  const int64_t D = d.D, T = d.T, KV = d.KV, window = d.window;
  const float cap = d.softcap;
  const int32_t* starts = d.starts;
  const int32_t* gaps = d.gaps;
  const bool first = k0 == st.k_first;
  Kokkos::parallel_for(
      "attention_softmax_block", RangePolicy(space, 0, st.nc * nr),
      KOKKOS_LAMBDA(const int64_t row) {
        const int64_t t = i0 + row % nr, b = (c0 + row / nr) / KV;
        const int64_t valid = causal_width(t, k0, kw);
        const int64_t lo = start_width(row_first_key(starts, b, t, T, window), k0, kw);
        float* srow = scores + row * kw;
        if (cap > 0.0f) softcap_row(srow, lo, valid, cap);
        int64_t g0, g1;  // a shared prefix's gap: masked (never the row's max), then 0
        gap_columns(gaps, b, t, T, k0, kw, &g0, &g1);
        for (int64_t c = g0; c < g1; ++c) srow[c] = -FLT_MAX;
        const float m_old = first ? -FLT_MAX : m[row];
        const float m_new =
            math::max_f(m_old, row_max(valid - lo, [&](const int64_t c) { return srow[lo + c]; }));
        exp_row(srow, lo, valid, kw, m_new);
        for (int64_t c = g0; c < g1; ++c) srow[c] = 0.0f;
        const float sum = row_sum(kw, [&](const int64_t c) { return srow[c]; });
        if (probs != nullptr) round_row(probs + row * kw, srow, kw);
        m[row] = m_new;
        if (first) {
          l[row] = sum;
        } else {
          const float alpha = exp_fast(m_old - m_new);
          l[row] = alpha * l[row] + sum;
          for (int64_t e = 0; e < D; ++e) acc[row * D + e] *= alpha;
        }
      });
}

// out (token layout) = rnd(acc / l), lse = m + log(l) for the rows of a tile.
template <class TC>
void finalize_tile(const ExecSpace& space, TC* out, float* lse, const AttentionScratch<TC>& s,
                   const Step& st, const AttentionDims& d) {
  const float *m = s.row_max, *l = s.row_sum, *acc = s.out_acc;
  const int64_t nr = st.nr, i0 = st.i0, c0 = st.c0, g = st.g;
  const int64_t T = d.T, H = d.H, D = d.D, KV = d.KV, G = d.H / d.KV;
  Kokkos::parallel_for(
      "attention_finalize", RangePolicy(space, 0, st.nc * nr), KOKKOS_LAMBDA(const int64_t row) {
        const int64_t bk = c0 + row / nr, t = i0 + row % nr;
        const int64_t b = bk / KV, h = (bk % KV) * G + g;
        const float inv = 1.0f / l[row];
        TC* o = out + token_index(b, h, t, 0, T, H, D);
        for (int64_t e = 0; e < D; ++e) store_rounded(o, e, acc[row * D + e] * inv);
        lse[(b * H + h) * T + t] = m[row] + math::log(l[row]);
      });
}

// Backward row kernel over scores S and dprobs dP (nc, nr, kw): P = exp(S - lse) (0 where
// masked), its rounded copy into probs (or in place), and dS = rnd(P * (rnd(dP) - delta)) into
// dscores (or in place of dP); with a softcap, S capped first and dS times the cap's derivative.
template <class TC>
void dscores_block(const ExecSpace& space, const AttentionScratch<TC>& s, const float* lse,
                   const Step& st, const AttentionDims& d, Rounding rc) {
  float *scores = s.scores, *dprobs = s.dprobs;
  const float* delta = s.delta;
  TC *probs = s.probs, *dscores = s.dscores;
  const int64_t nr = st.nr, kw = st.kw, i0 = st.i0, k0 = st.k0, c0 = st.c0, g = st.g;
  const int64_t T = d.T, G = d.H / d.KV, KV = d.KV, window = d.window;
  const float cap = d.softcap;
  const int32_t* starts = d.starts;
  const int32_t* gaps = d.gaps;
  Kokkos::parallel_for(
      "attention_dscores_block", RangePolicy(space, 0, st.nc * nr),
      KOKKOS_LAMBDA(const int64_t row) {
        const int64_t t = i0 + row % nr, b = (c0 + row / nr) / KV;
        const int64_t stat = ((c0 + row / nr) * G + g) * T + t;  // (b*H + h)*T + t
        const int64_t valid = causal_width(t, k0, kw);
        const int64_t lo = start_width(row_first_key(starts, b, t, T, window), k0, kw);
        const float row_lse = lse[stat], row_delta = delta[stat];
        float* srow = scores + row * kw;
        float* dprow = dprobs + row * kw;
        if (probs != nullptr) {
          TC *p = probs + row * kw, *ds = dscores + row * kw;
          if (cap > 0.0f) {
            dscores_row<true>(p, ds, srow, dprow, lo, valid, kw, row_lse, row_delta, cap, rc);
          } else {
            dscores_row<false>(p, ds, srow, dprow, lo, valid, kw, row_lse, row_delta, cap, rc);
          }
        } else if (cap > 0.0f) {  // fp32 without rounding
          dscores_row_in_place<true>(srow, dprow, lo, valid, kw, row_lse, row_delta, cap);
        } else {
          dscores_row_in_place<false>(srow, dprow, lo, valid, kw, row_lse, row_delta, cap);
        }
        int64_t g0, g1;  // a shared prefix's gap: P and dS 0
        gap_columns(gaps, b, t, T, k0, kw, &g0, &g1);
        for (int64_t c = g0; c < g1; ++c) {
          if (probs != nullptr) {
            store_as(probs + row * kw, c, 0.0f);
            store_as(dscores + row * kw, c, 0.0f);
          }
          srow[c] = 0.0f;
          dprow[c] = 0.0f;
        }
      });
}

template <class TC>
void tiled_forward(const ExecSpace& space, TC* out, float* lse, const TC* q, const TC* k,
                   const TC* v, const AttentionDims& d, const AttentionScratch<TC>& s) {
  const AttentionTiles tl = attention_tiles(d, AttentionKernel::tiled_gemm);
  const int64_t T = d.T, D = d.D, G = d.H / d.KV, NG = d.B * d.KV;
  for (int64_t g = 0; g < G; ++g) {
    for (int64_t i0 = 0; i0 < T; i0 += tl.q_rows) {
      const int64_t nr = std::min(tl.q_rows, T - i0), kend = i0 + nr;
      for (int64_t c0 = 0; c0 < NG; c0 += tl.groups) {
        const int64_t nc = std::min(tl.groups, NG - c0);
        const GemmIn qt = gin(q + ((c0 * G + g) * T + i0) * D, nr, D, G * T * D);  // (nr, D)
        const int64_t k_first = first_key_block(d, c0, nc, i0, nr, tl.k_cols);
        for (int64_t k0 = k_first; k0 < kend; k0 += tl.k_cols) {
          const Step st{c0, nc, g, i0, nr, k0, std::min(tl.k_cols, kend - k0), k_first};
          const int64_t kw = st.kw;
          // S (nr, kw) = scale q_tile k_block^T, fp32
          gemm_batched(space, d.options.gemm, nc, 'N', 'T', d.scale, qt,
                       gin(k + (c0 * T + k0) * D, kw, D, T * D), 0.0f, gout(s.scores, nr, kw));
          softmax_block(space, s, st, d);
          // acc (nr, D) (+)= rnd(P~) (nr, kw) v_block (kw, D), fp32
          gemm_batched(space, d.options.gemm, nc, 'N', 'N', 1.0f,
                       gin(operand(s.probs, s.scores), nr, kw),
                       gin(v + (c0 * T + k0) * D, kw, D, T * D), k0 == k_first ? 0.0f : 1.0f,
                       gout(s.out_acc, nr, D));
        }
        finalize_tile(space, out, lse, s, Step{c0, nc, g, i0, nr, 0, 0}, d);
      }
    }
  }
}

template <class TC>
void tiled_backward(const ExecSpace& space, float* dq, float* dk, float* dv, const TC* dout,
                    const float* lse, const TC* q, const TC* k, const TC* v, const AttentionDims& d,
                    const AttentionScratch<TC>& s, Rounding rc) {
  const AttentionTiles tl = attention_tiles(d, AttentionKernel::tiled_gemm);
  const int64_t T = d.T, D = d.D, G = d.H / d.KV, NG = d.B * d.KV;
  // dK and dV sum over query tiles and the group's heads: start at zero, every product adds.
  Kokkos::deep_copy(space, DViewU<float>(dk, NG * T * D), 0.0f);
  Kokkos::deep_copy(space, DViewU<float>(dv, NG * T * D), 0.0f);
  for (int64_t g = 0; g < G; ++g) {
    for (int64_t i0 = 0; i0 < T; i0 += tl.q_rows) {
      const int64_t nr = std::min(tl.q_rows, T - i0), kend = i0 + nr;
      for (int64_t c0 = 0; c0 < NG; c0 += tl.groups) {
        const int64_t nc = std::min(tl.groups, NG - c0);
        const int64_t qoff = ((c0 * G + g) * T + i0) * D, qstride = G * T * D;
        const GemmIn qt = gin(q + qoff, nr, D, qstride), dot = gin(dout + qoff, nr, D, qstride);
        const int64_t k_first = first_key_block(d, c0, nc, i0, nr, tl.k_cols);
        for (int64_t k0 = k_first; k0 < kend; k0 += tl.k_cols) {
          const Step st{c0, nc, g, i0, nr, k0, std::min(tl.k_cols, kend - k0), k_first};
          const int64_t kw = st.kw, koff = (c0 * T + k0) * D;
          const GemmIn kb = gin(k + koff, kw, D, T * D);
          // S (nr, kw) = scale q_tile k_block^T; dP (nr, kw) = dout_tile v_block^T
          gemm_batched(space, d.options.gemm, nc, 'N', 'T', d.scale, qt, kb, 0.0f,
                       gout(s.scores, nr, kw));
          gemm_batched(space, d.options.gemm, nc, 'N', 'T', 1.0f, dot, gin(v + koff, kw, D, T * D),
                       0.0f, gout(s.dprobs, nr, kw));
          dscores_block(space, s, lse, st, d, rc);
          const TC* p = operand(s.probs, s.scores);
          const TC* ds = operand(s.dscores, s.dprobs);
          // dv_block (kw, D) += rnd(P)^T (kw, nr) dout_tile (nr, D)
          gemm_batched(space, d.options.gemm, nc, 'T', 'N', 1.0f, gin(p, nr, kw), dot, 1.0f,
                       gout(dv + koff, kw, D, T * D));
          // dq_tile (nr, D) (+)= scale dS (nr, kw) k_block (kw, D)
          gemm_batched(space, d.options.gemm, nc, 'N', 'N', d.scale, gin(ds, nr, kw), kb,
                       k0 == k_first ? 0.0f : 1.0f, gout(dq + qoff, nr, D, qstride));
          // dk_block (kw, D) += scale dS^T (kw, nr) q_tile (nr, D)
          gemm_batched(space, d.options.gemm, nc, 'T', 'N', d.scale, gin(ds, nr, kw), qt, 1.0f,
                       gout(dk + koff, kw, D, T * D));
        }
      }
    }
  }
}

}  // namespace

const char* attention_kernel_name(AttentionKernel k) {
  return k == AttentionKernel::team ? "team" : "tiled_gemm";
}

AttentionTiles attention_tiles(const AttentionDims& d, AttentionKernel k) {
  const AttentionOptions& o = d.options;
  AttentionTiles t;
  if (k == AttentionKernel::team) {
    t.q_rows = t.k_cols = gpu_tile(d.D);
  } else {
    t.q_rows = kCpuQueryRows;
    t.k_cols = kCpuKeyCols;
  }
  if (o.q_rows > 0) t.q_rows = o.q_rows;
  if (o.k_cols > 0) t.k_cols = o.k_cols;
  t.q_rows = std::max<int64_t>(1, std::min(t.q_rows, d.T));
  t.k_cols = std::max<int64_t>(1, std::min(t.k_cols, d.T));
  const int64_t per_group = t.q_rows * t.k_cols * static_cast<int64_t>(sizeof(float));
  t.groups = k == AttentionKernel::team
                 ? 1
                 : std::max<int64_t>(1, std::min(d.B * d.KV, kCpuScoreBytes / per_group));
  if (k != AttentionKernel::team && o.groups > 0) t.groups = std::min(d.B * d.KV, o.groups);
  return t;
}

AttentionWorkspaceSizes attention_workspace_sizes(const AttentionDims& d, Rounding operands) {
  const AttentionKernel k = d.options.kernel;
  AttentionWorkspaceSizes w;
  w.delta = d.B * d.H * d.T;
  if (k == AttentionKernel::team) return w;  // the team kernel's tiles live in team scratch
  const AttentionTiles t = attention_tiles(d, k);
  const int64_t tile = t.groups * t.q_rows * t.k_cols;
  w.scores = w.dprobs = tile;
  w.probs = w.dscores = operands == Rounding::bf16 ? tile : 0;
  w.out_acc = t.groups * t.q_rows * d.D;
  w.row_stats = t.groups * t.q_rows;
  return w;
}

template <class TC>
void attention_delta(const ExecSpace& space, float* delta, const TC* dout, const TC* out,
                     const AttentionDims& d) {
  const int64_t T = d.T, H = d.H, D = d.D;
  Kokkos::parallel_for(
      "attention_delta", RangePolicy(space, 0, d.B * H * T), KOKKOS_LAMBDA(const int64_t row) {
        const int64_t t = row % T, h = (row / T) % H, b = row / (T * H);
        const TC* o = out + token_index(b, h, t, 0, T, H, D);
        const TC* go = dout + row * D;
        delta[row] = row_sum(D, [&](const int64_t e) { return load_f32(go, e) * load_f32(o, e); });
      });
}

template <class TC>
void attention_forward(const ExecSpace& space, TC* out, float* lse, const TC* q, const TC* k,
                       const TC* v, const AttentionDims& d, const AttentionScratch<TC>& s) {
  constexpr Rounding rc = rounding_of<TC>();
  if (d.options.kernel == AttentionKernel::team) {
    team_attention_forward(space, out, lse, q, k, v, d, rc);
  } else {
    tiled_forward(space, out, lse, q, k, v, d, s);
  }
}

template <class TC>
void attention_backward(const ExecSpace& space, float* dq, float* dk, float* dv, const TC* dout,
                        const TC* out, const float* lse, const TC* q, const TC* k, const TC* v,
                        const AttentionDims& d, const AttentionScratch<TC>& s) {
  constexpr Rounding rc = rounding_of<TC>();
  attention_delta(space, s.delta, dout, out, d);
  if (d.options.kernel == AttentionKernel::team) {
    team_attention_backward(space, dq, dk, dv, dout, lse, s.delta, q, k, v, d, rc);
  } else {
    tiled_backward(space, dq, dk, dv, dout, lse, q, k, v, d, s, rc);
  }
}

#define KKTRAIN_INST_ATTENTION(TC)                                                               \
  template void attention_delta<TC>(const ExecSpace&, float*, const TC*, const TC*,              \
                                    const AttentionDims&);                                       \
  template void attention_forward<TC>(const ExecSpace&, TC*, float*, const TC*, const TC*,       \
                                      const TC*, const AttentionDims&,                           \
                                      const AttentionScratch<TC>&);                              \
  template void attention_backward<TC>(const ExecSpace&, float*, float*, float*, const TC*,      \
                                       const TC*, const float*, const TC*, const TC*, const TC*, \
                                       const AttentionDims&, const AttentionScratch<TC>&);
KKTRAIN_INST_ATTENTION(float)
KKTRAIN_INST_ATTENTION(bf16)
#undef KKTRAIN_INST_ATTENTION

}  // namespace kktrain
