// gemm() (ops/gemm.hpp) against a double-precision reference, on every backend this build and
// CPU offer: kokkos-kernels (fp32), onednn (bf16 x bf16, when built and the CPU has native bf16)
// and converted (mixed operands, and bf16 under GemmOptions::bf16 = Bf16Products::widened, the
// model.gemm: widened of a run). Every product takes its options as an argument: no test changes
// a process-wide setting.
//
// Inputs are bf16-exact values for every dtype, so each product a*b is exact in fp32 and the
// double reference is the exact sum (its own error, ~k 2^-53, is negligible). Tolerance from the
// math: fp32 accumulation of k exact products in any order errs by at most (k-1) u sum|a b|
// (u = 2^-24), then alpha * s + beta * c0 adds at most two more roundings, so
//   |C - ref| <= (k + 2) u (|alpha| sum|a b| + |beta c0|)                              fp32 C
// and a bf16 C must be the round-to-nearest-even of some fp32 value within that bound: it lies
// between RNE(ref - tol) and RNE(ref + tol) (RNE is monotone), i.e. within one bf16 ulp of the
// reference plus the bound.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/blas_threads.hpp"
#include "core/errors.hpp"
#include "dtype_types.hpp"
#include "ops/gemm.hpp"
#if defined(KKTRAIN_HAVE_ONEDNN)
#include "ops/gemm_onednn.hpp"
#endif

namespace kktrain {
namespace {

struct Shape {
  int64_t m, n, k;
};
const Shape kShapes[] = {{1, 1, 1}, {7, 5, 3}, {33, 65, 17}, {128, 96, 200}};

// The production options (a run's with model.gemm and model.gemm_fp32 at auto), and the same with
// every bf16 product widened (model.gemm: widened).
const GemmOptions kNative{};
GemmOptions widened_options() {
  GemmOptions o;
  o.bf16 = Bf16Products::widened;
  return o;
}

#if defined(KKTRAIN_HAVE_VENDOR_GEMM) && defined(KOKKOS_ENABLE_CUDA)
constexpr GemmBackend kVendorBackend = GemmBackend::cublas;
#elif defined(KKTRAIN_HAVE_VENDOR_GEMM)
constexpr GemmBackend kVendorBackend = GemmBackend::rocblas;
#endif

// A matrix of either dtype holding bf16-exact values: a double copy for the reference, host
// copies in both dtypes, and the device copy gemm() reads and writes (store() uploads the host
// copy of `dtype`, load() brings the device one back).
struct Matrix {
  DType dtype;
  int64_t rows, cols;
  std::vector<double> ref;
  std::vector<float> f32;
  std::vector<bf16> b16;
  DView<float> d32;
  DView<bf16> d16;

