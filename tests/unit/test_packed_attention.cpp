// Packed rows in the tiled attention (ops/attention.hpp, AttentionDims::starts): several examples
// in one row, each token's query sees the keys of its own example only (start <= j <= t). Both
// kernels (tiled_gemm, team), forward and backward, fp32 and bf16 compute, against a float64
// host computation of every example on its own; tiles small enough that examples begin inside
// query tiles and key blocks and straddle them, a row with trailing padding (one padding block,
// or one start per padding token), GQA, B > 1. Also: starts that are all 0 give the bits of
// starts = null (one sequence per row), both kernels are deterministic with starts, the key
// blocks before a query tile's starts are never read (not merely masked), and the rotary
// embedding (rope_forward / rope_backward) restarts positions at every example.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/bf16.hpp"
#include "dtype_types.hpp"
#include "ops/attention.hpp"
#include "ops/kernels.hpp"

namespace kktrain {
namespace {

// Rows of T = 37 tokens (B = 3, H = 4, KV = 2, D = 16):
//   row 0: examples [0, 10), [10, 23), [23, 30), padding [30, 37) as one block (start 30),
//   row 1: one example [0, 37) (starts 0: the plain causal row),
//   row 2: examples [0, 1), [1, 19), [19, 33), padding [33, 37), each its own start (start = t).
constexpr int64_t kB = 3, kT = 37, kH = 4, kKV = 2, kD = 16;
std::vector<int32_t> packed_starts() {
  std::vector<int32_t> s(kB * kT);
  for (int64_t t = 0; t < kT; ++t) {
    s[0 * kT + t] = t < 10 ? 0 : t < 23 ? 10 : t < 30 ? 23 : 30;
    s[1 * kT + t] = 0;
    s[2 * kT + t] = t < 1 ? 0 : t < 19 ? 1 : t < 33 ? 19 : static_cast<int32_t>(t);
  }
  return s;
}

AttentionDims dims() {
  return AttentionDims{kB, kT, kH, kKV, kD, 1.0f / std::sqrt(static_cast<float>(kD))};
}

struct Config {
  AttentionKernel kernel;
  int64_t q_rows, k_cols, groups = 0;
  std::string name() const {
    return std::string(attention_kernel_name(kernel)) + " " + std::to_string(q_rows) + "x" +
           std::to_string(k_cols) + " groups " + std::to_string(groups);
  }
};
// 0 x 0: the defaults (one tile for T = 37 on the host kernel). 8 x 8: example boundaries at 10,
// 19, 23 fall inside tiles, whole tiles lie before a later example's start (skipped). 7 x 5,
// 5 x 3: tiles of different shapes, so a query tile's first visible block is not aligned with
// it. groups 2: a batched call covers rows with different starts.
const Config kConfigs[] = {
    {AttentionKernel::tiled_gemm, 0, 0}, {AttentionKernel::tiled_gemm, 8, 8},
    {AttentionKernel::tiled_gemm, 7, 5}, {AttentionKernel::tiled_gemm, 8, 8, 2},
    {AttentionKernel::team, 0, 0},       {AttentionKernel::team, 8, 8},
    {AttentionKernel::team, 5, 3},
};

struct Grads {
  std::vector<double> out, lse, dq, dk, dv;  // head layout (B, H, T, D) / (B, KV, T, D)
};

struct Inputs {
  std::vector<float> q, k, v, dout;  // bf16-exact: both compute dtypes see the same values
  explicit Inputs(uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> n(0.0f, 1.0f);
    auto fill = [&](std::vector<float>& x, int64_t size, float scale) {
      x.resize(size);
      for (float& e : x) e = round_to_bf16(scale * n(rng));
    };
    fill(q, kB * kH * kT * kD, 2.0f);
    fill(k, kB * kKV * kT * kD, 1.0f);
    fill(v, kB * kKV * kT * kD, 1.0f);
    fill(dout, kB * kH * kT * kD, 1.0f);
  }
};

// The float64 attention of each example alone: query t attends to keys [start[t], t] of its row.
Grads exact(const Inputs& in, const std::vector<int32_t>& starts) {
  const int64_t T = kT, D = kD, G = kH / kKV;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  Grads g;
  g.out.assign(kB * kH * T * D, 0.0);
  g.lse.assign(kB * kH * T, 0.0);
  g.dq.assign(g.out.size(), 0.0);
  g.dk.assign(kB * kKV * T * D, 0.0);
  g.dv.assign(g.dk.size(), 0.0);
  std::vector<double> p(T), dp(T);
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t h = 0; h < kH; ++h) {
      const int64_t qh = (b * kH + h) * T, kh = (b * kKV + h / G) * T;
      for (int64_t t = 0; t < T; ++t) {
        const int64_t j0 = starts[b * T + t];
        double mx = -1e300, sum = 0.0, dot = 0.0;
        for (int64_t j = j0; j <= t; ++j) {
          double a = 0.0;
          for (int64_t e = 0; e < D; ++e)
            a += double(in.q[(qh + t) * D + e]) * in.k[(kh + j) * D + e];
          p[j] = scale * a;
          mx = std::max(mx, p[j]);
        }
        for (int64_t j = j0; j <= t; ++j) sum += (p[j] = std::exp(p[j] - mx));
        g.lse[qh + t] = mx + std::log(sum);
        for (int64_t j = j0; j <= t; ++j) {
          p[j] /= sum;
          dp[j] = 0.0;
          for (int64_t e = 0; e < D; ++e) {
            g.out[(qh + t) * D + e] += p[j] * in.v[(kh + j) * D + e];
            dp[j] += double(in.dout[(qh + t) * D + e]) * in.v[(kh + j) * D + e];
            g.dv[(kh + j) * D + e] += p[j] * in.dout[(qh + t) * D + e];
          }
          dot += p[j] * dp[j];
        }
        for (int64_t j = j0; j <= t; ++j) {
          const double ds = p[j] * (dp[j] - dot) * scale;
          for (int64_t e = 0; e < D; ++e) {
            g.dq[(qh + t) * D + e] += ds * in.k[(kh + j) * D + e];
            g.dk[(kh + j) * D + e] += ds * in.q[(qh + t) * D + e];
          }
        }
      }
    }
  }
  return g;
}

