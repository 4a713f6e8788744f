// RMSNorm and rotary-embedding kernels. Norm statistics and rotary angles are fp32.
#include <cmath>
#include <vector>

#include "ops/kernels.hpp"

namespace kktrain {

namespace {
using Member = TeamMember;
}  // namespace

namespace {
// The weight multiply's forms (NormForm) with the form a compile-time choice, so that the
// channel loops carry no branch (a runtime test there made the fp32 Llama step's norms 4-6x
// slower: they stopped vectorizing).
template <bool kFp32>
KOKKOS_INLINE_FUNCTION float norm_y(float x, float r, float w, float off, Rounding stream) {
  if constexpr (kFp32) {
    return rnd((off + w) * (x * r), stream);
  } else {
    return rnd(w * rnd(x * r, stream), stream);
  }
}
// The gradient of x_hat: rnd(dy * w) (Llama's product in the stream dtype), or dy * (off + w).
template <bool kFp32>
KOKKOS_INLINE_FUNCTION float norm_dxhat(float dy, float w, float off, Rounding stream) {
  if constexpr (kFp32) {
    return dy * (off + w);
  } else {
    return rnd(dy * w, stream);
  }
}
// x_hat as the weight multiply saw it.
template <bool kFp32>
KOKKOS_INLINE_FUNCTION float norm_xhat(float x, float r, Rounding stream) {
  if constexpr (kFp32) {
    return x * r;
  } else {
    return rnd(x * r, stream);
  }
}

// The forward's rows: x = inp's row, or with a residual branch b the row of rnd(a + b, stream)
// written to xres first (the residual add and the norm in one pass over the row); rstd = 1 /
// sqrt(mean(x^2) + eps); out = TC(norm_y). CPUs: one row per iteration, the sum of squares in
// lanes (row_sum), every loop vectorized; GPUs: one team per row.
template <class TC, class TB, bool kFp32>
void rmsnorm_forward_form(const ExecSpace& space, const char* name, TC* out, float* out_stream,
                          float* rstd, float* xres, const float* inp, const TB* b,
                          const float* weight, int64_t N, int64_t C, float eps, Rounding stream,
                          float off) {
  if (kHostKernels) {
    Kokkos::parallel_for(
        name, RangePolicy(space, 0, N), KOKKOS_LAMBDA(const int64_t n) {
          const float* x = inp + n * C;
          if (b != nullptr) {
            float* xr = xres + n * C;
            for (int64_t c = 0; c < C; ++c) xr[c] = rnd(x[c] + load_f32(b, n * C + c), stream);
            x = xr;
          }
          const float ss = row_sum(C, [&](const int64_t c) { return x[c] * x[c]; });
          const float r = 1.0f / math::sqrt(ss / static_cast<float>(C) + eps);
          rstd[n] = r;
          if (out_stream != nullptr) {
            for (int64_t c = 0; c < C; ++c)
              out_stream[n * C + c] = norm_y<kFp32>(x[c], r, weight[c], off, stream);
          }
          for (int64_t c = 0; c < C; ++c)
            store_rounded(out, n * C + c, norm_y<kFp32>(x[c], r, weight[c], off, stream));
        });
    return;
  }
  Kokkos::parallel_for(
      name, TeamPolicy(space, N, Kokkos::AUTO), KOKKOS_LAMBDA(const Member& m) {
        const int64_t n = m.league_rank();
        const float* x = inp + n * C;
        float ss = 0.0f;
        if (b != nullptr) {
          float* xr = xres + n * C;
          Kokkos::parallel_reduce(
              Kokkos::TeamThreadRange(m, C),
              [&](const int64_t c, float& acc) {
                const float v = rnd(x[c] + load_f32(b, n * C + c), stream);
                xr[c] = v;
                acc += v * v;
              },
              ss);
          m.team_barrier();  // the row's sums, written by the whole team, read below
          x = xr;
        } else {
          Kokkos::parallel_reduce(
              Kokkos::TeamThreadRange(m, C),
              [&](const int64_t c, float& acc) { acc += x[c] * x[c]; }, ss);
        }
        const float r = 1.0f / math::sqrt(ss / static_cast<float>(C) + eps);
        Kokkos::single(Kokkos::PerTeam(m), [&]() { rstd[n] = r; });
        Kokkos::parallel_for(Kokkos::TeamThreadRange(m, C), [&](const int64_t c) {
          const float y = norm_y<kFp32>(x[c], r, weight[c], off, stream);
          if (out_stream) out_stream[n * C + c] = y;
          store_rounded(out, n * C + c, y);
        });
      });
}

// The weight gradient's second stage: dweight (C) = the sum of the chunk sums, chunks in order.
void rmsnorm_weight_total(const ExecSpace& space, float* dweight, const float* partial, int64_t P,
                          int64_t C) {
  Kokkos::parallel_for(
      "rmsnorm_backward_weight", RangePolicy(space, 0, C), KOKKOS_LAMBDA(const int64_t c) {
        float acc = 0.0f;
        for (int64_t p = 0; p < P; ++p) acc += partial[p * C + c];
        dweight[c] = acc;
      });
}

//   xhat = x * r, dxhat = dy * w,  dx = r * dxhat - r^3 * x * mean(dxhat * x)
// dinp += rnd(dx, stream) (rounded to the stream dtype); with `copy`, copy = TC(the new dinp).
// Weight gradient in two stages with a fixed summation order, the same on every backend: the sum
// over each chunk of kRmsnormRowsPerPartial rows (rows in order), then the sum of the chunk sums
// (chunks in order).
// CPUs: one chunk per iteration, its rows in order, each row's input gradient (its dot product in
// lanes, row_sum) and its weight-gradient terms in one pass over dy and x, every loop vectorized.
// GPUs: one team per row for the input gradient; then one thread per (chunk, channel), coalesced
// over channels, for the chunk sums.
template <class TC, bool kFp32>
void rmsnorm_backward_form(const ExecSpace& space, float* dinp, TC* copy, float* dweight,
                           float* partial, const float* dout, const float* inp, const float* weight,
                           const float* rstd, int64_t N, int64_t C, Rounding stream,
                           Rounding dout_rounding, float off) {
  const int64_t R = kRmsnormRowsPerPartial, P = (N + R - 1) / R;
  if (kHostKernels) {
    Kokkos::parallel_for(
        "rmsnorm_backward", RangePolicy(space, 0, P), KOKKOS_LAMBDA(const int64_t p) {
          float* acc = partial + p * C;
          for (int64_t c = 0; c < C; ++c) acc[c] = 0.0f;
          const int64_t end = (p + 1) * R < N ? (p + 1) * R : N;
          for (int64_t n = p * R; n < end; ++n) {
            const float r = rstd[n];
            const float* x = inp + n * C;
            const float* dy = dout + n * C;
            float* di = dinp + n * C;
            const float dot = row_sum(C, [&](const int64_t c) {
              return norm_dxhat<kFp32>(rnd(dy[c], dout_rounding), weight[c], off, stream) * x[c];
            });
            const float k = r * r * r * dot / static_cast<float>(C);
            for (int64_t c = 0; c < C; ++c) {
              const float g = rnd(dy[c], dout_rounding);
              const float dx = r * norm_dxhat<kFp32>(g, weight[c], off, stream) - k * x[c];
              di[c] = rnd(di[c] + rnd(dx, stream), stream);
              acc[c] += g * norm_xhat<kFp32>(x[c], r, stream);
            }
            if (copy != nullptr) {
              for (int64_t c = 0; c < C; ++c) store_rounded(copy, n * C + c, di[c]);
            }
          }
        });
    rmsnorm_weight_total(space, dweight, partial, P, C);
    return;
  }
  Kokkos::parallel_for(
      "rmsnorm_backward_input", TeamPolicy(space, N, Kokkos::AUTO), KOKKOS_LAMBDA(const Member& m) {
        const int64_t n = m.league_rank();
        const float* x = inp + n * C;
        const float* dy = dout + n * C;
        const float r = rstd[n];
        float dot = 0.0f;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(m, C),
            [&](const int64_t c, float& acc) {
              acc += norm_dxhat<kFp32>(rnd(dy[c], dout_rounding), weight[c], off, stream) * x[c];
            },
            dot);
        const float k = r * r * r * dot / static_cast<float>(C);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(m, C), [&](const int64_t c) {
          const float dx =
              r * norm_dxhat<kFp32>(rnd(dy[c], dout_rounding), weight[c], off, stream) - k * x[c];
          const float v = rnd(dinp[n * C + c] + rnd(dx, stream), stream);
          dinp[n * C + c] = v;
          if (copy != nullptr) store_rounded(copy, n * C + c, v);
        });
      });
  Kokkos::parallel_for(
      "rmsnorm_backward_weight_partial", RangePolicy(space, 0, P * C),
      KOKKOS_LAMBDA(const int64_t i) {
        const int64_t p = i / C, c = i - p * C;
        const int64_t end = (p + 1) * R < N ? (p + 1) * R : N;
        float acc = 0.0f;
        for (int64_t n = p * R; n < end; ++n)
          acc += rnd(dout[n * C + c], dout_rounding) *
                 norm_xhat<kFp32>(inp[n * C + c], rstd[n], stream);
        partial[i] = acc;
      });
  rmsnorm_weight_total(space, dweight, partial, P, C);
}

