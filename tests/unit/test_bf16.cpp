// core/bf16.hpp: the 2-byte bf16 type, its conversions, and TE's fp32-master remainder split.
//
// float -> bf16 and the remainder split are checked over all 2^32 float bit patterns against
// references written here independently of the code under test:
//   - RNE reference: picks between the two bf16 neighbours of x by exact distance in double
//     arithmetic (a difference of two floats of the same binade is exact in double), ties to the
//     candidate with an even last bit, with 2^128 standing in for the neighbour past the largest
//     finite bf16 (IEEE: overflow happens where rounding with unbounded exponent reaches 2^128).
//   - Remainder reference: the master bits are high * 2^16 + remainder (remainder sign-extended,
//     everything mod 2^32), so split is high = (bits + 0x8000) >> 16 and remainder = the rest.
// The exhaustive loops are split into quarters so ctest can run them in parallel and each stays
// a few seconds in Release. Kokkos need not be initialized: everything here is inline host code.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

#include "core/bf16.hpp"

namespace kktrain {
namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

bool is_nan_bits(uint32_t u) {
  return (u & 0x7fffffffu) > 0x7f800000u;
}

// Value of a non-negative bf16 magnitude (15 bits) from its fields; 0x7f80 reads as 2^128.
double bf16_magnitude_value(uint32_t mag) {
  const int e = static_cast<int>(mag >> 7);
  const int m = static_cast<int>(mag & 0x7fu);
  if (e == 0) return std::ldexp(m, -133);  // subnormal: m/128 * 2^-126
  return std::ldexp(128 + m, e - 134);     // normal: (1 + m/128) * 2^(e-127); e=255,m=0 -> 2^128
}

// All 0x7f81 magnitudes from +0 to 0x7f80 (2^128), built once.
const std::vector<double>& magnitude_table() {
  static const std::vector<double> t = [] {
    std::vector<double> v(0x7f81);
    for (uint32_t m = 0; m <= 0x7f80u; ++m) v[m] = bf16_magnitude_value(m);
    return v;
  }();
  return t;
}

// Reference float -> bf16 bits (see the file comment). Does not use bf16_bits_from_float.
uint16_t reference_rne(uint32_t u, const double* table) {
  const uint32_t sign = u >> 31;
  const uint32_t mag = u & 0x7fffffffu;
  if (mag > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN, sign kept
  const uint32_t lo = mag >> 16;
  if ((mag & 0xffffu) == 0) return static_cast<uint16_t>(u >> 16);  // exact (zeros, inf too)
  const uint32_t hi = lo + 1;  // <= 0x7f80 because mag < 0x7f800000 here
  const double x = static_cast<double>(float_of(mag));
  const double below = x - table[lo];
  const double above = table[hi] - x;
  uint32_t pick;
  if (below < above) {
    pick = lo;
  } else if (above < below) {
    pick = hi;
  } else {
    pick = (lo & 1u) ? hi : lo;
  }
  return static_cast<uint16_t>((sign << 15) | pick);
}

// Checks float -> bf16 for every bit pattern in [begin, end) (end exclusive, 64-bit).
void check_conversion_range(uint64_t begin, uint64_t end) {
  const double* table = magnitude_table().data();
  uint64_t mismatches = 0, ctor_mismatches = 0, word_mismatches = 0;
  for (uint64_t i = begin; i < end; ++i) {
    const uint32_t u = static_cast<uint32_t>(i);
    const float f = float_of(u);
    const uint16_t got = bf16_bits_from_float(f);
    const uint16_t want = reference_rne(u, table);
    if (got != want && ++mismatches <= 5) {
      ADD_FAILURE() << std::hex << "float bits 0x" << u << ": got 0x" << got << ", want 0x" << want;
    }
    if (bf16(f).bits != got) ++ctor_mismatches;
    // The 32-bit forms the word-by-word kernels use: the rounded value as an fp32 pattern, and
    // u read as a word of two bf16 (element 2j in the low half), widened and packed back.
    if (bf16_round_bits32(f) != static_cast<uint32_t>(want) << 16) ++word_mismatches;
    if (bits_of(round_to_bf16(f)) != static_cast<uint32_t>(want) << 16) ++word_mismatches;
    const uint32_t lo32 = bits_of(bf16_lo(u)), hi32 = bits_of(bf16_hi(u));
    if (lo32 != u << 16 || hi32 != (u & 0xffff0000u) || bf16_word(lo32, hi32) != u)
      ++word_mismatches;
  }
  EXPECT_EQ(mismatches, 0u);
  EXPECT_EQ(ctor_mismatches, 0u) << "bf16(float) disagrees with bf16_bits_from_float";
  EXPECT_EQ(word_mismatches, 0u) << "32-bit / word forms disagree with the reference";
}

TEST(Bf16Conversion, ExhaustiveQuarter0) {
  check_conversion_range(0x00000000ull, 0x40000000ull);
}
TEST(Bf16Conversion, ExhaustiveQuarter1) {
  check_conversion_range(0x40000000ull, 0x80000000ull);
}
TEST(Bf16Conversion, ExhaustiveQuarter2) {
  check_conversion_range(0x80000000ull, 0xc0000000ull);
}
TEST(Bf16Conversion, ExhaustiveQuarter3) {
  check_conversion_range(0xc0000000ull, 0x100000000ull);
}

// The reference itself must be right on hand-checked values, or the exhaustive test proves
// nothing.
TEST(Bf16Conversion, ReferenceSanity) {
  const double* t = magnitude_table().data();
  EXPECT_EQ(t[0x3f80], 1.0);
  EXPECT_EQ(t[0x0001], std::ldexp(1.0, -133));
  EXPECT_EQ(t[0x7f7f], std::ldexp(255.0, 120));
  EXPECT_EQ(t[0x7f80], std::ldexp(1.0, 128));
  EXPECT_EQ(reference_rne(0x3f808000u, t), 0x3f80);  // tie, even below
  EXPECT_EQ(reference_rne(0x3f818000u, t), 0x3f82);  // tie, odd below
  EXPECT_EQ(reference_rne(0x3f808001u, t), 0x3f81);
  EXPECT_EQ(reference_rne(0x7f7f8000u, t), 0x7f80);
  EXPECT_EQ(reference_rne(0x7f800001u, t), 0x7fc0);
}

uint16_t conv(uint32_t u) {
  return bf16_bits_from_float(float_of(u));
}

TEST(Bf16Conversion, TiesToEvenBothDirections) {
  // 1 + 2^-8 is halfway between 1 (0x3f80, even) and 1 + 2^-7 (0x3f81): down to even.
  EXPECT_EQ(conv(0x3f808000u), 0x3f80);
  EXPECT_EQ(conv(0xbf808000u), 0xbf80);
  // Halfway between 0x3f81 (odd) and 0x3f82: up to even.
  EXPECT_EQ(conv(0x3f818000u), 0x3f82);
  EXPECT_EQ(conv(0xbf818000u), 0xbf82);
  // One ulp either side of the tie is not a tie.
  EXPECT_EQ(conv(0x3f807fffu), 0x3f80);
  EXPECT_EQ(conv(0x3f808001u), 0x3f81);
  EXPECT_EQ(conv(0x3f817fffu), 0x3f81);
  // A tie whose round-up carries into the exponent: 0x3fff (odd) + half -> 0x4000 = 2.0.
  EXPECT_EQ(conv(0x3fff8000u), 0x4000);
  EXPECT_EQ(bf16(2.0f).bits, 0x4000);
}

TEST(Bf16Conversion, OverflowThreshold) {
  const uint16_t max_finite = 0x7f7f;
  EXPECT_EQ(bf16::from_bits(max_finite).to_float(), 0x1.fep127f);  // 3.38953139e38
  EXPECT_EQ(conv(0x7f7f0000u), max_finite);                        // exact
  EXPECT_EQ(conv(0x7f7f7fffu), max_finite);                        // just below the threshold
  EXPECT_EQ(conv(0x7f7f8000u), 0x7f80);  // at the threshold: tie, odd below -> inf
  EXPECT_EQ(conv(0x7f7f8001u), 0x7f80);  // above
  EXPECT_EQ(conv(0x7f7fffffu), 0x7f80);  // FLT_MAX
  EXPECT_EQ(conv(0xff7f7fffu), 0xff7f);
  EXPECT_EQ(conv(0xff7f8000u), 0xff80);
  EXPECT_TRUE(std::isinf(round_to_bf16(3.4e38f)));
}

TEST(Bf16Conversion, ZerosInfinitiesNaNs) {
  EXPECT_EQ(bf16(0.0f).bits, 0x0000);
  EXPECT_EQ(bf16(-0.0f).bits, 0x8000);
  EXPECT_TRUE(std::signbit(bf16(-0.0f).to_float()));
  EXPECT_EQ(bf16(INFINITY).bits, 0x7f80);
  EXPECT_EQ(bf16(-INFINITY).bits, 0xff80);
  EXPECT_EQ(conv(0x7fc00000u), 0x7fc0);  // quiet NaN unchanged
  EXPECT_EQ(conv(0xffc00000u), 0xffc0);  // sign kept
  EXPECT_EQ(conv(0x7fffffffu), 0x7fff);  // no carry out of a NaN payload into the sign
  // Signalling NaNs whose payload sits only in the dropped half must not become inf.
  EXPECT_EQ(conv(0x7f800001u), 0x7fc0);
  EXPECT_EQ(conv(0xff800001u), 0xffc0);
  EXPECT_EQ(conv(0x7f810000u), 0x7fc1);  // signalling in bf16 too: quieted, payload top kept
}

TEST(Bf16Conversion, Subnormals) {
  const uint16_t smallest = 0x0001;  // 2^-133
  EXPECT_EQ(bf16::from_bits(smallest).to_float(), std::ldexp(1.0f, -133));
  EXPECT_EQ(conv(0x00010000u), smallest);
  EXPECT_EQ(conv(0x00000001u), 0x0000);  // smallest float subnormal -> +0
  EXPECT_EQ(conv(0x80000001u), 0x8000);  // -> -0
  EXPECT_EQ(conv(0x00008000u), 0x0000);  // half the smallest bf16 subnormal: tie to even 0
  EXPECT_EQ(conv(0x00008001u), smallest);
  EXPECT_EQ(conv(0x00018000u), 0x0002);  // tie above an odd subnormal
  EXPECT_EQ(conv(0x007fffffu), 0x0080);  // largest float subnormal rounds up to smallest normal
  EXPECT_EQ(conv(0x007f7fffu), 0x007f);  // largest bf16 subnormal
  EXPECT_EQ(conv(0x807f8000u), 0x8080);
}

TEST(Bf16Conversion, ToFloatExactForAll65536Patterns) {
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const float f = bf16::from_bits(static_cast<uint16_t>(b)).to_float();
    ASSERT_EQ(bits_of(f), b << 16) << std::hex << "bf16 0x" << b;
    const uint32_t mag = b & 0x7fffu;
    if (mag > 0x7f80u) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << "bf16 0x" << b;
      continue;
    }
    const double want =
        (b & 0x8000u ? -1.0 : 1.0) * (mag == 0x7f80u ? INFINITY : bf16_magnitude_value(mag));
    ASSERT_EQ(static_cast<double>(f), want) << std::hex << "bf16 0x" << b;
    ASSERT_EQ(static_cast<float>(bf16::from_bits(static_cast<uint16_t>(b))), f);
    ASSERT_EQ(to_f32(bf16::from_bits(static_cast<uint16_t>(b))), f);
    // Every non-NaN bf16 value converts back to itself.
    ASSERT_EQ(bf16(f).bits, b) << std::hex << "bf16 0x" << b;
  }
}

