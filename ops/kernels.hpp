// The transformer's elementwise and row-wise kernels, llm.c style: free functions named
// <layer>_forward / <layer>_backward, outputs first, sizes last, a shape comment on every tensor.
// Every pointer is a device pointer; every loop is a Kokkos parallel construct. The first argument
// is the execution-space instance the kernel launches on (a stream of its own on GPUs); the
// kernel is ordered after the work queued on that instance before it, and nothing waits for it
// (but sum_to_host, whose result is on the host).
//
// Precision: a tensor "in dtype X" holds values exactly representable in X. Compute-dtype tensors
// (template parameter TC) are 2-byte bf16 Views when the compute dtype is bf16; the residual stream
// and gradients that sum several fp32 contributions before their one rounding stay fp32
// containers. Every kernel reads through to_f32 and writes through store_as, so the math is the
// same for both containers. Which roles are bf16, and so rounded, is fixed at launch:
//   the compute dtype (inputs and outputs of matmuls, attention, SwiGLU) is the template
//     parameter TC: rounding_of<TC>() (core/bf16.hpp);
//   the residual-stream dtype (embedding output, norms, residual adds) is a Rounding `stream`;
//   an explicit rounding (a cast, a gradient's one rounding) is a Rounding argument too.
// A gradient is rounded to the dtype of the tensor it is the gradient of, as autograd does.
// Statistics (norm rstd, softmax, rotary angles, loss) are computed and kept in fp32.
#pragma once

#include <cfloat>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/bf16.hpp"
#include "core/kokkos_compat.hpp"
#include "core/launch.hpp"
#include "core/model_enums.hpp"

