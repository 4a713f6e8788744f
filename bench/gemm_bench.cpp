// GFLOP/s of gemm() (ops/gemm.hpp) per backend at the model's product shapes: fp32 through
// kokkos-kernels (OpenBLAS sgemm), fp32 through oneDNN where that is the default fp32 backend,
// bf16 x bf16 through oneDNN (native bf16 dot products), and the
// same bf16 product through the converted path (operands widened to fp32, then sgemm).
//
//   bench_gemm [--threads 1] [--reps 7] [--layout NT] [--shapes 2048x1024x1024,2048x384x1152]
//              [--scratch-elems N]
//
// Shapes are m x n x k: C (m, n) = A (m, k) @ B (k, n), with the layout's transposes (NT, the
// forward of a linear layer, by default). bf16 products write a bf16 C. Each row is the median of
// `reps` timed calls after one warm-up call (which also builds oneDNN's primitive). Every product
// gets `threads` threads (OpenBLAS and oneDNN's OpenMP alike). --scratch-elems replaces the
// converted path's scratch budget (GemmOptions::limits; e.g. 1000000000: whole operands, no
// panels).
#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_util.hpp"
#include "core/blas_threads.hpp"
#include "ops/gemm.hpp"
#if defined(KKTRAIN_HAVE_ONEDNN)
#include "ops/gemm_onednn.hpp"
#endif

using namespace kktrain;
using bench::median;
using bench::now;

namespace {

struct Shape {
  int64_t m, n, k;
};

std::vector<Shape> parse_shapes(const std::string& text) {
  std::vector<Shape> out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    Shape s{};
    if (std::sscanf(text.substr(pos, end - pos).c_str(), "%ldx%ldx%ld", &s.m, &s.n, &s.k) != 3) {
      std::fprintf(stderr, "bench_gemm: bad shape '%s'\n", text.substr(pos, end - pos).c_str());
      std::exit(2);
    }
    out.push_back(s);
    pos = end + 1;
  }
  return out;
}

// Median seconds of one product (after one warm-up call), checking which backend ran.
double time_product(const GemmOptions& options, char ta, char tb, const GemmIn& A, const GemmIn& B,
                    const GemmOut& C, GemmBackend expect, int reps) {
  const auto calls = [expect] { return gemm_counters().calls[static_cast<int>(expect)]; };
  const int64_t before = calls();
  gemm(ExecSpace(), options, ta, tb, 1.0f, A, B, 0.0f, C);
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    const double t0 = now();
    gemm(ExecSpace(), options, ta, tb, 1.0f, A, B, 0.0f, C);
    Kokkos::fence();
    times.push_back(now() - t0);
  }
  if (calls() != before + reps + 1) {
    std::fprintf(stderr, "bench_gemm: expected backend %s did not run\n",
                 gemm_backend_name(expect));
    std::exit(1);
  }
  return median(times);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 1, reps = 7;
  GemmOptions native;  // the production options, with --scratch-elems' budget
  std::string layout = "NT", shapes_text = "2048x1024x1024,2048x384x1152,2048x1024x384";
  // This program's options are read before Kokkos sees the command line (Kokkos 3.4 takes a bare
  // `--threads` for itself and refuses `--threads 1`); Kokkos gets the rest.
  std::vector<char*> kokkos_args = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string key = argv[i];
    const bool ours = key == "--threads" || key == "--reps" || key == "--layout" ||
                      key == "--shapes" || key == "--scratch-elems";
    if (!ours) {
      kokkos_args.push_back(argv[i]);
      continue;
    }
    if (i + 1 == argc) {
      std::fprintf(stderr, "bench_gemm: %s needs a value\n", key.c_str());
      return 2;
    }
    const char* value = argv[++i];
    if (key == "--threads") threads = std::atoi(value);
    if (key == "--reps") reps = std::atoi(value);
    if (key == "--layout") layout = value;
    if (key == "--shapes") shapes_text = value;
    if (key == "--scratch-elems" && std::atoll(value) > 0) {
      native.limits.converted_scratch_elems = std::atoll(value);
    }
  }
  GemmOptions kk = native, widened = native;  // fp32 on the host BLAS; bf16 widened to fp32
  kk.fp32 = Fp32Backend::kokkos_kernels;
  widened.bf16 = Bf16Products::widened;
  int kokkos_argc = static_cast<int>(kokkos_args.size());
  Kokkos::ScopeGuard kokkos(kokkos_argc, kokkos_args.data());
  if (kokkos_argc > 1) {
    std::fprintf(stderr, "bench_gemm: unknown option %s\n", kokkos_args[1]);
    return 2;
  }
  if (layout.size() != 2) {
    std::fprintf(stderr, "bench_gemm: --layout is two letters of N/T\n");
    return 2;
  }
  const char ta = layout[0], tb = layout[1];
  set_blas_thread_limit(threads, false);  // every product on `threads` threads
  std::printf("threads %d, layout %s, reps %d; %s\n", threads, layout.c_str(), reps,
              gemm_backends_summary().c_str());
  const GemmBackend bf16_native =
      gemm_backend_for(native, DType::bfloat16, DType::bfloat16, DType::bfloat16);
  const bool has_native = bf16_native != GemmBackend::converted;