TEST(Bf16Type, LayoutAndGenericConversions) {
  static_assert(sizeof(bf16) == 2 && alignof(bf16) == 2, "bf16 is a 2-byte value");
  static_assert(std::is_trivially_copyable<bf16>::value, "bf16 must be memcpy-able");
  static_assert(std::is_same<decltype(from_f32<bf16>(1.0f)), bf16>::value, "");
  EXPECT_EQ(from_f32<bf16>(1.00390625f).bits, 0x3f80);  // tie -> even
  EXPECT_EQ(from_f32<float>(1.00390625f), 1.00390625f);
  EXPECT_EQ(to_f32(1.5f), 1.5f);
  EXPECT_EQ(round_to_bf16(1.00390625f), 1.0f);
  EXPECT_EQ(round_to_bf16(0.1f), 0.10009765625f);
}

// ---- TE remainder split / rebuild ---------------------------------------------------------

struct RefSplit {
  uint16_t high;
  int16_t remainder;
};

RefSplit reference_split(uint32_t u) {
  const uint16_t high = static_cast<uint16_t>((u + 0x8000u) >> 16);  // wraps mod 2^32 like TE
  const uint32_t rest = u - (static_cast<uint32_t>(high) << 16);     // in [-0x8000, 0x7fff]
  return {high, static_cast<int16_t>(static_cast<uint16_t>(rest))};
}

