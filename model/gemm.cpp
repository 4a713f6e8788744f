#include "model/gemm.hpp"

#include <KokkosBlas3_gemm.hpp>
#include <type_traits>

#include "core/blas_threads.hpp"

namespace kktrain {

void gemm(char transA, char transB, float alpha, const CMat& A, const CMat& B, float beta,
          const Mat& C) {
  const char ta[2] = {transA, '\0'};
  const char tb[2] = {transB, '\0'};
  if (std::is_same<MemSpace, HostSpace>::value) {  // host BLAS: as many threads as it is worth
    fit_blas_threads(C.extent(0), C.extent(1), transA == 'N' ? A.extent(1) : A.extent(0));
  }
  KokkosBlas::gemm(ta, tb, alpha, A, B, beta, C);
}

void matmul_forward(float* out, const float* inp, const float* weight, int64_t N, int64_t I,
                    int64_t O) {
  gemm('N', 'T', 1.0f, cmat(inp, N, I), cmat(weight, O, I), 0.0f, mat(out, N, O));
}

void matmul_backward_input(float* dinp, const float* dout, const float* weight, int64_t N,
                           int64_t I, int64_t O, bool accumulate) {
  gemm('N', 'N', 1.0f, cmat(dout, N, O), cmat(weight, O, I), accumulate ? 1.0f : 0.0f,
       mat(dinp, N, I));
}

void matmul_backward_weight(float* dweight, const float* dout, const float* inp, int64_t N,
                            int64_t I, int64_t O) {
  gemm('T', 'N', 1.0f, cmat(dout, N, O), cmat(inp, N, I), 0.0f, mat(dweight, O, I));
}

}  // namespace kktrain
