#include "io/elem_convert.hpp"

#include <cstring>

#include "core/bf16.hpp"
#include "core/errors.hpp"

namespace kktrain {

std::vector<float> widen_to_f32(const std::vector<char>& bytes, h5::Elem e,
                                const std::string& what) {
  const std::size_t n = bytes.size() / h5::elem_size(e);
  std::vector<float> out(n);
  if (e == h5::Elem::f32) {
    std::memcpy(out.data(), bytes.data(), bytes.size());
  } else if (e == h5::Elem::bf16) {
    const auto* b = reinterpret_cast<const uint16_t*>(bytes.data());
    for (std::size_t k = 0; k < n; ++k) out[k] = bf16::from_bits(b[k]).to_float();
  } else {
    throw InputError(what + " holds int16 data, not float32 or bfloat16");
  }
  return out;
}

float f16_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (mant << 13));  // inf, NaN (payload)
  if (exp != 0) return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
  if (mant == 0) return bits_float(sign);  // +-0
  // Subnormal: mant * 2^-24, normalized for fp32 (every binary16 subnormal is an fp32 normal).
  int e = -1;
  do {
    mant <<= 1;
    ++e;
  } while ((mant & 0x400u) == 0);
  return bits_float(sign | (static_cast<uint32_t>(112 - e) << 23) | ((mant & 0x3ffu) << 13));
}

std::vector<float> widen_dtype_to_f32(const char* bytes, int64_t n, DType d) {
  std::vector<float> out(static_cast<std::size_t>(n));
  if (d == DType::float32) {
    std::memcpy(out.data(), bytes, out.size() * 4);
    return out;
  }
  for (int64_t k = 0; k < n; ++k) {
    uint16_t b;
    std::memcpy(&b, bytes + 2 * k, 2);
    out[k] = d == DType::bfloat16 ? bf16::from_bits(b).to_float() : f16_bits_to_float(b);
  }
  return out;
}

std::vector<char> narrow_from_f32(const std::vector<float>& v, DType d) {
  if (d == DType::float16) throw InternalError("narrow_from_f32: float16 is not written");
  std::vector<char> out(v.size() * dtype_size(d));
  if (d == DType::float32) {
    std::memcpy(out.data(), v.data(), out.size());
  } else {
    auto* b = reinterpret_cast<uint16_t*>(out.data());
    for (std::size_t k = 0; k < v.size(); ++k) b[k] = bf16_bits_from_float(v[k]);
  }
  return out;
}

std::vector<float> rebuild_masters(const std::vector<char>& param_bf16,
                                   const std::vector<char>& remainder_i16) {
  const std::size_t n = param_bf16.size() / 2;
  std::vector<float> out(n);
  const auto* p = reinterpret_cast<const uint16_t*>(param_bf16.data());
  const auto* r = reinterpret_cast<const int16_t*>(remainder_i16.data());
  for (std::size_t k = 0; k < n; ++k) out[k] = rebuild_remainder(bf16::from_bits(p[k]), r[k]);
  return out;
}

}  // namespace kktrain
