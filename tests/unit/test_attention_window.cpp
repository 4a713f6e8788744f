// Sliding-window attention and attention-logit soft-capping in the tiled attention
// (ops/attention.hpp, AttentionDims::window and softcap): both kernels (tiled_gemm, team), forward
// and backward, fp32 and bf16 compute, GQA, against
//  - a float64 host computation from the definitions (query t sees keys t - W < j <= t and
//    start[t] <= j; scores s = scale q.k, then cap tanh(s / cap), then the mask and the softmax),
//    whose analytic gradients are themselves checked by finite differences, and
//  - the materialized attention (tests/unit/attention_reference.hpp) with the same mask and cap.
// Tiles 8 x 8 and 7 x 5 / 5 x 3 with windows 2, 3 (below a tile), 8 (a tile), 13 (above), so the
// window's edge falls inside key blocks and whole blocks lie before it; with packed starts; the
// softcap with and without a window. Also: a window of T or more gives the bits of no window, a
// window of 1 gives out = v exactly, and the key blocks (and, team dK/dV pass, the query tiles)
// wholly outside the window are never read, not merely masked.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "attention_reference.hpp"
#include "core/bf16.hpp"
#include "dtype_types.hpp"
#include "ops/attention.hpp"
#include "ops/kernels.hpp"

namespace kktrain {
namespace {

// Rows of T = 37 tokens, B = 2, H = 4, KV = 2 (GQA), D = 16. Packed starts (when a case has them):
// row 0: examples [0, 10), [10, 23), [23, 30), padding [30, 37) as one block; row 1: [0, 1),
// [1, 19), [19, 33), padding [33, 37) with one start per token.
constexpr int64_t kB = 2, kT = 37, kH = 4, kKV = 2, kD = 16;
std::vector<int32_t> packed_starts() {
  std::vector<int32_t> s(kB * kT);
  for (int64_t t = 0; t < kT; ++t) {
    s[0 * kT + t] = t < 10 ? 0 : t < 23 ? 10 : t < 30 ? 23 : 30;
    s[1 * kT + t] = t < 1 ? 0 : t < 19 ? 1 : t < 33 ? 19 : static_cast<int32_t>(t);
  }
  return s;
}

// One variant of the attention: window (0: none), softcap (0: off), packed starts or not.
struct Case {
  int64_t window;
  float softcap;
  bool packed;
  std::string name() const {
    return "window " + std::to_string(window) + " softcap " + std::to_string(softcap) +
           (packed ? " packed" : "");
  }
};

AttentionDims dims(const Case& c) {
  AttentionDims d{kB, kT, kH, kKV, kD, 1.0f / std::sqrt(static_cast<float>(kD))};
  d.window = c.window;
  d.softcap = c.softcap;
  return d;
}

struct Config {
  AttentionKernel kernel;
  int64_t q_rows, k_cols, groups = 0;
  std::string name() const {
    return std::string(attention_kernel_name(kernel)) + " " + std::to_string(q_rows) + "x" +
           std::to_string(k_cols) + " groups " + std::to_string(groups);
  }
};
// 0 x 0: the defaults (one tile for T = 37 on the host kernel). 8 x 8: windows 3 / 8 / 13 below,
// equal to and above a tile. 7 x 5, 5 x 3: tiles of different shapes, so a window's first block is
// not aligned with the query tile. groups 2: one batched call covers rows of different starts.
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
    fill(q, kB * kH * kT * kD, 2.0f);  // scores of a few units: the softcap 3 bends them
    fill(k, kB * kKV * kT * kD, 1.0f);
    fill(v, kB * kKV * kT * kD, 1.0f);
    fill(dout, kB * kH * kT * kD, 1.0f);
  }
};

