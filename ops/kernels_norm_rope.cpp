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

template <class TC, bool kFp32>
void rmsnorm_forward_form(const ExecSpace& space, TC* out, float* out_stream, float* rstd,
                          const float* inp, const float* weight, int64_t N, int64_t C, float eps,
                          Rounding stream, float off) {
  constexpr Rounding rc = rounding_of<TC>();
  Kokkos::parallel_for(
      "rmsnorm_forward", TeamPolicy(space, N, Kokkos::AUTO), KOKKOS_LAMBDA(const Member& m) {
        const int64_t n = m.league_rank();
        const float* x = inp + n * C;
        float ss = 0.0f;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(m, C), [&](const int64_t c, float& acc) { acc += x[c] * x[c]; },
            ss);
        const float r = 1.0f / math::sqrt(ss / static_cast<float>(C) + eps);
        Kokkos::single(Kokkos::PerTeam(m), [&]() { rstd[n] = r; });
        Kokkos::parallel_for(Kokkos::TeamThreadRange(m, C), [&](const int64_t c) {
          const float y = norm_y<kFp32>(x[c], r, weight[c], off, stream);
          if (out_stream) out_stream[n * C + c] = y;
          store_as(out, n * C + c, rnd(y, rc));
        });
      });
}

template <bool kFp32>
void rmsnorm_backward_form(const ExecSpace& space, float* dinp, float* dweight, float* partial,
                           const float* dout, const float* inp, const float* weight,
                           const float* rstd, int64_t N, int64_t C, Rounding stream,
                           Rounding dout_rounding, float off) {
  // Input gradient: one team per row.
  //   xhat = x * r, dxhat = dy * w,  dx = r * dxhat - r^3 * x * mean(dxhat * x)
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
          dinp[n * C + c] = rnd(dinp[n * C + c] + rnd(dx, stream), stream);
        });
      });
  // Weight gradient in two stages with a fixed summation order, the same on every backend: the
  // sum over each chunk of kRmsnormRowsPerPartial rows (rows in order), then the sum of the chunk
  // sums (chunks in order). GPUs: one thread per (chunk, channel), coalesced over channels; CPUs:
  // one chunk per iteration, its rows streamed in order with a vectorized channel loop.
  const int64_t R = kRmsnormRowsPerPartial, P = (N + R - 1) / R;
  if (kHostKernels) {
    Kokkos::parallel_for(
        "rmsnorm_backward_weight_partial", RangePolicy(space, 0, P),
        KOKKOS_LAMBDA(const int64_t p) {
          float* acc = partial + p * C;
          for (int64_t c = 0; c < C; ++c) acc[c] = 0.0f;
          const int64_t end = (p + 1) * R < N ? (p + 1) * R : N;
          for (int64_t n = p * R; n < end; ++n) {
            const float r = rstd[n];
            const float* x = inp + n * C;
            const float* dy = dout + n * C;
            for (int64_t c = 0; c < C; ++c)
              acc[c] += rnd(dy[c], dout_rounding) * norm_xhat<kFp32>(x[c], r, stream);
          }
        });
  } else {
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
  }
  Kokkos::parallel_for(
      "rmsnorm_backward_weight", RangePolicy(space, 0, C), KOKKOS_LAMBDA(const int64_t c) {
        float acc = 0.0f;
        for (int64_t p = 0; p < P; ++p) acc += partial[p * C + c];
        dweight[c] = acc;
      });
}
}  // namespace

template <class TC>
void rmsnorm_forward(const ExecSpace& space, TC* out, float* out_stream, float* rstd,
                     const float* inp, const float* weight, int64_t N, int64_t C, float eps,
                     Rounding stream, NormForm form) {
  if (form.fp32_product) {
    rmsnorm_forward_form<TC, true>(space, out, out_stream, rstd, inp, weight, N, C, eps, stream,
                                   form.offset);
  } else {
    rmsnorm_forward_form<TC, false>(space, out, out_stream, rstd, inp, weight, N, C, eps, stream,
                                    form.offset);
  }
}

void rmsnorm_backward(const ExecSpace& space, float* dinp, float* dweight, float* partial,
                      const float* dout, const float* inp, const float* weight, const float* rstd,
                      int64_t N, int64_t C, Rounding stream, Rounding dout_rounding,
                      NormForm form) {
  if (form.fp32_product) {
    rmsnorm_backward_form<true>(space, dinp, dweight, partial, dout, inp, weight, rstd, N, C,
                                stream, dout_rounding, form.offset);
  } else {
    rmsnorm_backward_form<false>(space, dinp, dweight, partial, dout, inp, weight, rstd, N, C,
                                 stream, dout_rounding, form.offset);
  }
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
  constexpr Rounding rc = rounding_of<TC>();
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
        if (w == nullptr && c != nullptr) {  // the common case, without branches in the loop
          for (int64_t j = j0; j < jr; ++j) {
            const float x1 = load_f32(x, j), x2 = load_f32(x, j + rhalf);
            store_as(y, j, rnd(x1 * c[j] - x2 * s[j], rc));
            store_as(y, j + rhalf, rnd(x2 * c[j] + x1 * s[j], rc));
          }
        }
        for (int64_t j = w == nullptr && c != nullptr ? jr : j0; j < jr; ++j) {
          float x1 = load_f32(x, j), x2 = load_f32(x, j + rhalf);
          if (w != nullptr) {
            x1 = rnd(x1 * w[j], scale.round);
            x2 = rnd(x2 * w[j + rhalf], scale.round);
          }
          if (c == nullptr) {
            store_as(y, j, rnd(x1, rc));
            store_as(y, j + rhalf, rnd(x2, rc));
            continue;
          }
          store_as(y, j, rnd(x1 * c[j] - x2 * s[j], rc));
          store_as(y, j + rhalf, rnd(x2 * c[j] + x1 * s[j], rc));
        }
        // the values past rotary_dim: scaled, not rotated
        for (int64_t j = j0 > rhalf ? j0 : rhalf; j < j1; ++j) {
          const int64_t e1 = j + rhalf, e2 = j + rhalf + pass;
          float x1 = load_f32(x, e1), x2 = load_f32(x, e2);
          if (w != nullptr) {
            x1 = rnd(x1 * w[e1], scale.round);
            x2 = rnd(x2 * w[e2], scale.round);
          }
          store_as(y, e1, rnd(x1, rc));
          store_as(y, e2, rnd(x2, rc));
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
            store_as(out, j, rnd(g[j], rc));
            store_as(out, j + half, rnd(g[j + half], rc));
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
            store_as(out, j, rnd(g1 * c[j] + g2 * s[j], rc));
            store_as(out, j + rhalf, rnd(g2 * c[j] - g1 * s[j], rc));
          }
        }
        for (int64_t j = c != nullptr ? jr : j0; j < jr; ++j) {
          const float g1 = rnd(g[j], rc), g2 = rnd(g[j + rhalf], rc);
          if (c == nullptr) {
            store_as(out, j, rnd(g1, rc));
            store_as(out, j + rhalf, rnd(g2, rc));
            continue;
          }
          store_as(out, j, rnd(g1 * c[j] + g2 * s[j], rc));
          store_as(out, j + rhalf, rnd(g2 * c[j] - g1 * s[j], rc));
        }
        for (int64_t j = j0 > rhalf ? j0 : rhalf; j < j1; ++j) {
          store_as(out, j + rhalf, rnd(g[j + rhalf], rc));
          store_as(out, j + rhalf + pass, rnd(g[j + rhalf + pass], rc));
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
