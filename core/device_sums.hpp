// Sums that stay on the device across a training step and reach the host at one synchronization.
//
// A step's losses (one per micro-batch and head) and its gradient sum of squares are each a
// reduction over device memory. Read back one by one, each would wait for the device; here each
// reduction lands in a device scratch scalar and a one-thread kernel adds it into its slot, so
// the host reads every slot at once, at the step's one wait for them (core/host_sync.hpp). The
// arithmetic is the one a host readback would do (the same reduction, then the same divisions
// and additions in double, in the same order), so values are bitwise those of reading each back.
#pragma once

#include <vector>

#include "core/host_sync.hpp"
#include "core/kokkos_compat.hpp"

namespace kktrain {

class DeviceSums {
 public:
  explicit DeviceSums(int slots);
  int size() const { return static_cast<int>(slots_.extent(0)); }
  // Every slot = 0 (a kernel; no wait).
  void zero();
  // slot = 0 (a kernel; no wait).
  void zero(int slot);
  // Reductions write their result here (a device scalar), then call add_scratch.
  const Kokkos::View<double, MemSpace>& scratch() const { return scratch_; }
  // slot += count > 0 ? scratch / count / then : 0 (a kernel; no wait).
  void add_scratch(int slot, double count = 1.0, double then = 1.0);
  // slot += the sum of x[0, n) (fp32 values summed in double) / count / then; 0 when count is 0.
  void add_mean(int slot, const float* x, int64_t n, double count, double then = 1.0);
  // slot += the sum of x[k * stride] for k in [0, n) (double values) / count; 0 when count is 0.
  void add_column_mean(int slot, const double* x, int64_t n, int64_t stride, double count);
  // to += from (a kernel; no wait).
  void add_slot(int to, int from);
  // Every slot on the host: one host synchronization (core/host_sync.hpp).
  std::vector<double> read() const;

 private:
  DView<double> slots_;
  Kokkos::View<double, MemSpace> scratch_;
};

}  // namespace kktrain
