// GEMM on GPUs through the vendor libraries (ops/gemm_vendor_gpu.hpp). Grouped products (the
// experts of a sparse MLP) are one cublasGemmGroupedBatchedEx on CUDA, one problem per group
// (groups of one product each: sizes differ from expert to expert). Both are
// column-major: a row-major C (m, n) is a column-major C^T (n, m), and C^T = op(B)^T op(A)^T, so
// the call swaps the operands and the dimensions and keeps each operand's own transpose flag and
// leading dimension (its row length); a batch is strided by each operand's batch stride. One handle
// per process, bound before each call to the stream of the execution-space instance the product
// runs on, so the products order with the Kokkos kernels on that instance without extra fences.
//
// Compiled only in CUDA or HIP Kokkos builds (model/CMakeLists.txt); untested on this project's
// CPU-only machines beyond compiling.
#include "ops/gemm_vendor_gpu.hpp"

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

cublasHandle_t handle(const ExecSpace& space) {
  static cublasHandle_t h = [] {
    cublasHandle_t made = nullptr;
    check(cublasCreate(&made), "cublasCreate");
    // Every sum in fp32, as the CUBLAS_COMPUTE_32F calls ask: without this flag cuBLAS may reduce
    // split-K partial products in the output dtype, rounding a bf16 result more than once. (It
    // does not cover bf16 C += A B, which cuBLAS still rounds twice: gemm.cpp converts those.)
    check(cublasSetMathMode(
              made, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH |
                                              CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)),
          "cublasSetMathMode");
    return made;
  }();
  check(cublasSetStream(h, space.cuda_stream()), "cublasSetStream");
  return h;
}

cublasOperation_t op(char t) {
  return t == 'N' ? CUBLAS_OP_N : CUBLAS_OP_T;
}

cudaDataType_t type(DType d) {
  return d == DType::bfloat16 ? CUDA_R_16BF : CUDA_R_32F;
}

#if defined(CUBLAS_VERSION) && CUBLAS_VERSION >= 120500
#define KKTRAIN_CUBLAS_GROUPED 1
// The pointer arrays of a grouped call (device memory, as cuBLAS reads them), grown on demand
// and freed when Kokkos finalizes.
const void** device_pointers(const std::vector<const void*>& host) {
  static Kokkos::View<uintptr_t*, Kokkos::CudaSpace> buf;
  static const bool hooked = [] {
    Kokkos::push_finalize_hook([] { buf = Kokkos::View<uintptr_t*, Kokkos::CudaSpace>(); });
    return true;
  }();
  (void)hooked;
  if (buf.extent(0) < host.size()) {
    buf = Kokkos::View<uintptr_t*, Kokkos::CudaSpace>("gemm_grouped_pointers", host.size());
  }
  std::vector<uintptr_t> v(host.size());
  for (std::size_t i = 0; i < host.size(); ++i) v[i] = reinterpret_cast<uintptr_t>(host[i]);
  Kokkos::deep_copy(
      Kokkos::subview(buf, std::make_pair(std::size_t(0), v.size())),
      Kokkos::View<const uintptr_t*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
          v.data(), v.size()));
  return reinterpret_cast<const void**>(buf.data());
}
#endif

}  // namespace

bool gemm_grouped(const ExecSpace& space, const std::vector<int64_t>& sizes, char transA,
                  char transB, float alpha, const GemmIn& A, const GemmIn& B, float beta,
                  const GemmOut& C) {
#if !defined(KKTRAIN_CUBLAS_GROUPED)
  (void)space, (void)sizes, (void)transA, (void)transB, (void)alpha, (void)A, (void)B, (void)beta,
      (void)C;
  return false;  // cublasGemmGroupedBatchedEx arrived in cuBLAS 12.5
#else
  // One grouped GemmEx takes one dtype for A, B and C.
  if (A.dtype != B.dtype || A.dtype != C.dtype || sizes.empty()) return false;
  const bool vary_m = transA == 'N';
  const int groups = static_cast<int>(sizes.size());
  // Column-major view (gemm() above): C^T = op(B)^T op(A)^T, operands swapped.
  std::vector<cublasOperation_t> ta(groups, op(transB)), tb(groups, op(transA));
  std::vector<int> m(groups), n(groups), k(groups), lda(groups, static_cast<int>(B.cols)),
      ldb(groups, static_cast<int>(A.cols)), ldc(groups, static_cast<int>(C.cols)),
      group_size(groups, 1);
  std::vector<float> alphas(groups, alpha), betas(groups, beta);
  std::vector<const void*> ptrs(3 * static_cast<std::size_t>(groups));
  const std::size_t ea = dtype_size(A.dtype), eb = dtype_size(B.dtype), ec = dtype_size(C.dtype);
  int64_t row = 0;
  for (int g = 0; g < groups; ++g) {
    const int64_t size = sizes[g];
    const char* a = static_cast<const char*>(A.data) + row * A.cols * ea;
    const char* b =
        static_cast<const char*>(B.data) + (vary_m ? g * B.stride() * eb : row * B.cols * eb);
    char* c = static_cast<char*>(C.data) + (vary_m ? row * C.cols * ec : g * C.stride() * ec);
    m[g] = static_cast<int>(transB == 'N' ? B.cols : B.rows);                    // rows of C^T
    n[g] = static_cast<int>(vary_m ? size : (transA == 'N' ? A.rows : A.cols));  // cols of C^T
    k[g] = static_cast<int>(vary_m ? (transB == 'N' ? B.rows : B.cols) : size);
    ptrs[g] = b;  // the first operand of the column-major call is B
    ptrs[groups + g] = a;
    ptrs[2 * groups + g] = c;
    row += size;
  }
  const void** dev = device_pointers(ptrs);
  const cublasStatus_t st = cublasGemmGroupedBatchedEx(
      handle(space), ta.data(), tb.data(), m.data(), n.data(), k.data(), alphas.data(), dev,
      type(B.dtype), lda.data(), dev + groups, type(A.dtype), ldb.data(), betas.data(),
      const_cast<void**>(dev + 2 * groups), type(C.dtype), ldc.data(), groups, group_size.data(),
      CUBLAS_COMPUTE_32F);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED) return false;
  check(st, "cublasGemmGroupedBatchedEx");
  return true;
