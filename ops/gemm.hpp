// Matrix products for the model, through one interface with operands typed at run time.
//
//   C = alpha * op(A) @ op(B) + beta * C        row-major, op = 'N' (as is) or 'T' (transposed)
//
// A, B: fp32 or bf16; C: fp32 or bf16. Products and sums are fp32 (a bf16 x bf16 product is exact
// in fp32), and a bf16 C is rounded to nearest-even once, after alpha, beta and the sum. Backends,
// chosen per call from the operand dtypes, what the build has and what the CPU can do:
//
//   kokkos-kernels  all-fp32 products: KokkosBlas::gemm, which hands them to BLAS on the host
//                   (OpenBLAS, with as many threads as the product is worth: core/blas_threads)
//                   and to cuBLAS/rocBLAS on GPUs.
//   onednn          bf16 x bf16 on CPUs with AVX512-BF16 or AMX (oneDNN matmul; build option
//                   KKTRAIN_ENABLE_ONEDNN, run-time ISA check); also fp32 products where the host
//                   BLAS runs a generic pre-AVX kernel on an AVX2-or-better CPU (Debian's OpenBLAS
//                   0.3.21 on cores it does not know), or when GemmOptions::fp32 asks for it.
//   cublas/rocblas  bf16 x bf16 on CUDA/HIP builds: GemmEx with fp32 accumulation.
//   converted       anything else (bf16 without a native backend, mixed fp32/bf16 operands):
//                   bf16 operands widened to fp32 scratch, then kokkos-kernels. The same math as
//                   a native bf16 GEMM up to the order of the fp32 sums.
//
// Every product takes its GemmOptions (the model's come from model.gemm and model.gemm_fp32):
// Bf16Products::widened disables the native bf16 backends (every bf16 product takes the
// converted path), which parity checks and benchmarks compare against; Fp32Backend picks the fp32
// backend; GemmLimits are the production limits unless a test lowers them. Nothing here is a
// process-wide switch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/bf16.hpp"
#include "core/dtype.hpp"
#include "core/kokkos_compat.hpp"