  Matrix(DType d, int64_t r, int64_t c, std::mt19937& rng, float scale = 2.0f)
      : dtype(d), rows(r), cols(c), ref(r * c), d32("m32", r * c), d16("m16", r * c) {
    std::uniform_real_distribution<float> dist(-scale, scale);
    for (double& v : ref) v = round_to_bf16(dist(rng));
    store();
  }
  void store() {
    f32.assign(ref.begin(), ref.end());
    b16.resize(ref.size());
    for (std::size_t i = 0; i < ref.size(); ++i) b16[i] = bf16(static_cast<float>(ref[i]));
    Kokkos::deep_copy(d32, HViewU<float>(f32.data(), f32.size()));
    Kokkos::deep_copy(d16, HViewU<bf16>(b16.data(), b16.size()));
  }
  void load() {
    Kokkos::deep_copy(HViewU<float>(f32.data(), f32.size()), d32);
    Kokkos::deep_copy(HViewU<bf16>(b16.data(), b16.size()), d16);
  }
  // The matrix as an operand; with batch > 1, as `batch` (rows / batch - pad, cols) ones, each
  // followed by `pad` rows the product must neither read nor write (a strided batch).
  GemmIn in(int64_t batch = 1, int64_t pad = 0) const {
    const int64_t r = rows / batch - pad, st = pad > 0 ? (r + pad) * cols : 0;
    return dtype == DType::float32 ? gin(d32.data(), r, cols, st) : gin(d16.data(), r, cols, st);
  }
  GemmOut out(int64_t batch = 1, int64_t pad = 0) {
    const int64_t r = rows / batch - pad, st = pad > 0 ? (r + pad) * cols : 0;
    return dtype == DType::float32 ? gout(d32.data(), r, cols, st) : gout(d16.data(), r, cols, st);
  }
  double at(int64_t i) const {
    return dtype == DType::float32 ? f32[i] : static_cast<double>(b16[i].to_float());
  }
};

// Stores an fp32-representable value as the largest float <= x (down) or smallest >= x (up).
float float_toward(double x, bool up) {
  float f = static_cast<float>(x);
  if (up && f < x) f = std::nextafter(f, INFINITY);
  if (!up && f > x) f = std::nextafter(f, -INFINITY);
  return f;
}

struct Case {
  char ta, tb;
  DType a, b, c;
  float alpha, beta;
  Shape s;
  std::string name() const {
    return std::string(1, ta) + tb + " " + dtype_name(a) + "x" + dtype_name(b) + "->" +
           dtype_name(c) + " alpha " + std::to_string(alpha) + " beta " + std::to_string(beta) +
           " " + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k);
  }
};

// C as computed and the interval the bound allows for each element.
struct Result {
  std::vector<double> got, lo, hi;
};

// Runs one case through gemm() (gemm_batched() when batch > 1) and checks every element; returns
// C for cross-backend checks. pad > 0: every matrix of the batch is followed by pad rows (of
// A, B and C) that the product must leave alone (strided batches).
Result run_and_check(const Case& cs, uint32_t seed, int64_t batch = 1, int64_t pad = 0,
                     const GemmOptions& options = kNative) {
  SCOPED_TRACE(cs.name() + " batch " + std::to_string(batch) + " pad " + std::to_string(pad));
  std::mt19937 rng(seed);
  const int64_t m = cs.s.m, n = cs.s.n, k = cs.s.k;
  const int64_t ar = cs.ta == 'N' ? m : k, br = cs.tb == 'N' ? k : n;
  Matrix A(cs.a, batch * (ar + pad), cs.ta == 'N' ? k : m, rng);
  Matrix B(cs.b, batch * (br + pad), cs.tb == 'N' ? n : k, rng);
  Matrix C(cs.c, batch * (m + pad), n, rng);
  const std::vector<double> c0 = C.ref;
  if (batch == 1 && pad == 0) {
    gemm(ExecSpace(), options, cs.ta, cs.tb, cs.alpha, A.in(), B.in(), cs.beta, C.out());
  } else {
    gemm_batched(ExecSpace(), options, batch, cs.ta, cs.tb, cs.alpha, A.in(batch, pad),
                 B.in(batch, pad), cs.beta, C.out(batch, pad));
  }
  C.load();
  int64_t gaps_written = 0;  // the padding rows of C are untouched
  for (int64_t bt = 0; bt < batch; ++bt) {
    for (int64_t e = (bt * (m + pad) + m) * n; e < (bt + 1) * (m + pad) * n; ++e) {
      gaps_written += C.at(e) != c0[e];
    }
  }
  EXPECT_EQ(gaps_written, 0) << "elements of C between the batch's matrices were written";
  Result r;
  r.got.resize(batch * m * n);
  r.lo.resize(batch * m * n);
  r.hi.resize(batch * m * n);
  int bad = 0;
  for (int64_t e = 0; e < batch * m; ++e) {
    const int64_t bt = e / m, i = e % m;  // matrix bt, row i
    const double* a_ref = A.ref.data() + bt * (ar + pad) * A.cols;
    const double* b_ref = B.ref.data() + bt * (br + pad) * B.cols;
    const int64_t c_at = (bt * (m + pad) + i) * n;  // row i of matrix bt in C
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0, abs_sum = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double a = cs.ta == 'N' ? a_ref[i * k + p] : a_ref[p * m + i];
        const double b = cs.tb == 'N' ? b_ref[p * n + j] : b_ref[j * k + p];
        sum += a * b;
        abs_sum += std::fabs(a * b);
      }
      const int64_t at = e * n + j;
      const double beta_c = cs.beta == 0.0f ? 0.0 : cs.beta * c0[c_at + j];
      const double ref = cs.alpha * sum + beta_c;
      const double tol =
          (k + 2) * std::ldexp(1.0, -24) * (std::fabs(cs.alpha) * abs_sum + std::fabs(beta_c));
      const double v = C.at(c_at + j);
      double lo = ref - tol, hi = ref + tol;
      if (cs.c == DType::bfloat16) {
        lo = bf16(float_toward(lo, false)).to_float();
        hi = bf16(float_toward(hi, true)).to_float();
      }
      const bool ok = lo <= v && v <= hi;
      r.got[at] = v;
      r.lo[at] = lo;
      r.hi[at] = hi;
      if (!ok && ++bad <= 3) {
        ADD_FAILURE() << "C" << bt << "[" << i << "," << j << "] = " << v << ", reference " << ref
                      << ", tolerance " << tol;
      }
    }
  }
  EXPECT_EQ(bad, 0);
  return r;
}

