#include "ops/gemm.hpp"
#include "core/host_sync.hpp"

#include <algorithm>
#include <cstdio>
#include <string>
#include <type_traits>

#include "core/blas_threads.hpp"
#include "core/errors.hpp"
#include "ops/gemm_converted.hpp"
#if defined(KKTRAIN_HAVE_ONEDNN)
#include "ops/gemm_onednn.hpp"
#endif
#if defined(KKTRAIN_HAVE_VENDOR_GEMM)
#include "ops/gemm_vendor_gpu.hpp"
#endif

namespace kktrain {

namespace {

GemmCounters g_counters;

bool widened(const GemmOptions& o) {
  return o.bf16 == Bf16Products::widened;
}

// fp32 products: kokkos-kernels (the host BLAS, cuBLAS, rocBLAS), except on a host where the BLAS
// runs a generic pre-AVX kernel on a CPU with AVX2 or better (Debian's OpenBLAS 0.3.21 on cores
// it does not know: "Prescott", about a fifth of the CPU's fp32 rate) and oneDNN has a JIT fp32
// matmul: there oneDNN. Fp32Backend::kokkos_kernels or ::onednn decides explicitly;
// Bf16Products::widened keeps fp32 on kokkos-kernels.
GemmBackend fp32_backend(const GemmOptions& o) {
#if defined(KKTRAIN_HAVE_ONEDNN)
  if (widened(o) || o.fp32 == Fp32Backend::kokkos_kernels) return GemmBackend::kokkos_kernels;
  if (o.fp32 == Fp32Backend::onednn) {
    return onednn::fp32_available() ? GemmBackend::onednn : GemmBackend::kokkos_kernels;
  }
  // The machine's facts (the BLAS core, the CPU's ISA), looked up once.
  static const GemmBackend automatic = [] {
    const std::string core = blas_core_name();
    const bool generic = core == "Prescott" || core == "Core2" || core == "Penryn" ||
                         core == "Dunnington" || core == "Nehalem" || core == "Katmai";
    return generic && onednn::fp32_available() ? GemmBackend::onednn : GemmBackend::kokkos_kernels;
  }();
  return automatic;
#else
  (void)o;
  return GemmBackend::kokkos_kernels;
#endif
}

// The native bf16 x bf16 backend this build and machine offer, or converted.
GemmBackend native_bf16_backend() {
#if defined(KKTRAIN_HAVE_VENDOR_GEMM) && defined(KOKKOS_ENABLE_CUDA)
  return GemmBackend::cublas;
#elif defined(KKTRAIN_HAVE_VENDOR_GEMM) && defined(KOKKOS_ENABLE_HIP)
  return GemmBackend::rocblas;
#elif defined(KOKKOS_ENABLE_CUDA) || defined(KOKKOS_ENABLE_HIP)
  return GemmBackend::converted;  // a GPU build without its vendor BLAS: Kokkos Kernels' own GEMM
#elif defined(KKTRAIN_HAVE_ONEDNN)
  return onednn::available() ? GemmBackend::onednn : GemmBackend::converted;
#else
  return GemmBackend::converted;
#endif
}

// C = beta * C, for products with nothing to multiply (k == 0, or alpha == 0, where BLAS reads
// neither A nor B); beta == 0 writes zeros without reading C.
void scale_c(const ExecSpace& space, float beta, const GemmOut& C, int64_t count) {
  if (C.dtype == DType::float32) {
    float* c = static_cast<float*>(C.data);
    Kokkos::parallel_for(
        "gemm_scale_c", RangePolicy(space, 0, count),
        KOKKOS_LAMBDA(const int64_t i) { c[i] = beta == 0.0f ? 0.0f : beta * c[i]; });
  } else {
    bf16* c = static_cast<bf16*>(C.data);
    Kokkos::parallel_for(
        "gemm_scale_c", RangePolicy(space, 0, count), KOKKOS_LAMBDA(const int64_t i) {
          store_as(c, i, beta == 0.0f ? 0.0f : beta * to_f32(c[i]));
        });
  }
}

// Matrix i of a batch of matrices shaped like X, stride() elements apart.
template <class X>
X matrix(const X& x, int64_t i) {
  X out = x;
  using Byte = typename std::conditional<std::is_same<X, GemmIn>::value, const char, char>::type;
  out.data = static_cast<Byte*>(x.data) + i * x.stride() * dtype_size(x.dtype);
  out.batch_stride = 0;
  return out;
}

int index_of(GemmBackend b) {
  return static_cast<int>(b);
}

}  // namespace

// Runs a product whose dimensions do not fit a 32-bit int in pieces that do (false: no need).
static bool gemm_in_int_pieces(const ExecSpace& space, const GemmOptions& options, int64_t batch,
                               char transA, char transB, float alpha, const GemmIn& A,
                               const GemmIn& B, float beta, const GemmOut& C, int64_t m, int64_t n,
                               int64_t k, GemmBackend be) {
  const int64_t lim = options.limits.int_dim;
  if (m <= lim && n <= lim && k <= lim && batch <= lim) return false;
  // Rows of C (and of A when it is not transposed) split into pieces; other dimensions cannot
  // be (a library takes each of them whole).
  const char* dim = n > lim                    ? "n (columns of the result)"
                    : k > lim                  ? "k (the summed dimension)"
                    : m > lim && transA != 'N' ? "m (of a transposed A)"
                                               : nullptr;
  if (dim) {
    throw RuntimeFailure(std::string("a matrix product's ") + dim + " exceeds " +
                         std::to_string(lim) + ", the largest " + gemm_backend_name(be) +
                         " takes (" + std::to_string(m) + " x " + std::to_string(k) + " by " +
                         std::to_string(k) + " x " + std::to_string(n) + ")");
  }
  for (int64_t i = 0; i < batch; ++i) {
    const GemmIn Ai = matrix(A, i), Bi = matrix(B, i);
    const GemmOut Ci = matrix(C, i);
    for (int64_t r0 = 0; r0 < m; r0 += lim) {
      const int64_t rows = std::min(lim, m - r0);
      GemmIn a = Ai;
      a.data = static_cast<const char*>(Ai.data) + r0 * Ai.cols * dtype_size(Ai.dtype);
      a.rows = rows;
      GemmOut c = Ci;
      c.data = static_cast<char*>(Ci.data) + r0 * Ci.cols * dtype_size(Ci.dtype);
      c.rows = rows;
      gemm_batched(space, options, 1, transA, transB, alpha, a, Bi, beta, c);
    }
  }
  return true;
}

const char* gemm_backend_name(GemmBackend b) {
  switch (b) {
    case GemmBackend::kokkos_kernels:
      return "kokkos-kernels";
    case GemmBackend::onednn:
      return "onednn";
    case GemmBackend::cublas:
      return "cublas";
    case GemmBackend::rocblas:
      return "rocblas";
    case GemmBackend::converted:
      return "converted";
  }
  return "?";
}

GemmBackend gemm_backend_for(const GemmOptions& options, DType a, DType b, DType c) {
  if (a == DType::float32 && b == DType::float32 && c == DType::float32) {
    return fp32_backend(options);
  }
  if (a == DType::bfloat16 && b == DType::bfloat16 && !widened(options)) {
    return native_bf16_backend();
  }
  return GemmBackend::converted;
}

std::string gemm_backends_summary(const GemmOptions& options) {
  const GemmBackend f32 = fp32_backend(options);
  std::string s = std::string("fp32: ") + gemm_backend_name(f32);
  if (std::is_same<MemSpace, HostSpace>::value) {
    const std::string core = blas_core_name();
    const std::string blas = blas_threads_library()[0] != '\0' ? "OpenBLAS" : "BLAS";
    if (f32 == GemmBackend::onednn) {
      s += " (" + blas + " runs generic '" + core + "' kernels on this CPU)";
    } else {
      s += " (" + blas + (core.empty() ? "" : " " + core) + ")";
    }
  }
  const GemmBackend bf =
      gemm_backend_for(options, DType::bfloat16, DType::bfloat16, DType::float32);
  s += std::string("; bf16: ") + gemm_backend_name(bf);
#if defined(KKTRAIN_HAVE_ONEDNN)
  if (bf == GemmBackend::onednn) {
    s += " (" + onednn::isa_name() + ", oneDNN " + onednn::version() + ")";
  } else if (widened(options)) {
    s += " (model.gemm: widened)";
  } else {
    s += " (oneDNN " + onednn::version() + ": no native bf16 on " + onednn::isa_name() + ")";
  }
#else
  if (bf == GemmBackend::converted) {
    s += widened(options) ? " (model.gemm: widened)"
#if defined(KOKKOS_ENABLE_HIP)
                          : " (built without rocBLAS: Kokkos Kernels' GEMM on fp32 copies)";
#elif defined(KOKKOS_ENABLE_CUDA)
                          : " (built without cuBLAS: Kokkos Kernels' GEMM on fp32 copies)";
#else
                          : " (no native bf16 backend built)";
#endif
  }
#endif
  return s;
}

GemmCounters gemm_counters() {
  return g_counters;
}

void gemm(const ExecSpace& space, const GemmOptions& options, char transA, char transB, float alpha,
          const GemmIn& A, const GemmIn& B, float beta, const GemmOut& C) {
  gemm_batched(space, options, 1, transA, transB, alpha, A, B, beta, C);
}

// While a Kokkos Tools library is loaded (bench/kernel_timer.cpp), each product is a profile
// region named after its shape, so profiles attribute GEMM time by shape.
class GemmRegion {
 public:
  GemmRegion(int64_t batch, char ta, char tb, const GemmIn& A, const GemmIn& B, const GemmOut& C,
             int64_t m, int64_t n, int64_t k, float beta) {
    active_ = external_tool_loaded();  // not kktrain's own launch counting
    if (!active_) return;
    const auto t = [](DType d) { return d == DType::bfloat16 ? "bf16" : "f32"; };
    char name[160];
    std::snprintf(name, sizeof(name), "gemm %c%c %lldx%lldx%lld%s %s.%s->%s%s", ta, tb,
                  static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k),
                  batch > 1 ? (" x" + std::to_string(batch)).c_str() : "", t(A.dtype), t(B.dtype),
                  t(C.dtype), beta != 0.0f ? " +C" : "");
    Kokkos::Profiling::pushRegion(name);
  }
  ~GemmRegion() {
    if (active_) {
      SyncScope why(SyncCause::profiling);
      host_sync();  // the region's time is its kernels'
      Kokkos::Profiling::popRegion();
    }
  }
  GemmRegion(const GemmRegion&) = delete;
  GemmRegion& operator=(const GemmRegion&) = delete;