// The float64 attention from the definitions, forward and analytic backward; `starts` empty: none.
Grads exact(const Inputs& in, const std::vector<int32_t>& starts, int64_t window, double cap) {
  const int64_t T = kT, D = kD, G = kH / kKV;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  Grads g;
  g.out.assign(kB * kH * T * D, 0.0);
  g.lse.assign(kB * kH * T, 0.0);
  g.dq.assign(g.out.size(), 0.0);
  g.dk.assign(kB * kKV * T * D, 0.0);
  g.dv.assign(g.dk.size(), 0.0);
  std::vector<double> p(T), dp(T), dcap(T);
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t h = 0; h < kH; ++h) {
      const int64_t qh = (b * kH + h) * T, kh = (b * kKV + h / G) * T;
      for (int64_t t = 0; t < T; ++t) {
        const int64_t start = starts.empty() ? 0 : starts[b * T + t];
        const int64_t j0 = std::max<int64_t>(start, window > 0 ? t - window + 1 : 0);
        double mx = -1e300, sum = 0.0, dot = 0.0;
        for (int64_t j = j0; j <= t; ++j) {
          double a = 0.0;
          for (int64_t e = 0; e < D; ++e)
            a += double(in.q[(qh + t) * D + e]) * in.k[(kh + j) * D + e];
          p[j] = scale * a;
          dcap[j] = 1.0;
          if (cap > 0.0) {
            const double th = std::tanh(p[j] / cap);
            p[j] = cap * th;
            dcap[j] = 1.0 - th * th;
          }
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
          const double ds = p[j] * (dp[j] - dot) * dcap[j] * scale;
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
DView<int32_t> device_starts(const std::vector<int32_t>& starts) {
  DView<int32_t> d("starts", starts.size());
  Kokkos::deep_copy(d, Kokkos::View<const int32_t*, HostSpace, Kokkos::MemoryUnmanaged>(
                           starts.data(), starts.size()));
  return d;
}

// (B*T, H*D) token layout -> (B, H, T, D).
std::vector<double> head_layout(const std::vector<double>& tok) {
  std::vector<double> out(tok.size());
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t t = 0; t < kT; ++t)
      for (int64_t h = 0; h < kH; ++h)
        for (int64_t e = 0; e < kD; ++e)
          out[((b * kH + h) * kT + t) * kD + e] = tok[((b * kT + t) * kH + h) * kD + e];
  return out;
}

// The tiled attention with kernel and tiles `c`, forward and backward.
template <class TC>
Grads tiled(const Inputs& in, const Case& cs, const Config& c) {
  AttentionDims d = dims(cs);
  d.options = AttentionOptions{c.kernel, c.q_rows, c.k_cols, c.groups};
  constexpr Rounding rc = rounding_of<TC>();
  const std::vector<int32_t> starts = packed_starts();
  DView<int32_t> dstarts = device_starts(starts);
  if (cs.packed) {
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
  return Grads{head_layout(host(out)), host(lse), host(dq), host(dk), host(dv)};
}

// The materialized attention (attention_reference.hpp) with the same mask and cap.
template <class TC>
Grads materialized(const Inputs& in, const Case& cs) {
  AttentionDims d = dims(cs);
  constexpr Rounding rc = rounding_of<TC>();
  const std::vector<int32_t> starts = packed_starts();
  DView<int32_t> dstarts = device_starts(starts);
  if (cs.packed) d.starts = dstarts.data();
  DView<TC> q = device<TC>(in.q), k = device<TC>(in.k), v = device<TC>(in.v);
  DView<TC> dout = device<TC>(in.dout), out("out", in.q.size());
  DView<float> dq("dq", in.q.size()), dk("dk", in.k.size()), dv("dv", in.v.size());
  reference::Buffers<TC> buf(d);
  reference::forward(out.data(), buf, q.data(), k.data(), v.data(), d, rc);
  reference::backward(dq.data(), dk.data(), dv.data(), buf, dout.data(), q.data(), k.data(),
                      v.data(), d, rc);
  Kokkos::fence();
  return Grads{host(out), {}, host(dq), host(dk), host(dv)};
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

const char* kNames[] = {"out", "dq", "dk", "dv"};
std::vector<double> errors(const Grads& a, const Grads& b) {
  return {rel_err(a.out, b.out), rel_err(a.dq, b.dq), rel_err(a.dk, b.dk), rel_err(a.dv, b.dv)};
}

template <class TC>
class AttentionWindow : public ::testing::Test {};
TYPED_TEST_SUITE(AttentionWindow, testing_util::Dtypes);

// Both kernels in every tile configuration against float64 (max-norm error relative to the
// tensor's largest element) and the materialized attention. fp32: fp32 summation noise amplified by
// the cancellation in dS = P (dP - D), as test_packed_attention (5e-6 against float64, 1e-5
// against the materialized). bf16: q.k inputs, P, dP, dS and the outputs rounded to bf16 (2^-8
// each): 2e-2 against float64, 4e-2 against the materialized, as test_packed_attention and
// test_attention. A window ignored, off by one key, or a cap missing in either pass errs by
// 0.1 .. 1.
const Case kCases[] = {
    {2, 0.0f, false}, {3, 0.0f, false}, {8, 0.0f, false}, {13, 0.0f, false},
    {3, 0.0f, true},  {8, 0.0f, true},  {13, 0.0f, true}, {0, 3.0f, false},
    {6, 3.0f, false}, {0, 3.0f, true},  {6, 3.0f, true},
};
TYPED_TEST(AttentionWindow, MatchesFloat64AndTheMaterializedAttention) {
  using TC = TypeParam;
  const bool bf = rounding_of<TC>() == Rounding::bf16;
  const double tol = bf ? 2e-2 : 5e-6, tol_ref = bf ? 4e-2 : 1e-5;
  const Inputs in(31);
  double worst = 0.0, worst_ref = 0.0;
  for (const Case& cs : kCases) {
    const Grads ideal =
        exact(in, cs.packed ? packed_starts() : std::vector<int32_t>{}, cs.window, cs.softcap);
    const Grads ref = materialized<TC>(in, cs);
    for (const Config& c : kConfigs) {
      SCOPED_TRACE(cs.name() + ", " + c.name());
      const Grads got = tiled<TC>(in, cs, c);
      const std::vector<double> e = errors(got, ideal), er = errors(got, ref);
      for (int i = 0; i < 4; ++i) {
        EXPECT_LT(e[i], tol) << kNames[i] << " against float64";
        EXPECT_LT(er[i], tol_ref) << kNames[i] << " against the materialized attention";
        worst = std::max(worst, e[i]);
        worst_ref = std::max(worst_ref, er[i]);
      }
      for (std::size_t i = 0; i < ideal.lse.size(); ++i) {
        ASSERT_NEAR(got.lse[i], ideal.lse[i], 2e-5 * (1.0 + std::fabs(ideal.lse[i]))) << i;
      }
    }
  }
  std::printf(
      "worst max-norm relative error: %.3g against float64, %.3g against the "
      "materialized attention\n",
      worst, worst_ref);
}

// A window of T or more covers every causal key: the bits of no window, with and without starts
// and the softcap; a second run gives the same bits (determinism with a window and a cap).
TYPED_TEST(AttentionWindow, WindowOfTOrMoreIsBitwiseNoWindow) {
  using TC = TypeParam;
  const Inputs in(32);
  for (const Case& base : {Case{0, 0.0f, false}, Case{0, 0.0f, true}, Case{0, 3.0f, true}}) {
    for (const Config& c : kConfigs) {
      SCOPED_TRACE(base.name() + ", " + c.name());
      const Grads none = tiled<TC>(in, base, c);
      for (int64_t w : {kT, kT + 5}) {
        Case cs = base;
        cs.window = w;
        const Grads got = tiled<TC>(in, cs, c);
        EXPECT_EQ(got.out, none.out) << "window " << w;
        EXPECT_EQ(got.lse, none.lse) << "window " << w;
        EXPECT_EQ(got.dq, none.dq) << "window " << w;
        EXPECT_EQ(got.dk, none.dk) << "window " << w;
        EXPECT_EQ(got.dv, none.dv) << "window " << w;
      }
      Case cs = base;
      cs.window = 6;
      const Grads a = tiled<TC>(in, cs, c), b = tiled<TC>(in, cs, c);
      EXPECT_EQ(a.out, b.out);
      EXPECT_EQ(a.dq, b.dq);
      EXPECT_EQ(a.dk, b.dk);
      EXPECT_EQ(a.dv, b.dv);
    }
  }
}

// A window of 1: every query sees only its own key, with probability 1 (whatever the cap), so
// out = v of its position exactly and dv = the sum of the group's heads' dout (fp32 sums in head
// order, rounded once with bf16); lse is the (capped) score itself. dq and dk are the gradient
// through a softmax of one element, 0 in exact arithmetic (so MatchesFloat64... has no relative
// error for them): here within one rounding of dP, as test_attention's one-token case,
// |dq| <= scale |dP - D| |k| with |dP - D| <= ulp sum_e |dout_e v_e| (2^-8 bf16, 2^-20 fp32).
TYPED_TEST(AttentionWindow, WindowOneAttendsOnlyToItself) {
  using TC = TypeParam;
  constexpr Rounding rc = rounding_of<TC>();
  const Inputs in(33);
  const int64_t G = kH / kKV;
  for (float cap : {0.0f, 3.0f}) {
    const Case cs{1, cap, false};
    for (const Config& c : kConfigs) {
      SCOPED_TRACE(cs.name() + ", " + c.name());
      const Grads got = tiled<TC>(in, cs, c);
      const double scale = 1.0 / std::sqrt(double(kD)),
                   ulp = std::ldexp(1.0, rc == Rounding::bf16 ? -8 : -20);
      std::vector<float> dv(in.v.size(), 0.0f);
      std::vector<double> dk_bound(in.k.size(), 0.0);
      int64_t out_bad = 0, lse_bad = 0, dq_bad = 0;
      for (int64_t b = 0; b < kB; ++b) {
        for (int64_t h = 0; h < kH; ++h) {
          for (int64_t t = 0; t < kT; ++t) {
            const int64_t qr = (b * kH + h) * kT + t, kr = (b * kKV + h / G) * kT + t;
            double s = 0.0, dp_abs = 0.0;
            for (int64_t e = 0; e < kD; ++e) {
              out_bad += got.out[qr * kD + e] != in.v[kr * kD + e];
              dv[kr * kD + e] += in.dout[qr * kD + e];
              s += double(in.q[qr * kD + e]) * in.k[kr * kD + e];
              dp_abs += std::fabs(double(in.dout[qr * kD + e]) * in.v[kr * kD + e]);
            }
            for (int64_t e = 0; e < kD; ++e) {
              dq_bad += std::fabs(got.dq[qr * kD + e]) >
                        scale * ulp * dp_abs * std::fabs(in.k[kr * kD + e]);
              dk_bound[kr * kD + e] += scale * ulp * dp_abs * std::fabs(in.q[qr * kD + e]);
            }
            s *= scale;
            if (cap > 0.0f) s = cap * std::tanh(s / cap);
            lse_bad += std::fabs(got.lse[qr] - s) > 1e-5 * (1.0 + std::fabs(s));
          }
        }
      }
      EXPECT_EQ(out_bad, 0) << "out elements that are not v";
      EXPECT_EQ(lse_bad, 0) << "lse that is not the query's own score";
      EXPECT_EQ(dq_bad, 0) << "dq elements above one rounding of dP";
      int64_t dv_bad = 0, dk_bad = 0;
      for (std::size_t i = 0; i < dv.size(); ++i) {
        dv_bad += got.dv[i] != (rc == Rounding::bf16 ? round_to_bf16(dv[i]) : dv[i]);
        dk_bad += std::fabs(got.dk[i]) > dk_bound[i];
      }
      EXPECT_EQ(dv_bad, 0) << "dv elements that are not the sum of the group's dout";
      EXPECT_EQ(dk_bad, 0) << "dk elements above one rounding of dP";
    }
  }
}

// The float64 reference's analytic gradients (window, softcap, starts) are those of its forward:
// central differences of L = sum(out * dout) in every input element, h = 1e-5, agree to 1e-6
// relative (the difference quotient's error is ~h^2 |L'''| ~ 1e-10 here; a missing (1 - t^2)
// factor errs by 0.1 .. 1).
TEST(AttentionWindowReference, AnalyticGradientsMatchFiniteDifferences) {
  const Inputs in(34);
  const std::vector<int32_t> starts = packed_starts();
  const int64_t window = 6;
  const double cap = 3.0, h = 1e-5;
  const Grads g = exact(in, starts, window, cap);
  auto loss = [&](const Inputs& x) {
    const Grads y = exact(x, starts, window, cap);
    double l = 0.0;
    for (std::size_t i = 0; i < y.out.size(); ++i) l += y.out[i] * x.dout[i];
    return l;
  };
  // Every 7th element of q, k, v (the loss is evaluated in float64; the inputs are perturbed as
  // floats, so the step is the float nearest h above and below).
  // (an alias: nvcc's front end writes the member pointer's declarator in parentheses, which g++
  // then warns about)
  using InputsMember = std::vector<float> Inputs::*;
  struct Tensor {
    InputsMember member;
    const std::vector<double>* grad;
    const char* name;
  };
  for (const Tensor& x : {Tensor{&Inputs::q, &g.dq, "dq"}, Tensor{&Inputs::k, &g.dk, "dk"},
                          Tensor{&Inputs::v, &g.dv, "dv"}}) {
    double num = 0.0, den = 0.0;
    for (std::size_t i = 0; i < (in.*x.member).size(); i += 7) {
      Inputs up = in, down = in;
      (up.*x.member)[i] += static_cast<float>(h);
      (down.*x.member)[i] -= static_cast<float>(h);
      const double step = double((up.*x.member)[i]) - double((down.*x.member)[i]);
      const double fd = (loss(up) - loss(down)) / step;
      num = std::max(num, std::fabs(fd - (*x.grad)[i]));
      den = std::max(den, std::fabs((*x.grad)[i]));
    }
    EXPECT_LT(num / den, 1e-6) << x.name;
  }
}

// Blocks wholly outside the window are never computed, not merely masked: a masked block still
// multiplies its zero probabilities with its values (0 * NaN = NaN), so NaN planted where only
// skipped blocks would read it shows whether they were read. Tiles 4 x 4, window 5 (query t sees
// keys [t - 4, t]):
//  - forward: values at positions [0, 4) (key block 0) NaN. Rows 0 .. 7 see them (NaN output);
//    the query tiles from row 8 on start at key block 4 or later: their out, lse and dq (team:
//    dP = dout . v would be NaN in a computed block) stay finite;
//  - backward: dout of rows [16, 20) NaN. Keys [12, 20) get it; the other keys' dk and dv stay
//    finite: the team kernel's dK/dV pass ends key tile [8, 12)'s query tiles at row 15 (its
//    last key's window), and the tiled_gemm kernel's key loop for query tile 16 starts at 12.
// fp32 only: the skipping does not depend on the compute dtype.
TEST(AttentionWindowSkip, BlocksOutsideTheWindowAreNeverRead) {
  const float nan = std::nanf("");
  const Case cs{5, 0.0f, false};
  for (AttentionKernel kernel : {AttentionKernel::tiled_gemm, AttentionKernel::team}) {
    SCOPED_TRACE(attention_kernel_name(kernel));
    const Config c{kernel, 4, 4};
    Inputs poisoned_v(35), poisoned_dout(35);
    for (int64_t bk = 0; bk < kB * kKV; ++bk)
      for (int64_t t = 0; t < 4; ++t)
        for (int64_t e = 0; e < kD; ++e) poisoned_v.v[(bk * kT + t) * kD + e] = nan;
    for (int64_t bh = 0; bh < kB * kH; ++bh)
      for (int64_t t = 16; t < 20; ++t)
        for (int64_t e = 0; e < kD; ++e) poisoned_dout.dout[(bh * kT + t) * kD + e] = nan;
    const Grads a = tiled<float>(poisoned_v, cs, c);
    const Grads b = tiled<float>(poisoned_dout, cs, c);
    // Counts of rows that are not as expected (element 0 of each row; the rows' elements alike).
    int64_t own_nan = 0, out_bad = 0, dq_bad = 0, dout_nan = 0, dkv_bad = 0;
    for (int64_t bh = 0; bh < kB * kH; ++bh) {
      for (int64_t t = 0; t < kT; ++t) {
        const int64_t i = (bh * kT + t) * kD;
        if (t < 8) {
          own_nan += !std::isnan(a.out[i]);
        } else {
          out_bad += !(std::isfinite(a.out[i]) && std::isfinite(a.lse[bh * kT + t]));
          dq_bad += !std::isfinite(a.dq[i]);
        }
      }
    }
    for (int64_t bk = 0; bk < kB * kKV; ++bk) {
      for (int64_t t = 0; t < kT; ++t) {
        const int64_t i = (bk * kT + t) * kD;
        if (t >= 12 && t < 20) {
          dout_nan += !std::isnan(b.dv[i]);
        } else {
          dkv_bad += !(std::isfinite(b.dk[i]) && std::isfinite(b.dv[i]));
        }
      }
    }
    EXPECT_EQ(own_nan, 0) << "rows 0 .. 7 read their NaN values";
    EXPECT_EQ(dout_nan, 0) << "keys 12 .. 19 get the NaN dout of rows 16 .. 19";
    EXPECT_EQ(out_bad, 0) << "out / lse rows from 8 on read a skipped block";
    EXPECT_EQ(dq_bad, 0) << "dq rows from 8 on read a skipped block";
    EXPECT_EQ(dkv_bad, 0) << "dk, dv of keys outside [12, 20) read a skipped query tile";
  }
}

}  // namespace
}  // namespace kktrain
