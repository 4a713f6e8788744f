// The precision policy: which dtype each tensor role uses, and why.
//
//   storage  model.dtype (or deprecated model.torch_dtype): resident parameters; torch-style
//            Adam/AdamW moments follow it.
//   compute  distributed.mp_policy.param_dtype (or distributed.autocast_dtype on one rank):
//            forward/backward matmuls and activations, and the all-gather dtype when sharded.
//   reduce   distributed.mp_policy.reduce_dtype: gradient reduce-scatter/all-reduce.
//   output   distributed.mp_policy.output_dtype: layer outputs, applied only when sharded.
//   lora     peft.lora_dtype: adapter storage (null inherits the base layer).
// Every resolved dtype carries a human-readable source, so bf16 is never chosen silently.
#pragma once

#include <optional>
#include <string>

#include "core/dtype.hpp"

namespace kktrain {

// distributed.mp_policy, with torch.distributed.fsdp.MixedPrecisionPolicy semantics
// (docs/precision.md, "Compute, reduce and output dtypes"): null param_dtype computes in the
// storage dtype; null reduce_dtype reduces in the compute dtype; null output_dtype leaves outputs
// alone.
struct MixedPrecisionPolicy {
  std::optional<DType> param_dtype = DType::bfloat16;
  std::optional<DType> reduce_dtype = DType::float32;
  std::optional<DType> output_dtype = DType::bfloat16;
  bool cast_forward_inputs = true;
};

struct ResolvedPrecision {
  DType storage = DType::bfloat16;
  std::string storage_source;
  DType compute = DType::bfloat16;
  std::string compute_source;
  DType reduce = DType::float32;
  std::string reduce_source;
  std::optional<DType> output;  // null: outputs keep the compute dtype
  bool output_applied = false;  // only with more than one rank
  std::optional<DType> lora;    // null: adapters inherit the base layer's storage dtype
  // The MoE layers' experts (and shared expert): the compute dtype unless
  // distributed.moe_param_dtype says otherwise (the router is fp32 whatever these are).
  DType moe_compute = DType::bfloat16;
  std::string moe_compute_source;
  bool cast_forward_inputs = true;
  int world_size = 1;
};

// Inputs to storage-dtype resolution, as read from the config.
struct StorageDtypeSpec {
  bool dtype_present = false;  // model.dtype non-null
  bool dtype_auto = false;
  std::optional<DType> dtype;
  bool torch_dtype_present = false;  // model.torch_dtype non-null
  bool torch_dtype_auto = false;
  std::optional<DType> torch_dtype;
  std::optional<std::string> init_from;
};

// Resolves the storage dtype (docs/precision.md, "Storage dtype"): a non-null model.dtype wins over
// model.torch_dtype (including dtype: auto); dtype: null falls back to torch_dtype; `auto` (also
// when both are unset) is bfloat16 for a fresh model and the checkpoint's dtype with init_from.
// `checkpoint_dtype` is called only for auto + init_from.
template <class ReadCheckpointDtype>
void resolve_storage_dtype(const StorageDtypeSpec& s, ReadCheckpointDtype&& checkpoint_dtype,
                           ResolvedPrecision* out) {
  std::string origin;
  bool is_auto = false;
  std::optional<DType> explicit_dtype;
  if (s.dtype_present) {
    origin = "model.dtype";
    is_auto = s.dtype_auto;
    explicit_dtype = s.dtype;
  } else if (s.torch_dtype_present) {
    origin = "model.torch_dtype";
    is_auto = s.torch_dtype_auto;
    explicit_dtype = s.torch_dtype;
  } else {
    origin = "model.dtype unset";
    is_auto = true;
  }
  if (!is_auto) {
    out->storage = *explicit_dtype;
    out->storage_source = origin + ": " + dtype_name(*explicit_dtype);
  } else if (s.init_from) {
    out->storage = checkpoint_dtype(*s.init_from);
    out->storage_source = origin + " -> auto -> " + dtype_name(out->storage) +
                          " (dtype of checkpoint " + *s.init_from + ")";
  } else {
    out->storage = DType::bfloat16;
    out->storage_source = origin + " -> auto -> bfloat16 (fresh model)";
  }
}

// Resolves compute, reduce and output dtypes from the policy for `world_size` ranks.
void resolve_compute_dtypes(const MixedPrecisionPolicy& mp, std::optional<DType> autocast_dtype,
                            int world_size, ResolvedPrecision* out);

}  // namespace kktrain
