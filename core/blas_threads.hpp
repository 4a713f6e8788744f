// The host BLAS library's thread count, reached at run time (dlsym of openblas_set_num_threads),
// so kktrain links against any BLAS and only OpenBLAS' pool is steered.
//
// Two levels: the limit is the process's share of the cores (parallel/threads.hpp plans it once
// at startup); each product then takes as many threads as its size is worth, never more than the
// limit (ops/gemm.cpp says how many and why). Both depend only on the launch and the shapes,
// never on the machine's load: OpenBLAS' sums depend on its thread count, and two identical runs
// must write identical numbers.
#pragma once

#include <string>

#include <cstdint>

namespace kktrain {

// Multiply-adds each BLAS thread must get for a product to be split: 64 Mi, longer than a
// scheduler time slice of one core's sgemm. OpenBLAS splits a product statically and waits for its
// slowest thread, so when another process shares a core, every split product risks a time slice;
// below this size the risk costs more than the second core gains (the reasons: the .cpp; the
// numbers: bench/README.md, "BLAS threads per product").
constexpr int64_t kBlasWorkPerThread = int64_t{1} << 26;

// Threads worth using for one (m x k) @ (k x n) product under `limit`: one per
// kBlasWorkPerThread multiply-adds, at least 1, at most max(limit, 1).
int blas_threads_for_product(int64_t m, int64_t n, int64_t k, int limit);

// "OpenBLAS" when the loaded BLAS lets us set its thread count, else "" (reference BLAS, ...).
const char* blas_threads_library();
// The kernel family OpenBLAS chose for this CPU ("SkylakeX", "Haswell", "Prescott", ...), or ""
// when the BLAS is not OpenBLAS. Debian's OpenBLAS 0.3.21 does not know newer cores (Sapphire
// Rapids among them) and falls back to its generic "Prescott" SSE3 kernels there.
std::string blas_core_name();

// Sets the per-process limit (n < 1 counts as 1) and the library's count to it. With
// fit_to_products, use_blas_threads() then sets the count product by product; without (the user
// chose OPENBLAS_NUM_THREADS / OMP_NUM_THREADS), the library keeps n for every product.
void set_blas_thread_limit(int n, bool fit_to_products);
int blas_thread_limit();  // 0 until set

// The library's thread count for the next products: min(n, limit), at least 1. Cheap when
// unchanged (one comparison); a no-op when the BLAS offers no way to set it, without
// fit_to_products, and until a limit is set (programs that do not plan threads, such as the
// benchmarks run with OPENBLAS_NUM_THREADS, keep the library's own count).
void use_blas_threads(int n);
// use_blas_threads(blas_threads_for_product(m, n, k, limit)): before each host product.
void fit_blas_threads(int64_t m, int64_t n, int64_t k);
// The count fit_blas_threads(m, n, k) would give this product: blas_threads_for_product under the
// limit, or the limit itself when the user chose it (no fit_to_products); 0 until a limit is set.
// For other host GEMM libraries (oneDNN's OpenMP threads) that must follow the same plan.
int planned_threads_for_product(int64_t m, int64_t n, int64_t k);
// The count the library reports (0 when it cannot say).
int blas_threads_in_use();

}  // namespace kktrain