template <class TC>
DView<TC> device(const std::vector<float>& x) {
  auto h = Kokkos::create_mirror_view(DView<TC>("in", x.size()));
  for (std::size_t i = 0; i < x.size(); ++i) h(i) = from_f32<TC>(x[i]);
  DView<TC> d("in", x.size());
  Kokkos::deep_copy(d, h);
  return d;
}
std::vector<double> host(const DView<float>& v) {
  auto h = Kokkos::create_mirror_view_and_copy(HostSpace(), v);
  return std::vector<double>(h.data(), h.data() + h.extent(0));
}
std::vector<double> host(const DView<bf16>& v) {
  auto h = Kokkos::create_mirror_view_and_copy(HostSpace(), v);
  std::vector<double> out(h.extent(0));
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = h(i).to_float();
  return out;
}

// Whose starts the kernels get: none (null), or the given ones (on the device, and on the host
// for the tiled_gemm kernel's block skipping).
enum class Starts : uint8_t { none, given };

// The tiled attention with kernel and tiles `c`, forward and backward.
template <class TC>
Grads tiled(const Inputs& in, const std::vector<int32_t>& starts, Starts use, const Config& c) {
  AttentionDims d = dims();
  d.options = AttentionOptions{c.kernel, c.q_rows, c.k_cols, c.groups};
  constexpr Rounding rc = rounding_of<TC>();
  DView<int32_t> dstarts("starts", starts.size());
  Kokkos::deep_copy(dstarts, Kokkos::View<const int32_t*, HostSpace, Kokkos::MemoryUnmanaged>(
                                 starts.data(), starts.size()));
  if (use == Starts::given) {
    d.starts = dstarts.data();
    d.host_starts = starts.data();
  }
  const AttentionWorkspaceSizes ws = attention_workspace_sizes(d, rc);
  DView<float> scores("scores", ws.scores), dprobs("dprobs", ws.dprobs), acc("acc", ws.out_acc);
  DView<float> mx("m", ws.row_stats), l("l", ws.row_stats), delta("delta", ws.delta);
  DView<TC> probs("probs", ws.probs), dscores("dscores", ws.dscores);
  AttentionScratch<TC> sc;
  sc.scores = scores.data();
  sc.dprobs = dprobs.data();
  sc.probs = ws.probs > 0 ? probs.data() : nullptr;
  sc.dscores = ws.dscores > 0 ? dscores.data() : nullptr;
  sc.out_acc = acc.data();
  sc.row_max = mx.data();
  sc.row_sum = l.data();
  sc.delta = delta.data();
  DView<TC> q = device<TC>(in.q), k = device<TC>(in.k), v = device<TC>(in.v);
  DView<TC> dout = device<TC>(in.dout), out("out", in.q.size());
  DView<float> lse("lse", kB * kH * kT);
  DView<float> dq("dq", in.q.size()), dk("dk", in.k.size()), dv("dv", in.v.size());
  attention_forward(ExecSpace(), out.data(), lse.data(), q.data(), k.data(), v.data(), d, sc);
  attention_backward(ExecSpace(), dq.data(), dk.data(), dv.data(), dout.data(), out.data(),
                     lse.data(), q.data(), k.data(), v.data(), d, sc);
  if (rc == Rounding::bf16) {  // as the model's consumer (rope_backward) rounds them on load
    for (auto* g : {&dq, &dk, &dv}) round_copy(ExecSpace(), g->data(), g->data(), g->extent(0), rc);
  }
  Kokkos::fence();
  Grads g{{}, host(lse), host(dq), host(dk), host(dv)};
  const std::vector<double> tok = host(out);  // (B*T, H*D) -> (B, H, T, D)
  g.out.resize(tok.size());
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t t = 0; t < kT; ++t)
      for (int64_t h = 0; h < kH; ++h)
        for (int64_t e = 0; e < kD; ++e)
          g.out[((b * kH + h) * kT + t) * kD + e] = tok[((b * kT + t) * kH + h) * kD + e];
  return g;
}

