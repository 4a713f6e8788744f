// Moving parameters and gradients between device storage (any dtype) and host fp32 arrays, for
// files (grads dumps, init_from) and tests.
#pragma once

#include <vector>

#include "core/param_registry.hpp"

namespace kktrain {

// fp32 copy of parameter i's values (or gradient) on the host; bf16 converts exactly.
std::vector<float> param_to_host(const ParamRegistry& reg, int i, bool grad = false);
// Sets parameter i (or its gradient) from host fp32 values, rounding to nearest-even when
// stored in bf16.
void param_from_host(ParamRegistry& reg, int i, const std::vector<float>& values,
                     bool grad = false);

}  // namespace kktrain