template <class TC, class TB>
void rmsnorm_forward_any(const ExecSpace& space, const char* name, TC* out, float* out_stream,
                         float* rstd, float* xres, const float* inp, const TB* b,
                         const float* weight, int64_t N, int64_t C, float eps, Rounding stream,
                         NormForm form) {
  if (form.fp32_product) {
    rmsnorm_forward_form<TC, TB, true>(space, name, out, out_stream, rstd, xres, inp, b, weight, N,
                                       C, eps, stream, form.offset);
  } else {
    rmsnorm_forward_form<TC, TB, false>(space, name, out, out_stream, rstd, xres, inp, b, weight, N,
                                        C, eps, stream, form.offset);
  }
}

template <class TC>
void rmsnorm_backward_any(const ExecSpace& space, float* dinp, TC* copy, float* dweight,
                          float* partial, const float* dout, const float* inp, const float* weight,
                          const float* rstd, int64_t N, int64_t C, Rounding stream,
                          Rounding dout_rounding, NormForm form) {
  if (form.fp32_product) {
    rmsnorm_backward_form<TC, true>(space, dinp, copy, dweight, partial, dout, inp, weight, rstd, N,
                                    C, stream, dout_rounding, form.offset);
  } else {
    rmsnorm_backward_form<TC, false>(space, dinp, copy, dweight, partial, dout, inp, weight, rstd,
                                     N, C, stream, dout_rounding, form.offset);
  }
}
}  // namespace

