// Moving parameters and gradients between device storage (any dtype) and host fp32 arrays, for
// files (grads dumps, init_from) and tests.
#pragma once

#include <vector>

#include "core/param_registry.hpp"

namespace kktrain {

// Which of a parameter's tensors a copy moves: its values or its gradient.
enum class ParamPart : uint8_t { values, grad };

// fp32 copy of this rank's shard of parameter i (or of its gradient) on the host: local_numel
// values (the whole tensor on one rank); bf16 converts exactly.
std::vector<float> param_to_host(const ParamRegistry& reg, int i,
                                 ParamPart part = ParamPart::values);
// Sets this rank's shard of parameter i (or of its gradient) from the full tensor's host fp32
// values (numel of them), rounding to nearest-even when stored in bf16; fp32 storage takes fp32
// values as they are.
void param_from_host(ParamRegistry& reg, int i, const std::vector<float>& values,
                     ParamPart part = ParamPart::values);
// Sets this rank's shard of parameter i from the fp32 values of its own rows (local_numel of
// them: what a rank reads of a model file), rounding to nearest-even when stored in bf16.
void shard_from_host(ParamRegistry& reg, int i, const std::vector<float>& local);

}  // namespace kktrain