// max |a - b| / max |b| over the tensor.
double rel_err(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0.0, den = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::fabs(a[i] - b[i]));
    den = std::max(den, std::fabs(b[i]));
  }
  return num / std::max(den, 1e-30);
}

template <class TC>
class PackedAttention : public ::testing::Test {};
TYPED_TEST_SUITE(PackedAttention, testing_util::Dtypes);

// Both kernels with starts against every example computed alone in float64 (max-norm error
// relative to the tensor's largest element). fp32: fp32 summation noise, a few ulps amplified by
// the cancellation in dS = P (dP - D) (measured worst 2.8e-7); 5e-6 here. bf16: q.k inputs, P,
// dP, dS and the outputs rounded to bf16 (2^-8 each; measured worst 5.6e-3, test_attention's
// unpacked kernels 1.5e-2 from the materialized bf16 attention); 2e-2 here. Attention crossing
// into another example errs by 0.5 .. 1 (measured before the kernels read starts: 1.07).
TYPED_TEST(PackedAttention, MatchesEachExampleAlone) {
  using TC = TypeParam;
  const double tol = rounding_of<TC>() == Rounding::bf16 ? 2e-2 : 5e-6;
  const Inputs in(21);
  const std::vector<int32_t> starts = packed_starts();
  const Grads ideal = exact(in, starts);
  double worst = 0.0;
  for (const Config& c : kConfigs) {
    SCOPED_TRACE(c.name());
    const Grads got = tiled<TC>(in, starts, Starts::given, c);
    const double e[] = {rel_err(got.out, ideal.out), rel_err(got.dq, ideal.dq),
                        rel_err(got.dk, ideal.dk), rel_err(got.dv, ideal.dv)};
    const char* names[] = {"out", "dq", "dk", "dv"};
    for (int i = 0; i < 4; ++i) {
      EXPECT_LT(e[i], tol) << names[i];
      worst = std::max(worst, e[i]);
    }
    // lse: within the compute's rounding of the float64 log-sum-exp (the scores are fp32 in both).
    for (std::size_t i = 0; i < ideal.lse.size(); ++i) {
      ASSERT_NEAR(got.lse[i], ideal.lse[i], 2e-5 * (1.0 + std::fabs(ideal.lse[i]))) << i;
    }
  }
  std::printf("worst max-norm relative error against float64 per example: %.3g\n", worst);
}

// Starts that are all 0 are the plain causal attention: the same bits as starts = null, in every
// tile configuration; and a second run with packed starts gives the same bits (determinism).
TYPED_TEST(PackedAttention, ZeroStartsAreBitwiseThePlainAttention) {
  using TC = TypeParam;
  const Inputs in(22);
  const std::vector<int32_t> zeros(kB * kT, 0), starts = packed_starts();
  for (const Config& c : kConfigs) {
    SCOPED_TRACE(c.name());
    const Grads plain = tiled<TC>(in, zeros, Starts::none, c);
    const Grads zero = tiled<TC>(in, zeros, Starts::given, c);
    EXPECT_EQ(plain.out, zero.out);
    EXPECT_EQ(plain.lse, zero.lse);
    EXPECT_EQ(plain.dq, zero.dq);
    EXPECT_EQ(plain.dk, zero.dk);
    EXPECT_EQ(plain.dv, zero.dv);
    const Grads a = tiled<TC>(in, starts, Starts::given, c);
    const Grads b = tiled<TC>(in, starts, Starts::given, c);
    EXPECT_EQ(a.out, b.out);
    EXPECT_EQ(a.dq, b.dq);
    EXPECT_EQ(a.dk, b.dk);
    EXPECT_EQ(a.dv, b.dv);
  }
}