template <class TC>
void rmsnorm_forward(const ExecSpace& space, TC* out, float* out_stream, float* rstd,
                     const float* inp, const float* weight, int64_t N, int64_t C, float eps,
                     Rounding stream, NormForm form) {
  rmsnorm_forward_any<TC, float>(space, "rmsnorm_forward", out, out_stream, rstd, nullptr, inp,
                                 nullptr, weight, N, C, eps, stream, form);
}

template <class TC, class TB>
void add_rmsnorm_forward(const ExecSpace& space, TC* out, float* rstd, float* xres, const float* a,
                         const TB* b, const float* weight, int64_t N, int64_t C, float eps,
                         Rounding stream, NormForm form) {
  rmsnorm_forward_any<TC, TB>(space, "add_rmsnorm_forward", out, nullptr, rstd, xres, a, b, weight,
                              N, C, eps, stream, form);
}

void rmsnorm_backward(const ExecSpace& space, float* dinp, float* dweight, float* partial,
                      const float* dout, const float* inp, const float* weight, const float* rstd,
                      int64_t N, int64_t C, Rounding stream, Rounding dout_rounding,
                      NormForm form) {
  rmsnorm_backward_any<float>(space, dinp, nullptr, dweight, partial, dout, inp, weight, rstd, N, C,
                              stream, dout_rounding, form);
}

