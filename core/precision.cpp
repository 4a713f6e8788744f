#include "core/precision.hpp"

namespace kktrain {

void resolve_compute_dtypes(const MixedPrecisionPolicy& mp, std::optional<DType> autocast_dtype,
                            int world_size, ResolvedPrecision* out) {
  out->world_size = world_size;
  out->cast_forward_inputs = mp.cast_forward_inputs;
  if (world_size == 1 && autocast_dtype) {
    out->compute = *autocast_dtype;
    out->compute_source = "distributed.autocast_dtype (autocast on one rank)";
  } else if (mp.param_dtype) {
    out->compute = *mp.param_dtype;
    out->compute_source = world_size == 1
                              ? "distributed.mp_policy.param_dtype (autocast on one rank)"
                              : "distributed.mp_policy.param_dtype";
  } else {
    out->compute = out->storage;
    out->compute_source = "storage dtype (distributed.mp_policy.param_dtype: null)";
  }
  if (mp.reduce_dtype) {
    out->reduce = *mp.reduce_dtype;
    out->reduce_source = "distributed.mp_policy.reduce_dtype";
  } else {
    out->reduce = out->compute;
    out->reduce_source = "compute dtype (distributed.mp_policy.reduce_dtype: null)";
  }
  out->output = mp.output_dtype;
  out->output_applied = world_size > 1 && mp.output_dtype.has_value();
}

}  // namespace kktrain
