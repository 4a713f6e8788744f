// bfloat16 as a 2-byte value type usable in host and device code.
//
// Why our own type: Kokkos 3.4 has no bhalf_t, and Kokkos 4.x's bhalf_t is a 4-byte float on host
// backends, which would double the memory of "bf16" tensors and hide rounding. This type stores
// the upper 16 bits of an IEEE binary32. Conversion from float rounds to nearest, ties to even;
// NaN stays NaN (forced quiet, sign kept); +-inf are preserved; finite values past the largest
// bf16 round to inf exactly as IEEE round-to-nearest prescribes. Conversion to float is exact.
//
// Also here: TE FusedAdam's "store_param_remainders" split of an fp32 master into a bf16 parameter
// plus a signed int16 remainder, and its rebuild (docs/precision.md, "bf16 parameter + int16
// remainder"):
//   rebuild: if remainder < 0, bf16 bits -= 1; fp32 bits = bf16 bits << 16 | (uint16)remainder
//   split:   high = bits >> 16, low = bits & 0xffff; if low >= 0x8000, high += 1
// The split rounds ties away from zero (not to even) and the pair round-trips losslessly.
#pragma once

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace kktrain {

KOKKOS_INLINE_FUNCTION uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}

KOKKOS_INLINE_FUNCTION float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

// Round an fp32 value to the nearest bf16 (ties to even), as an fp32 bit pattern: the bf16 bits in
// the high half, the low half zero. Branch-free (a select) and all in 32-bit lanes, so loops over
// it vectorize without narrowing; bits_float of the result is the rounded value.
KOKKOS_INLINE_FUNCTION uint32_t bf16_round_bits32(float f) {
  const uint32_t u = float_bits(f);
  // Adding 0x7fff plus the lowest kept bit rounds to nearest with ties to even; a carry out of the
  // mantissa bumps the exponent, and a carry into the all-ones exponent gives inf, as IEEE says.
  const uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
  const uint32_t quiet_nan = u | 0x00400000u;  // NaN: keep sign and payload top, make quiet
  return ((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded) & 0xffff0000u;
}

// Round an fp32 bit pattern to the nearest bf16 bit pattern (ties to even).
KOKKOS_INLINE_FUNCTION uint16_t bf16_bits_from_float(float f) {
  return static_cast<uint16_t>(bf16_round_bits32(f) >> 16);
}

struct bf16 {
  uint16_t bits;

  bf16() = default;
  KOKKOS_INLINE_FUNCTION explicit bf16(float f) : bits(bf16_bits_from_float(f)) {}
  KOKKOS_INLINE_FUNCTION static bf16 from_bits(uint16_t b) {
    bf16 h;
    h.bits = b;
    return h;
  }
  KOKKOS_INLINE_FUNCTION float to_float() const {
    return bits_float(static_cast<uint32_t>(bits) << 16);
  }
  KOKKOS_INLINE_FUNCTION explicit operator float() const { return to_float(); }
};

static_assert(sizeof(bf16) == 2, "bf16 must be 2 bytes");

// Round a float to the nearest bf16 value, returned as float (an fp32 holding a bf16 value).
KOKKOS_INLINE_FUNCTION float round_to_bf16(float f) {
  return bits_float(bf16_round_bits32(f));
}

// Whether the values of a tensor role (the residual stream, the compute dtype, what passes
// between units) are rounded to bf16 because the role's dtype is bf16, or kept in fp32. Fixed
// at launch for each role and passed to kernels as this type, never as a bare bool.
enum class Rounding : uint8_t { fp32 = 0, bf16 = 1 };
// The rounding a container implies: a bf16 container holds bf16 values, a float one fp32 values
// (the compute dtype of a pass is its template parameter TC; its rounding is rounding_of<TC>()).
template <class T>
constexpr Rounding rounding_of() {
  return std::is_same<T, bf16>::value ? Rounding::bf16 : Rounding::fp32;
}

// Uniform conversions used by dtype-generic kernels: to_f32(x) and from_f32<T>(f).
KOKKOS_INLINE_FUNCTION float to_f32(float x) {
  return x;
}
KOKKOS_INLINE_FUNCTION float to_f32(bf16 x) {
  return x.to_float();
}
// load_f32(p, i) = to_f32(p[i]), reading a bf16 as its 16-bit pattern (a load GCC vectorizes;
// a load of the bf16 struct it does not).
KOKKOS_INLINE_FUNCTION float load_f32(const float* p, int64_t i) {
  return p[i];
}
KOKKOS_INLINE_FUNCTION float load_f32(const bf16* p, int64_t i) {
  return bits_float(static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(p)[i]) << 16);
}

template <class T>
KOKKOS_INLINE_FUNCTION T from_f32(float f);
template <>
KOKKOS_INLINE_FUNCTION float from_f32<float>(float f) {
  return f;
}
template <>
KOKKOS_INLINE_FUNCTION bf16 from_f32<bf16>(float f) {
  return bf16(f);
}

