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

std::vector<char> narrow_from_f32(const std::vector<float>& v, DType d) {
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