#if defined(KKTRAIN_HAVE_ONEDNN)
  if (has_native) {
    const std::string impl =
        onednn::implementation(ta, tb, 1.0f, DType::bfloat16, 0.0f, 64, 64, 64);
    std::printf("oneDNN implementation: %s\n", impl.c_str());
  }
#endif
  std::printf("%-16s %-16s %10s %10s %8s\n", "m x n x k", "backend", "ms", "GFLOP/s", "vs fp32");
  for (const Shape& s : parse_shapes(shapes_text)) {
    const int64_t ar = ta == 'N' ? s.m : s.k, ac = ta == 'N' ? s.k : s.m;
    const int64_t br = tb == 'N' ? s.k : s.n, bc = tb == 'N' ? s.n : s.k;
    // Operands in device memory, filled by kernels (the products never see host memory).
    DView<float> a32("a32", ar * ac), b32("b32", br * bc), c32("c32", s.m * s.n);
    DView<bf16> a16("a16", ar * ac), b16("b16", br * bc), c16("c16", s.m * s.n);
    Kokkos::parallel_for(
        "fill_operands", RangePolicy(0, std::max(ar * ac, br * bc)), KOKKOS_LAMBDA(int64_t i) {
          if (i < ar * ac) {
            a32(i) = 0.001f * static_cast<float>(i % 997);
            a16(i) = bf16(a32(i));
          }
          if (i < br * bc) {
            b32(i) = 0.002f * static_cast<float>(i % 991);
            b16(i) = bf16(b32(i));
          }
        });
    Kokkos::fence();
    const double flops = 2.0 * s.m * s.n * s.k;
    const std::string name =
        std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k);
    const auto row = [&](const char* backend, double sec, double fp32_sec) {
      std::printf("%-16s %-16s %10.2f %10.1f %8.2f\n", name.c_str(), backend, sec * 1e3,
                  flops / sec / 1e9, fp32_sec / sec);
      std::fflush(stdout);
    };
    const double t32 = time_product(kk, ta, tb, gin(a32.data(), ar, ac), gin(b32.data(), br, bc),
                                    gout(c32.data(), s.m, s.n), GemmBackend::kokkos_kernels, reps);
    row("fp32 kk (BLAS)", t32, t32);
    const GemmBackend f32 =
        gemm_backend_for(native, DType::float32, DType::float32, DType::float32);
    if (f32 != GemmBackend::kokkos_kernels) {  // the default fp32 backend, when it is another
      const double t = time_product(native, ta, tb, gin(a32.data(), ar, ac),
                                    gin(b32.data(), br, bc), gout(c32.data(), s.m, s.n), f32, reps);
      row((std::string("fp32 ") + gemm_backend_name(f32)).c_str(), t, t32);
    }
    if (has_native) {
      const double t =
          time_product(native, ta, tb, gin(a16.data(), ar, ac), gin(b16.data(), br, bc),
                       gout(c16.data(), s.m, s.n), bf16_native, reps);
      row((std::string("bf16 ") + gemm_backend_name(bf16_native)).c_str(), t, t32);
    }
    const double tc =
        time_product(widened, ta, tb, gin(a16.data(), ar, ac), gin(b16.data(), br, bc),
                     gout(c16.data(), s.m, s.n), GemmBackend::converted, reps);
    row("bf16 converted", tc, t32);
  }
  return 0;
}
