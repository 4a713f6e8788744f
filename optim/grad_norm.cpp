#include "optim/grad_norm.hpp"

#include <algorithm>

#include "optim/update_kernels.hpp"

namespace kktrain {

double grad_sum_squares(const ParamRegistry& params) {
  double total = 0.0;
  for (int i = 0; i < params.size(); ++i) {
    const ParamInfo& p = params.info(i);
    if (!p.trainable) continue;
    dispatch_dtype(p.dtype, [&](auto tag) {
      using T = decltype(tag);
      total += grad_sum_squares<T>(params.grad<T>(i).data(), p.local_numel);
    });
  }
  return total;
}

float clip_factor(double total_norm, double max_norm) {
  if (max_norm <= 0.0) return 1.0f;
  return static_cast<float>(std::min(1.0, max_norm / (total_norm + 1e-6)));
}

}  // namespace kktrain