uint32_t reference_rebuild(uint16_t high, int16_t remainder) {
  return (static_cast<uint32_t>(high) << 16) + static_cast<uint32_t>(int32_t{remainder});
}

// Checks, for every bit pattern in [begin, end): split matches the reference, rebuild(split(x))
// is bit-exact, and the bf16 half equals round-to-nearest-even except at exact ties (low half
// 0x8000), where it is one bf16 ulp further from zero. NaN masters are only round-tripped.
void check_split_range(uint64_t begin, uint64_t end) {
  uint64_t bad_split = 0, bad_trip = 0, bad_word = 0, bad_rne = 0, ties_away = 0;
  for (uint64_t i = begin; i < end; ++i) {
    const uint32_t u = static_cast<uint32_t>(i);
    const Bf16Remainder s = split_remainder(float_of(u));
    const RefSplit r = reference_split(u);
    if ((s.high.bits != r.high || s.remainder != r.remainder) && ++bad_split <= 5) {
      ADD_FAILURE() << std::hex << "split 0x" << u << ": got (0x" << s.high.bits << ", "
                    << s.remainder << "), want (0x" << r.high << ", " << r.remainder << ")";
    }
    if (bits_of(rebuild_remainder(s.high, s.remainder)) != u && ++bad_trip <= 5) {
      ADD_FAILURE() << std::hex << "round trip of 0x" << u << " failed";
    }
    // Word forms: the split as 32-bit patterns, and the rebuild from both halves of a word.
    const uint32_t high32 = static_cast<uint32_t>(s.high.bits) << 16;
    const uint32_t rem16 = static_cast<uint16_t>(s.remainder);
    const uint32_t pw = high32 | s.high.bits, rw = rem16 << 16 | rem16;
    if ((split_remainder_high32(float_of(u)) != high32 ||
         remainder_word(float_of(u), float_of(u)) != rw ||
         bits_of(rebuild_remainder_lo(pw, rw)) != u ||
         bits_of(rebuild_remainder_hi(pw, rw)) != u) &&
        ++bad_word <= 5) {
      ADD_FAILURE() << std::hex << "word forms of the split of 0x" << u << " disagree";
    }
    if (is_nan_bits(u)) continue;
    const uint16_t rne = bf16_bits_from_float(float_of(u));
    if ((u & 0xffffu) == 0x8000u) {
      // Tie: always away from zero in magnitude, for either sign.
      if (s.high.bits == static_cast<uint16_t>((u >> 16) + 1)) ++ties_away;
    } else if (s.high.bits != rne && ++bad_rne <= 5) {
      ADD_FAILURE() << std::hex << "bf16 half of 0x" << u << " is 0x" << s.high.bits
                    << ", round-to-nearest gives 0x" << rne;
    }
  }
  EXPECT_EQ(bad_split, 0u);
  EXPECT_EQ(bad_trip, 0u);
  EXPECT_EQ(bad_word, 0u);
  EXPECT_EQ(bad_rne, 0u);
  // Non-NaN ties in the range: one per high half that is not a NaN pattern.
  uint64_t want_ties = 0;
  for (uint64_t h = begin >> 16; h < (end >> 16); ++h) {
    if (!is_nan_bits(static_cast<uint32_t>(h << 16 | 0x8000u))) ++want_ties;
  }
  EXPECT_EQ(ties_away, want_ties);
}

