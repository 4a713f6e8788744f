#include "model/gemm.hpp"

#include <KokkosBlas3_gemm.hpp>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "core/blas_threads.hpp"
#include "core/errors.hpp"

namespace kktrain {

namespace {

using CMat = Kokkos::View<const float**, Kokkos::LayoutRight, MemSpace,
                          Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
using Mat = DMatrixU<float>;

GemmCounters g_counters;

bool reference_only() {
  static const bool ref = [] {
    const char* e = std::getenv("KKTRAIN_GEMM");
    return e != nullptr && std::strcmp(e, "reference") == 0;
  }();
  return ref;
}

// fp32 scratch for widened operands and bf16 results, grown on demand (one per role).
float* scratch(int which, int64_t n) {
  static DView<float> bufs[3];
  if (static_cast<int64_t>(bufs[which].extent(0)) < n) {
    bufs[which] = DView<float>();
    bufs[which] = DView<float>(Kokkos::view_alloc(Kokkos::WithoutInitializing, "gemm_scratch"), n);
  }
  return bufs[which].data();
}

void widen(float* out, const void* in, DType dtype, int64_t n) {
  if (dtype == DType::float32) {
    const float* src = static_cast<const float*>(in);
    Kokkos::parallel_for(
        "gemm_copy", RangePolicy(0, n), KOKKOS_LAMBDA(const int64_t i) { out[i] = src[i]; });
  } else {
    const bf16* src = static_cast<const bf16*>(in);
    Kokkos::parallel_for(
        "gemm_widen", RangePolicy(0, n),
        KOKKOS_LAMBDA(const int64_t i) { out[i] = to_f32(src[i]); });
  }
}

void narrow(bf16* out, const float* in, int64_t n) {
  Kokkos::parallel_for(
      "gemm_narrow", RangePolicy(0, n),
      KOKKOS_LAMBDA(const int64_t i) { store_as(out, i, in[i]); });
}

void kk_gemm(char transA, char transB, float alpha, const float* A, int64_t ar, int64_t ac,
             const float* B, int64_t br, int64_t bc, float beta, float* C, int64_t m, int64_t n) {
  const char ta[2] = {transA, '\0'};
  const char tb[2] = {transB, '\0'};
  if (std::is_same<MemSpace, HostSpace>::value) {  // host BLAS: as many threads as it is worth
    fit_blas_threads(m, n, transA == 'N' ? ac : ar);
  }
  KokkosBlas::gemm(ta, tb, alpha, CMat(A, ar, ac), CMat(B, br, bc), beta, Mat(C, m, n));
}

int index_of(GemmBackend b) {
  return static_cast<int>(b);
}

}  // namespace

const char* gemm_backend_name(GemmBackend b) {
  switch (b) {
    case GemmBackend::kokkos_kernels:
      return "kokkos-kernels";
    case GemmBackend::onednn:
      return "onednn";
    case GemmBackend::cublas:
      return "cublas";
    case GemmBackend::rocblas:
      return "rocblas";
    case GemmBackend::converted:
      return "converted";
  }
  return "?";
}

GemmBackend gemm_backend_for(DType a, DType b, DType c) {
  if (a == DType::float32 && b == DType::float32 && c == DType::float32) {
    return GemmBackend::kokkos_kernels;
  }
  (void)reference_only();
  return GemmBackend::converted;
}

std::string gemm_backends_summary() {
  return std::string("fp32: kokkos-kernels; bf16: ") +
         gemm_backend_name(gemm_backend_for(DType::bfloat16, DType::bfloat16, DType::float32));
}

GemmCounters gemm_counters() {
  return g_counters;
}

void gemm(char transA, char transB, float alpha, const GemmIn& A, const GemmIn& B, float beta,
          const GemmOut& C) {
  const int64_t m = transA == 'N' ? A.rows : A.cols, k = transA == 'N' ? A.cols : A.rows;
  const int64_t kb = transB == 'N' ? B.rows : B.cols, n = transB == 'N' ? B.cols : B.rows;
  if (k != kb || C.rows != m || C.cols != n || (transA != 'N' && transA != 'T') ||
      (transB != 'N' && transB != 'T')) {
    throw InternalError("gemm: shapes do not match");
  }
  for (DType d : {A.dtype, B.dtype, C.dtype}) {
    if (d != DType::float32 && d != DType::bfloat16) {
      throw InternalError(std::string("gemm: unsupported dtype ") + dtype_name(d));
    }
  }
  const GemmBackend be = gemm_backend_for(A.dtype, B.dtype, C.dtype);
  g_counters.calls[index_of(be)] += 1;
  g_counters.flops[index_of(be)] += 2.0 * static_cast<double>(m) * n * k;
  if (m == 0 || n == 0) return;
  const float* a = static_cast<const float*>(A.data);
  const float* b = static_cast<const float*>(B.data);
  if (A.dtype != DType::float32) {
    float* s = scratch(0, A.rows * A.cols);
    widen(s, A.data, A.dtype, A.rows * A.cols);
    a = s;
  }
  if (B.dtype != DType::float32) {
    float* s = scratch(1, B.rows * B.cols);
    widen(s, B.data, B.dtype, B.rows * B.cols);
    b = s;
  }
  float* c = static_cast<float*>(C.data);
  if (C.dtype != DType::float32) {
    c = scratch(2, m * n);
    if (beta != 0.0f) widen(c, C.data, C.dtype, m * n);
  }
  kk_gemm(transA, transB, alpha, a, A.rows, A.cols, b, B.rows, B.cols, beta, c, m, n);
  if (C.dtype != DType::float32) narrow(static_cast<bf16*>(C.data), c, m * n);
}

}  // namespace kktrain