template <class TC>
void rmsnorm_backward_copy(const ExecSpace& space, float* dinp, TC* copy, float* dweight,
                           float* partial, const float* dout, const float* inp, const float* weight,
                           const float* rstd, int64_t N, int64_t C, Rounding stream,
                           Rounding dout_rounding, NormForm form) {
  rmsnorm_backward_any<TC>(space, dinp, copy, dweight, partial, dout, inp, weight, rstd, N, C,
                           stream, dout_rounding, form);
}

void rope_tables(float* cos, float* sin, int64_t T, int64_t D, const std::vector<float>& inv_freq,
                 float attention_factor) {
  // Computed on the host in fp32 exactly as the reference model does (angle = t * inv_freq in
  // fp32, inv_freq from ops/rope.hpp; longrope's cos and sin times attention_factor in fp32),
  // then copied to the device once per model.
  const int64_t half = D / 2;
  const bool scaled = attention_factor != 1.0f;
  std::vector<float> hc(T * half), hs(T * half);
  for (int64_t j = 0; j < half; ++j) {
    for (int64_t t = 0; t < T; ++t) {
      const float a = static_cast<float>(t) * inv_freq[j];
      hc[t * half + j] = scaled ? std::cos(a) * attention_factor : std::cos(a);
      hs[t * half + j] = scaled ? std::sin(a) * attention_factor : std::sin(a);
    }
  }
  Kokkos::View<float*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> hcv(hc.data(),
                                                                               hc.size()),
      hsv(hs.data(), hs.size());
  Kokkos::deep_copy(DViewU<float>(cos, hc.size()), hcv);
  Kokkos::deep_copy(DViewU<float>(sin, hs.size()), hsv);
}

