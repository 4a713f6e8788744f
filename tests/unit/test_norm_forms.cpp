// The family forms of the block's elementwise kernels (ops/kernels.hpp) against float64 host
// computations from their definitions, whose gradients are checked by central finite differences:
//  - rmsnorm_forward / rmsnorm_backward with NormForm (OLMo 2's fp32 product w * x_hat, Gemma's
//    (1 + w) * x_hat), fp32: output, input and weight gradients;
//  - head_rmsnorm_forward / head_rmsnorm_backward with the weights applied by the norm
//    (fp32_product), per head (Gemma 3) and over the whole projection (OLMo 2);
//  - swiglu_forward / swiglu_backward with the tanh-approximated GELU (GeGLU);
//  - the fused passes (add_rmsnorm_forward, rmsnorm_backward_copy) bit for bit against the
//    unfused kernels they replace, typed over the compute dtype; row_sum's documented order.
// fp32 kernels against float64: within 2e-5 of the largest value (fp32 sums of <= 64 terms).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "dtype_types.hpp"
#include "ops/kernels.hpp"

namespace kktrain {
namespace {

DView<float> dev(const std::vector<float>& h) {
  DView<float> d("buf", h.size());
  Kokkos::deep_copy(d, HViewU<const float>(h.data(), h.size()));
  return d;
}
std::vector<float> host(const DView<float>& d) {
  std::vector<float> h(d.extent(0));
  Kokkos::deep_copy(HViewU<float>(h.data(), h.size()), d);
  return h;
}
std::vector<float> randn(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}
double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}
void expect_close(const std::vector<float>& got, const std::vector<double>& want,
                  const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const double tol = 2e-5 * std::max(1.0, max_abs(want));
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol) << what << " at " << i;
  }
}

// y = (offset + w) * x * rstd per row of C values, in float64.
std::vector<double> norm_rows(const std::vector<double>& x, const std::vector<double>& w,
                              int64_t rows, int64_t C, double eps, double offset) {
  std::vector<double> y(x.size());
  for (int64_t n = 0; n < rows; ++n) {
    double ss = 0;
    for (int64_t c = 0; c < C; ++c) ss += x[n * C + c] * x[n * C + c];
    const double r = 1.0 / std::sqrt(ss / C + eps);
    for (int64_t c = 0; c < C; ++c) y[n * C + c] = (offset + w[c]) * x[n * C + c] * r;
  }
  return y;
}

// d(sum dy * f(x)) / dx by central differences (f in float64); checks an analytic gradient.
std::vector<double> numeric_grad(const std::function<double(const std::vector<double>&)>& f,
                                 std::vector<double> x) {
  std::vector<double> g(x.size());
  const double h = 1e-6;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + h;
    const double up = f(x);
    x[i] = keep - h;
    const double down = f(x);
    x[i] = keep;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}
std::vector<double> wide(const std::vector<float>& v) {
  return {v.begin(), v.end()};
}
double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

class NormForms : public ::testing::TestWithParam<NormWeight> {};

TEST_P(NormForms, RmsnormMatchesItsDefinitionForwardAndBackward) {
  const NormForm form = norm_form(GetParam());
  const int64_t N = 5, C = 24;
  const float eps = 1e-6f;
  const std::vector<float> x = randn(N * C, 1), w = randn(C, 2, 0.3f), dy = randn(N * C, 3);
  DView<float> out("out", N * C), rstd("rstd", N), dx("dx", N * C), dw("dw", C);
  DView<float> partial("partial", rmsnorm_partial_size(N, C));
  const DView<float> dx_in = dev(x), dw_in = dev(w), ddy = dev(dy);
  rmsnorm_forward<float>(ExecSpace(), out.data(), nullptr, rstd.data(), dx_in.data(), dw_in.data(),
                         N, C, eps, Rounding::fp32, form);
  rmsnorm_backward(ExecSpace(), dx.data(), dw.data(), partial.data(), ddy.data(), dx_in.data(),
                   dw_in.data(), rstd.data(), N, C, Rounding::fp32, Rounding::fp32, form);
  const double off = form.offset;
  expect_close(host(out), norm_rows(wide(x), wide(w), N, C, eps, off), "y");
  const std::vector<double> wdy = wide(dy);
  auto loss_x = [&](const std::vector<double>& xs) {
    return dot(wdy, norm_rows(xs, wide(w), N, C, eps, off));
  };
  auto loss_w = [&](const std::vector<double>& ws) {
    return dot(wdy, norm_rows(wide(x), ws, N, C, eps, off));
  };
  expect_close(host(dx), numeric_grad(loss_x, wide(x)), "dx");
  expect_close(host(dw), numeric_grad(loss_w, wide(w)), "dw");
}