 private:
  bool active_ = false;
};

void gemm_batched(const ExecSpace& space, const GemmOptions& options, int64_t batch, char transA,
                  char transB, float alpha, const GemmIn& A, const GemmIn& B, float beta,
                  const GemmOut& C) {
  const int64_t m = transA == 'N' ? A.rows : A.cols, k = transA == 'N' ? A.cols : A.rows;
  const int64_t kb = transB == 'N' ? B.rows : B.cols, n = transB == 'N' ? B.cols : B.rows;
  if (k != kb || C.rows != m || C.cols != n || (transA != 'N' && transA != 'T') ||
      (transB != 'N' && transB != 'T') || batch < 0) {
    throw InternalError("gemm: shapes do not match");
  }
  if (A.batch_stride < 0 || B.batch_stride < 0 || C.batch_stride < 0 ||
      (batch > 1 && C.stride() < m * n)) {
    throw InternalError("gemm: batch strides must be >= 0 and the C matrices must not overlap");
  }
  for (DType d : {A.dtype, B.dtype, C.dtype}) {
    if (d != DType::float32 && d != DType::bfloat16) {
      throw InternalError(std::string("gemm: unsupported dtype ") + dtype_name(d));
    }
  }
  GemmBackend be = gemm_backend_for(options, A.dtype, B.dtype, C.dtype);
  if (batch == 0) return;
  const GemmRegion region(batch, transA, transB, A, B, C, m, n, k, beta);
  if (m == 0 || n == 0 || k == 0 || alpha == 0.0f) {  // nothing to multiply
    g_counters.calls[index_of(be)] += 1;
    if (m > 0 && n > 0) {
      for (int64_t i = 0; i < batch; ++i) scale_c(space, beta, matrix(C, i), m * n);
    }
    return;
  }
#if defined(KKTRAIN_HAVE_VENDOR_GEMM)
  // fp32 batches take the vendor library's strided-batched call too (kokkos-kernels has none).
  if (be == GemmBackend::kokkos_kernels && batch > 1) be = native_bf16_backend();
#endif
#if defined(KKTRAIN_HAVE_VENDOR_GEMM) && defined(KOKKOS_ENABLE_CUDA)
  // cuBLAS (13.0, H200) rounds a bf16 C += A B twice: 20% of a 128x96x200 product's elements one
  // bf16 unit off the once-rounded fp32 result (tests/unit/test_gemm.cpp), with reduced-precision
  // reductions disallowed too. Such products take the converted path, which rounds once; the
  // model's products with a bf16 result all have beta 0 (its sums over chunks and micro-batches
  // accumulate in fp32), so this costs it nothing.
  if (be == GemmBackend::cublas && C.dtype == DType::bfloat16 && beta != 0.0f) {
    be = GemmBackend::converted;
  }
#endif
#if defined(KKTRAIN_HAVE_ONEDNN)
  // false: oneDNN has only a reference implementation for this product; convert instead. (oneDNN
  // runs on the host, whose instance is `space` in a build with oneDNN: nothing to pass.)
  if (be == GemmBackend::onednn &&
      !onednn::gemm(batch, transA, transB, alpha, A, B, beta, C, m, n, k)) {
    be = GemmBackend::converted;
  }
#endif
  // Dimensions past a 32-bit int (oneDNN, which ran above if it could, takes 64-bit ones).
  if (be != GemmBackend::onednn && gemm_in_int_pieces(space, options, batch, transA, transB, alpha,
                                                      A, B, beta, C, m, n, k, be)) {
    return;
  }
#if defined(KKTRAIN_HAVE_VENDOR_GEMM)
  if (be == GemmBackend::cublas || be == GemmBackend::rocblas) {
    vendor_gpu::gemm(space, batch, transA, transB, alpha, A, B, beta, C, m, n, k);
  }
#endif
  g_counters.calls[index_of(be)] += 1;
  g_counters.flops[index_of(be)] += 2.0 * static_cast<double>(batch) * m * n * k;
  if (be == GemmBackend::kokkos_kernels || be == GemmBackend::converted) {
    for (int64_t i = 0; i < batch; ++i) {
      const int64_t panels = converted_gemm(space, options.limits, transA, transB, alpha,
                                            matrix(A, i), matrix(B, i), beta, matrix(C, i), m, n);
      g_counters.converted_in_panels += panels > 1;
    }
  }
}

