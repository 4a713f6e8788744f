// Matrix products for the model: every one goes through Kokkos Kernels GEMM, which hands float
// GEMM to BLAS on the host (OpenBLAS here) and to cuBLAS/rocBLAS on GPUs. On the host each product
// first sets the BLAS thread count its size is worth (core/blas_threads.hpp).
//
// All operands are row-major (LayoutRight) fp32 windows into flat buffers. bf16 compute on the
// host stores bf16-rounded values in fp32 containers, so the products are exact bf16 x bf16
// products accumulated in fp32: the same arithmetic as a bf16 GEMM with fp32 accumulation.
#pragma once

#include "core/kokkos_compat.hpp"

namespace kktrain {

using CMat = Kokkos::View<const float**, Kokkos::LayoutRight, MemSpace,
                          Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
using Mat = DMatrixU<float>;

inline CMat cmat(const float* p, int64_t rows, int64_t cols) {
  return CMat(p, rows, cols);
}
inline Mat mat(float* p, int64_t rows, int64_t cols) {
  return Mat(p, rows, cols);
}

// C = alpha * op(A) @ op(B) + beta * C, op given by transA/transB ('N' or 'T').
void gemm(char transA, char transB, float alpha, const CMat& A, const CMat& B, float beta,
          const Mat& C);

// out (N, O) = inp (N, I) @ weight(O, I)^T            -- a Linear layer forward (no bias)
void matmul_forward(float* out, const float* inp, const float* weight, int64_t N, int64_t I,
                    int64_t O);
// dinp (N, I) (+)= dout (N, O) @ weight (O, I)        -- accumulate when `accumulate`
// dweight (O, I) = dout^T (O, N) @ inp (N, I)         -- written, not accumulated
void matmul_backward_input(float* dinp, const float* dout, const float* weight, int64_t N,
                           int64_t I, int64_t O, bool accumulate);
void matmul_backward_weight(float* dweight, const float* dout, const float* inp, int64_t N,
                            int64_t I, int64_t O);

}  // namespace kktrain