std::vector<Case> all_cases(DType a, DType b, DType c) {
  std::vector<Case> cases;
  for (char ta : {'N', 'T'}) {
    for (char tb : {'N', 'T'}) {
      for (float alpha : {1.0f, 0.125f}) {
        for (float beta : {0.0f, 1.0f, 0.5f}) {
          for (const Shape& s : kShapes) cases.push_back(Case{ta, tb, a, b, c, alpha, beta, s});
        }
      }
    }
  }
  return cases;
}

bool native_bf16() {
  return gemm_backend_for(kNative, DType::bfloat16, DType::bfloat16, DType::float32) !=
         GemmBackend::converted;
}

// Every test: products on one thread (the plan's per-product rule, as kktrain sets it).
class Gemm : public ::testing::Test {
 protected:
  void SetUp() override { set_blas_thread_limit(1, true); }
};

struct DtypeCase {
  DType a, b, c;
};
class GemmDtypes : public Gemm, public ::testing::WithParamInterface<DtypeCase> {};

TEST_P(GemmDtypes, MatchesDoubleReferenceForEveryTransposeAlphaBetaAndShape) {
  const DtypeCase d = GetParam();
  uint32_t seed = 1;
  for (const Case& cs : all_cases(d.a, d.b, d.c)) run_and_check(cs, seed++);
}

INSTANTIATE_TEST_SUITE_P(
    Operands, GemmDtypes,
    ::testing::Values(DtypeCase{DType::float32, DType::float32, DType::float32},
                      DtypeCase{DType::float32, DType::float32, DType::bfloat16},
                      DtypeCase{DType::bfloat16, DType::bfloat16, DType::float32},
                      DtypeCase{DType::bfloat16, DType::bfloat16, DType::bfloat16},
                      DtypeCase{DType::bfloat16, DType::float32, DType::float32},
                      DtypeCase{DType::bfloat16, DType::float32, DType::bfloat16},
                      DtypeCase{DType::float32, DType::bfloat16, DType::float32}),
    [](const ::testing::TestParamInfo<DtypeCase>& info) {
      const auto n = [](DType t) { return t == DType::float32 ? "f32" : "bf16"; };
      return std::string(n(info.param.a)) + "_" + n(info.param.b) + "_to_" + n(info.param.c);
    });

// A batch of products (the attention's shape of call) on every operand dtype and transpose: each
// matrix of the batch within the bound of its own reference.
TEST_P(GemmDtypes, BatchedProductsMatchTheReferencePerMatrix) {
  const DtypeCase d = GetParam();
  uint32_t seed = 500;
  for (const Case& cs : all_cases(d.a, d.b, d.c)) {
    if (cs.s.m * cs.s.n * cs.s.k > 100000) continue;  // the three smaller shapes suffice
    for (int64_t batch : {2, 5}) run_and_check(cs, seed++, batch);
  }
}

// Libraries with 32-bit int dimensions (BLAS LP64, cuBLAS, rocBLAS): a product with more rows
// than an int holds runs in row pieces, any other oversized dimension is refused naming it. The
// limit is lowered to 5 (GemmLimits::int_dim) so that small products take that path.
TEST_P(GemmDtypes, DimensionsPastIntRunInRowPiecesOrAreRefused) {
  const DtypeCase d = GetParam();
  GemmOptions five;
  five.limits.int_dim = 5;
  uint32_t seed = 900;
  for (const Shape& s : {Shape{13, 4, 3}, Shape{6, 5, 5}, Shape{11, 1, 2}}) {
    for (char tb : {'N', 'T'}) {
      for (int64_t batch : {1, 3}) {
        run_and_check(Case{'N', tb, d.a, d.b, d.c, 0.5f, 1.0f, s}, seed++, batch, 0, five);
      }
    }
  }
  const bool native = gemm_backend_for(five, d.a, d.b, d.c) == GemmBackend::onednn;
  if (!native) {  // oneDNN takes 64-bit dimensions: nothing to refuse there
    std::mt19937 rng(7);
    Matrix A(d.a, 2, 3, rng), B(d.b, 3, 7, rng), C(d.c, 2, 7, rng);
    try {
      gemm(ExecSpace(), five, 'N', 'N', 1.0f, A.in(), B.in(), 0.0f, C.out());
      ADD_FAILURE() << "a product with 7 > 5 result columns was not refused";
    } catch (const RuntimeFailure& e) {
      EXPECT_NE(std::string(e.what()).find("n (columns of the result) exceeds 5"),
                std::string::npos)
          << e.what();
    }
  }
}

