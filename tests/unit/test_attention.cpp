// The tiled causal attention (ops/attention.hpp), both kernels (tiled_gemm: the host builds'
// batched GEMM tiles; team: the GPU builds' Kokkos teams, run here on the host), against
//  - the materialized attention kktrain ran before (tests/unit/attention_reference.hpp), and
//  - a float64 host computation of the same function from the same (bf16-exact) inputs,
// for fp32 and bf16 compute, GQA / MQA / MHA, B > 1, odd T, T not a multiple of the tile, tiles
// that cut the sequence into many query tiles and key blocks (so the online softmax rescales), the
// (batch, KV head) groups split into several batched calls, and T = 1. Also: the kernels are
// deterministic (a second run gives the same bits), and the workspace grows linearly in T.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "attention_reference.hpp"
#include "core/bf16.hpp"
#include "dtype_types.hpp"
#include "ops/attention.hpp"

namespace kktrain {
namespace {

struct Shape {
  int64_t B, T, H, KV, D;
  std::string name() const {
    return "B" + std::to_string(B) + " T" + std::to_string(T) + " H" + std::to_string(H) + " KV" +
           std::to_string(KV) + " D" + std::to_string(D);
  }
  AttentionDims dims() const {
    return AttentionDims{B, T, H, KV, D, 1.0f / std::sqrt(static_cast<float>(D))};
  }
};
const Shape kShapes[] = {
    {2, 37, 4, 2, 16},   // GQA, B > 1, odd T below every default tile
    {1, 130, 2, 1, 32},  // MQA, T past two default CPU tiles, not a multiple of any tile
    {3, 64, 3, 3, 8},    // MHA, T exactly one default CPU tile
};

// A kernel with its tile sizes and (tiled_gemm) groups per call (0: the kernel's defaults).
struct Config {
  AttentionKernel kernel;
  int64_t q_rows, k_cols, groups = 0;
  std::string name() const {
    return std::string(attention_kernel_name(kernel)) + " " + std::to_string(q_rows) + "x" +
           std::to_string(k_cols) + " groups " + std::to_string(groups);
  }
};
const Config kConfigs[] = {
    {AttentionKernel::tiled_gemm, 0, 0},
    {AttentionKernel::tiled_gemm, 16, 32},
    {AttentionKernel::tiled_gemm, 7, 5},
    {AttentionKernel::tiled_gemm, 16, 32, 3},  // (batch, KV head) groups split into chunks of 3
    {AttentionKernel::team, 0, 0},
    {AttentionKernel::team, 8, 16},
    {AttentionKernel::team, 5, 3},
};

// Outputs in head layout (B, H, T, D) / (B, KV, T, D) as doubles on the host.
struct Grads {
  std::vector<double> out, lse, dq, dk, dv;
};

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

// Random bf16-exact inputs q, k, v, dout (so both dtypes see the same values).
struct Inputs {
  std::vector<float> q, k, v, dout;
  Inputs(const Shape& s, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> n(0.0f, 1.0f);
    auto fill = [&](std::vector<float>& x, int64_t size, float scale) {
      x.resize(size);
      for (float& e : x) e = round_to_bf16(scale * n(rng));
    };
    fill(q, s.B * s.H * s.T * s.D, 2.0f);  // peaked rows: the running max changes between blocks
    fill(k, s.B * s.KV * s.T * s.D, 1.0f);
    fill(v, s.B * s.KV * s.T * s.D, 1.0f);
    fill(dout, s.B * s.H * s.T * s.D, 1.0f);
  }
};

template <class TC>
DView<TC> device(const std::vector<float>& x) {
  auto h = Kokkos::create_mirror_view(DView<TC>("in", x.size()));
  for (std::size_t i = 0; i < x.size(); ++i) h(i) = from_f32<TC>(x[i]);
  DView<TC> d("in", x.size());
  Kokkos::deep_copy(d, h);
  return d;
}

// The float64 attention of the same inputs: no rounding anywhere.
Grads exact(const Shape& s, const Inputs& in) {
  const int64_t T = s.T, D = s.D, G = s.H / s.KV;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  Grads g;
  g.out.assign(s.B * s.H * T * D, 0.0);
  g.lse.assign(s.B * s.H * T, 0.0);
  g.dq.assign(g.out.size(), 0.0);
  g.dk.assign(s.B * s.KV * T * D, 0.0);
  g.dv.assign(g.dk.size(), 0.0);
  std::vector<double> p(T), dp(T);
  for (int64_t b = 0; b < s.B; ++b) {
    for (int64_t h = 0; h < s.H; ++h) {
      const int64_t qh = (b * s.H + h) * T, kh = (b * s.KV + h / G) * T;
      for (int64_t t = 0; t < T; ++t) {
        double mx = -1e300, sum = 0.0, dot = 0.0;
        for (int64_t j = 0; j <= t; ++j) {
          double a = 0.0;
          for (int64_t e = 0; e < D; ++e)
            a += double(in.q[(qh + t) * D + e]) * in.k[(kh + j) * D + e];
          p[j] = scale * a;
          mx = std::max(mx, p[j]);
        }
        for (int64_t j = 0; j <= t; ++j) sum += (p[j] = std::exp(p[j] - mx));
        g.lse[qh + t] = mx + std::log(sum);
        for (int64_t j = 0; j <= t; ++j) {
          p[j] /= sum;
          dp[j] = 0.0;
          for (int64_t e = 0; e < D; ++e) {
            g.out[(qh + t) * D + e] += p[j] * in.v[(kh + j) * D + e];
            dp[j] += double(in.dout[(qh + t) * D + e]) * in.v[(kh + j) * D + e];
            g.dv[(kh + j) * D + e] += p[j] * in.dout[(qh + t) * D + e];
          }
          dot += p[j] * dp[j];
        }
        for (int64_t j = 0; j <= t; ++j) {
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

// The materialized reference (what kktrain ran before), TC = float (fp32) or bf16 (rc).
template <class TC>
Grads materialized(const Shape& s, const Inputs& in) {
  const AttentionDims d = s.dims();
  constexpr Rounding rc = rounding_of<TC>();
  DView<TC> q = device<TC>(in.q), k = device<TC>(in.k), v = device<TC>(in.v);
  DView<TC> dout = device<TC>(in.dout), out("out", in.q.size());
  DView<float> dq("dq", in.q.size()), dk("dk", in.k.size()), dv("dv", in.v.size());
  reference::Buffers<TC> buf(d);
  reference::forward(out.data(), buf, q.data(), k.data(), v.data(), d, rc);
  reference::backward(dq.data(), dk.data(), dv.data(), buf, dout.data(), q.data(), k.data(),
                      v.data(), d, rc);
  return Grads{host(out), {}, host(dq), host(dk), host(dv)};
}

// The tiled attention with kernel and tiles `c` (its token-layout output brought to head layout).
template <class TC>
Grads tiled(const Shape& s, const Inputs& in, const Config& c) {
  AttentionDims d = s.dims();
  d.options = AttentionOptions{c.kernel, c.q_rows, c.k_cols, c.groups};
  constexpr Rounding rc = rounding_of<TC>();
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
  DView<float> lse("lse", s.B * s.H * s.T);
  DView<float> dq("dq", in.q.size()), dk("dk", in.k.size()), dv("dv", in.v.size());
  attention_forward(ExecSpace(), out.data(), lse.data(), q.data(), k.data(), v.data(), d, sc);
  attention_backward(ExecSpace(), dq.data(), dk.data(), dv.data(), dout.data(), out.data(),
                     lse.data(), q.data(), k.data(), v.data(), d, sc);
  if (rc == Rounding::bf16) {  // the model's consumer (rope_backward) rounds the fp32 sums on load
    for (auto* g : {&dq, &dk, &dv}) round_copy(ExecSpace(), g->data(), g->data(), g->extent(0), rc);
  }
  Kokkos::fence();
  Grads g{{}, host(lse), host(dq), host(dk), host(dv)};
  const std::vector<double> tok = host(out);  // (B*T, H*D) -> (B, H, T, D)
  g.out.resize(tok.size());
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t t = 0; t < s.T; ++t)
      for (int64_t h = 0; h < s.H; ++h)
        for (int64_t e = 0; e < s.D; ++e)
          g.out[((b * s.H + h) * s.T + t) * s.D + e] = tok[((b * s.T + t) * s.H + h) * s.D + e];
  return g;
}

// max |a - b| / max |b|: the error relative to the tensor's scale.
double rel_err(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0.0, den = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::fabs(a[i] - b[i]));
    den = std::max(den, std::fabs(b[i]));
  }
  return num / std::max(den, 1e-30);
}

struct Errors {
  double out, dq, dk, dv;
  double worst() const { return std::max({out, dq, dk, dv}); }
};
Errors errors(const Grads& a, const Grads& b) {
  return Errors{rel_err(a.out, b.out), rel_err(a.dq, b.dq), rel_err(a.dk, b.dk),
                rel_err(a.dv, b.dv)};
}

const char* tensor_names[] = {"out", "dq", "dk", "dv"};
double pick(const Errors& e, int i) {
  const double v[] = {e.out, e.dq, e.dk, e.dv};
  return v[i];
}

TEST(Attention, Fp32MatchesTheMaterializedAttention) {
  double worst = 0.0;
  for (const Shape& s : kShapes) {
    const Inputs in(s, 11);
    const Grads ref = materialized<float>(s, in), ideal = exact(s, in);
    for (const Config& c : kConfigs) {
      SCOPED_TRACE(s.name() + ", " + c.name());
      const Grads got = tiled<float>(s, in, c);
      const Errors e = errors(got, ref);
      worst = std::max(worst, e.worst());
      // fp32 throughout: the two differ only in the order of fp32 sums (GEMM blocking, the
      // online softmax's rescaling by exp(m_old - m_new) and its exp(S - lse) in backward against
      // a division by the row sum): a few ulps per element, amplified by the cancellation in
      // dS = P (dP - D) (measured worst 5.5e-7). 1e-5 is ~20x that; a wrong mask, scale, head
      // mapping or a dropped rescale errs by 1e-2 .. 1.
      for (int i = 0; i < 4; ++i) EXPECT_LT(pick(e, i), 1e-5) << tensor_names[i];
      // lse: within fp32 rounding of the float64 log-sum-exp.
      for (std::size_t i = 0; i < ideal.lse.size(); ++i) {
        ASSERT_NEAR(got.lse[i], ideal.lse[i], 2e-6 * (1.0 + std::fabs(ideal.lse[i]))) << i;
      }
    }
  }
  std::printf("fp32: worst max-norm relative error against the materialized attention %.3g\n",
              worst);
}

TEST(Attention, Bf16IsAsCloseToFloat64AsTheMaterializedAttention) {
  double worst_ratio = 0.0, worst_vs_ref = 0.0;
  for (const Shape& s : kShapes) {
    const Inputs in(s, 12);
    const Grads ref = materialized<bf16>(s, in), ideal = exact(s, in);
    const Errors ref_err = errors(ref, ideal);
    for (const Config& c : kConfigs) {
      SCOPED_TRACE(s.name() + ", " + c.name());
      const Grads got = tiled<bf16>(s, in, c);
      const Errors e = errors(got, ideal), vs_ref = errors(got, ref);
      for (int i = 0; i < 4; ++i) {
        // Both round q.k products' inputs, P, dP, dS and the outputs to bf16 (2^-8 relative each),
        // at different places: P~ = exp(S - m) before its division by l here, the normalized P
        // there; D = rowsum(dout * out) from the rounded output here, rowsum(P dP) there. Each is
        // as far from the float64 result as the other: the tiled error may not exceed 2.5 times
        // the materialized one's, with a floor of 2^-8 (one bf16 rounding). Measured worst ratio
        // 1.56 (a wrong mask, scale or head mapping gives ratios of 10 .. 1000).
        const double floor = std::ldexp(1.0, -8);
        const double ratio = pick(e, i) / std::max(pick(ref_err, i), floor);
        worst_ratio = std::max(worst_ratio, ratio);
        worst_vs_ref = std::max(worst_vs_ref, pick(vs_ref, i));
        EXPECT_LT(ratio, 2.5) << tensor_names[i] << ": " << pick(e, i) << " against float64, the "
                              << "materialized attention " << pick(ref_err, i);
        // And the two agree to a few bf16 roundings (measured worst 1.5e-2).
        EXPECT_LT(pick(vs_ref, i), 4e-2) << tensor_names[i];
      }
    }
  }
  std::printf(
      "bf16: worst error ratio against the materialized attention (vs float64) %.3g, "
      "worst difference %.3g\n",
      worst_ratio, worst_vs_ref);
}

// One token (T = 1): its one key gets probability 1, so out = v and dv = dout exactly; dq and dk
// are the gradient through a softmax of one element, 0 in exact arithmetic. The tiled kernels'
// D = rowsum(dout * out) and dP = dout . v are the same sum in two orders (and in bf16 dP is
// rounded, D is not), so dS = P (dP - D) is not exactly 0 but within one rounding of dP:
// |dq| <= scale |dP - D| |k| with |dP - D| <= 2^-8 sum_e |dout_e v_e| (bf16; 2^-20 in fp32).
// Typed over the compute dtype TC (float, bf16).
template <class TC>
class AttentionCompute : public ::testing::Test {};
TYPED_TEST_SUITE(AttentionCompute, testing_util::Dtypes);

TYPED_TEST(AttentionCompute, OneTokenAttendsOnlyToItself) {
  using TC = TypeParam;
  const Shape s{3, 1, 4, 2, 8};
  const Inputs in(s, 14);
  constexpr Rounding rc = rounding_of<TC>();
  for (const Config& c : kConfigs) {
    SCOPED_TRACE(c.name());
    const Grads got = tiled<TC>(s, in, c);
    const int64_t G = s.H / s.KV, D = s.D;
    const double scale = 1.0 / std::sqrt(double(D)),
                 ulp = std::ldexp(1.0, rc == Rounding::bf16 ? -8 : -20);
    std::vector<float> dv(in.v.size(), 0.0f);        // fp32 sums over the group's heads
    std::vector<double> dk_bound(in.k.size(), 0.0);  // likewise the bounds
    for (int64_t b = 0; b < s.B; ++b) {
      for (int64_t h = 0; h < s.H; ++h) {
        const int64_t qr = b * s.H + h, kr = b * s.KV + h / G;
        double dp_abs = 0.0, qk = 0.0;
        for (int64_t e = 0; e < D; ++e) {
          ASSERT_EQ(got.out[qr * D + e], in.v[kr * D + e]) << "out of head " << h;
          dv[kr * D + e] += in.dout[qr * D + e];
          dp_abs += std::fabs(double(in.dout[qr * D + e]) * in.v[kr * D + e]);
          qk += double(in.q[qr * D + e]) * in.k[kr * D + e];
        }
        for (int64_t e = 0; e < D; ++e) {
          const double bound = scale * ulp * dp_abs * std::fabs(in.k[kr * D + e]);
          EXPECT_LE(std::fabs(got.dq[qr * D + e]), bound) << "dq of head " << h;
          dk_bound[kr * D + e] += scale * ulp * dp_abs * std::fabs(in.q[qr * D + e]);
        }
        EXPECT_NEAR(got.lse[qr], scale * qk, 1e-5 * (1.0 + std::fabs(scale * qk)));
      }
    }
    for (std::size_t i = 0; i < dv.size(); ++i) {
      EXPECT_EQ(got.dv[i], rc == Rounding::bf16 ? round_to_bf16(dv[i]) : dv[i]) << i;
      EXPECT_LE(std::fabs(got.dk[i]), dk_bound[i]) << "dk " << i;
    }
  }
}

TYPED_TEST(AttentionCompute, KernelsAreDeterministic) {
  using TC = TypeParam;
  const Shape s{2, 70, 4, 2, 16};
  const Inputs in(s, 13);
  for (const Config& c : kConfigs) {
    SCOPED_TRACE(c.name());
    const Grads a = tiled<TC>(s, in, c), b = tiled<TC>(s, in, c);
    EXPECT_EQ(a.out, b.out);
    EXPECT_EQ(a.lse, b.lse);
    EXPECT_EQ(a.dq, b.dq);
    EXPECT_EQ(a.dk, b.dk);
    EXPECT_EQ(a.dv, b.dv);
  }
}

TYPED_TEST(AttentionCompute, WorkspaceIsLinearInT) {
  constexpr Rounding round = rounding_of<TypeParam>();
  for (AttentionKernel k : {AttentionKernel::tiled_gemm, AttentionKernel::team}) {
    AttentionDims small{1, 4096, 32, 8, 128, 0.1f}, big{1, 8192, 32, 8, 128, 0.1f};
    small.options.kernel = big.options.kernel = k;
    const AttentionWorkspaceSizes a = attention_workspace_sizes(small, round);
    const AttentionWorkspaceSizes b = attention_workspace_sizes(big, round);
    auto total = [](const AttentionWorkspaceSizes& w) {
      return w.scores + w.dprobs + w.probs + w.dscores + w.out_acc + 2 * w.row_stats + w.delta;
    };
    EXPECT_LE(total(b), 2 * total(a)) << attention_kernel_name(k);
    // Far below one T x T score matrix per head.
    EXPECT_LT(total(b), big.T * big.T / 8) << attention_kernel_name(k);
  }
}

}  // namespace
}  // namespace kktrain
