// The team kernel of the tiled attention (ops/attention.hpp), the GPU shape: no GEMM calls, one
// Kokkos team per tile with its tiles in team scratch (shared memory on GPUs), threads over the
// elements of a tile product, each summing its dot product in order.
//
//   forward   team per (batch, head, query tile): q tile loaded once, K^T and V blocks streamed
//             from the block of the tile's smallest first key (starts, window) up to the causal
//             diagonal, online softmax per row, fp32 accumulator in scratch.
//   dK, dV    team per (batch, KV head, key tile): loops over the group's query heads and the query
//             tiles from the diagonal down to the last query whose window holds one of its keys
//             (skipping tiles whose every row's first key lies after it), accumulating the key
//             tile's gradients in scratch.
//   dQ        team per (batch, head, query tile): the forward's key blocks.
// The backward's two passes recompute the scores with the same loops, so both see the same P and
// dS, and nothing is added by two teams to one element (no atomics: deterministic).
//
// Scratch tiles are fp32 (inputs widened once when loaded). At the default tile sizes
// (ops/attention.cpp) a team's tiles fit level-0 scratch (GPU shared memory) up to D = 128;
// whatever does not fit runs from level 1 (global memory).
#include <Kokkos_Core.hpp>
#include <cfloat>

#include "core/bf16.hpp"
#include "ops/attention_impl.hpp"
#include "ops/kernels.hpp"

namespace kktrain {

namespace {

using Member = TeamMember;
using ScratchFloats =
    Kokkos::View<float*, ExecSpace::scratch_memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

// A policy over `league` teams with `floats` fp32 of scratch each, on the level it fits.
struct ScratchPolicy {
  TeamPolicy policy;
  int level;
};
ScratchPolicy scratch_policy(const ExecSpace& space, int64_t league, int64_t floats) {
  const size_t bytes = ScratchFloats::shmem_size(floats);
  const int level = bytes <= static_cast<size_t>(TeamPolicy::scratch_size_max(0)) ? 0 : 1;
  TeamPolicy p(space, league, Kokkos::AUTO);
  p.set_scratch_size(level, Kokkos::PerTeam(bytes));
  return ScratchPolicy{p, level};
}

// dst (rows, D) fp32 = src rows (contiguous) of a compute-dtype tensor.
template <class TC>
KOKKOS_INLINE_FUNCTION void load_rows(const Member& m, float* dst, const TC* src, int64_t n) {
  Kokkos::parallel_for(Kokkos::TeamThreadRange(m, n),
                       [&](const int64_t i) { dst[i] = to_f32(src[i]); });
}

// dst (D, ld) = transpose of rows (n, D) of src: dst[e * ld + c] = src[c * D + e].
template <class TC>
KOKKOS_INLINE_FUNCTION void load_transposed(const Member& m, float* dst, int64_t ld, const TC* src,
                                            int64_t n, int64_t D) {
  Kokkos::parallel_for(Kokkos::TeamThreadRange(m, n * D),
                       [&](const int64_t i) { dst[(i % D) * ld + i / D] = to_f32(src[i]); });
}

KOKKOS_INLINE_FUNCTION void fill(const Member& m, float* dst, int64_t n, float value) {
  Kokkos::parallel_for(Kokkos::TeamThreadRange(m, n), [&](const int64_t i) { dst[i] = value; });
}

// sum_e a[e] * bt[e * ld] over e < D, in order.
KOKKOS_INLINE_FUNCTION float dot_strided(const float* a, const float* bt, int64_t ld, int64_t D) {
  float s = 0.0f;
  for (int64_t e = 0; e < D; ++e) s += a[e] * bt[e * ld];
  return s;
}

// The backward's per-element step for query row r (position t) and key c of a tile, from the
// scores q.k and dP: P = exp(scale q.k - lse) (0 where masked) and dS = rnd(P (rnd(dP) - delta)).
// With a softcap (cap > 0): s = scale q.k, t = tanh(s / cap), P = exp(cap t - lse) and
// dS = rnd(P (rnd(dP) - delta) (1 - t^2)).
struct BackwardElement {
  float p, ds;
};
KOKKOS_INLINE_FUNCTION BackwardElement backward_element(float qk, float dp, bool valid, float scale,
                                                        float lse, float delta, float cap,
                                                        Rounding rc) {
  if (cap > 0.0f) {
    const float t = math::tanh(scale * qk / cap);
    const float p = valid ? exp_fast(cap * t - lse) : 0.0f;
    return BackwardElement{p, rnd(p * (rnd(dp, rc) - delta) * (1.0f - t * t), rc)};
  }
  const float p = valid ? exp_fast(scale * qk - lse) : 0.0f;
  return BackwardElement{p, rnd(p * (rnd(dp, rc) - delta), rc)};
}

// The smallest first key (row_first_key: example start, window) of rows [i0, i0 + nr) of row b,
// on every thread of the team: the key blocks before it are seen by no row of the query tile.
// Without starts, the first row's (every later row's window begins there or later).
KOKKOS_INLINE_FUNCTION int64_t tile_first_key(const Member& m, const int32_t* starts, int64_t b,
                                              int64_t i0, int64_t nr, int64_t T, int64_t window) {
  if (starts == nullptr) return attention_first_key(i0, 0, window);
  int64_t lo = i0;
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(m, nr),
      [&](const int64_t r, int64_t& x) {
        const int64_t s = row_first_key(starts, b, i0 + r, T, window);
        x = s < x ? s : x;
      },
      Kokkos::Min<int64_t>(lo));
  return lo;
}

}  // namespace