TEST(Bf16Remainder, ExhaustiveQuarter0) {
  check_split_range(0x00000000ull, 0x40000000ull);
}
TEST(Bf16Remainder, ExhaustiveQuarter1) {
  check_split_range(0x40000000ull, 0x80000000ull);
}
TEST(Bf16Remainder, ExhaustiveQuarter2) {
  check_split_range(0x80000000ull, 0xc0000000ull);
}
TEST(Bf16Remainder, ExhaustiveQuarter3) {
  check_split_range(0xc0000000ull, 0x100000000ull);
}

TEST(Bf16Remainder, ReferenceSanity) {
  EXPECT_EQ(reference_split(0x3f808000u).high, 0x3f81);
  EXPECT_EQ(reference_split(0x3f808000u).remainder, -32768);
  EXPECT_EQ(reference_split(0x3f807fffu).high, 0x3f80);
  EXPECT_EQ(reference_split(0x3f807fffu).remainder, 32767);
  EXPECT_EQ(reference_rebuild(0x3f81, -32768), 0x3f808000u);
  EXPECT_EQ(reference_rebuild(0x0000, -1), 0xffffffffu);
}

struct Targeted {
  uint32_t bits;
  uint16_t high;
  int16_t remainder;
};

TEST(Bf16Remainder, TargetedCases) {
  const Targeted cases[] = {
      {0x00000000u, 0x0000, 0},       // +0
      {0x80000000u, 0x8000, 0},       // -0
      {0x3f800000u, 0x3f80, 0},       // 1.0 exact
      {0x3f807fffu, 0x3f80, 32767},   // just below a tie: truncate
      {0x3f808000u, 0x3f81, -32768},  // tie with even below: away from zero (RNE would not)
      {0x3f818000u, 0x3f82, -32768},  // tie with odd below: away from zero (= RNE)
      {0x3f80ffffu, 0x3f81, -1},
      {0xbf808000u, 0xbf81, -32768},  // negative tie: bits up = magnitude up = away from zero
      {0xbf807fffu, 0xbf80, 32767},
      {0x00000001u, 0x0000, 1},       // smallest subnormal
      {0x00008000u, 0x0001, -32768},  // subnormal tie
      {0x807fffffu, 0x8080, -1},      // largest negative subnormal rounds to -smallest normal
      {0x7f7fffffu, 0x7f80, -1},      // FLT_MAX: the bf16 half is +inf, still lossless
      {0x7f800000u, 0x7f80, 0},       // +inf
      {0xff800000u, 0xff80, 0},       // -inf
      {0x7fc00000u, 0x7fc0, 0},       // quiet NaN
      {0x7f800001u, 0x7f80, 1},       // NaN master: bf16 half is +inf (TE does the same)
      {0x7fff8000u, 0x8000, -32768},  // NaN master: bf16 half wraps to -0
      {0xffff8000u, 0x0000, -32768},  // NaN master: bf16 half wraps to +0
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(::testing::Message() << std::hex << "master 0x" << c.bits);
    const Bf16Remainder s = split_remainder(float_of(c.bits));
    EXPECT_EQ(s.high.bits, c.high);
    EXPECT_EQ(s.remainder, c.remainder);
    EXPECT_EQ(bits_of(rebuild_remainder(s.high, s.remainder)), c.bits);
  }
}

TEST(Bf16Remainder, ZeroRemainderRebuildsTheBf16Value) {
  // Remainders start at zero: the first rebuilt master is exactly the bf16 parameter.
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const bf16 p = bf16::from_bits(static_cast<uint16_t>(b));
    ASSERT_EQ(bits_of(rebuild_remainder(p, 0)), b << 16);
  }
}

TEST(Bf16Remainder, RebuildMatchesReferenceOnRandomPairs) {
  std::mt19937_64 rng(20240611);
  for (int i = 0; i < 2000000; ++i) {
    const uint64_t r = rng();
    const uint16_t high = static_cast<uint16_t>(r);
    const int16_t rem = static_cast<int16_t>(static_cast<uint16_t>(r >> 16));
    const uint32_t got = bits_of(rebuild_remainder(bf16::from_bits(high), rem));
    ASSERT_EQ(got, reference_rebuild(high, rem)) << "high " << high << " rem " << rem;
    const Bf16Remainder back = split_remainder(float_of(got));
    ASSERT_EQ(back.high.bits, high);
    ASSERT_EQ(back.remainder, rem);
  }
}

}  // namespace
}  // namespace kktrain
