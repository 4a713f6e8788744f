// Rotary inverse frequencies (ops/rope.hpp). theta^(2j/D) is the correctly rounded fp32 value
// of the power of the fp32 operands (formed in double): PyTorch's fp32 pow is a vectorized 1-ulp
// approximation on CPUs and CUDA's powf on GPUs, so the reference itself differs by an ulp from
// one platform to the next, and the correctly rounded value is the one every platform can agree
// on. Every later operation is rounded to fp32 as PyTorch's elementwise kernels round it: a
// Python scalar operand is first converted to fp32, `a / t` of a scalar and a tensor is
// reciprocal(t) * a, and the build never contracts a * b + c into an FMA (-ffp-contract=off).
#include "ops/rope.hpp"

#include <cmath>

namespace kktrain {

std::vector<float> rope_inv_freq(int64_t D, double theta, const RopeScaling& s, bool long_factors) {
  const int64_t half = D / 2;
  std::vector<float> inv(half);
  const float base = static_cast<float>(theta);
  const std::vector<double>* ext = nullptr;
  if (s.longrope()) {
    ext = long_factors ? &s.long_factor : &s.short_factor;
    if (static_cast<int64_t>(ext->size()) != half) ext = nullptr;  // checked by the config
  }
  for (int64_t j = 0; j < half; ++j) {
    const float expo = static_cast<float>(2 * j) / static_cast<float>(D);
    const float power =
        static_cast<float>(std::pow(static_cast<double>(base), static_cast<double>(expo)));
    // longrope: the fp32 factor times the power, rounded, then its reciprocal
    inv[j] = ext ? 1.0f / (static_cast<float>((*ext)[j]) * power) : 1.0f / power;
  }
  if (s.longrope()) return inv;
  if (s.rope_type == RopeType::linear) {
    // _compute_linear_scaling_rope_parameters: inv_freq / factor (the factor rounded to fp32)
    const float factor = static_cast<float>(s.factor);
    for (float& x : inv) x = x / factor;
    return inv;
  }
  return rope_scale_llama3(std::move(inv), s);
}

std::vector<float> rope_scale_llama3(std::vector<float> inv, const RopeScaling& s) {
  const int64_t half = static_cast<int64_t>(inv.size());
  if (!s.llama3()) return inv;
  const double old_len = static_cast<double>(s.original_max_position_embeddings);
  const float low_wavelen = static_cast<float>(old_len / s.low_freq_factor);
  const float high_wavelen = static_cast<float>(old_len / s.high_freq_factor);
  const float two_pi = static_cast<float>(2.0 * M_PI);
  const float factor = static_cast<float>(s.factor);
  const float low = static_cast<float>(s.low_freq_factor);
  const float span = static_cast<float>(s.high_freq_factor - s.low_freq_factor);
  const float old_len_f = static_cast<float>(old_len);
  for (int64_t j = 0; j < half; ++j) {
    const float wavelen = (1.0f / inv[j]) * two_pi;
    const float scaled = wavelen > low_wavelen ? inv[j] / factor : inv[j];
    const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    if (!medium) {
      inv[j] = scaled;
      continue;
    }
    const float smooth = ((1.0f / wavelen) * old_len_f - low) / span;
    const float a = (1.0f - smooth) * scaled / factor;
    const float b = smooth * scaled;
    inv[j] = a + b;
  }
  return inv;
}

}  // namespace kktrain