// v[c] as row_sum's f (a functor callable on the host and the device: a host lambda passed to a
// KOKKOS_INLINE_FUNCTION is an nvcc warning).
struct Values {
  const float* v;
  KOKKOS_INLINE_FUNCTION float operator()(int64_t c) const { return v[c]; }
};

// row_sum adds value c into lane c % 16, in order within a lane, then folds the lanes in halves:
// values whose sum depends on the order (1 + 2^-24 rounds to 1; lanes keep the small ones apart).
TEST(RowSum, AddsInItsDocumentedOrder) {
  for (const int64_t n : {1, 7, 16, 17, 40, 384, 389}) {
    std::vector<float> v(n);
    std::mt19937 rng(static_cast<uint32_t>(n));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int64_t c = 0; c < n; ++c) v[c] = c % 5 == 0 ? 1.0f : std::ldexp(u(rng), -24);
    float lane[16] = {};
    for (int64_t c = 0; c < n; ++c) lane[c % 16] += v[c];
    for (int w = 8; w > 0; w /= 2) {
      for (int l = 0; l < w; ++l) lane[l] += lane[l + w];
    }
    const float got = row_sum(n, Values{v.data()});
    EXPECT_EQ(float_bits(got), float_bits(lane[0])) << "n " << n;
  }
}

// The residual add fused into the next norm's forward, and the compute-dtype copy fused into the
// norm's backward, give the unfused kernels' bits (every form, both stream roundings; N over
// two chunks of the weight gradient's rows and C not a multiple of the 16 lanes).
template <class TC>
class FusedNorm : public ::testing::Test {};
TYPED_TEST_SUITE(FusedNorm, testing_util::Dtypes);

template <class T>
std::vector<float> host_f32(const DView<T>& d) {
  auto m = Kokkos::create_mirror_view(d);
  Kokkos::deep_copy(m, d);
  std::vector<float> h(d.extent(0));
  for (std::size_t i = 0; i < h.size(); ++i) h[i] = to_f32(m(i));
  return h;
}
template <class T>
DView<T> dev_as(const std::vector<float>& h) {
  DView<T> d("buf", h.size());
  auto m = Kokkos::create_mirror_view(d);
  for (std::size_t i = 0; i < h.size(); ++i) m(i) = from_f32<T>(h[i]);
  Kokkos::deep_copy(d, m);
  return d;
}
void expect_bits(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(float_bits(got[i]), float_bits(want[i])) << what << " at " << i;
  }
}