// Rotary positions restart in every example: rope_forward and rope_backward with starts give,
// for every token of an example, the bits of the same example rotated alone (positions from 0).
// (The attention itself cannot tell: q.k under rotary embeddings depends on t - j only, so a
// shifted example differs by rounding alone; this checks the positions themselves.)
TYPED_TEST(PackedAttention, RotaryPositionsRestartInEveryExample) {
  using TC = TypeParam;
  const int64_t B = 2, T = 12, H = 2, KV = 1, D = 8, half = D / 2, S = H + 2 * KV;
  // row 0: examples [0, 5), [5, 12); row 1: [0, 3), [3, 9), padding [9, 12)
  const std::vector<int32_t> starts = {0, 0, 0, 0, 0, 5, 5, 5, 5, 5, 5, 5,
                                       0, 0, 0, 3, 3, 3, 3, 3, 3, 9, 9, 9};
  std::vector<float> freq(half);
  for (int64_t j = 0; j < half; ++j) freq[j] = std::pow(10000.0f, -2.0f * j / D);
  DView<float> cos("cos", T * half), sin("sin", T * half);
  rope_tables(cos.data(), sin.data(), T, D, freq);
  std::mt19937 rng(5);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> qkv(B * T * S * D), dq(B * H * T * D), dk(B * KV * T * D), dv(dk.size());
  for (auto* x : {&qkv, &dq, &dk, &dv})
    for (float& e : *x) e = round_to_bf16(n(rng));
  DView<int32_t> dstarts("starts", starts.size());
  Kokkos::deep_copy(dstarts, Kokkos::View<const int32_t*, HostSpace, Kokkos::MemoryUnmanaged>(
                                 starts.data(), starts.size()));
  // The packed rows, forward and backward.
  DView<TC> in = device<TC>(qkv), q("q", dq.size()), k("k", dk.size()), v("v", dv.size());
  DView<TC> dqkv("dqkv", qkv.size());
  DView<float> gq = device<float>(dq), gk = device<float>(dk), gv = device<float>(dv);
  rope_forward(ExecSpace(), q.data(), k.data(), v.data(), in.data(), cos.data(), sin.data(), B, T,
               H, KV, D, dstarts.data());
  rope_backward(ExecSpace(), dqkv.data(), gq.data(), gk.data(), gv.data(), cos.data(), sin.data(),
                B, T, H, KV, D, dstarts.data());
  const std::vector<double> hq = host(q), hk = host(k), hdqkv = host(dqkv);
  // Each example alone: its tokens as a (1, L) batch without starts.
  int64_t examples = 0;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t s0 = 0; s0 < T;) {
      int64_t L = 0;
      while (s0 + L < T && starts[b * T + s0 + L] == s0) ++L;
      ++examples;
      std::vector<float> aq(qkv.begin() + (b * T + s0) * S * D,
                            qkv.begin() + (b * T + s0 + L) * S * D);
      std::vector<float> adq(H * L * D), adk(KV * L * D), adv(KV * L * D);
      for (int64_t t = 0; t < L; ++t) {
        for (int64_t e = 0; e < D; ++e) {
          for (int64_t h = 0; h < H; ++h)
            adq[(h * L + t) * D + e] = dq[((b * H + h) * T + s0 + t) * D + e];
          adk[t * D + e] = dk[(b * T + s0 + t) * D + e];
          adv[t * D + e] = dv[(b * T + s0 + t) * D + e];
        }
      }
      DView<TC> ain = device<TC>(aq), q1("q1", adq.size()), k1("k1", adk.size());
      DView<TC> v1("v1", adv.size()), dqkv1("dqkv1", aq.size());
      DView<float> gq1 = device<float>(adq), gk1 = device<float>(adk), gv1 = device<float>(adv);
      rope_forward(ExecSpace(), q1.data(), k1.data(), v1.data(), ain.data(), cos.data(), sin.data(),
                   1, L, H, KV, D);
      rope_backward(ExecSpace(), dqkv1.data(), gq1.data(), gk1.data(), gv1.data(), cos.data(),
                    sin.data(), 1, L, H, KV, D);
      const std::vector<double> aq1 = host(q1), ak1 = host(k1), ad1 = host(dqkv1);
      for (int64_t t = 0; t < L; ++t) {
        for (int64_t e = 0; e < D; ++e) {
          for (int64_t h = 0; h < H; ++h) {
            ASSERT_EQ(hq[((b * H + h) * T + s0 + t) * D + e], aq1[(h * L + t) * D + e])
                << "q, row " << b << " position " << s0 + t;
          }
          ASSERT_EQ(hk[(b * T + s0 + t) * D + e], ak1[t * D + e]) << "k, position " << s0 + t;
        }
        for (int64_t e = 0; e < S * D; ++e) {
          ASSERT_EQ(hdqkv[(b * T + s0 + t) * S * D + e], ad1[t * S * D + e])
              << "dqkv, row " << b << " position " << s0 + t;
        }
      }
      s0 += L;
    }
  }
  EXPECT_EQ(examples, 5);
}