#endif
}

void gemm(const ExecSpace& space, int64_t batch, char transA, char transB, float alpha,
          const GemmIn& A, const GemmIn& B, float beta, const GemmOut& C, int64_t m, int64_t n,
          int64_t k) {
  if (m == 0 || n == 0 || batch == 0) return;
  const int ni = static_cast<int>(n), mi = static_cast<int>(m), ki = static_cast<int>(k);
  const int lda = static_cast<int>(A.cols), ldb = static_cast<int>(B.cols);
  if (batch == 1) {
    check(cublasGemmEx(handle(space), op(transB), op(transA), ni, mi, ki, &alpha, B.data,
                       type(B.dtype), ldb, A.data, type(A.dtype), lda, &beta, C.data, type(C.dtype),
                       ni, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "cublasGemmEx");
    return;
  }
  const long long sa = A.stride(), sb = B.stride(), sc = C.stride();
  check(cublasGemmStridedBatchedEx(handle(space), op(transB), op(transA), ni, mi, ki, &alpha,
                                   B.data, type(B.dtype), ldb, sb, A.data, type(A.dtype), lda, sa,
                                   &beta, C.data, type(C.dtype), ni, sc, static_cast<int>(batch),
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

rocblas_handle handle(const ExecSpace& space) {
  static rocblas_handle h = [] {
    rocblas_handle made = nullptr;
    check(rocblas_create_handle(&made), "rocblas_create_handle");
    return made;
  }();
  check(rocblas_set_stream(h, space.hip_stream()), "rocblas_set_stream");
  return h;
}

rocblas_operation op(char t) {
  return t == 'N' ? rocblas_operation_none : rocblas_operation_transpose;
}

rocblas_datatype type(DType d) {
  return d == DType::bfloat16 ? rocblas_datatype_bf16_r : rocblas_datatype_f32_r;
}

}  // namespace

void gemm(const ExecSpace& space, int64_t batch, char transA, char transB, float alpha,
          const GemmIn& A, const GemmIn& B, float beta, const GemmOut& C, int64_t m, int64_t n,
          int64_t k) {
  if (m == 0 || n == 0 || batch == 0) return;
  const auto ni = static_cast<rocblas_int>(n), mi = static_cast<rocblas_int>(m);
  const auto ki = static_cast<rocblas_int>(k);
  const auto lda = static_cast<rocblas_int>(A.cols), ldb = static_cast<rocblas_int>(B.cols);
  if (batch == 1) {
    check(rocblas_gemm_ex(handle(space), op(transB), op(transA), ni, mi, ki, &alpha, B.data,
                          type(B.dtype), ldb, A.data, type(A.dtype), lda, &beta, C.data,
                          type(C.dtype), ni, C.data, type(C.dtype), ni, rocblas_datatype_f32_r,
                          rocblas_gemm_algo_standard, 0, 0),
          "rocblas_gemm_ex");
    return;
  }
  const rocblas_stride sa = A.stride(), sb = B.stride(), sc = C.stride();
  check(rocblas_gemm_strided_batched_ex(handle(space), op(transB), op(transA), ni, mi, ki, &alpha,
                                        B.data, type(B.dtype), ldb, sb, A.data, type(A.dtype), lda,
                                        sa, &beta, C.data, type(C.dtype), ni, sc, C.data,
                                        type(C.dtype), ni, sc, static_cast<rocblas_int>(batch),
                                        rocblas_datatype_f32_r, rocblas_gemm_algo_standard, 0, 0),
        "rocblas_gemm_strided_batched_ex");
}

bool gemm_grouped(const ExecSpace&, const std::vector<int64_t>&, char, char, float, const GemmIn&,
                  const GemmIn&, float, const GemmOut&) {
  return false;  // rocBLAS has no grouped GEMM: the caller runs the groups one by one
}

#else

bool gemm_grouped(const ExecSpace&, const std::vector<int64_t>&, char, char, float, const GemmIn&,
                  const GemmIn&, float, const GemmOut&) {
  return false;
}

// Host builds: never called (gemm.cpp routes bf16 to oneDNN or the converted path); present so
// the file compiles anywhere.
void gemm(const ExecSpace&, int64_t, char, char, float, const GemmIn&, const GemmIn&, float,
          const GemmOut&, int64_t, int64_t, int64_t) {
  throw InternalError("vendor_gpu::gemm: this build has no CUDA or HIP");
}

#endif

}  // namespace vendor_gpu
}  // namespace kktrain
