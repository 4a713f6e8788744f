#include "optim/grad_norm.hpp"

#include <algorithm>

#include "optim/update_kernels.hpp"

namespace kktrain {

void grad_sum_squares(const ParamRegistry& params, DeviceSums& sums, int slot) {
  // One reduction per storage dtype over the flat gradient buffer, which holds exactly the
  // trainable parameters' gradients; a parameter frozen after allocation (its gradient buffer
  // kept but not trainable, or the reverse) sends that dtype back to one reduction per parameter.
  sums.zero(slot);
  const auto add = [&](const auto* g, int64_t n) {
    grad_sum_squares(g, n, sums.scratch());
    sums.add_scratch(slot);
  };
  for (DType d : {DType::float32, DType::bfloat16}) {
    bool whole = true;
    for (const ParamInfo& p : params.all())
      whole = whole && !(p.dtype == d && p.has_grad != p.trainable);
    dispatch_dtype(d, [&](auto tag) {
      using T = decltype(tag);
      if (whole) {
        const DView<T>& g = params.flat_grad<T>();
        add(g.data(), static_cast<int64_t>(g.extent(0)));
        return;
      }
      for (int i = 0; i < params.size(); ++i) {
        const ParamInfo& p = params.info(i);
        if (p.dtype == d && p.trainable) {
          add(params.grad<T>(i).data(), p.local_numel);
        }
      }
    });
  }
}

float clip_factor(double total_norm, double max_norm) {
  if (max_norm <= 0.0) return 1.0f;
  return static_cast<float>(std::min(1.0, max_norm / (total_norm + 1e-6)));
}

}  // namespace kktrain