template <class TC>
void rope_forward(const ExecSpace& space, TC* q, TC* k, TC* v, const TC* qkv, const float* cos,
                  const float* sin, int64_t B, int64_t T, int64_t H, int64_t KV, int64_t D,
                  const int32_t* starts, HeadScale scale, int64_t R) {
  const int64_t S = H + 2 * KV;  // head slots per token: H query, KV key, KV value
  const int64_t half = D / 2;
  // Partial rotary: pairs (j, j + rhalf) for j < rhalf rotate; the last D - R values pass.
  const int64_t rhalf = (R > 0 && R < D ? R : D) / 2, pass = half - rhalf;
  // Rows are (token, head slot) pairs of D values; element j of a row handles the rotary pair
  // (j, j + rhalf), or for j >= rhalf the unrotated values j + rhalf and j + rhalf + pass.
  for_rows(
      space, "rope_forward", B * T * S, half,
      KOKKOS_LAMBDA(const int64_t idx, const int64_t j0, const int64_t j1) {
        const int64_t slot = idx % S, bt = idx / S;
        const int64_t b = bt / T, t = bt % T;
        const TC* x = qkv + idx * D;
        if (slot >= H + KV) {  // value head: layout change only
          TC* y = v + ((b * KV + slot - H - KV) * T + t) * D;
          for (int64_t j = j0; j < j1; ++j) {
            y[j] = x[j];
            y[j + half] = x[j + half];
          }
          return;
        }
        TC* y = slot < H ? q + ((b * H + slot) * T + t) * D : k + ((b * KV + slot - H) * T + t) * D;
        const int64_t pos = starts != nullptr ? t - starts[bt] : t;  // restarts in each example
        // No tables: no rotation (cos 1, sin 0), the layout change (and scale) only.
        const float* c = cos != nullptr ? cos + pos * rhalf : nullptr;
        const float* s = sin != nullptr ? sin + pos * rhalf : nullptr;
        const float* w = slot < H ? scale.q : scale.k;
        // rotate_half: y = x * cos + [-x2, x1] * sin
        const int64_t jr = j1 < rhalf ? j1 : rhalf;
        // the common cases (tables; with or without a head scale), without branches in the loop
        if (w == nullptr && c != nullptr) {
          for (int64_t j = j0; j < jr; ++j) {
            const float x1 = load_f32(x, j), x2 = load_f32(x, j + rhalf);
            store_rounded(y, j, x1 * c[j] - x2 * s[j]);
            store_rounded(y, j + rhalf, x2 * c[j] + x1 * s[j]);
          }
        } else if (c != nullptr) {
          const Rounding wr = scale.round;
          for (int64_t j = j0; j < jr; ++j) {
            const float x1 = rnd(load_f32(x, j) * w[j], wr);
            const float x2 = rnd(load_f32(x, j + rhalf) * w[j + rhalf], wr);
            store_rounded(y, j, x1 * c[j] - x2 * s[j]);
            store_rounded(y, j + rhalf, x2 * c[j] + x1 * s[j]);
          }
        }
        for (int64_t j = c != nullptr ? jr : j0; j < jr; ++j) {
          float x1 = load_f32(x, j), x2 = load_f32(x, j + rhalf);
          if (w != nullptr) {
            x1 = rnd(x1 * w[j], scale.round);
            x2 = rnd(x2 * w[j + rhalf], scale.round);
          }
          if (c == nullptr) {
            store_rounded(y, j, x1);
            store_rounded(y, j + rhalf, x2);
            continue;
          }
          store_rounded(y, j, x1 * c[j] - x2 * s[j]);
          store_rounded(y, j + rhalf, x2 * c[j] + x1 * s[j]);
        }
        // the values past rotary_dim: scaled, not rotated
        for (int64_t j = j0 > rhalf ? j0 : rhalf; j < j1; ++j) {
          const int64_t e1 = j + rhalf, e2 = j + rhalf + pass;
          float x1 = load_f32(x, e1), x2 = load_f32(x, e2);
          if (w != nullptr) {
            x1 = rnd(x1 * w[e1], scale.round);
            x2 = rnd(x2 * w[e2], scale.round);
          }
          store_rounded(y, e1, x1);
          store_rounded(y, e2, x2);
        }
      });
}