// store_as(p, i, x): p[i] = T(x). The bf16 store writes the 16-bit pattern directly (a struct
// copy would block loop vectorization).
KOKKOS_INLINE_FUNCTION void store_as(float* p, int64_t i, float x) {
  p[i] = x;
}
KOKKOS_INLINE_FUNCTION void store_as(bf16* p, int64_t i, float x) {
  reinterpret_cast<uint16_t*>(p)[i] = bf16_bits_from_float(x);
}
// p[i] = T(x), returning the stored value as a float (rounds once for bf16).
KOKKOS_INLINE_FUNCTION float store_rounded(float* p, int64_t i, float x) {
  p[i] = x;
  return x;
}
KOKKOS_INLINE_FUNCTION float store_rounded(bf16* p, int64_t i, float x) {
  const uint32_t r = bf16_round_bits32(x);
  reinterpret_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(r >> 16);
  return bits_float(r);
}
KOKKOS_INLINE_FUNCTION void store_bits(bf16* p, int64_t i, bf16 v) {
  reinterpret_cast<uint16_t*>(p)[i] = v.bits;
}

// ---- TE-style fp32 master = bf16 parameter + int16 remainder ---------------------------------

struct Bf16Remainder {
  bf16 high;
  int16_t remainder;
};

// Split an fp32 value into (bf16 param, int16 remainder) with TE's rule.
KOKKOS_INLINE_FUNCTION Bf16Remainder split_remainder(float master) {
  const uint32_t u = float_bits(master);
  uint16_t high = static_cast<uint16_t>(u >> 16);
  const uint16_t low = static_cast<uint16_t>(u & 0xffffu);
  if (low >= 0x8000u) high = static_cast<uint16_t>(high + 1u);
  Bf16Remainder r;
  r.high = bf16::from_bits(high);
  r.remainder = static_cast<int16_t>(low);  // two's complement reinterpretation of the low half
  return r;
}

// Rebuild the exact fp32 master from (bf16 param, int16 remainder).
KOKKOS_INLINE_FUNCTION float rebuild_remainder(bf16 param, int16_t remainder) {
  uint16_t high = param.bits;
  if (remainder < 0) high = static_cast<uint16_t>(high - 1u);
  const uint32_t u = (static_cast<uint32_t>(high) << 16) | static_cast<uint16_t>(remainder);
  return bits_float(u);
}

// ---- two adjacent 16-bit values as one 32-bit word ----------------------------------------------
// Kernels over bf16 (and int16) arrays handle elements 2j and 2j+1 together through the 32-bit
// word j: widening is a shift or a mask and narrowing a shift and an or, all in 32-bit lanes, so
// the loops vectorize without the 16 <-> 32-bit repacking that element-wise code needs. Words
// must be 4-byte aligned; element 2j is the low half (little-endian, as on every Kokkos backend).
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "bf16 word access assumes a little-endian target"
#endif
#if defined(__GNUC__)
typedef uint32_t __attribute__((may_alias)) word32;  // may alias the bf16/int16 arrays it reads
#else
typedef uint32_t word32;
#endif

KOKKOS_INLINE_FUNCTION uint32_t load_word(const void* p, int64_t j) {
  return static_cast<const word32*>(p)[j];
}
KOKKOS_INLINE_FUNCTION void store_word(void* p, int64_t j, uint32_t w) {
  static_cast<word32*>(p)[j] = w;
}
// The two bf16 of a word, widened (exact).
KOKKOS_INLINE_FUNCTION float bf16_lo(uint32_t w) {
  return bits_float(w << 16);
}
KOKKOS_INLINE_FUNCTION float bf16_hi(uint32_t w) {
  return bits_float(w & 0xffff0000u);
}
// The word of two bf16 given as fp32 bit patterns with zero low halves (bf16_round_bits32).
KOKKOS_INLINE_FUNCTION uint32_t bf16_word(uint32_t lo32, uint32_t hi32) {
  return (lo32 >> 16) | hi32;
}

// Remainder pairs word by word: rebuild_remainder of the low / high elements of a bf16 word and
// an int16 word; split_remainder_high32 is split_remainder's bf16 as an fp32 bit pattern (the
// carry of low >= 0x8000 into the high half, wrapping as the uint16 does); the remainder is the
// master's low half.
KOKKOS_INLINE_FUNCTION float rebuild_remainder_lo(uint32_t param_word, uint32_t rem_word) {
  return bits_float(((param_word << 16) - ((rem_word & 0x8000u) << 1)) | (rem_word & 0xffffu));
}
KOKKOS_INLINE_FUNCTION float rebuild_remainder_hi(uint32_t param_word, uint32_t rem_word) {
  return bits_float(((param_word & 0xffff0000u) - ((rem_word >> 15) & 0x10000u)) |
                    (rem_word >> 16));
}
KOKKOS_INLINE_FUNCTION uint32_t split_remainder_high32(float master) {
  return (float_bits(master) + 0x8000u) & 0xffff0000u;
}
KOKKOS_INLINE_FUNCTION uint32_t remainder_word(float master_lo, float master_hi) {
  return (float_bits(master_lo) & 0xffffu) | (float_bits(master_hi) << 16);
}

}  // namespace kktrain