TYPED_TEST(FusedNorm, GiveTheUnfusedKernelsBits) {
  using TC = TypeParam;
  const int64_t N = 70, C = 100;
  const float eps = 1e-5f;
  for (const NormWeight nw : {NormWeight::plain, NormWeight::fp32, NormWeight::one_plus_fp32}) {
    for (const Rounding stream : {Rounding::fp32, Rounding::bf16}) {
      const NormForm form = norm_form(nw);
      const ExecSpace space;
      const DView<float> a = dev(randn(N * C, 11)), w = dev(randn(C, 12, 0.3f));
      const DView<TC> b = dev_as<TC>(randn(N * C, 13, 0.5f));
      // forward: add_forward then rmsnorm_forward, against add_rmsnorm_forward
      DView<float> x1("x1", N * C), x2("x2", N * C), r1("r1", N), r2("r2", N);
      DView<TC> y1("y1", N * C), y2("y2", N * C);
      add_forward(space, x1.data(), a.data(), b.data(), N * C, stream);
      rmsnorm_forward<TC>(space, y1.data(), nullptr, r1.data(), x1.data(), w.data(), N, C, eps,
                          stream, form);
      add_rmsnorm_forward(space, y2.data(), r2.data(), x2.data(), a.data(), b.data(), w.data(), N,
                          C, eps, stream, form);
      expect_bits(host(x2), host(x1), "residual");
      expect_bits(host(r2), host(r1), "rstd");
      expect_bits(host_f32(y2), host_f32(y1), "norm output");
      // backward: rmsnorm_backward then round_copy, against rmsnorm_backward_copy
      const std::vector<float> dres0 = randn(N * C, 14);
      const DView<float> dy = dev(randn(N * C, 15));
      DView<float> d1 = dev(dres0), d2 = dev(dres0), dw1("dw1", C), dw2("dw2", C);
      DView<float> partial("partial", rmsnorm_partial_size(N, C));
      DView<TC> c1("c1", N * C), c2("c2", N * C);
      rmsnorm_backward(space, d1.data(), dw1.data(), partial.data(), dy.data(), x1.data(), w.data(),
                       r1.data(), N, C, stream, rounding_of<TC>(), form);
      round_copy(space, c1.data(), d1.data(), N * C, rounding_of<TC>());
      rmsnorm_backward_copy(space, d2.data(), c2.data(), dw2.data(), partial.data(), dy.data(),
                            x1.data(), w.data(), r1.data(), N, C, stream, rounding_of<TC>(), form);
      expect_bits(host(d2), host(d1), "input gradient");
      expect_bits(host(dw2), host(dw1), "weight gradient");
      expect_bits(host_f32(c2), host_f32(c1), "compute-dtype copy");
    }
  }
}

// The q/k norm with its weights applied by the norm: per head (rows of D) or the whole query and
// key projections (one row of H*D, one of KV*D); the value part is left alone.
// (The plain form's weights are the rotary kernel's: HeadScale, tested with the rotary.)
class QkNormForms : public ::testing::TestWithParam<NormWeight> {};

