// Shared pieces of mpi_collectives_check (tests/tools/mpi_collectives_check.cpp and
// mpi_fsdp_check.cpp): a failure recorder that names every mismatch, seeded data that every rank
// can recompute for every other rank, an independent bf16 reference rounding, and the set of
// results a reduction may legally produce.
//
// Why a set of results: MPI (and NCCL) may combine the ranks' contributions in any order for a
// commutative op, and even a different order per message size or algorithm. Every such
// reduction is still a binary tree of pairwise additions, each rounded to the element type, so
// the set of all binary trees over the W contributions (15 shapes at W = 4) holds every legal
// answer. A result is correct when it is one of them; that is exact, not a tolerance.
//
// The bf16 reference here does not reuse core/bf16.hpp (the code under test): it rounds in
// double arithmetic with nearbyint (round-to-nearest-even mode), so a bug there cannot cancel out.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "core/kokkos_compat.hpp"
#include "core/random.hpp"
#include "parallel/communicator.hpp"

namespace kktrain::check {

// Records failures per named check; prints the first few details of each and a summary.
class Checker {
 public:
  Checker(int rank, int world) : rank_(rank), world_(world) {}
  void fail(const std::string& check, const std::string& detail) {
    int& n = counts_[check];
    if (n++ < 4) line("FAIL " + check + ": " + detail);
  }
  void expect(bool ok, const std::string& check, const std::string& detail = "") {
    if (!ok) fail(check, detail.empty() ? "condition false" : detail);
  }
  int failures() const {
    int n = 0;
    for (const auto& c : counts_) n += c.second;
    return n;
  }
  void summary() const {
    for (const auto& c : counts_) {
      line(std::to_string(c.second) + " mismatch(es) in " + c.first);
    }
  }
  // One write per line, so lines of several ranks do not interleave on mpirun's stderr.
  void line(const std::string& text) const {
    const std::string s =
        "rank " + std::to_string(rank_) + "/" + std::to_string(world_) + ": " + text + "\n";
    std::fwrite(s.data(), 1, s.size(), stderr);
  }

 private:
  int rank_, world_;
  std::map<std::string, int> counts_;
};

// The MPI count limit the check runs under: --max-count L on mpi_collectives_check's command line
// (the communicator's MpiLimits::max_count, standing in for INT_MAX); 0 when not given.
inline std::size_t& lowered_max_count() {
  static std::size_t l = 0;
  return l;
}

// The collective sizes a check runs. Under --max-count L (MPI calls cut into pieces of L) a size
// of more than 64 L is left out: every size kept still splits into up to 64 pieces with a
// remainder, while a count of 70001 would be 14,000 collectives per check at L = 5, which three
// ranks on two busy cores take minutes to run.
inline std::vector<std::size_t> collective_sizes(std::initializer_list<std::size_t> sizes) {
  const std::size_t l = lowered_max_count();
  std::vector<std::size_t> kept;
  for (std::size_t n : sizes) {
    if (l == 0 || n <= 64 * l) kept.push_back(n);
  }
  return kept;
}

// The counters before a measured collective, zeroed first: the checks compare the bytes of one
// call exactly, and a running total holding fractional allreduce volumes would make the
// difference inexact.
inline CommStats fresh_stats(Communicator& comm) {
  comm.reset_stats();
  return comm.stats();
}

inline uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// Bitwise equality, except that any NaN matches any NaN (payloads may travel differently).
inline bool same(float a, float b) {
  return bits_of(a) == bits_of(b) || (std::isnan(a) && std::isnan(b));
}
inline std::string show(float f) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g (0x%08x)", static_cast<double>(f), bits_of(f));
  return buf;
}

// Rounding of a real x to a binary format with `precision` significant bits and bf16's exponent
// range (quantum at least 2^-133, overflow to inf), in the given mode. nearest_even is the bf16
// reference; the others are the wrong schemes the crafted cases must tell apart from it.
enum class Mode { nearest_even, truncate, half_away };
inline float round_bits(double x, int precision, Mode mode) {
  if (std::isnan(x) || std::isinf(x) || x == 0.0) return static_cast<float>(x);
  int e = 0;
  std::frexp(x, &e);                               // x = m 2^e, 0.5 <= |m| < 1
  const int qexp = std::max(e - precision, -133);  // bf16's smallest subnormal is 2^-133
  const double q = std::ldexp(x, -qexp);           // exact: a power-of-two scaling
  double r = 0.0;
  switch (mode) {
    case Mode::nearest_even:
      r = std::nearbyint(q);  // default rounding mode: to nearest, ties to even
      break;
    case Mode::truncate:
      r = std::trunc(q);
      break;
    case Mode::half_away:
      r = std::round(q);
      break;
  }
  const double v = std::ldexp(r, qexp);
  // Past bf16's largest finite value (2^128 (1 - 2^-8)) rounding lands on 2^128: inf.
  if (std::fabs(v) >= std::ldexp(1.0, 128)) return v > 0 ? INFINITY : -INFINITY;
  return static_cast<float>(v);
}
// The reference nearest-even bf16 rounding of an fp32 (NaN stays NaN).
inline float rne(float x) {
  return round_bits(x, 8, Mode::nearest_even);
}