namespace kktrain {

// rnd(x, r): x rounded to bf16 when r is Rounding::bf16. A bit-mask select rather than a branch:
// GCC does not vectorize a select on a loop-invariant flag, and these sit in every inner loop.
KOKKOS_INLINE_FUNCTION float rnd(float x, Rounding r) {
  const uint32_t m = 0u - static_cast<uint32_t>(r);
  return bits_float((bf16_round_bits32(x) & m) | (float_bits(x) & ~m));
}

// The sum over c in [0, n) of f(c) in a fixed order that vectorizes, for the row reductions of
// the CPU kernels: kRowSumLanes partial sums (value c into lane c % kRowSumLanes, in order within
// its lane), then the lanes folded in halves (lane l += lane l + w for w = 8, 4, 2, 1). The order
// depends on n alone: any thread count, rank or run gives the same bits. (A sum in index order
// is a chain of dependent adds the compiler may not reorder: RMSNorm's rows ran unvectorized.)
constexpr int kRowSumLanes = 16;
template <class F>
KOKKOS_INLINE_FUNCTION float row_sum(int64_t n, const F& f) {
  float lane[kRowSumLanes] = {};
  int64_t c = 0;
  for (; c + kRowSumLanes <= n; c += kRowSumLanes) {
    for (int l = 0; l < kRowSumLanes; ++l) lane[l] += f(c + l);
  }
  for (int l = 0; c + l < n; ++l) lane[l] += f(c + l);
  for (int w = kRowSumLanes / 2; w > 0; w /= 2) {
    for (int l = 0; l < w; ++l) lane[l] += lane[l + w];
  }
  return lane[0];
}

// The largest f(c) over c in [0, n) (-FLT_MAX for n = 0), in row_sum's lanes and order (a max
// is the same in any order, but for which of -0 and +0 it keeps: the order fixes that too).
template <class F>
KOKKOS_INLINE_FUNCTION float row_max(int64_t n, const F& f) {
  float lane[kRowSumLanes];
  for (int l = 0; l < kRowSumLanes; ++l) lane[l] = -FLT_MAX;
  int64_t c = 0;
  for (; c + kRowSumLanes <= n; c += kRowSumLanes) {
    for (int l = 0; l < kRowSumLanes; ++l) {
      const float x = f(c + l);
      lane[l] = x > lane[l] ? x : lane[l];
    }
  }
  for (int l = 0; c + l < n; ++l) {
    const float x = f(c + l);
    lane[l] = x > lane[l] ? x : lane[l];
  }
  for (int w = kRowSumLanes / 2; w > 0; w /= 2) {
    for (int l = 0; l < w; ++l) lane[l] = lane[l + w] > lane[l] ? lane[l + w] : lane[l];
  }
  return lane[0];
}

// exp(x) in fp32 without a library call, so loops over it vectorize (and every backend computes
// the same values): x = n ln2 + r with |r| <= ln2/2 (ln2 split in two parts, so r is exact
// enough), exp(r) by a degree-7 minimax polynomial (within about 1 ulp of the true value), times
// 2^n built in the exponent bits. x is clamped to [-87.33, 88.37]: the result never overflows or
// goes subnormal (exp(-inf) gives 1.2e-38 rather than 0, which every caller adds to 1 or to a
// sum that contains exp(0) = 1). NaN in, NaN out.
KOKKOS_INLINE_FUNCTION float exp_fast(float x) {
  const float lo = -87.33f, hi = 88.37f;
  const float xc = x < lo ? lo : (x > hi ? hi : x);
  const float magic = 12582912.0f;                    // 1.5 * 2^23: adding it rounds to an integer
  const float t = xc * 1.44269504088896341f + magic;  // n + magic
  const float n = t - magic;
  const float r = (xc - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  // 2^n: n sits in the low mantissa bits of t (two's complement), so no float-to-int conversion.
  const uint32_t k = float_bits(t) - float_bits(magic);
  const float scale = bits_float((k + 127u) << 23);
  const float y = p * scale;
  return x != x ? x : y;
}

// ---- parameters ------------------------------------------------------------------------------

// out (n) = rnd(float(in (n)), round).   The per-forward compute-weight cast.
template <class T>
void cast_to_float(const ExecSpace& space, float* out, const T* in, int64_t n, Rounding round);

// out (n) = T(in (n)), rounding to nearest-even for bf16.
template <class T>
void cast_from_float(const ExecSpace& space, T* out, const float* in, int64_t n);

// out (n) = T(scale * N(0,1) + shift), the normal draw keyed on (seed, stream, first + element
// index): a shard starting at element `first` of a tensor gets exactly that part of the tensor.
template <class T>
void init_normal(const ExecSpace& space, T* out, int64_t n, uint64_t seed, uint64_t stream,
                 float scale, float shift, int64_t first = 0);

// out (n) = T(U(lo, hi)), the uniform draw keyed on (seed, stream, first + element index).
template <class T>
void init_uniform(const ExecSpace& space, T* out, int64_t n, uint64_t seed, uint64_t stream,
                  float lo, float hi, int64_t first = 0);

// grad (n) = T(float(grad) + rnd(dw, round_dw)).   Accumulates a parameter-gradient contribution
// computed in fp32 (and first rounded to the dtype it was computed in) into storage-dtype grads.
template <class T>
void accumulate_grad(const ExecSpace& space, T* grad, const float* dw, int64_t n,
                     Rounding round_dw);

// ---- embedding -------------------------------------------------------------------------------

// out (N, C) = rnd(wte[ids[n]], stream)
template <class TW>
void embedding_forward(const ExecSpace& space, float* out, const int32_t* ids, const TW* wte,
                       int64_t N, int64_t C, int64_t V, Rounding stream);
// dwte (V, C) = sum over n with ids[n] == v of dout[n]; fp32, written (rows without tokens are 0).
// The token positions grouped by id (CSR: row_start (V+1), positions (N)) make the sum order
// fixed, so gradients are deterministic on every backend.
void embedding_backward(const ExecSpace& space, float* dwte, const float* dout,
                        const int32_t* row_start, const int32_t* positions, int64_t V, int64_t C);

// ---- RMSNorm ---------------------------------------------------------------------------------

// How an RMSNorm applies its weight w to x_hat = x * rstd (model.norm_weight): Llama's rounds
// x_hat to the stream dtype and multiplies, rnd(w * rnd(x_hat)); with fp32_product the product
// (offset + w) * x_hat is formed in fp32 and rounded once (OLMo 2: offset 0; Gemma: offset 1).
struct NormForm {
  float offset = 0.0f;
  bool fp32_product = false;
};
inline NormForm norm_form(NormWeight w) {
  if (w == NormWeight::fp32) return NormForm{0.0f, true};
  if (w == NormWeight::one_plus_fp32) return NormForm{1.0f, true};
  return NormForm{};
}

// rstd (N) = 1/sqrt(mean(x^2) + eps) in fp32 (CPUs sum the squares in row_sum's order, GPUs in
// a team reduction's); out (N, C) = TC(rnd(w * rnd(x * rstd, stream),
// stream)) (or the NormForm's product); out_stream (N, C), if not null, receives the
// stream-dtype value before the TC store.
template <class TC>
void rmsnorm_forward(const ExecSpace& space, TC* out, float* out_stream, float* rstd,
                     const float* inp, const float* weight, int64_t N, int64_t C, float eps,
                     Rounding stream, NormForm form = {});
// The residual add and the next norm in one pass: xres (N, C) = rnd(a + b, stream) (xres may
// alias a), then rmsnorm_forward of xres into out and rstd (no out_stream).
template <class TC, class TB>
void add_rmsnorm_forward(const ExecSpace& space, TC* out, float* rstd, float* xres, const float* a,
                         const TB* b, const float* weight, int64_t N, int64_t C, float eps,
                         Rounding stream, NormForm form = {});
// dinp (N, C) = rnd(dinp + rnd(d(norm)/dx, stream), stream)  -- accumulates into the stream grad
// dout (N, C) is read as rnd(dout, dout_rounding): a caller's fp32 sum (GEMM + LoRA
// contributions) gets its one rounding to the compute dtype here, without a separate pass.
// dweight (C) = sum_n dout * rnd(x * rstd, stream)       -- fp32, written: the sums over chunks
//   of kRmsnormRowsPerPartial rows, then over the chunks, in that fixed order on every backend
// partial (rmsnorm_partial_size(N, C)) fp32 scratch: the chunk sums
constexpr int64_t kRmsnormRowsPerPartial = 64;
inline int64_t rmsnorm_partial_size(int64_t N, int64_t C) {
  return (N + kRmsnormRowsPerPartial - 1) / kRmsnormRowsPerPartial * C;
}
// With form.fp32_product: d(norm)/dx from dout * (offset + w) in fp32, dweight = sum dout * x_hat.
void rmsnorm_backward(const ExecSpace& space, float* dinp, float* dweight, float* partial,
                      const float* dout, const float* inp, const float* weight, const float* rstd,
                      int64_t N, int64_t C, Rounding stream,
                      Rounding dout_rounding = Rounding::fp32, NormForm form = {});
// rmsnorm_backward that also writes copy (N, C) = TC(dinp) after the update, in the same pass:
// the compute-dtype copy of the residual stream's gradient that the next product reads.
template <class TC>
void rmsnorm_backward_copy(const ExecSpace& space, float* dinp, TC* copy, float* dweight,
                           float* partial, const float* dout, const float* inp, const float* weight,
                           const float* rstd, int64_t N, int64_t C, Rounding stream,
                           Rounding dout_rounding = Rounding::fp32, NormForm form = {});

// ---- attention inputs: projection biases, per-head norms (ops/kernels_heads.cpp) ---------------

// y (N, n) = rnd(bias) in TC, bias (n) broadcast over the rows: a projection's output before its
// product is added (matmul_forward with Into::accumulate), so that x W^T + b is rounded once, as
// a fused addmm rounds it; the adapter's output is added after (PEFT adds it to the base layer's
// output, bias included).
template <class TC, class TB>
void bias_fill(const ExecSpace& space, TC* y, const TB* bias, int64_t N, int64_t n);
// dbias (n) = sum over the N rows of dy (N, n), fp32, rows in order (deterministic).
template <class TC>
void bias_backward(const ExecSpace& space, float* dbias, const TC* dy, int64_t N, int64_t n);

// The query and key rows a q/k norm normalizes in a fused (N, Q) q/k/v projection output: per
// token, q_rows rows of q_width values (the query part, at the token's start), then k_rows rows of
// k_width (the key part, right after it). Per head (Qwen3, Gemma 3): H x D and KV x D; the whole
// projection (OLMo 2): 1 x H*D and 1 x KV*D. The norm weights have q_width and k_width values.
struct HeadNormDims {
  int64_t N, Q;
  int64_t q_rows, q_width, k_rows, k_width;
  float eps;
  NormForm form;  // with fp32_product the norm multiplies its weights itself (else HeadScale)
  int64_t rows() const { return q_rows + k_rows; }                       // per token
  int64_t width() const { return q_rows * q_width + k_rows * k_width; }  // values per token
  static HeadNormDims per_head(int64_t N, int64_t H, int64_t KV, int64_t D, float eps,
                               NormForm f = {}) {
    return HeadNormDims{N, (H + 2 * KV) * D, H, D, KV, D, eps, f};
  }
  static HeadNormDims whole(int64_t N, int64_t H, int64_t KV, int64_t D, float eps,
                            NormForm f = {}) {
    return HeadNormDims{N, (H + 2 * KV) * D, 1, H * D, 1, KV * D, eps, f};
  }
};
// The q/k norm's forward: rstd (N * rows) = 1 / sqrt(mean(x^2) + eps) of each query and key row
// in fp32, x_pre (N, width) = the rows as they were (kept for backward), and each row replaced in
// place by rnd(x * rstd) in TC (Llama's RMSNorm casts the normalized value to the input dtype
// before the weight multiply, which rope_forward's HeadScale then does), or with
// d.form.fp32_product by rnd((offset + w) * x * rstd), the weights wq / wk applied here.
template <class TC>
void head_rmsnorm_forward(const ExecSpace& space, TC* qkv, TC* x_pre, float* rstd,
                          const HeadNormDims& d, const float* wq = nullptr,
                          const float* wk = nullptr);
// Backward of the forward above per query/key row: dqkv's query and key rows hold dy
// (rope_backward's output) on entry and dx, rounded to TC, on return (value rows are left
// alone); dwq (q_width), dwk (k_width) = sum over the rows of dy * x_hat (rounded to TC without
// fp32_product), fp32, in a fixed order. `weight`: the rounding of the weight multiply (bf16
// when the weights and TC are both bf16; unused with fp32_product).
template <class TC>
void head_rmsnorm_backward(const ExecSpace& space, TC* dqkv, float* dwq, float* dwk,
                           const TC* x_pre, const float* rstd, const float* wq, const float* wk,
                           const HeadNormDims& d, Rounding weight);
// The per-channel weights rope_forward multiplies query and key rows by before rotating them:
// value = rnd(x * w[j], round) (Qwen3's norm weights; null: no multiply).
struct HeadScale {
  const float* q = nullptr;  // (D)
  const float* k = nullptr;  // (D)
  Rounding round = Rounding::fp32;
};

// ---- rotary embedding + head layout ------------------------------------------------------------

// cos, sin (T, D/2) fp32 tables: angle[t][j] = t * inv_freq[j] (D/2 values, ops/rope.hpp; D the
// rotary width), computed in fp32 on the host and uploaded with a blocking copy (set-up time, no
// kernel: the one function here without an execution-space argument). attention_factor
// (longrope's): cos and sin multiplied by it in fp32.
void rope_tables(float* cos, float* sin, int64_t T, int64_t D, const std::vector<float>& inv_freq,
                 float attention_factor = 1.0f);
// q (B, H, T, D), k (B, KV, T, D), v (B, KV, T, D) from qkv (B*T, (H + 2 KV) * D):
// rotate-half rotary on q and k (fp32 math, stored in TC), v copied. Token t of row b is rotated
// by the angles of position t, or with packed rows (starts: (B, T) device array, as
// AttentionDims::starts) of position t - starts[b*T + t]: positions restart at 0 in every example.
// `scale`: query and key values are first multiplied by per-channel weights (HeadScale). Null
// cos and sin: no rotation (a layer without positions, model.layer_rope), the layout change only.
// R (model.rotary_dim; 0: D): partial rotary, the first R values of each query and key head
// rotate (pairs j, j + R/2; tables (T, R/2)) and the other D - R pass through (scaled).
template <class TC>
void rope_forward(const ExecSpace& space, TC* q, TC* k, TC* v, const TC* qkv, const float* cos,
                  const float* sin, int64_t B, int64_t T, int64_t H, int64_t KV, int64_t D,
                  const int32_t* starts = nullptr, HeadScale scale = {}, int64_t R = 0);
// dqkv (B*T, (H + 2 KV) * D) from dq, dk, dv in head layout (inverse rotation), stored in TC.
// dq, dk, dv are fp32 sums (ops/attention.hpp), rounded to TC on load: the gradients of the
// compute-dtype q, k, v.
// Positions as rope_forward's (starts likewise), and R.
template <class TC>
void rope_backward(const ExecSpace& space, TC* dqkv, const float* dq, const float* dk,
                   const float* dv, const float* cos, const float* sin, int64_t B, int64_t T,
                   int64_t H, int64_t KV, int64_t D, const int32_t* starts = nullptr,
                   int64_t R = 0);

// out (B, H, T, D) = rnd(in (B*T, H*D), round): token layout to head layout. (The attention
// writes its output in token layout itself: ops/attention.hpp.)
template <class TO, class TI>
void tokens_to_heads(const ExecSpace& space, TO* out, const TI* in, int64_t B, int64_t H, int64_t T,
                     int64_t D, Rounding round);

// ---- elementwise -------------------------------------------------------------------------------

// out (n) = rnd(in (n), round)
template <class TO, class TI>
void round_copy(const ExecSpace& space, TO* out, const TI* in, int64_t n, Rounding round);
// The compute-dtype copy of an fp32 tensor (n) as a GEMM operand: dst holding TC(src), or src
// itself when nothing changes (fp32 compute).
template <class TC>
const TC* compute_copy(const ExecSpace& space, TC* dst, const float* src, int64_t n) {
  if constexpr (std::is_same<TC, float>::value) {
    return src;
  } else {
    round_copy(space, dst, src, n, Rounding::bf16);
    return dst;
  }
}

// x (n) = rnd(x * factor, round): Gemma's embedding scale (and its gradient's).
void scale_values(const ExecSpace& space, float* x, int64_t n, float factor, Rounding round);
// out (n) = rnd(a + b, round)        (out may alias a)
template <class TB>
void add_forward(const ExecSpace& space, float* out, const float* a, const TB* b, int64_t n,
                 Rounding round);
// a (N, F) = TC(TC(act(g)) * u) with gu (N, 2F) = [g | u] per row; act SiLU (SwiGLU) or the
// tanh-approximated GELU (GeGLU: 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3)))), in fp32.
template <class TC>
void swiglu_forward(const ExecSpace& space, TC* a, const TC* gu, int64_t N, int64_t F,
                    MlpActivation act = MlpActivation::silu);
// dgu (N, 2F) = [dg | du] from da (N, F), an fp32 sum rounded to TC on load
template <class TC>
void swiglu_backward(const ExecSpace& space, TC* dgu, const float* da, const TC* gu, int64_t N,
                     int64_t F, MlpActivation act = MlpActivation::silu);

// out (N, 2C) = [a | b] per row        and its inverse split (fp32)
template <class TC>
void concat2(const ExecSpace& space, TC* out, const TC* a, const TC* b, int64_t N, int64_t C);
void split2(const ExecSpace& space, float* a, float* b, const float* in, int64_t N, int64_t C);

// y (N, out) at column col of rows ld wide: y = TC(y + TC(delta * scale))
template <class TC>
void add_scaled_slice(const ExecSpace& space, TC* y, int64_t ld, int64_t col, const TC* delta,
                      int64_t N, int64_t out, float scale);
// out (N, w) = TC(in[:, col : col + w] * scale), the slice of rows ld wide made contiguous
template <class TC>
void scaled_slice(const ExecSpace& space, TC* out, const TC* in, int64_t ld, int64_t col, int64_t N,
                  int64_t w, float scale);

// ---- loss --------------------------------------------------------------------------------------

// What a loss kernel computes: the losses only, or also their gradient.
enum class LossPass : uint8_t { forward, forward_backward };

// Final-logit soft-capping (Gemma 2): z = cap * tanh(l / cap) bounds every logit to (-cap, cap).
// cap <= 0: off.
struct LogitSoftcap {
  float cap = 0.0f;
  bool on() const { return cap > 0.0f; }
};

// logits (n) in place: l -> TC(cap * tanh(l / cap)), computed in fp32 from the stored l and
// rounded once, on the store, to the compute dtype (with bf16 compute the capped logits are
// bf16, as the logits are). Nothing when the cap is off.
template <class TC>
void logit_softcap_forward(const ExecSpace& space, TC* logits, int64_t n, LogitSoftcap softcap);

// Fused softmax + cross-entropy over logits (N, V). Rows with target < 0 are ignored.
// losses (N) = logsumexp(logits) - logits[target] (fp32, exponentials by exp_fast; the row's sum
// in row_sum's order on CPUs; 0 for ignored rows).
// With LossPass::forward_backward, logits are overwritten in place with dlogits =
// TC((softmax - onehot) * scale), the gradient of the mean loss when scale = 1 / count.
// With a soft-cap on, the logits given are the capped z (logit_softcap_forward's output) and
// what is written is the gradient of the uncapped l: dz = TC((softmax - onehot) * scale) (the
// gradient of the compute-dtype tensor z, rounded to its dtype), then
// dl = TC(dz * (1 - (z / cap)^2)), from z read just before it is overwritten.
template <class TC>
// row_scale (N), when given, replaces scale for each row (a preference pair's weights).
void cross_entropy_forward_backward(const ExecSpace& space, float* losses, TC* logits,
                                    const int32_t* targets, int64_t N, int64_t V, float scale,
                                    LossPass pass, LogitSoftcap softcap = {},
                                    const float* row_scale = nullptr);

// Sum of n fp32 values (deterministic reduction) returned to the host as double.
double sum_to_host(const ExecSpace& space, const float* x, int64_t n);

}  // namespace kktrain