namespace {

// Rows [row, row + rows) of a row-major operand.
template <class X>
X rows_of(const X& x, int64_t row, int64_t rows) {
  X out = x;
  using Byte = typename std::conditional<std::is_same<X, GemmIn>::value, const char, char>::type;
  out.data = static_cast<Byte*>(x.data) + row * x.cols * dtype_size(x.dtype);
  out.rows = rows;
  out.batch_stride = 0;
  return out;
}

}  // namespace

void gemm_grouped(const ExecSpace& space, const GemmOptions& options,
                  const std::vector<int64_t>& sizes, char transA, char transB, float alpha,
                  const GemmIn& A, const GemmIn& B, float beta, const GemmOut& C) {
  const bool vary_m = transA == 'N';
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) throw InternalError("gemm_grouped: a negative group size");
    total += s;
  }
  const bool ok = vary_m ? A.rows == total && C.rows == total
                         : transA == 'T' && transB == 'N' && A.rows == total && B.rows == total;
  if (!ok) throw InternalError("gemm_grouped: group sizes do not match the operands");
  const int64_t groups = static_cast<int64_t>(sizes.size());
#if defined(KKTRAIN_HAVE_VENDOR_GEMM)
  // One launch for every group where the vendor library has a grouped call for these dtypes (not
  // a bf16 C += A B, which cuBLAS rounds twice: gemm_batched above).
  const GemmBackend be = gemm_backend_for(options, A.dtype, B.dtype, C.dtype);
  const bool rounds_twice = C.dtype == DType::bfloat16 && beta != 0.0f;
  if ((be == GemmBackend::cublas || be == GemmBackend::kokkos_kernels) && !rounds_twice &&
      vendor_gpu::gemm_grouped(space, sizes, transA, transB, alpha, A, B, beta, C)) {
    g_counters.calls[index_of(GemmBackend::cublas)] += 1;
    const int64_t m = vary_m ? total : (transA == 'N' ? A.rows : A.cols);
    const int64_t n = transB == 'N' ? B.cols : B.rows;
    const int64_t k = vary_m ? (transB == 'N' ? B.rows : B.cols) : total;
    g_counters.flops[index_of(GemmBackend::cublas)] += 2.0 * static_cast<double>(m) * n * k;
    return;
  }