// The converted path in panels (ops/gemm_converted.hpp): with the scratch budget lowered to 300
// fp32 elements (GemmLimits::converted_scratch_elems) every product of widened operands larger than
// that runs in row and column panels, gathered, widened and written back panel by panel; each
// element must stay within the bound of the double reference. (Not bit for bit the whole-operand
// product: OpenBLAS picks other kernels, with or without FMA, for narrower shapes; measured 51%
// of the elements differing by an ulp or so, all within the bound.)
TEST_P(GemmDtypes, ConvertedProductsInPanelsMatchTheReference) {
  const DtypeCase d = GetParam();
  GemmOptions small = widened_options();  // bf16 x bf16 too goes the converted way
  small.limits.converted_scratch_elems = 300;
  const bool widens = d.a != DType::float32 || d.b != DType::float32 || d.c != DType::float32;
  uint32_t seed = 1300;
  int64_t in_panels = 0;
  {
    const int64_t before = gemm_counters().converted_in_panels;
    for (const Case& cs : all_cases(d.a, d.b, d.c)) run_and_check(cs, seed++, 1, 0, small);
    in_panels = gemm_counters().converted_in_panels - before;
  }
  if (widens) {
    EXPECT_GT(in_panels, 0) << "no product ran in panels";
  } else {
    EXPECT_EQ(in_panels, 0) << "fp32 operands need no scratch: nothing to split";
  }
}

// Strided batches (the tiled attention's calls: one tile of every head, heads T rows apart): each
// matrix followed by rows the product must neither read nor write.
TEST_P(GemmDtypes, StridedBatchesMatchTheReferenceAndLeaveTheGapsAlone) {
  const DtypeCase d = GetParam();
  uint32_t seed = 900;
  for (const Case& cs : all_cases(d.a, d.b, d.c)) {
    if (cs.s.m * cs.s.n * cs.s.k > 100000) continue;
    run_and_check(cs, seed++, 3, 2);
  }
}

// Typed over the result's dtype C (float, bf16) of products with bf16 operands.
template <class C>
class GemmResult : public Gemm {};
TYPED_TEST_SUITE(GemmResult, testing_util::Dtypes);

TYPED_TEST(GemmResult, NativeAndConvertedBf16AgreeWithinTheBound) {
  if (!native_bf16()) GTEST_SKIP() << "no native bf16 backend here";
  const DType c = dtype_of<TypeParam>::value;
  uint32_t seed = 100;
  for (const Case& cs : all_cases(DType::bfloat16, DType::bfloat16, c)) {
    const Result native = run_and_check(cs, seed);
    const Result converted = run_and_check(cs, seed++, 1, 0, widened_options());
    // Each lies within the bound of the reference, so they differ by at most the width of the
    // allowed interval (2 tol for an fp32 C; for a bf16 C, the bf16 values the bound spans).
    // Bitwise equality is not expected: the two sum the k products in different orders.
    int bad = 0;
    for (std::size_t i = 0; i < native.got.size(); ++i) {
      const double diff = std::fabs(native.got[i] - converted.got[i]);
      if (diff > native.hi[i] - native.lo[i] && ++bad <= 3) {
        ADD_FAILURE() << cs.name() << ": element " << i << " native " << native.got[i]
                      << " converted " << converted.got[i];
      }
    }
  }
}