template <class TC>
void rope_backward(const ExecSpace& space, TC* dqkv, const float* dq, const float* dk,
                   const float* dv, const float* cos, const float* sin, int64_t B, int64_t T,
                   int64_t H, int64_t KV, int64_t D, const int32_t* starts, int64_t R) {
  constexpr Rounding rc = rounding_of<TC>();
  const int64_t S = H + 2 * KV;
  const int64_t half = D / 2;
  const int64_t rhalf = (R > 0 && R < D ? R : D) / 2, pass = half - rhalf;
  for_rows(
      space, "rope_backward", B * T * S, half,
      KOKKOS_LAMBDA(const int64_t idx, const int64_t j0, const int64_t j1) {
        const int64_t slot = idx % S, bt = idx / S;
        const int64_t b = bt / T, t = bt % T;
        TC* out = dqkv + idx * D;
        if (slot >= H + KV) {
          const float* g = dv + ((b * KV + slot - H - KV) * T + t) * D;
          for (int64_t j = j0; j < j1; ++j) {
            store_rounded(out, j, g[j]);
            store_rounded(out, j + half, g[j + half]);
          }
          return;
        }
        const float* g =
            slot < H ? dq + ((b * H + slot) * T + t) * D : dk + ((b * KV + slot - H) * T + t) * D;
        const int64_t pos = starts != nullptr ? t - starts[bt] : t;
        const float* c = cos != nullptr ? cos + pos * rhalf : nullptr;
        const float* s = sin != nullptr ? sin + pos * rhalf : nullptr;
        // Transpose of the rotation: [x1, x2] <- [g1 c + g2 s, g2 c - g1 s], from the gradients
        // of the compute-dtype q and k (rounded on load); no tables (or values that pass through
        // unrotated): no rotation.
        const int64_t jr = j1 < rhalf ? j1 : rhalf;
        if (c != nullptr) {  // the common case, without a branch in the loop
          for (int64_t j = j0; j < jr; ++j) {
            const float g1 = rnd(g[j], rc), g2 = rnd(g[j + rhalf], rc);
            store_rounded(out, j, g1 * c[j] + g2 * s[j]);
            store_rounded(out, j + rhalf, g2 * c[j] - g1 * s[j]);
          }
        }
        for (int64_t j = c != nullptr ? jr : j0; j < jr; ++j) {
          const float g1 = rnd(g[j], rc), g2 = rnd(g[j + rhalf], rc);
          if (c == nullptr) {
            store_rounded(out, j, g1);
            store_rounded(out, j + rhalf, g2);
            continue;
          }
          store_rounded(out, j, g1 * c[j] + g2 * s[j]);
          store_rounded(out, j + rhalf, g2 * c[j] - g1 * s[j]);
        }
        for (int64_t j = j0 > rhalf ? j0 : rhalf; j < j1; ++j) {
          store_rounded(out, j + rhalf, g[j + rhalf]);
          store_rounded(out, j + rhalf + pass, g[j + rhalf + pass]);
        }
      });
}

template <class TO, class TI>
void tokens_to_heads(const ExecSpace& space, TO* out, const TI* in, int64_t B, int64_t H, int64_t T,
                     int64_t D, Rounding round) {
  for_rows(
      space, "tokens_to_heads", B * H * T, D,
      KOKKOS_LAMBDA(const int64_t idx, const int64_t d0, const int64_t d1) {
        const int64_t t = idx % T, h = (idx / T) % H, b = idx / (T * H);
        const TI* x = in + ((b * T + t) * H + h) * D;
        TO* y = out + idx * D;
        for (int64_t d = d0; d < d1; ++d) store_as(y, d, rnd(load_f32(x, d), round));
      });
}

#define KKTRAIN_INST_TC(TC)                                                                        \
  template void rmsnorm_forward<TC>(const ExecSpace&, TC*, float*, float*, const float*,           \
                                    const float*, int64_t, int64_t, float, Rounding, NormForm);    \
  template void add_rmsnorm_forward<TC, TC>(const ExecSpace&, TC*, float*, float*, const float*,   \
                                            const TC*, const float*, int64_t, int64_t, float,      \
                                            Rounding, NormForm);                                   \
  template void rmsnorm_backward_copy<TC>(const ExecSpace&, float*, TC*, float*, float*,           \
                                          const float*, const float*, const float*, const float*,  \
                                          int64_t, int64_t, Rounding, Rounding, NormForm);         \
  template void rope_forward<TC>(const ExecSpace&, TC*, TC*, TC*, const TC*, const float*,         \
                                 const float*, int64_t, int64_t, int64_t, int64_t, int64_t,        \
                                 const int32_t*, HeadScale, int64_t);                              \
  template void rope_backward<TC>(const ExecSpace&, TC*, const float*, const float*, const float*, \
                                  const float*, const float*, int64_t, int64_t, int64_t, int64_t,  \
                                  int64_t, const int32_t*, int64_t);                               \
  template void tokens_to_heads<TC, float>(const ExecSpace&, TC*, const float*, int64_t, int64_t,  \
                                           int64_t, int64_t, Rounding);
KKTRAIN_INST_TC(float)
KKTRAIN_INST_TC(bf16)
#undef KKTRAIN_INST_TC

}  // namespace kktrain
