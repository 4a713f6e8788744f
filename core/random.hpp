// Counter-based random numbers: every value is a pure function of (seed, stream, index), so
// results never depend on thread layout, backend, or how many ranks share the work. Used for
// weight initialization, data sampling and stochastic rounding.
#pragma once

#include <cstdint>
#include <string>

#include "core/kokkos_compat.hpp"

namespace kktrain {

// SplitMix64 finalizer: a bijective 64-bit mix with good avalanche.
KOKKOS_INLINE_FUNCTION uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

KOKKOS_INLINE_FUNCTION uint64_t hash3(uint64_t seed, uint64_t stream, uint64_t index) {
  return mix64(mix64(mix64(seed) ^ stream) ^ index);
}

// Uniform in (0, 1): 24 random bits, offset by half a step so 0 is never returned.
KOKKOS_INLINE_FUNCTION float uniform01(uint64_t seed, uint64_t stream, uint64_t index) {
  const uint32_t bits = static_cast<uint32_t>(hash3(seed, stream, index) >> 40);
  return (static_cast<float>(bits) + 0.5f) * (1.0f / 16777216.0f);
}

// Standard normal by Box-Muller from two independent uniforms of the same (seed, stream, index).
KOKKOS_INLINE_FUNCTION float normal01(uint64_t seed, uint64_t stream, uint64_t index) {
  const uint64_t h = hash3(seed, stream, index);
  const double u1 = (static_cast<double>(h >> 40) + 0.5) / 16777216.0;
  const double u2 = (static_cast<double>((h >> 16) & 0xffffffull) + 0.5) / 16777216.0;
  return static_cast<float>(math::sqrt(-2.0 * math::log(u1)) * math::cos(6.283185307179586 * u2));
}

// FNV-1a hash of a name: the random stream of a named object (e.g. a parameter).
inline uint64_t name_stream(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace kktrain
