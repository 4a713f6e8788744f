// The oneDNN backend of gemm() (ops/gemm.hpp): bf16 x bf16 products on CPUs that multiply bf16
// natively (AVX512-BF16 or AMX), fp32 accumulation, fp32 or bf16 C. Internal to the model library:
// gemm.cpp calls it only in builds with KKTRAIN_HAVE_ONEDNN (CMake option KKTRAIN_ENABLE_ONEDNN).
#pragma once

#include <cstdint>
#include <string>

#include "ops/gemm.hpp"

namespace kktrain {
namespace onednn {

// True when the CPU multiplies bf16 natively: oneDNN's effective ISA is avx512_core_bf16 or
// avx512_core_amx and a probe product gets a JIT implementation, not a reference one. Checked once.
bool available();

// True when oneDNN has a JIT fp32 matmul for this CPU (AVX2 or better). gemm.cpp uses it for fp32
// products only where the host BLAS runs a generic kernel (see gemm.cpp). Checked once.
bool fp32_available();

// oneDNN's effective ISA ("avx512_core_amx", "avx512_core_bf16", "avx2", ...) and its version,
// e.g. "2.6.3".
std::string isa_name();
std::string version();

// C_i (m, n) = alpha * op(A_i) @ op(B_i) + beta * C_i for i < batch, as gemm_batched()
// documents; A and B both bf16 or both fp32, C fp32 or bf16, shapes already checked, m, n, k > 0
// (gemm() handles empty products and alpha == 0 itself). One primitive for the whole batch (a
// leading batch dimension); transposes are memory strides (no copies). Returns false, having
// done nothing, when oneDNN offers only a reference implementation for this product (the caller
// then converts).
bool gemm(int64_t batch, char transA, char transB, float alpha, const GemmIn& A, const GemmIn& B,
          float beta, const GemmOut& C, int64_t m, int64_t n, int64_t k);

// The implementation oneDNN chose for such a product (e.g. "brg:avx512_core_amx"), creating and
// caching its primitive; for tests and the benchmark.
std::string implementation(char transA, char transB, float alpha, DType c_dtype, float beta,
                           int64_t m, int64_t n, int64_t k, DType ab_dtype = DType::bfloat16);

// Primitives in the cache (one per shape, transposes, C dtype, alpha, beta and thread count).
int64_t cached_primitives();

}  // namespace onednn
}  // namespace kktrain