// Skipped blocks are never computed, not merely masked: a masked block still multiplies its zero
// probabilities with its values (0 * NaN = NaN), so NaN planted where only skipped blocks would
// read it shows whether they were read. Tiles 4 x 4, examples [0, 8), [8, 16), [16, 37): the
// query tiles of the later examples start at key block 8 or 16.
//  - forward: values at positions [0, 4) NaN; the later examples' outputs (and, team, their dq,
//    whose dP = dout . v would be NaN) stay finite;
//  - backward: dout of the second example NaN; dk and dv of the other examples' keys stay finite
//    (the team kernel's dK/dV pass skips the query tiles that start after its key tile; the
//    tiled_gemm kernel's key loop never reaches those blocks).
// fp32 only: the skipping does not depend on the compute dtype.
TEST(PackedAttentionSkip, SkippedBlocksAreNeverRead) {
  using TC = float;
  std::vector<int32_t> starts(kB * kT);
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t t = 0; t < kT; ++t) starts[b * kT + t] = t < 8 ? 0 : t < 16 ? 8 : 16;
  const float nan = std::nanf("");
  for (AttentionKernel kernel : {AttentionKernel::tiled_gemm, AttentionKernel::team}) {
    SCOPED_TRACE(attention_kernel_name(kernel));
    const Config c{kernel, 4, 4};
    Inputs poisoned_v(23), poisoned_dout(23);
    for (int64_t bk = 0; bk < kB * kKV; ++bk)
      for (int64_t t = 0; t < 4; ++t)
        for (int64_t e = 0; e < kD; ++e) poisoned_v.v[(bk * kT + t) * kD + e] = nan;
    for (int64_t bh = 0; bh < kB * kH; ++bh)
      for (int64_t t = 8; t < 16; ++t)
        for (int64_t e = 0; e < kD; ++e) poisoned_dout.dout[(bh * kT + t) * kD + e] = nan;
    const Grads a = tiled<TC>(poisoned_v, starts, Starts::given, c);
    const Grads b = tiled<TC>(poisoned_dout, starts, Starts::given, c);
    // Counts of rows that are not as expected (element 0 of each row; the rows' elements alike).
    int64_t own_nan = 0, out_bad = 0, dq_bad = 0, dout_nan = 0, dkv_bad = 0;
    for (int64_t bh = 0; bh < kB * kH; ++bh) {
      for (int64_t t = 0; t < kT; ++t) {
        const int64_t i = (bh * kT + t) * kD;
        if (t < 8) {
          own_nan += !std::isnan(a.out[i]);
        } else {
          out_bad += !std::isfinite(a.out[i]);
          dq_bad += !std::isfinite(a.dq[i]);
        }
      }
    }
    for (int64_t bk = 0; bk < kB * kKV; ++bk) {
      for (int64_t t = 0; t < kT; ++t) {
        const int64_t i = (bk * kT + t) * kD;
        if (t >= 8 && t < 16) {
          dout_nan += !std::isnan(b.dv[i]);
        } else {
          dkv_bad += !(std::isfinite(b.dk[i]) && std::isfinite(b.dv[i]));
        }
      }
    }
    EXPECT_EQ(own_nan, 0) << "the first example reads its NaN values";
    EXPECT_EQ(dout_nan, 0) << "the second example's keys get its NaN dout";
    EXPECT_EQ(out_bad, 0) << "out rows of later examples read a skipped block";
    EXPECT_EQ(dq_bad, 0) << "dq rows of later examples read a skipped block";
    EXPECT_EQ(dkv_bad, 0) << "dk, dv of other examples' keys read a skipped query tile";
  }
}

}  // namespace
}  // namespace kktrain
