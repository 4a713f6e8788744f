// The one place that papers over differences between Kokkos 3.4 (Debian/Trilinos) and 4.x.
// Everything else includes this instead of naming version-specific spellings: math functions
// moved from Kokkos::Experimental:: to Kokkos:: in 3.7, and the default spaces are aliased here
// so kernels read the same on Serial, OpenMP, CUDA and HIP builds.
#pragma once

#include <Kokkos_Core.hpp>

namespace kktrain {

using ExecSpace = Kokkos::DefaultExecutionSpace;
using MemSpace = ExecSpace::memory_space;
using HostSpace = Kokkos::HostSpace;

// 1-D device View of T; the project's default container for flat buffers.
template <class T>
using DView = Kokkos::View<T*, Kokkos::LayoutRight, MemSpace>;
// 2-D row-major device View (rows, cols); what GEMM consumes.
template <class T>
using DMatrix = Kokkos::View<T**, Kokkos::LayoutRight, MemSpace>;
// Unmanaged 2-D row-major window into someone else's allocation.
template <class T>
using DMatrixU =
    Kokkos::View<T**, Kokkos::LayoutRight, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
template <class T>
using DViewU =
    Kokkos::View<T*, Kokkos::LayoutRight, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

// Unmanaged 1-D host View over host memory (a std::vector's data): the host side of a deep_copy
// at the edges (data loading, logging, checkpoint I/O, tests).
template <class T>
using HViewU =
    Kokkos::View<T*, Kokkos::LayoutRight, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

// The bytes of a device tensor whose element type is a runtime dtype: what crosses module
// boundaries where the dtype is data (checkpoint shards, optimizer state), so that host code can
// only reach it through a deep_copy into a HostBytesU.
using DBytesU =
    Kokkos::View<char*, Kokkos::LayoutRight, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
using HostBytesU =
    Kokkos::View<char*, Kokkos::LayoutRight, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
// The bytes of a typed device View.
template <class V>
DBytesU bytes_of(const V& v) {
  using T = typename V::non_const_value_type;
  return DBytesU(reinterpret_cast<char*>(const_cast<T*>(v.data())), v.span() * sizeof(T));
}

// Launch policies with 64-bit indices. On CUDA and HIP a policy's default index type is the
// execution space's size_type, 32-bit unsigned: a launch over a 7B model's parameters (~7e9
// elements) would be silently truncated. Every launch of the project goes through these.
using RangePolicy = Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<int64_t>>;
using TeamPolicy = Kokkos::TeamPolicy<ExecSpace, Kokkos::IndexType<int64_t>>;
using TeamMember = TeamPolicy::member_type;
static_assert(sizeof(RangePolicy::index_type) == 8 && sizeof(TeamPolicy::index_type) == 8,
              "kktrain's launch policies must index with 64 bits");

namespace math {
#if KOKKOS_VERSION >= 30700
using Kokkos::cos;
using Kokkos::exp;
using Kokkos::expm1;
using Kokkos::fabs;
using Kokkos::log;
using Kokkos::log1p;
using Kokkos::pow;
using Kokkos::sin;
using Kokkos::sqrt;
using Kokkos::tanh;
#else
using Kokkos::Experimental::cos;
using Kokkos::Experimental::exp;
using Kokkos::Experimental::expm1;
using Kokkos::Experimental::fabs;
using Kokkos::Experimental::log;
using Kokkos::Experimental::log1p;
using Kokkos::Experimental::pow;
using Kokkos::Experimental::sin;
using Kokkos::Experimental::sqrt;
using Kokkos::Experimental::tanh;
#endif
// Device-safe tests on the IEEE bit pattern (no reliance on <cmath> in device code).
KOKKOS_INLINE_FUNCTION bool isfinite_f(float x) {
  return (x - x) == (x - x);
}
KOKKOS_INLINE_FUNCTION float max_f(float a, float b) {
  return a > b ? a : b;
}
}  // namespace math

}  // namespace kktrain