TEST_P(QkNormForms, QkNormWithItsWeightsMatchesItsDefinition) {
  const NormForm form = norm_form(GetParam());
  const int64_t N = 3, H = 4, KV = 2, D = 8, Q = (H + 2 * KV) * D;
  const float eps = 1e-6f;
  for (const bool whole : {false, true}) {
    const HeadNormDims d = whole ? HeadNormDims::whole(N, H, KV, D, eps, form)
                                 : HeadNormDims::per_head(N, H, KV, D, eps, form);
    const std::vector<float> qkv = randn(N * Q, 4), wq = randn(d.q_width, 5, 0.3f),
                             wk = randn(d.k_width, 6, 0.3f), dy = randn(N * Q, 7);
    // float64: each row's norm; value columns pass through (their gradient is left as dy).
    auto forward = [&](const std::vector<double>& x, const std::vector<double>& q_w,
                       const std::vector<double>& k_w) {
      std::vector<double> y = x;
      for (int64_t n = 0; n < N; ++n) {
        for (int64_t r = 0; r < d.rows(); ++r) {
          const bool key = r >= d.q_rows;
          const int64_t width = key ? d.k_width : d.q_width;
          const int64_t at =
              n * Q + (key ? d.q_rows * d.q_width + (r - d.q_rows) * width : r * width);
          const std::vector<double> row(x.begin() + at, x.begin() + at + width);
          const std::vector<double> out =
              norm_rows(row, key ? k_w : q_w, 1, width, eps, form.offset);
          std::copy(out.begin(), out.end(), y.begin() + at);
        }
      }
      return y;
    };
    DView<float> buf = dev(qkv), pre("pre", N * d.width()), rstd("rstd", N * d.rows());
    const DView<float> dwq_in = dev(wq), dwk_in = dev(wk);
    head_rmsnorm_forward<float>(ExecSpace(), buf.data(), pre.data(), rstd.data(), d, dwq_in.data(),
                                dwk_in.data());
    expect_close(host(buf), forward(wide(qkv), wide(wq), wide(wk)), whole ? "whole y" : "y");
    // backward: the query/key part of dy replaced by dx, the value part unchanged
    DView<float> g = dev(dy), gwq("gwq", d.q_width), gwk("gwk", d.k_width);
    head_rmsnorm_backward<float>(ExecSpace(), g.data(), gwq.data(), gwk.data(), pre.data(),
                                 rstd.data(), dwq_in.data(), dwk_in.data(), d, Rounding::fp32);
    const std::vector<double> wdy = wide(dy);
    std::vector<double> want_dx = numeric_grad(
        [&](const std::vector<double>& xs) { return dot(wdy, forward(xs, wide(wq), wide(wk))); },
        wide(qkv));
    for (int64_t n = 0; n < N; ++n) {  // value columns: dy as it was
      for (int64_t c = (H + KV) * D; c < Q; ++c) want_dx[n * Q + c] = dy[n * Q + c];
    }
    expect_close(host(g), want_dx, whole ? "whole dx" : "dx");
    expect_close(host(gwq),
                 numeric_grad(
                     [&](const std::vector<double>& ws) {
                       return dot(wdy, forward(wide(qkv), ws, wide(wk)));
                     },
                     wide(wq)),
                 "dwq");
    expect_close(host(gwk),
                 numeric_grad(
                     [&](const std::vector<double>& ws) {
                       return dot(wdy, forward(wide(qkv), wide(wq), ws));
                     },
                     wide(wk)),
                 "dwk");
  }
}

INSTANTIATE_TEST_SUITE_P(Forms, NormForms,
                         ::testing::Values(NormWeight::plain, NormWeight::fp32,
                                           NormWeight::one_plus_fp32));
INSTANTIATE_TEST_SUITE_P(Forms, QkNormForms,
                         ::testing::Values(NormWeight::fp32, NormWeight::one_plus_fp32));

// GeGLU: a = gelu_tanh(g) * u, its gradients.
TEST(GatedActivations, GeluTanhMatchesItsDefinitionForwardAndBackward) {
  const int64_t N = 4, F = 16;
  const std::vector<float> gu = randn(N * 2 * F, 8, 2.0f), da = randn(N * F, 9);
  auto forward = [&](const std::vector<double>& x) {
    std::vector<double> a(N * F);
    const double k = std::sqrt(2.0 / M_PI);
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t f = 0; f < F; ++f) {
        const double g = x[n * 2 * F + f], u = x[n * 2 * F + F + f];
        a[n * F + f] = 0.5 * g * (1.0 + std::tanh(k * (g + 0.044715 * g * g * g))) * u;
      }
    }
    return a;
  };
  const DView<float> dgu_in = dev(gu), dda = dev(da);
  DView<float> a("a", N * F), dgu("dgu", N * 2 * F);
  swiglu_forward<float>(ExecSpace(), a.data(), dgu_in.data(), N, F, MlpActivation::gelu_tanh);
  swiglu_backward<float>(ExecSpace(), dgu.data(), dda.data(), dgu_in.data(), N, F,
                         MlpActivation::gelu_tanh);
  expect_close(host(a), forward(wide(gu)), "a");
  const std::vector<double> wda = wide(da);
  expect_close(
      host(dgu),
      numeric_grad([&](const std::vector<double>& x) { return dot(wda, forward(x)); }, wide(gu)),
      "dgu");
}

}  // namespace
}  // namespace kktrain
