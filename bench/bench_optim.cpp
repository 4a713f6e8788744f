// Optimizer-step memory bandwidth of kktrain's fused updates, against a STREAM-style triad in
// the same process, for each precision pattern; plus the measured resident bytes per parameter
// (RSS growth when creating the parameters, gradients and optimizer state) against the theory.
// Every pattern's step is timed without and with the counting of updates lost to rounding
// (Optimizer::set_count_rounding), alternating step by step (which goes first alternates too):
// median_s is the plain step, counted_median_s the counting one, in wall time, and the *cpu_*
// pair the same steps in process CPU time (steadier than wall time on a machine shared with other
// jobs, where the process waits for a core). Parameters start at 1 and gradients are 0.001, so
// every step updates every element.
//
//   bench_optim --params 16777216 --iters 10 [--pattern NAME_PREFIX] [--plain-only 1]
// Prints one JSON object per line ({"kind": "triad"}, {"kind": "optim", "pattern": ...}).
//
// Bytes counted per parameter per step are the reads and writes the update must do (no
// write-allocate traffic): e.g. torch AdamW fp32 reads param, grad, exp_avg, exp_avg_sq (16 B)
// and writes param, exp_avg, exp_avg_sq (12 B): 28 B.
#include <time.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "bench/bench_util.hpp"
#include "core/config.hpp"
#include "core/param_registry.hpp"
#include "optim/optimizer.hpp"

using namespace kktrain;
using bench::median;
using bench::now;

namespace {

// Resident (host RSS) bytes of this process. In GPU builds the optimizer state lives in device
// memory, which RSS does not see: there the column reads 0 rather than a misleading number.
long rss_bytes() {
  if (!Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible) return 0;
  std::ifstream f("/proc/self/statm");
  long pages = 0, resident = 0;
  f >> pages >> resident;
  return resident * 4096;
}

// CPU time of this process (all its threads), seconds.
double cpu_now() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

void triad(float* a, const float* b, const float* c, float s, int64_t n) {
  Kokkos::parallel_for(
      "triad", RangePolicy(0, n), KOKKOS_LAMBDA(const int64_t i) { a[i] = b[i] + s * c[i]; });
}

struct Pattern {
  const char* name;
  DType storage;
  OptimizerConfig opt;
  double bytes_moved;   // per parameter per step
  double bytes_theory;  // resident per parameter: param + grad + moments + master
};

}  // namespace

int main(int argc, char** argv) {
  Kokkos::ScopeGuard kokkos(argc, argv);
  int64_t n = 1 << 24;
  int iters = 10;
  std::string only;  // --pattern: only the patterns whose name starts with this
  bool plain_only = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--params")
      n = std::atoll(argv[i + 1]);
    else if (k == "--iters")
      iters = std::atoi(argv[i + 1]);
    else if (k == "--pattern")
      only = argv[i + 1];
    else if (k == "--plain-only")  // --plain-only 1: no counting steps (A/B against older builds)
      plain_only = std::atoi(argv[i + 1]) != 0;
  }
  {
    DView<float> a("a", n), b("b", n), c("c", n);
    Kokkos::deep_copy(b, 1.0f);
    Kokkos::deep_copy(c, 2.0f);
    std::vector<double> t;
    for (int r = 0; r < iters + 2; ++r) {
      const double t0 = now();
      triad(a.data(), b.data(), c.data(), 0.5f, n);
      Kokkos::fence();
      if (r >= 2) t.push_back(now() - t0);
    }
    std::printf("{\"kind\": \"triad\", \"gbytes_per_s\": %.3f}\n", 12.0 * n / median(t) / 1e9);
  }
  std::vector<Pattern> patterns;
  {
    OptimizerConfig adamw;
    patterns.push_back({"B: torch AdamW, fp32 storage", DType::float32, adamw, 28, 16});
    patterns.push_back({"risky: torch AdamW, bf16 storage", DType::bfloat16, adamw, 14, 8});
    OptimizerConfig sr = adamw;
    sr.stochastic_rounding = true;
    patterns.push_back({"SR: torch AdamW, bf16, stochastic rounding", DType::bfloat16, sr, 14, 8});
    OptimizerConfig te;
    te.kind = OptimizerKind::fused_adam;
    te.master_weights = true;
    te.store_param_remainders = true;
    patterns.push_back(
        {"A: FusedAdam bf16 + remainder, fp32 moments", DType::bfloat16, te, 26, 14});
    te.store_param_remainders = false;
    patterns.push_back({"FusedAdam bf16 + fp32 master, fp32 moments", DType::bfloat16, te, 28, 16});
    te.store_param_remainders = true;
    te.exp_avg_dtype = te.exp_avg_sq_dtype = DType::bfloat16;
    patterns.push_back({"FusedAdam bf16 + remainder, bf16 moments", DType::bfloat16, te, 18, 10});
    OptimizerConfig sgd;
    sgd.kind = OptimizerKind::sgd;
    sgd.momentum = 0.9;
    patterns.push_back({"SGD momentum, fp32 storage", DType::float32, sgd, 20, 12});
  }
  for (const auto& p : patterns) {
    if (std::string(p.name).rfind(only, 0) != 0) continue;
    const long rss0 = rss_bytes();
    ParamRegistry reg;
    reg.add("w.weight", "w", {n}, ParamRole::linear, p.storage);
    reg.allocate();
    auto opt = make_optimizer(p.opt, reg, 1);
    dispatch_dtype(p.storage, [&](auto tag) {
      using T = decltype(tag);
      Kokkos::deep_copy(reg.flat_data<T>(), from_f32<T>(1.0f));
      Kokkos::deep_copy(reg.flat_grad<T>(), from_f32<T>(0.001f));
    });
    Kokkos::fence();
    const double resident = static_cast<double>(rss_bytes() - rss0) / static_cast<double>(n);
    std::vector<double> t[2], cpu[2];  // [0]: plain steps, [1]: counting steps
    for (int r = 0; r < iters + 2; ++r) {
      for (int k = 0; k < (plain_only ? 1 : 2); ++k) {
        const int count = plain_only ? 0 : (r + k) % 2;
        opt->set_count_rounding(count == 1);
        const double t0 = now(), c0 = cpu_now();
        opt->step(1e-3, 1.0f);
        Kokkos::fence();  // the step only queues its launches on a GPU
        if (r >= 2) {
          t[count].push_back(now() - t0);
          cpu[count].push_back(cpu_now() - c0);
        }
      }
    }
    const double med = median(t[0]), counted = plain_only ? 0.0 : median(t[1]);
    std::printf(
        "{\"kind\": \"optim\", \"pattern\": \"%s\", \"median_s\": %.6f, \"counted_median_s\": "
        "%.6f, \"cpu_median_s\": %.6f, \"counted_cpu_median_s\": %.6f, "
        "\"gbytes_per_s\": %.3f, \"bytes_moved_per_param\": %.0f, "
        "\"resident_bytes_per_param\": %.2f, \"theory_bytes_per_param\": %.0f}\n",
        p.name, med, counted, median(cpu[0]), plain_only ? 0.0 : median(cpu[1]),
        p.bytes_moved * n / med / 1e9, p.bytes_moved, resident, p.bytes_theory);
  }
  return 0;
}