// One addition as the bf16 reduction does it: widen to fp32, add, round once to bf16.
inline float add_bf16(float a, float b) {
  return rne(a + b);
}
inline float add_f32(float a, float b) {
  return a + b;
}

// Every result a reduction of x (one value per rank) can give: all binary trees of pairwise
// additions `add` (commutative), deduplicated (NaN-insensitively).
inline std::vector<float> tree_sums(const std::vector<float>& x,
                                    const std::function<float(float, float)>& add) {
  const int n = static_cast<int>(x.size());
  std::vector<std::vector<float>> memo(1u << n);
  auto put = [](std::vector<float>& s, float v) {
    for (float o : s)
      if (same(o, v)) return;
    s.push_back(v);
  };
  for (unsigned mask = 1; mask < (1u << n); ++mask) {
    if ((mask & (mask - 1)) == 0) {
      memo[mask].push_back(x[__builtin_ctz(mask)]);
      continue;
    }
    const unsigned low = mask & (~mask + 1);  // splits {A, B} counted once: A holds the low bit
    for (unsigned a = (mask - 1) & mask; a > 0; a = (a - 1) & mask) {
      if (!(a & low)) continue;
      for (float va : memo[a])
        for (float vb : memo[mask ^ a]) put(memo[mask], add(va, vb));
    }
  }
  return memo[(1u << n) - 1];
}
inline bool contains(const std::vector<float>& set, float v) {
  for (float s : set)
    if (same(s, v)) return true;
  return false;
}
inline std::string show_set(const std::vector<float>& set) {
  std::string s = "{";
  for (std::size_t i = 0; i < set.size(); ++i) s += (i ? ", " : "") + show(set[i]);
  return s + "}";
}

// Higham's bound for any summation order (any binary tree) of n terms in a format with unit
// roundoff u: |computed - exact| <= gamma_{n-1} sum |x_i|, gamma_k = k u / (1 - k u).
inline double gamma_k(int k, double u) {
  return k * u / (1.0 - k * u);
}
inline double gamma_f32(int k) {
  return gamma_k(k, std::ldexp(1.0, -24));
}

// ---- seeded data: a pure function of (stream, rank, index), so every rank can compute it ------

constexpr uint64_t kSeed = 20240611;

inline uint64_t draw(uint64_t stream, int rank, uint64_t i) {
  return hash3(kSeed, stream * 64 + static_cast<uint64_t>(rank), i);
}
// fp32 with all 24 significant bits random, sign random, magnitude in [2^-4, 2^4).
inline float random_f32(uint64_t stream, int rank, uint64_t i) {
  const uint64_t h = draw(stream, rank, i);
  const float m = 1.0f + static_cast<float>(h & 0x7fffff) * (1.0f / 8388608.0f);
  const int e = static_cast<int>((h >> 23) % 8) - 4;
  return ((h >> 40) & 1 ? -1.0f : 1.0f) * std::ldexp(m, e);
}
// A bf16 value (8 significant bits) with magnitude in [2^-3, 2^3): close enough in exponent for
// additions to round and interact.
inline float random_bf16(uint64_t stream, int rank, uint64_t i) {
  const uint64_t h = draw(stream, rank, i);
  const float m = 1.0f + static_cast<float>(h & 0x7f) * (1.0f / 128.0f);
  const int e = static_cast<int>((h >> 7) % 6) - 3;
  return ((h >> 40) & 1 ? -1.0f : 1.0f) * std::ldexp(m, e);
}

// ---- host <-> default memory space ------------------------------------------------------------

template <class T>
using HostU = Kokkos::View<T*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

// Host copy of n elements of T at device pointer p.
template <class T>
std::vector<T> to_host(const T* p, std::size_t n) {
  std::vector<T> out(n);
  if (n > 0) Kokkos::deep_copy(HostU<T>(out.data(), n), DViewU<T>(const_cast<T*>(p), n));
  return out;
}
// Device pointer p (n elements) = host values.
template <class T>
void to_device(T* p, const std::vector<T>& v) {
  if (!v.empty())
    Kokkos::deep_copy(DViewU<T>(p, v.size()), HostU<T>(const_cast<T*>(v.data()), v.size()));
}

}  // namespace kktrain::check
