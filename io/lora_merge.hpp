// A model file's weights with its LoRA adapters merged in: W + (alpha / r) B A for every base
// weight that has adapters (A (r, in), B (out, r); each sum formed in double from the fp32
// values and rounded once to fp32), the adapters themselves no longer listed. What the merged
// export writes and what `kktrain generate` runs.
#pragma once

#include <memory>

#include "io/model_weights.hpp"

namespace kktrain {

// `src` itself when it holds no adapters (no lora_dim attribute); else the merged view. The
// adapters of a weight are read whole, one process at a time (they are small: r rows of A, r
// columns of B), when that weight is read.
std::unique_ptr<WeightSource> with_lora_merged(std::unique_ptr<WeightSource> src);

// "<module>.lora_A.weight" -> "<module>.weight" (which = "A" or "B"; "" when not an adapter).
std::string lora_adapter_base(const std::string& name, const char* which);

}  // namespace kktrain