template <class TC>
void team_attention_forward(const ExecSpace& space, TC* out, float* lse, const TC* q, const TC* k,
                            const TC* v, const AttentionDims& d, Rounding rc) {
  const AttentionTiles tl = attention_tiles(d, AttentionKernel::team);
  const int64_t Br = tl.q_rows, Bc = tl.k_cols, T = d.T, D = d.D, H = d.H, KV = d.KV;
  const int64_t G = H / KV, nq = (T + Br - 1) / Br, window = d.window;
  const float scale = d.scale, cap = d.softcap;
  const int32_t* starts = d.starts;
  const int32_t* gaps = d.gaps;
  // q (Br, D), K^T (D, Bc), V (Bc, D), scores (Br, Bc), acc (Br, D), m, l, alpha (Br)
  const ScratchPolicy sp =
      scratch_policy(space, d.B * H * nq, 2 * Br * D + 2 * Bc * D + Br * Bc + 3 * Br);
  const int level = sp.level;
  Kokkos::parallel_for(
      "attention_team_forward", sp.policy, KOKKOS_LAMBDA(const Member& m) {
        const int64_t bh = m.league_rank() / nq, i0 = (m.league_rank() % nq) * Br;
        const int64_t b = bh / H, h = bh % H, nr = T - i0 < Br ? T - i0 : Br, kend = i0 + nr;
        const TC* kh = k + (b * KV + h / G) * T * D;
        const TC* vh = v + (b * KV + h / G) * T * D;
        ScratchFloats sc(m.team_scratch(level), 2 * Br * D + 2 * Bc * D + Br * Bc + 3 * Br);
        float* qs = sc.data();
        float* kt = qs + Br * D;
        float* vs = kt + Bc * D;
        float* s = vs + Bc * D;
        float* acc = s + Br * Bc;
        float* mrow = acc + Br * D;
        float* lrow = mrow + Br;
        float* arow = lrow + Br;
        load_rows(m, qs, q + (bh * T + i0) * D, nr * D);
        fill(m, acc, nr * D, 0.0f);
        fill(m, mrow, nr, -FLT_MAX);
        fill(m, lrow, nr, 0.0f);
        // From the block of the tile's smallest first key (packed rows, window; the earlier blocks
        // are skipped).
        const int64_t k_first = (tile_first_key(m, starts, b, i0, nr, T, window) / Bc) * Bc;
        for (int64_t k0 = k_first; k0 < kend; k0 += Bc) {
          const int64_t kw = kend - k0 < Bc ? kend - k0 : Bc;
          m.team_barrier();  // the previous block's products are done with kt, vs, s
          load_transposed(m, kt, Bc, kh + k0 * D, kw, D);
          load_rows(m, vs, vh + k0 * D, kw * D);
          m.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(m, nr * kw), [&](const int64_t i) {
            const int64_t r = i / kw, c = i % kw;
            s[r * Bc + c] = scale * dot_strided(qs + r * D, kt + c, Bc, D);
          });
          m.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(m, nr), [&](const int64_t r) {
            const int64_t valid = causal_width(i0 + r, k0, kw);
            // keys before the example's start or the window are masked (none without them); a
            // row with none visible here keeps m = -FLT_MAX, l = 0 (alpha 0 at its first visible
            // block)
            const int64_t lo = start_width(row_first_key(starts, b, i0 + r, T, window), k0, kw);
            float* srow = s + r * Bc;
            if (cap > 0.0f) {
              for (int64_t c = lo; c < valid; ++c) srow[c] = softcap_score(srow[c], cap);
            }
            const float m_old = mrow[r];
            float mx = m_old;
            for (int64_t c = lo; c < valid; ++c) {
              if (!in_gap(gaps, b, i0 + r, T, k0 + c)) mx = math::max_f(mx, srow[c]);
            }
            float sum = 0.0f;
            for (int64_t c = 0; c < kw; ++c) {
              const float p = c >= lo && c < valid && !in_gap(gaps, b, i0 + r, T, k0 + c)
                                  ? exp_fast(srow[c] - mx)
                                  : 0.0f;
              sum += p;
              srow[c] = rnd(p, rc);  // the P~ V operand, in the compute dtype
            }
            const float alpha = m_old == -FLT_MAX ? 0.0f : exp_fast(m_old - mx);
            lrow[r] = alpha * lrow[r] + sum;
            mrow[r] = mx;
            arow[r] = alpha;
          });
          m.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(m, nr * D), [&](const int64_t i) {
            const int64_t r = i / D, e = i % D;
            float a = acc[i] * arow[r];
            for (int64_t c = 0; c < kw; ++c) a += s[r * Bc + c] * vs[c * D + e];
            acc[i] = a;
          });
        }
        m.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(m, nr * D), [&](const int64_t i) {
          const int64_t r = i / D, e = i % D;
          store_as(out, token_index(b, h, i0 + r, e, T, H, D), rnd(acc[i] / lrow[r], rc));
        });
        Kokkos::parallel_for(Kokkos::TeamThreadRange(m, nr), [&](const int64_t r) {
          lse[bh * T + i0 + r] = mrow[r] + math::log(lrow[r]);
        });
      });
}

