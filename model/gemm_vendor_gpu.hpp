// The GPU backends of gemm() (model/gemm.hpp): bf16 x bf16 with fp32 accumulation through
// cublasGemmEx (CUDA builds) or rocblas_gemm_ex (HIP builds), on Kokkos' own stream. Internal to
// the model library; compiled only when Kokkos has CUDA or HIP.
#pragma once

#include <cstdint>

#include "model/gemm.hpp"

namespace kktrain {
namespace vendor_gpu {

// C (m, n) = alpha * op(A) @ op(B) + beta * C; A and B bf16, C fp32 or bf16, shapes checked.
void gemm(char transA, char transB, float alpha, const GemmIn& A, const GemmIn& B, float beta,
          const GemmOut& C, int64_t m, int64_t n, int64_t k);

}  // namespace vendor_gpu
}  // namespace kktrain
