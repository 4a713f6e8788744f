// Test seams of ops/gemm.hpp: process-wide switches that tests and benchmarks flip to reach a
// path from a small product. Included by tests and bench/ only, never by production code (the
// run's choices come from the environment, KKTRAIN_GEMM and KKTRAIN_GEMM_FP32, and from
// GemmLimits' production defaults).
#pragma once

#include "ops/gemm.hpp"

namespace kktrain {
namespace test_hooks {

// Overrides KKTRAIN_GEMM from here on: true sends every bf16 product to the converted path, false
// lets them take the native backend (tests and benchmarks compare the two in one process).
void set_gemm_reference(bool on);
// Replaces gemm_limits() from here on (e.g. int_dim 5: a 13-row product runs in row pieces);
// returns the limits it replaced, for the caller to put back.
GemmLimits set_gemm_limits(const GemmLimits& limits);

// Lowered limits for a scope: the limits before are put back when it ends.
class ScopedGemmLimits {
 public:
  explicit ScopedGemmLimits(const GemmLimits& limits) : before_(set_gemm_limits(limits)) {}
  ~ScopedGemmLimits() { set_gemm_limits(before_); }
  ScopedGemmLimits(const ScopedGemmLimits&) = delete;
  ScopedGemmLimits& operator=(const ScopedGemmLimits&) = delete;

 private:
  GemmLimits before_;
};

}  // namespace test_hooks
}  // namespace kktrain
