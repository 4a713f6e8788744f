// Kernel launches counted per process: every Kokkos parallel_for, parallel_reduce and
// parallel_scan this process dispatches (the project's own kernels and Kokkos' internal ones, such
// as a View's initialization), and every deep_copy apart. A step's launches are a metrics column
// (`kernel_launches`, apps/train/step_sync.cpp) beside its host synchronizations
// (core/host_sync.hpp): on a GPU each launch costs a few microseconds of host time whatever its
// size, so their number says what fusing kernels or replaying a captured step would save.
//
// How: Kokkos Tools callbacks (begin_parallel_for / _reduce / _scan, begin_deep_copy) that kktrain
// registers itself after Kokkos::initialize. Kernels are launched from ~40 files with
// Kokkos::parallel_* directly, not only through core/launch.hpp, so only Kokkos sees them all.
//   - A tool library the user loads (KOKKOS_TOOLS_LIBS / KOKKOS_PROFILE_LIBRARY: a profiler,
//     tests/tools/fence_counter.cpp) keeps working: each callback calls the one it replaced.
//   - Kokkos >= 3.5 fences the device around each kernel while any callback is set unless the
//     tool asked otherwise (kokkosp_request_tool_settings). prepare_launch_counting(), before
//     Kokkos::initialize, asks for no fences; a loaded tool library replaces that request with
//     its own, as it would without kktrain. Kokkos 3.4 adds no fences for tools.
//   - Kokkos::Tools::profileLibraryLoaded() is true from then on: code that marks regions for a
//     profiler asks external_tool_loaded() instead (ops/gemm.cpp).
// The cost when counting: one relaxed atomic add and Kokkos' building of the kernel's name per
// launch, on the host; results are unchanged.
#pragma once

#include <cstdint>

namespace kktrain {

// Before Kokkos::initialize: asks Kokkos (>= 3.5) not to fence around kernels for kktrain's own
// callbacks. Harmless without start_launch_counting().
void prepare_launch_counting();
// After Kokkos::initialize: registers the counting callbacks, chained to a loaded tool's.
void start_launch_counting();

// Counts since start_launch_counting() (0 before, and in programs that never call it).
struct LaunchCounts {
  int64_t kernels = 0;      // parallel_for + parallel_reduce + parallel_scan
  int64_t deep_copies = 0;  // Kokkos::deep_copy calls (each one a copy or a fill)
  LaunchCounts since(const LaunchCounts& earlier) const {
    return LaunchCounts{kernels - earlier.kernels, deep_copies - earlier.deep_copies};
  }
};
LaunchCounts launch_counts();

// Whether a Kokkos Tools library (a profiler) was loaded when counting started; without counting,
// Kokkos::Tools::profileLibraryLoaded().
bool external_tool_loaded();

}  // namespace kktrain
