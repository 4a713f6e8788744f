// The counting half of the update kernels (update_kernels.cpp only): what one call of a kernel
// body counts over its span (Tally), and the launch that runs a body as a parallel_for or, when
// counting, as a parallel_reduce of those tallies into UpdateCounts.
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/bf16.hpp"
#include "core/launch.hpp"
#include "optim/update_kernels.hpp"

namespace kktrain {
namespace update_detail {

// 1 when an update took `from` to a different fp32 result `to` but the stored value is `before`
// again (UpdateCounts): exact comparisons, so NaN never counts. Without a master from == before.
KOKKOS_INLINE_FUNCTION uint32_t unchanged(float from, float to, float before, float stored) {
  return static_cast<uint32_t>((to != from) & (stored == before));
}
// The same for a value stored as T: only bf16 values are counted.
template <class T>
KOKKOS_INLINE_FUNCTION uint32_t unchanged_as(float from, float to, float before, float stored) {
  if constexpr (std::is_same<T, bf16>::value) {
    return unchanged(from, to, before, stored);
  } else {
    (void)from, (void)to, (void)before, (void)stored;
    return 0;
  }
}

// What one call counted over its span, or nothing at all in a launch that does not count: there
// the flags are never used and the compiler drops them, leaving the loops as they were. A span is
// at most one block (UpdatePlan keeps blocks under 2^16 elements), so the parameter and exp_avg
// counts share one 32-bit lane (16 bits each): one accumulator fewer in the vectorized loop, which
// otherwise runs out of registers.
template <bool Count>
struct Tally {
  uint32_t pm = 0, v = 0;  // pm: parameters in the low 16 bits, exp_avg in the high 16
  KOKKOS_INLINE_FUNCTION void add(uint32_t p, uint32_t m, uint32_t v_lost) {
    pm += p + (m << 16);
    v += v_lost;
  }
  KOKKOS_INLINE_FUNCTION void add(const Tally& o) {
    pm += o.pm;
    v += o.v;
  }
};
template <>
struct Tally<false> {
  KOKKOS_INLINE_FUNCTION void add(uint32_t, uint32_t, uint32_t) {}
  KOKKOS_INLINE_FUNCTION void add(const Tally&) {}
};
template <bool Count>
KOKKOS_INLINE_FUNCTION Tally<Count> tally_of(uint32_t param, uint32_t m, uint32_t v) {
  Tally<Count> t;
  t.add(param, m, v);
  return t;
}

// One launch of body(tensor, lo, hi, Tally<Count>&) over the plan's blocks: a parallel_for, or,
// counting, a parallel_reduce into counts[1] (device memory) that a one-thread kernel then adds
// to counts[0]: no wait for the device (Optimizer::rounding_counts reads them back).
template <class Body>
void launch_update(std::false_type, const char* name, const UpdatePlan& plan, const Body& body,
                   UpdateCounts*) {
  for_tensor_blocks(
      name, plan.blocks(), KOKKOS_LAMBDA(const int64_t t, const int64_t lo, const int64_t hi) {
        Tally<false> none;
        body(t, lo, hi, none);
      });
}
template <class Body>
void launch_update(std::true_type, const char* name, const UpdatePlan& plan, const Body& body,
                   UpdateCounts* counts) {
  const Kokkos::View<UpdateCounts, MemSpace> sum(counts + 1);
  for_tensor_blocks_reduce(
      name, plan.blocks(),
      KOKKOS_LAMBDA(const int64_t t, const int64_t lo, const int64_t hi, UpdateCounts& acc) {
        Tally<true> c;
        body(t, lo, hi, c);
        acc.param_unchanged += c.pm & 0xffffu;
        acc.moment_lost[0] += c.pm >> 16;
        acc.moment_lost[1] += c.v;
      },
      sum);
  Kokkos::parallel_for(
      "update_counts_add", RangePolicy(0, 1),
      KOKKOS_LAMBDA(const int64_t) { counts[0] += counts[1]; });
}

}  // namespace update_detail
}  // namespace kktrain