TEST_F(Gemm, BackendChoice) {
  // fp32: kokkos-kernels, except oneDNN where OpenBLAS runs its generic kernels on this CPU.
  const std::string core = blas_core_name();
  const bool generic = core == "Prescott" || core == "Core2" || core == "Penryn" ||
                       core == "Dunnington" || core == "Nehalem" || core == "Katmai";
  GemmBackend want_f32 = GemmBackend::kokkos_kernels, onednn_f32 = GemmBackend::kokkos_kernels;
#if defined(KKTRAIN_HAVE_ONEDNN)
  if (onednn::fp32_available()) onednn_f32 = GemmBackend::onednn;
  if (generic) want_f32 = onednn_f32;
#endif
  const auto for_dtypes = [](const GemmOptions& o, DType a, DType b, DType c) {
    return gemm_backend_for(o, a, b, c);
  };
  const DType f32 = DType::float32, b16 = DType::bfloat16;
  std::printf("OpenBLAS core '%s', fp32 backend %s\n", core.c_str(),
              gemm_backend_name(for_dtypes(kNative, f32, f32, f32)));
  (void)generic;
  EXPECT_EQ(for_dtypes(kNative, f32, f32, f32), want_f32);
  EXPECT_EQ(for_dtypes(kNative, b16, f32, f32), GemmBackend::converted);
  EXPECT_EQ(for_dtypes(kNative, f32, b16, b16), GemmBackend::converted);
  EXPECT_EQ(for_dtypes(kNative, f32, f32, b16), GemmBackend::converted);
  // Fp32Backend decides explicitly (onednn: kokkos-kernels where oneDNN has no fp32 matmul).
  GemmOptions kk, dnn;
  kk.fp32 = Fp32Backend::kokkos_kernels;
  dnn.fp32 = Fp32Backend::onednn;
  EXPECT_EQ(for_dtypes(kk, f32, f32, f32), GemmBackend::kokkos_kernels);
  EXPECT_EQ(for_dtypes(dnn, f32, f32, f32), onednn_f32);
  // Widened: every bf16 product converted, fp32 on kokkos-kernels whatever Fp32Backend says.
  GemmOptions wide = widened_options();
  EXPECT_EQ(for_dtypes(wide, b16, b16, f32), GemmBackend::converted);
  EXPECT_EQ(for_dtypes(wide, b16, b16, b16), GemmBackend::converted);
  EXPECT_EQ(for_dtypes(wide, f32, f32, f32), GemmBackend::kokkos_kernels);
  wide.fp32 = Fp32Backend::onednn;
  EXPECT_EQ(for_dtypes(wide, f32, f32, f32), GemmBackend::kokkos_kernels);
  // --version's line says which it describes; the defaults' names no option.
  std::printf("gemm backends: %s\n", gemm_backends_summary(kNative).c_str());
  EXPECT_EQ(gemm_backends_summary(kNative).find("model.gemm"), std::string::npos);
  EXPECT_EQ(gemm_backends_summary(), gemm_backends_summary(kNative));
  const std::string wide_summary = gemm_backends_summary(widened_options());
  EXPECT_NE(wide_summary.find("bf16: converted (model.gemm: widened)"), std::string::npos)
      << wide_summary;
  EXPECT_NE(wide_summary.find("fp32: kokkos-kernels"), std::string::npos) << wide_summary;
#if defined(KKTRAIN_HAVE_ONEDNN)
  if (!onednn::available()) {
    GTEST_SKIP() << "oneDNN built, but this CPU (" << onednn::isa_name() << ") has no native bf16";
  }
  for (DType c : {DType::float32, DType::bfloat16}) {
    EXPECT_EQ(for_dtypes(kNative, b16, b16, c), GemmBackend::onednn);
  }
  EXPECT_NE(gemm_backends_summary().find("bf16: onednn (avx512_core"), std::string::npos);
  // The model's layouts (NT forward, NN backward-input, TN backward-weight) and TT all run JIT
  // code, not oneDNN's reference implementation.
  for (char ta : {'N', 'T'}) {
    for (char tb : {'N', 'T'}) {
      const std::string impl =
          onednn::implementation(ta, tb, 1.0f, DType::bfloat16, 1.0f, 64, 48, 80);
      std::printf("oneDNN %c%c: %s\n", ta, tb, impl.c_str());
      EXPECT_NE(impl.compare(0, 3, "ref"), 0) << ta << tb << ": " << impl;
    }
  }
#elif defined(KKTRAIN_HAVE_VENDOR_GEMM)
  for (DType c : {DType::float32, DType::bfloat16}) {
    EXPECT_EQ(for_dtypes(kNative, b16, b16, c), kVendorBackend);
  }
#else
  EXPECT_EQ(for_dtypes(kNative, b16, b16, f32), GemmBackend::converted);
#endif
}

