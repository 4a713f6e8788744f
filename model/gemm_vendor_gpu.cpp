// GEMM on GPUs through the vendor libraries (model/gemm_vendor_gpu.hpp). Both are
// column-major: a row-major C (m, n) is a column-major C^T (n, m), and C^T = op(B)^T op(A)^T, so
// the call swaps the operands and the dimensions and keeps each operand's own transpose flag and
// leading dimension (its row length); a batch is strided by each operand's batch stride. One handle
// per process, bound to Kokkos' default stream, so the products order with the Kokkos kernels
// around them without extra fences.
//
// Compiled only in CUDA or HIP Kokkos builds (model/CMakeLists.txt); untested on this project's
// CPU-only machines beyond compiling.
#include "model/gemm_vendor_gpu.hpp"

#include <Kokkos_Core.hpp>
#include <string>

#include "core/errors.hpp"

#if defined(KOKKOS_ENABLE_CUDA)
#include <cublas_v2.h>
#elif defined(KOKKOS_ENABLE_HIP)
#if __has_include(<rocblas/rocblas.h>)
#include <rocblas/rocblas.h>
#else
#include <rocblas.h>
#endif
#endif

namespace kktrain {
namespace vendor_gpu {

#if defined(KOKKOS_ENABLE_CUDA)

namespace {

void check(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS) {
    throw InternalError(std::string("cuBLAS ") + what + " failed (status " +
                        std::to_string(static_cast<int>(st)) + ")");
  }
}

cublasHandle_t handle() {
  static cublasHandle_t h = [] {
    cublasHandle_t made = nullptr;
    check(cublasCreate(&made), "cublasCreate");
    return made;
  }();
  check(cublasSetStream(h, Kokkos::DefaultExecutionSpace().cuda_stream()), "cublasSetStream");
  return h;
}

cublasOperation_t op(char t) {
  return t == 'N' ? CUBLAS_OP_N : CUBLAS_OP_T;
}

cudaDataType_t type(DType d) {
  return d == DType::bfloat16 ? CUDA_R_16BF : CUDA_R_32F;
}

}  // namespace

void gemm(int64_t batch, char transA, char transB, float alpha, const GemmIn& A, const GemmIn& B,
          float beta, const GemmOut& C, int64_t m, int64_t n, int64_t k) {
  if (m == 0 || n == 0 || batch == 0) return;
  const int ni = static_cast<int>(n), mi = static_cast<int>(m), ki = static_cast<int>(k);
  const int lda = static_cast<int>(A.cols), ldb = static_cast<int>(B.cols);
  if (batch == 1) {
    check(cublasGemmEx(handle(), op(transB), op(transA), ni, mi, ki, &alpha, B.data, type(B.dtype),
                       ldb, A.data, type(A.dtype), lda, &beta, C.data, type(C.dtype), ni,
                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "cublasGemmEx");
    return;
  }
  const long long sa = A.stride(), sb = B.stride(), sc = C.stride();
  check(cublasGemmStridedBatchedEx(handle(), op(transB), op(transA), ni, mi, ki, &alpha, B.data,
                                   type(B.dtype), ldb, sb, A.data, type(A.dtype), lda, sa, &beta,
                                   C.data, type(C.dtype), ni, sc, static_cast<int>(batch),
                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmStridedBatchedEx");
}

#elif defined(KOKKOS_ENABLE_HIP)

namespace {

void check(rocblas_status st, const char* what) {
  if (st != rocblas_status_success) {
    throw InternalError(std::string("rocBLAS ") + what + " failed (status " +
                        std::to_string(static_cast<int>(st)) + ")");
  }
}

rocblas_handle handle() {
  static rocblas_handle h = [] {
    rocblas_handle made = nullptr;
    check(rocblas_create_handle(&made), "rocblas_create_handle");
    return made;
  }();
  check(rocblas_set_stream(h, Kokkos::DefaultExecutionSpace().hip_stream()), "rocblas_set_stream");
  return h;
}

rocblas_operation op(char t) {
  return t == 'N' ? rocblas_operation_none : rocblas_operation_transpose;
}

rocblas_datatype type(DType d) {
  return d == DType::bfloat16 ? rocblas_datatype_bf16_r : rocblas_datatype_f32_r;
}

}  // namespace

void gemm(int64_t batch, char transA, char transB, float alpha, const GemmIn& A, const GemmIn& B,
          float beta, const GemmOut& C, int64_t m, int64_t n, int64_t k) {
  if (m == 0 || n == 0 || batch == 0) return;
  const auto ni = static_cast<rocblas_int>(n), mi = static_cast<rocblas_int>(m);
  const auto ki = static_cast<rocblas_int>(k);
  const auto lda = static_cast<rocblas_int>(A.cols), ldb = static_cast<rocblas_int>(B.cols);
  if (batch == 1) {
    check(rocblas_gemm_ex(handle(), op(transB), op(transA), ni, mi, ki, &alpha, B.data,
                          type(B.dtype), ldb, A.data, type(A.dtype), lda, &beta, C.data,
                          type(C.dtype), ni, C.data, type(C.dtype), ni, rocblas_datatype_f32_r,
                          rocblas_gemm_algo_standard, 0, 0),
          "rocblas_gemm_ex");
    return;
  }
  const rocblas_stride sa = A.stride(), sb = B.stride(), sc = C.stride();
  check(rocblas_gemm_strided_batched_ex(handle(), op(transB), op(transA), ni, mi, ki, &alpha,
                                        B.data, type(B.dtype), ldb, sb, A.data, type(A.dtype), lda,
                                        sa, &beta, C.data, type(C.dtype), ni, sc, C.data,
                                        type(C.dtype), ni, sc, static_cast<rocblas_int>(batch),
                                        rocblas_datatype_f32_r, rocblas_gemm_algo_standard, 0, 0),
        "rocblas_gemm_strided_batched_ex");
}

#else

// Host builds: never called (gemm.cpp routes bf16 to oneDNN or the converted path); present so
// the file compiles anywhere.
void gemm(int64_t, char, char, float, const GemmIn&, const GemmIn&, float, const GemmOut&, int64_t,
          int64_t, int64_t) {
  throw InternalError("vendor_gpu::gemm: this build has no CUDA or HIP");
}

#endif

}  // namespace vendor_gpu
}  // namespace kktrain
