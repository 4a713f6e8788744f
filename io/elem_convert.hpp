// Host conversions of a file's raw elements (float32, bfloat16, float16, int16 remainders) to and
// from fp32 values: exact widening, nearest-even narrowing, and TE's master rebuilt from a bf16
// parameter and its int16 remainder.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "io/h5.hpp"

namespace kktrain {

// fp32 values of float32 or bfloat16 elements (exact). InputError naming `what` for int16.
std::vector<float> widen_to_f32(const std::vector<char>& bytes, h5::Elem e,
                                const std::string& what);
// fp32 values of n little-endian elements of dtype d at `bytes` (float32, bfloat16 or IEEE
// float16: every value, subnormals, infinities and NaNs included, widens exactly).
std::vector<float> widen_dtype_to_f32(const char* bytes, int64_t n, DType d);
// The fp32 value of IEEE binary16 bits (exact).
float f16_bits_to_float(uint16_t h);
// The values in dtype d: exact for float32, nearest-even for bfloat16.
std::vector<char> narrow_from_f32(const std::vector<float>& v, DType d);
// The fp32 masters that bf16 parameters and their int16 remainders stand for.
std::vector<float> rebuild_masters(const std::vector<char>& param_bf16,
                                   const std::vector<char>& remainder_i16);

}  // namespace kktrain