TEST_F(Gemm, CountersFollowTheBackendThatRan) {
  std::mt19937 rng(5);
  Matrix A32(DType::float32, 8, 4, rng), B32(DType::float32, 4, 6, rng);
  Matrix A16(DType::bfloat16, 8, 4, rng), B16(DType::bfloat16, 4, 6, rng);
  Matrix C(DType::float32, 8, 6, rng);
  const auto calls = [](GemmBackend b) { return gemm_counters().calls[static_cast<int>(b)]; };
  const auto flops = [](GemmBackend b) { return gemm_counters().flops[static_cast<int>(b)]; };

  const GemmBackend bf =
      gemm_backend_for(kNative, DType::bfloat16, DType::bfloat16, DType::float32);
  const GemmBackend f32 = gemm_backend_for(kNative, DType::float32, DType::float32, DType::float32);
  const int64_t kk = calls(f32), conv = calls(GemmBackend::converted);
  gemm(ExecSpace(), kNative, 'N', 'N', 1.0f, A32.in(), B32.in(), 0.0f, C.out());
  EXPECT_EQ(calls(f32), kk + 1);
  const int64_t nat = calls(bf);
  const double nat_flops = flops(bf);
  gemm(ExecSpace(), kNative, 'N', 'N', 1.0f, A16.in(), B32.in(), 0.0f, C.out());
  EXPECT_EQ(calls(GemmBackend::converted), conv + 1);
  gemm(ExecSpace(), kNative, 'N', 'N', 1.0f, A16.in(), B16.in(), 0.0f, C.out());
  EXPECT_EQ(calls(bf), nat + (bf == GemmBackend::converted ? 2 : 1));
  EXPECT_EQ(flops(bf) - nat_flops, (bf == GemmBackend::converted ? 2 : 1) * 2.0 * 8 * 6 * 4);
  gemm(ExecSpace(), widened_options(), 'N', 'N', 1.0f, A16.in(), B16.in(), 0.0f, C.out());
  EXPECT_EQ(calls(GemmBackend::converted), conv + (bf == GemmBackend::converted ? 3 : 2));
  // A batch is one call of its backend, with the whole batch's flops (fp32 batches run the
  // vendor BLAS's strided-batched call where the build has one: Kokkos Kernels has none).
#if defined(KKTRAIN_HAVE_VENDOR_GEMM)
  const GemmBackend f32_batch = kVendorBackend;
#else
  const GemmBackend f32_batch = f32;
#endif
  const int64_t f32_calls = calls(f32_batch);
  const double f32_flops = flops(f32_batch);
  Matrix Ab(DType::float32, 2 * 4, 3, rng), Bb(DType::float32, 2 * 3, 5, rng);
  Matrix Cb(DType::float32, 2 * 4, 5, rng);
  gemm_batched(ExecSpace(), kNative, 2, 'N', 'N', 1.0f, Ab.in(2), Bb.in(2), 0.0f, Cb.out(2));
  EXPECT_EQ(calls(f32_batch), f32_calls + 1);
  EXPECT_EQ(flops(f32_batch) - f32_flops, 2 * 2.0 * 4 * 5 * 3);
}

// Typed over the operands' and the result's dtypes: DtypePair<AB, C> (float, bf16 each).
template <class AB_C>
class GemmOperandsResult : public Gemm {};
TYPED_TEST_SUITE(GemmOperandsResult, testing_util::DtypePairs);

// Zero-sized products and beta-only updates, on every backend: k == 0 gives C = beta * C (zeros
// for beta 0), m or n == 0 touches nothing, and beta == 0 never reads C (a NaN there is gone).
TYPED_TEST(GemmOperandsResult, EdgeCases) {
  const DType ab = TypeParam::first_dtype, c = TypeParam::second_dtype;
  SCOPED_TRACE(std::string(dtype_name(ab)) + " -> " + dtype_name(c));
  std::mt19937 rng(9);
  Matrix A(ab, 3, 0, rng), B(ab, 0, 4, rng), C(c, 3, 4, rng);
  const std::vector<double> c0 = C.ref;
  gemm(ExecSpace(), kNative, 'N', 'N', 1.0f, A.in(), B.in(), 0.5f, C.out());
  C.load();
  for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(C.at(i), 0.5 * c0[i]);
  gemm(ExecSpace(), kNative, 'N', 'N', 1.0f, A.in(), B.in(), 0.0f, C.out());
  C.load();
  for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(C.at(i), 0.0);

  Matrix A0(ab, 0, 5, rng), B0(ab, 5, 4, rng), C0(c, 0, 4, rng);
  gemm(ExecSpace(), kNative, 'N', 'N', 1.0f, A0.in(), B0.in(), 1.0f,
       C0.out());  // nothing to do, must not fail

  Matrix A1(ab, 2, 3, rng), B1(ab, 3, 2, rng), C1(c, 2, 2, rng);
  C1.ref.assign(4, NAN);
  C1.store();
  gemm(ExecSpace(), kNative, 'N', 'N', 1.0f, A1.in(), B1.in(), 0.0f, C1.out());
  C1.load();
  for (int64_t i = 0; i < 4; ++i) EXPECT_TRUE(std::isfinite(C1.at(i))) << i;
}

