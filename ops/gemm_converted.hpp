// The converted GEMM (ops/gemm.hpp's `converted` and `kokkos_kernels` backends): Kokkos Kernels'
// fp32 product (the host BLAS, cuBLAS, rocBLAS) on operands of either dtype, bf16 ones widened to
// fp32 first and a bf16 result narrowed back.
//
// Widening whole operands costs fp32 copies as large as the operands: the LM head of a
// 128k-token vocabulary and hidden size 8192 would widen its 1e9-element weight into 4 GiB per
// product. So products whose widened operands exceed the scratch budget (16 MiB of fp32 per
// operand role: GemmOptions::limits, which tests lower) run in panels: rows of the
// result (and of op(A)) and columns of the result (and of op(B)), each panel's operands gathered
// and widened into fp32 scratch of at most the budget, its result written back (narrowed). The
// summed dimension k is never split, so every element is still one fp32 dot product over all of
// k. Used by ops/gemm.cpp only.
#pragma once

#include <cstdint>

#include "ops/gemm.hpp"

namespace kktrain {

// C = alpha op(A) op(B) + beta C for one matrix (m x n result); the operands' dtypes are fp32 or
// bf16 in any combination, in panels of at most limits.converted_scratch_elems per scratch
// buffer. Returns the number of panels it ran in (1: whole operands).
int64_t converted_gemm(const ExecSpace& space, const GemmLimits& limits, char transA, char transB,
                       float alpha, const GemmIn& A, const GemmIn& B, float beta, const GemmOut& C,
                       int64_t m, int64_t n);

}  // namespace kktrain