template <class TC>
void team_attention_backward(const ExecSpace& space, float* dq, float* dk, float* dv,
                             const TC* dout, const float* lse, const float* delta, const TC* q,
                             const TC* k, const TC* v, const AttentionDims& d, Rounding rc) {
  const AttentionTiles tl = attention_tiles(d, AttentionKernel::team);
  const int64_t Br = tl.q_rows, Bc = tl.k_cols, T = d.T, D = d.D, H = d.H, KV = d.KV;
  const int64_t G = H / KV, nq = (T + Br - 1) / Br, nk = (T + Bc - 1) / Bc, window = d.window;
  const float scale = d.scale, cap = d.softcap;
  const int32_t* starts = d.starts;
  const int32_t* gaps = d.gaps;

  // dK, dV: q, dO (Br, D), K^T, V^T (D, Bc), P, dS (Br, Bc), dK, dV accumulators (Bc, D),
  // lse, delta (Br).
  const int64_t kv_floats = 2 * Br * D + 4 * Bc * D + 2 * Br * Bc + 2 * Br;
  const ScratchPolicy kv = scratch_policy(space, d.B * KV * nk, kv_floats);
  const int kv_level = kv.level;
  Kokkos::parallel_for(
      "attention_team_dkdv", kv.policy, KOKKOS_LAMBDA(const Member& m) {
        const int64_t bk = m.league_rank() / nk, j0 = (m.league_rank() % nk) * Bc;
        const int64_t kw = T - j0 < Bc ? T - j0 : Bc;
        // The last query that sees a key of the tile: its last key's window's (T - 1 without one).
        const int64_t i_last =
            window > 0 && window < T - (j0 + kw - 1) ? j0 + kw - 1 + window - 1 : T - 1;
        ScratchFloats sc(m.team_scratch(kv_level), kv_floats);
        float* qs = sc.data();
        float* dos = qs + Br * D;
        float* kt = dos + Br * D;
        float* vt = kt + Bc * D;
        float* dka = vt + Bc * D;
        float* dva = dka + Bc * D;
        float* ps = dva + Bc * D;
        float* dss = ps + Br * Bc;
        float* lse_r = dss + Br * Bc;
        float* delta_r = lse_r + Br;
        load_transposed(m, kt, Bc, k + (bk * T + j0) * D, kw, D);
        load_transposed(m, vt, Bc, v + (bk * T + j0) * D, kw, D);
        fill(m, dka, kw * D, 0.0f);
        fill(m, dva, kw * D, 0.0f);
        for (int64_t g = 0; g < G; ++g) {
          const int64_t bh = (bk / KV) * H + (bk % KV) * G + g;
          // query tiles from the diagonal to the window's end
          for (int64_t i0 = (j0 / Br) * Br; i0 <= i_last; i0 += Br) {
            const int64_t nr = T - i0 < Br ? T - i0 : Br;
            // Packed rows, window: a query tile whose every row's first key lies after this key
            // tile sees none of it (skipped, as the tiles above the diagonal are).
            if (tile_first_key(m, starts, bk / KV, i0, nr, T, window) >= j0 + kw) continue;
            m.team_barrier();  // the previous tile's products are done with qs, dos, ps, dss
            load_rows(m, qs, q + (bh * T + i0) * D, nr * D);
            load_rows(m, dos, dout + (bh * T + i0) * D, nr * D);
            Kokkos::parallel_for(Kokkos::TeamThreadRange(m, nr), [&](const int64_t r) {
              lse_r[r] = lse[bh * T + i0 + r];
              delta_r[r] = delta[bh * T + i0 + r];
            });
            m.team_barrier();
            Kokkos::parallel_for(Kokkos::TeamThreadRange(m, nr * kw), [&](const int64_t i) {
              const int64_t r = i / kw, c = i % kw;
              const BackwardElement el = backward_element(
                  dot_strided(qs + r * D, kt + c, Bc, D), dot_strided(dos + r * D, vt + c, Bc, D),
                  c >= start_width(row_first_key(starts, bk / KV, i0 + r, T, window), j0, kw) &&
                      c < causal_width(i0 + r, j0, kw) && !in_gap(gaps, bk / KV, i0 + r, T, j0 + c),
                  scale, lse_r[r], delta_r[r], cap, rc);
              ps[r * Bc + c] = rnd(el.p, rc);
              dss[r * Bc + c] = el.ds;
            });
            m.team_barrier();
            Kokkos::parallel_for(Kokkos::TeamThreadRange(m, kw * D), [&](const int64_t i) {
              const int64_t c = i / D, e = i % D;
              float a = dva[i], b = dka[i];
              for (int64_t r = 0; r < nr; ++r) {
                a += ps[r * Bc + c] * dos[r * D + e];
                b += dss[r * Bc + c] * qs[r * D + e];
              }
              dva[i] = a;
              dka[i] = b;
            });
          }
        }
        m.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(m, kw * D), [&](const int64_t i) {
          dk[(bk * T + j0) * D + i] = scale * dka[i];
          dv[(bk * T + j0) * D + i] = dva[i];
        });
      });

  // dQ: q, dO (Br, D), K^T, V^T (D, Bc), K (Bc, D), dS (Br, Bc), dQ accumulator (Br, D),
  // lse, delta (Br).
  const int64_t q_floats = 3 * Br * D + 3 * Bc * D + Br * Bc + 2 * Br;
  const ScratchPolicy qp = scratch_policy(space, d.B * H * nq, q_floats);
  const int q_level = qp.level;
  Kokkos::parallel_for(
      "attention_team_dq", qp.policy, KOKKOS_LAMBDA(const Member& m) {
        const int64_t bh = m.league_rank() / nq, i0 = (m.league_rank() % nq) * Br;
        const int64_t b = bh / H, h = bh % H, nr = T - i0 < Br ? T - i0 : Br, kend = i0 + nr;
        const TC* kh = k + (b * KV + h / G) * T * D;
        const TC* vh = v + (b * KV + h / G) * T * D;
        ScratchFloats sc(m.team_scratch(q_level), q_floats);
        float* qs = sc.data();
        float* dos = qs + Br * D;
        float* dqa = dos + Br * D;
        float* kt = dqa + Br * D;
        float* vt = kt + Bc * D;
        float* ks = vt + Bc * D;
        float* dss = ks + Bc * D;
        float* lse_r = dss + Br * Bc;
        float* delta_r = lse_r + Br;
        load_rows(m, qs, q + (bh * T + i0) * D, nr * D);
        load_rows(m, dos, dout + (bh * T + i0) * D, nr * D);
        fill(m, dqa, nr * D, 0.0f);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(m, nr), [&](const int64_t r) {
          lse_r[r] = lse[bh * T + i0 + r];
          delta_r[r] = delta[bh * T + i0 + r];
        });
        const int64_t k_first = (tile_first_key(m, starts, b, i0, nr, T, window) / Bc) * Bc;
        for (int64_t k0 = k_first; k0 < kend; k0 += Bc) {
          const int64_t kw = kend - k0 < Bc ? kend - k0 : Bc;
          m.team_barrier();  // the previous block's products are done with kt, vt, ks, dss
          load_transposed(m, kt, Bc, kh + k0 * D, kw, D);
          load_transposed(m, vt, Bc, vh + k0 * D, kw, D);
          load_rows(m, ks, kh + k0 * D, kw * D);
          m.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(m, nr * kw), [&](const int64_t i) {
            const int64_t r = i / kw, c = i % kw;
            dss[r * Bc + c] =
                backward_element(
                    dot_strided(qs + r * D, kt + c, Bc, D), dot_strided(dos + r * D, vt + c, Bc, D),
                    c >= start_width(row_first_key(starts, b, i0 + r, T, window), k0, kw) &&
                        c < causal_width(i0 + r, k0, kw) && !in_gap(gaps, b, i0 + r, T, k0 + c),
                    scale, lse_r[r], delta_r[r], cap, rc)
                    .ds;
          });
          m.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(m, nr * D), [&](const int64_t i) {
            const int64_t r = i / D, e = i % D;
            float a = dqa[i];
            for (int64_t c = 0; c < kw; ++c) a += dss[r * Bc + c] * ks[c * D + e];
            dqa[i] = a;
          });
        }
        m.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(m, nr * D),
                             [&](const int64_t i) { dq[(bh * T + i0) * D + i] = scale * dqa[i]; });
      });
}

#define KKTRAIN_INST_TEAM_ATTENTION(TC)                                                          \
  template void team_attention_forward<TC>(const ExecSpace&, TC*, float*, const TC*, const TC*,  \
                                           const TC*, const AttentionDims&, Rounding);           \
  template void team_attention_backward<TC>(const ExecSpace&, float*, float*, float*, const TC*, \
                                            const float*, const float*, const TC*, const TC*,    \
                                            const TC*, const AttentionDims&, Rounding);
KKTRAIN_INST_TEAM_ATTENTION(float)
KKTRAIN_INST_TEAM_ATTENTION(bf16)
#undef KKTRAIN_INST_TEAM_ATTENTION

}  // namespace kktrain