// gemm_grouped(): the experts of a sparse MLP. Groups of sizes {3, 0, 5, 1} (an empty group in
// the middle shifts nothing), checked element by element against the double reference with the
// bound of the file comment: varying m (forward 'N','T' and input gradient 'N','N': rows of A and
// C packed group after group, B_g matrix g of B) and varying k (weight gradient 'T','N': rows of
// A and B packed, C_g matrix g of C; the empty group gives C_g = beta * C_g).
TYPED_TEST(GemmOperandsResult, GroupedProductsMatchTheReferencePerGroup) {
  const std::vector<int64_t> sizes = {3, 0, 5, 1};
  const int64_t total = 9, groups = 4, p = 6, q = 4;  // per-group operand dims
  const DType ab = TypeParam::first_dtype, c = TypeParam::second_dtype;
  for (const char* t : {"NT", "NN", "TN"}) {
    SCOPED_TRACE(std::string(t) + " " + dtype_name(ab) + " -> " + dtype_name(c));
    std::mt19937 rng(21);
    const bool vary_m = t[0] == 'N';
    // vary m: A (total, p), B_g (q, p) for NT or (p, q) for NN, C (total, q).
    // vary k: A (total, p), B (total, q), C_g (p, q).
    Matrix A(ab, total, p, rng);
    Matrix B(ab, vary_m ? groups * (t[1] == 'T' ? q : p) : total, vary_m && t[1] == 'T' ? p : q,
             rng);
    Matrix C(c, vary_m ? total : groups * p, q, rng);
    const std::vector<double> c0 = C.ref;
    GemmIn bin = B.in();
    if (vary_m) bin.rows = B.rows / groups;
    GemmOut cout = C.out();
    if (!vary_m) cout.rows = p;
    gemm_grouped(ExecSpace(), kNative, sizes, t[0], t[1], 0.5f, A.in(), bin, 0.5f, cout);
    C.load();
    int bad = 0;
    int64_t row = 0;
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t kk = vary_m ? p : sizes[g], mm = vary_m ? sizes[g] : p;
      for (int64_t i = 0; i < mm; ++i) {
        for (int64_t j = 0; j < q; ++j) {
          double sum = 0, abs_sum = 0;
          for (int64_t r = 0; r < kk; ++r) {
            const double a = vary_m ? A.ref[(row + i) * p + r] : A.ref[(row + r) * p + i];
            const double b = !vary_m       ? B.ref[(row + r) * q + j]
                             : t[1] == 'T' ? B.ref[(g * q + j) * p + r]
                                           : B.ref[(g * p + r) * q + j];
            sum += a * b;
            abs_sum += std::fabs(a * b);
          }
          const int64_t at = vary_m ? (row + i) * q + j : (g * p + i) * q + j;
          const double ref = 0.5 * sum + 0.5 * c0[at];
          const double tol =
              (kk + 2) * std::ldexp(1.0, -24) * (0.5 * abs_sum + 0.5 * std::fabs(c0[at]));
          double lo = ref - tol, hi = ref + tol;
          if (c == DType::bfloat16) {
            lo = bf16(float_toward(lo, false)).to_float();
            hi = bf16(float_toward(hi, true)).to_float();
          }
          const double v = C.at(at);
          if (!(lo <= v && v <= hi) && ++bad <= 3) {
            ADD_FAILURE() << "group " << g << " [" << i << "," << j << "] = " << v << ", reference "
                          << ref;
          }
        }
      }
      row += sizes[g];
    }
    EXPECT_EQ(bad, 0);
  }
}