namespace kktrain {

// A row-major (rows, cols) matrix in device memory, contiguous (leading dimension = cols). In a
// batch (gemm_batched), matrix i starts batch_stride elements after matrix i - 1; 0 means
// rows * cols (the matrices follow each other directly).
struct GemmIn {
  const void* data = nullptr;
  DType dtype = DType::float32;
  int64_t rows = 0, cols = 0;
  int64_t batch_stride = 0;
  int64_t stride() const { return batch_stride > 0 ? batch_stride : rows * cols; }
};
struct GemmOut {
  void* data = nullptr;
  DType dtype = DType::float32;
  int64_t rows = 0, cols = 0;
  int64_t batch_stride = 0;
  int64_t stride() const { return batch_stride > 0 ? batch_stride : rows * cols; }
};

template <class T>
GemmIn gin(const T* p, int64_t rows, int64_t cols, int64_t batch_stride = 0) {
  return GemmIn{p, dtype_of<T>::value, rows, cols, batch_stride};
}
inline GemmIn gin(const CRef& r, int64_t rows, int64_t cols) {
  return GemmIn{r.data, r.dtype, rows, cols, 0};
}
template <class T>
GemmOut gout(T* p, int64_t rows, int64_t cols, int64_t batch_stride = 0) {
  return GemmOut{p, dtype_of<T>::value, rows, cols, batch_stride};
}

// The limits gemm() works within: production values by default; tests lower them
// (GemmOptions::limits) so that small products take the paths large ones do.
struct GemmLimits {
  // The largest dimension the libraries with 32-bit int arguments take (BLAS's LP64 interface
  // behind Kokkos Kernels, cuBLAS, rocBLAS): larger products run in row pieces or are refused.
  int64_t int_dim = 0x7fffffff;
  // The fp32 elements each of the converted backend's three scratch buffers (widened op(A),
  // op(B), result) holds at most (16 MiB): larger products run in panels
  // (ops/gemm_converted.hpp).
  int64_t converted_scratch_elems = int64_t(4) << 20;
};
// How bf16 x bf16 products run: native (the build's and CPU's bf16 backend where there is one,
// else converted) or widened (always converted: operands widened to fp32, then the fp32 product;
// the reference the native backends are compared against).
enum class Bf16Products { native, widened };
// The backend of all-fp32 products: automatic (kokkos-kernels, except oneDNN where the host BLAS
// runs a generic pre-AVX kernel on an AVX2-or-better CPU and oneDNN has a JIT fp32 matmul),
// kokkos_kernels, or onednn (kokkos-kernels where the build or CPU has no oneDNN fp32 matmul).
// Under Bf16Products::widened fp32 products stay on kokkos-kernels.
enum class Fp32Backend { automatic, kokkos_kernels, onednn };
// Everything a product's path depends on besides its operands (defaults: production).
struct GemmOptions {
  Bf16Products bf16 = Bf16Products::native;
  Fp32Backend fp32 = Fp32Backend::automatic;
  GemmLimits limits{};
};

// Every product runs on the execution-space instance given first (cuBLAS/rocBLAS: the instance's
// stream; Kokkos Kernels: the instance where its release takes one, else the default instance;
// oneDNN: the host), ordered after the work queued on it before; nothing waits for it. Its path
// follows the options given second.
// Throws InternalError on shape or dtype mismatches (a programming error, not user input).
void gemm(const ExecSpace& space, const GemmOptions& options, char transA, char transB, float alpha,
          const GemmIn& A, const GemmIn& B, float beta, const GemmOut& C);

// `batch` independent products of one shape, C_i = alpha * op(A_i) @ op(B_i) + beta * C_i, where
// matrix i of each operand starts stride() elements after matrix i - 1 (A_i at A.data + i *
// A.stride(); rows and cols describe one matrix; the C matrices must not overlap). One launch for
// the whole batch where the backend has one: a oneDNN matmul with a strided batch dimension,
// cublas/rocblas strided-batched GemmEx (fp32 and bf16) on GPUs; host BLAS runs the products one
// after another, each with its planned threads.
void gemm_batched(const ExecSpace& space, const GemmOptions& options, int64_t batch, char transA,
                  char transB, float alpha, const GemmIn& A, const GemmIn& B, float beta,
                  const GemmOut& C);

// Grouped products (the experts of a sparse MLP, model/moe.hpp): one per group g < sizes.size(),
// each with its own size along one dimension, operands packed group after group:
//   transA 'N'  C_g (m_g, n) = alpha * A_g (m_g, k) @ op(B_g) + beta * C_g           varying m:
//               the m_g rows of A and of C of group g follow those of group g - 1 (A.rows and
//               C.rows are the totals); B_g is matrix g of B (B.rows x B.cols, B.stride() apart)
//   transA 'T'  C_g (m, n) = alpha * A_g^T @ B_g + beta * C_g, A_g (k_g, m), B_g (k_g, n) as is:
//               varying k (weight gradients): the k_g rows of A and of B of group g follow those
//               of group g - 1 (A.rows and B.rows are the totals); C_g is matrix g of C
// A group of size 0 is an empty product (varying k: C_g = beta * C_g). One launch for every group
// where the backend has one (cuBLAS's grouped batched GemmEx, where it takes the dtypes); other
// backends run the groups one after another through gemm(), each in pieces of power-of-two rows
// (so a host library that builds a kernel per shape sees few shapes however the sizes vary).
void gemm_grouped(const ExecSpace& space, const GemmOptions& options,
                  const std::vector<int64_t>& sizes, char transA, char transB, float alpha,
                  const GemmIn& A, const GemmIn& B, float beta, const GemmOut& C);

enum class GemmBackend { kokkos_kernels, onednn, cublas, rocblas, converted };
const char* gemm_backend_name(GemmBackend b);
// The backend gemm() uses for these operand dtypes under these options in this process. (A bf16
// product whose layout oneDNN can only run with a reference implementation is converted instead;
// gemm_counters() counts the backend that actually ran.)
GemmBackend gemm_backend_for(const GemmOptions& options, DType a, DType b, DType c);
// One line for --version and the build summary, e.g.
// "fp32: kokkos-kernels (BLAS); bf16: onednn (avx512_core_amx)": the backends products take
// under these options (default: a run's with model.gemm and model.gemm_fp32 at auto).
std::string gemm_backends_summary(const GemmOptions& options = {});

// Calls and floating-point operations per backend since the start of the process (benchmarks
// and tests read them to show which path ran).
struct GemmCounters {
  int64_t calls[5] = {0, 0, 0, 0, 0};
  double flops[5] = {0, 0, 0, 0, 0};
  int64_t converted_in_panels = 0;  // converted products too large for whole-operand scratch
};
GemmCounters gemm_counters();

// ---- Linear layers (no bias), weights (O, I) as stored: typed wrappers of gemm() ------------
// Operands are typed pointers (float*, bf16*) or CRefs.

// Whether a product's result replaces what its output holds or is added to it.
enum class Into : uint8_t { overwrite, accumulate };
// out (N, O) = (or +=, Into::accumulate) inp (N, I) @ weight (O, I)^T. Accumulating into an out
// that holds a bias broadcast over its rows is a biased linear layer with one rounding of the sum.
template <class TO, class TI, class TW>
void matmul_forward(const ExecSpace& space, const GemmOptions& options, TO out, const TI& inp,
                    const TW& weight, int64_t N, int64_t I, int64_t O,
                    Into into = Into::overwrite) {
  gemm(space, options, 'N', 'T', 1.0f, gin(inp, N, I), gin(weight, O, I),
       into == Into::accumulate ? 1.0f : 0.0f, gout(out, N, O));
}
// dinp (N, I) = (or +=, Into::accumulate) dout (N, O) @ weight (O, I)
template <class TO, class TI, class TW>
void matmul_backward_input(const ExecSpace& space, const GemmOptions& options, TO dinp,
                           const TI& dout, const TW& weight, int64_t N, int64_t I, int64_t O,
                           Into into) {
  gemm(space, options, 'N', 'N', 1.0f, gin(dout, N, O), gin(weight, O, I),
       into == Into::accumulate ? 1.0f : 0.0f, gout(dinp, N, I));
}
// dweight (O, I) = dout^T (O, N) @ inp (N, I)           -- written, not accumulated
template <class TO, class TI, class TX>
void matmul_backward_weight(const ExecSpace& space, const GemmOptions& options, TO dweight,
                            const TI& dout, const TX& inp, int64_t N, int64_t I, int64_t O) {
  gemm(space, options, 'T', 'N', 1.0f, gin(dout, N, O), gin(inp, N, I), 0.0f, gout(dweight, O, I));
}

}  // namespace kktrain
