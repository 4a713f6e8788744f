// When several micro-batches of a step reach the other ranks (distributed.grad_sync;
// parallel/fsdp.hpp): every micro-batch's gradients reduce-scattered as it ends, or the unsharded
// sum reduce-scattered once on the last one. A choice read from the config, taken by the FSDP
// units.
#pragma once

namespace kktrain {

enum class GradSync { every_micro_batch, last_micro_batch };

// "every_micro_batch", "last_micro_batch": the config values.
inline const char* grad_sync_name(GradSync g) {
  return g == GradSync::last_micro_batch ? "last_micro_batch" : "every_micro_batch";
}

}  // namespace kktrain