#endif
  // Host backends: each group through gemm(), in pieces of power-of-two rows (largest first).
  // oneDNN builds and caches a primitive per shape, and the experts' group sizes change every
  // step: pieces keep the shapes to log2(largest group) per projection instead of a new one per
  // size. Rows of C are independent, so pieces of a varying-m product change nothing; pieces of
  // a varying-k product (weight gradients) sum in fp32 through beta = 1, so they are used only
  // for an fp32 C (a bf16 C is rounded once, so its group stays one product).
  const bool split_k = C.dtype == DType::float32;
  int64_t row = 0;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t size = sizes[g];
    if (!vary_m && (!split_k || size == 0)) {
      gemm(space, options, transA, transB, alpha, rows_of(A, row, size), rows_of(B, row, size),
           beta, matrix(C, g));
    }
    for (int64_t done = 0; done < size && (vary_m || split_k);) {
      int64_t piece = 1;
      while (piece * 2 <= size - done) piece *= 2;
      if (vary_m) {
        gemm(space, options, transA, transB, alpha, rows_of(A, row + done, piece), matrix(B, g),
             beta, rows_of(C, row + done, piece));
      } else {
        gemm(space, options, transA, transB, alpha, rows_of(A, row + done, piece),
             rows_of(B, row + done, piece), done == 0 ? beta : 1.0f, matrix(C, g));
      }
      done += piece;
    }
    row += size;
  }
}

}  // namespace kktrain