TEST_F(Gemm, GroupedSizesNotSummingToTheRowsAreAnInternalError) {
  std::vector<float> a(6), b(6), cc(6);
  EXPECT_THROW(gemm_grouped(ExecSpace(), kNative, {1, 1}, 'N', 'T', 1.0f, gin(a.data(), 3, 2),
                            gin(b.data(), 1, 2), 0.0f, gout(cc.data(), 3, 1)),
               InternalError);  // sizes sum to 2, operands hold 3 rows
}

TEST_F(Gemm, ShapeMismatchIsAnInternalError) {
  std::vector<float> a(6), b(6), c(4);
  EXPECT_THROW(gemm_batched(ExecSpace(), kNative, -1, 'N', 'N', 1.0f, gin(a.data(), 2, 3),
                            gin(b.data(), 3, 2), 0.0f, gout(c.data(), 2, 2)),
               InternalError);
  EXPECT_THROW(gemm(ExecSpace(), kNative, 'N', 'N', 1.0f, gin(a.data(), 2, 3), gin(b.data(), 2, 3),
                    0.0f, gout(c.data(), 2, 2)),
               InternalError);
  EXPECT_THROW(gemm(ExecSpace(), kNative, 'X', 'N', 1.0f, gin(a.data(), 2, 3), gin(b.data(), 3, 2),
                    0.0f, gout(c.data(), 2, 2)),
               InternalError);
}

#if defined(KKTRAIN_HAVE_ONEDNN)
// The model runs the same products every step: each gets its primitive once.
TEST_F(Gemm, OnednnReusesPrimitivesAndFollowsTheThreadPlan) {
  if (!onednn::available()) GTEST_SKIP() << "no native bf16 on " << onednn::isa_name();
  std::mt19937 rng(3);
  Matrix A(DType::bfloat16, 40, 24, rng), B(DType::bfloat16, 24, 56, rng);
  Matrix C(DType::bfloat16, 40, 56, rng);
  gemm(ExecSpace(), kNative, 'N', 'N', 1.0f, A.in(), B.in(), 0.0f, C.out());
  const int64_t cached = onednn::cached_primitives();
  for (int i = 0; i < 5; ++i)
    gemm(ExecSpace(), kNative, 'N', 'N', 1.0f, A.in(), B.in(), 0.0f, C.out());
  EXPECT_EQ(onednn::cached_primitives(), cached);
  gemm(ExecSpace(), kNative, 'N', 'N', 1.0f, A.in(), B.in(), 1.0f,
       C.out());  // beta is part of the primitive
  EXPECT_EQ(onednn::cached_primitives(), cached + 1);
  // The plan's limit (1 here) is OpenMP's count when oneDNN runs.
  const auto get = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
  if (get != nullptr) {
    EXPECT_EQ(get(), 1);
  }
}
#endif

// Bf16Products::widened: a bf16 product runs on the converted path (counted there) and gives the
// exact result; the options are the call's only (the next default call is native again).
TEST_F(Gemm, WidenedOptionsSendBf16ProductsToConverted) {
  DView<bf16> a("a", 6), b("b", 6), c("c", 4);
  Kokkos::deep_copy(a, bf16(1.0f));
  Kokkos::deep_copy(b, bf16(2.0f));
  const auto calls = [](GemmBackend be) { return gemm_counters().calls[static_cast<int>(be)]; };
  const GemmBackend native =
      gemm_backend_for(kNative, DType::bfloat16, DType::bfloat16, DType::bfloat16);
  const int64_t conv = calls(GemmBackend::converted), nat = calls(native);
  gemm(ExecSpace(), widened_options(), 'N', 'N', 1.0f, gin(a.data(), 2, 3), gin(b.data(), 3, 2),
       0.0f, gout(c.data(), 2, 2));
  EXPECT_EQ(calls(GemmBackend::converted), conv + 1);
  const auto h = Kokkos::create_mirror_view_and_copy(HostSpace(), c);
  EXPECT_EQ(h(0).to_float(), 6.0f);
  gemm(ExecSpace(), kNative, 'N', 'N', 1.0f, gin(a.data(), 2, 3), gin(b.data(), 3, 2), 0.0f,
       gout(c.data(), 2, 2));
  EXPECT_EQ(calls(native), (native == GemmBackend::converted ? conv + 2 : nat + 1));
}

}  // namespace
}  // namespace kktrain
