// The model's units over ranks (FSDP2, parallel/fsdp.hpp): which parameters each unit holds, how
// their compute copies are laid out, gathering before use and reducing after backward, the
// roundings at unit boundaries, and where a weight gradient goes. Free functions over ModelState.
#pragma once

#include <cstdint>
#include <vector>

#include "model/model_state.hpp"

namespace kktrain {

// What the unit machinery's buffer plan is for (Transformer::unit_buffer_plan).
struct UnitPlanOptions {
  bool reshard_after_forward = true;
  bool accumulates = false;  // steps of several micro-batches
  GradSync sync = GradSync::every_micro_batch;
  bool overlapped = false;  // reduce-scatters overlap the backward
};

// Lays the registry out for rank `rank` of `world` (the world size the precision was resolved
// for): expert owners, frozen storage lowered on several ranks, the dim-0 shards.
void plan_layout(ModelState& s, int rank, int world, int expert_parallel);
// After plan_layout: allocates the parameters and the units, the model-level buffers and the
// rotary tables.
void prepare_units(ModelState& s, const ShardOptions& opts);
ComputeLayout compute_layout(const ModelState& s);
// The model-level fp32 buffers prepare_units allocates: staged gradients, rope tables.
std::vector<BufferSpec> model_buffer_plan(const ModelState& s);
std::vector<BufferSpec> unit_buffer_plan(const ModelState& s, const UnitPlanOptions& o);

// Unit scheduling: gather before use and start the all-gather of `next` (-1: none), the unit that
// runs after it; after a unit's forward, release it when sharded runs reshard after forward;
// after its backward, reduce its gradients (sharded runs).
void gather(ModelState& s, int unit, int next = -1);
void release_after_forward(ModelState& s, int unit);
void reduce(ModelState& s, int unit);

// Rounding at unit boundaries on several ranks (outputs cast to output_dtype, gradients to the
// dtype of the tensor they are the gradient of); x, g (n) in place.
void boundary_output(const ModelState& s, float* x, int64_t n);
void boundary_grad_into_unit(const ModelState& s, float* g, int64_t n);
void boundary_grad_out_of_unit(const ModelState& s, float* g, int64_t n);

// dw (numel of param, fp32): param's gradient from this backward, first rounded as round_dw says
// (the dtype it was computed in), added to the unit's full gradient (sharded), the staged fp32
// sum, or the storage-dtype gradient.
void accumulate(ModelState& s, int param, const float* dw, Rounding round_dw);
// Staged gradients: dropped (a forward whose backward never ran), rounded into the storage
// gradients once (end of backward).
void drop_staged_grads(ModelState& s);
void flush_staged_grads(ModelState& s);

}  // namespace kktrain
