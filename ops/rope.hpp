// Rotary inverse frequencies as Hugging Face's Llama computes them (modeling_rope_utils): the
// default 1 / theta^(2j/D), and Llama 3.1's "llama3" rescaling of the low frequencies for long
// contexts. Computed on the host in fp32, one rounding per operation in the reference's order:
// the llama3 rescaling of given frequencies is the reference's bit for bit, and theta^(2j/D) is
// the correctly rounded power, within one ulp of PyTorch's pow (tests/parity/check_rope.py).
#pragma once

#include <cstdint>
#include <vector>

#include "core/config.hpp"

namespace kktrain {

// inv_freq (D/2) for head dimension D:
//   default  inv_freq[j] = 1 / theta^(2j / D)
//   llama3   wavelen = 2 pi / inv_freq; wavelengths above original / low_freq_factor are divided
//            by `factor`, those below original / high_freq_factor kept, and those between
//            interpolated: s = (original / wavelen - low) / (high - low),
//            inv = (1 - s) * inv / factor + s * inv.
//   linear   inv_freq[j] = default / factor
//   longrope inv_freq[j] = 1 / (ext[j] * theta^(2j / D)), ext the long factors when
//            `long_factors`, else the short ones (fp32: the product rounded, then its reciprocal;
//            transformers' _compute_longrope_parameters). D is the rotary width.
std::vector<float> rope_inv_freq(int64_t D, double theta, const RopeScaling& scaling,
                                 bool long_factors = false);
// The llama3 step alone: `inv` rescaled as above (returned unchanged for rope_type default).
std::vector<float> rope_scale_llama3(std::vector<float> inv, const RopeScaling& scaling);

}  // namespace kktrain
