// The GPU backends of gemm() (ops/gemm.hpp): bf16 x bf16 products and batches of fp32 or bf16
// products, fp32 accumulation, through cublasGemmEx / cublasGemmStridedBatchedEx (CUDA builds) or
// rocblas_gemm_ex / rocblas_gemm_strided_batched_ex (HIP builds), on the stream of the
// execution-space instance each call is given. Internal to the model library; compiled only when
// Kokkos has CUDA or HIP.
#pragma once

#include <cstdint>

#include "ops/gemm.hpp"

namespace kktrain {
namespace vendor_gpu {

// C_i (m, n) = alpha * op(A_i) @ op(B_i) + beta * C_i for i < batch (contiguous matrices, as
// gemm_batched() documents); A and B both fp32 or both bf16, C fp32 or bf16, shapes checked.
void gemm(const ExecSpace& space, int64_t batch, char transA, char transB, float alpha,
          const GemmIn& A, const GemmIn& B, float beta, const GemmOut& C, int64_t m, int64_t n,
          int64_t k);

// gemm_grouped() (ops/gemm.hpp) in one launch: cublasGemmGroupedBatchedEx on CUDA builds.
// Returns false, having done nothing, where the library has no grouped call for these dtypes
// (rocBLAS; cuBLAS for mixed dtypes), and the caller runs the groups one by one.
bool gemm_grouped(const ExecSpace& space, const std::vector<int64_t>& sizes, char transA,
                  char transB, float alpha, const GemmIn& A, const GemmIn& B, float beta,
                  const GemmOut& C);

}  // namespace vendor_gpu
}  // namespace kktrain
