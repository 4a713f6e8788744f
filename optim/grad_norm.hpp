// Global gradient-norm clipping, computed in fp32 values with double accumulation. The local
// sum of squares is per rank; the caller sums it across ranks (communicator) before the sqrt,
// so optim/ needs no communicator. The clip factor is applied inside the optimizer's fused
// update (Optimizer::step's grad_scale), saving a pass over the gradients.
#pragma once

#include "core/device_sums.hpp"
#include "core/param_registry.hpp"

namespace kktrain {

// sums[slot] = the sum over the trainable parameters' gradients of g^2 on this rank, on the
// device (read back with the step's other sums at one wait).
void grad_sum_squares(const ParamRegistry& params, DeviceSums& sums, int slot);

// torch.nn.utils.clip_grad_norm_'s factor: min(1, max_norm / (norm + 1e-6)); 1 when
// max_norm <= 0 (clipping disabled).
float clip_factor(double total_norm, double max_norm);

}  // namespace kktrain
