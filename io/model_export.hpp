// The consolidated export of a training checkpoint: model weights only, in one file that a
// reader without kktrain (h5py, h5dump) can rebuild the model from.
//
//   /params/<canonical name>   full tensors in the export dtype (bf16 by default); parameters
//                              the model keeps in fp32 (model.keep_in_fp32) stay fp32; a tied
//                              weight appears once, with an "alias" attribute naming the others
//   root attributes            format "kktrain-export", format_version, storage_dtype (the
//                              export dtype), the architecture, the checkpoint's step, and the
//                              LoRA scale when adapters are exported separately
//
// Values come from the fp32 master when the checkpoint has one (an fp32 master, or the bf16
// parameter rebuilt with its remainder), rounded once to nearest even: never bf16 -> bf16 of an
// already rounded value. LoRA adapters are merged into their base weights (W + alpha/r * B A,
// formed in fp32 with the product accumulated in double) or written separately.
//
// Streamed: tensor by tensor in pieces of rows (kStreamPieceBytes of fp32 values), so one process
// never holds more than a piece of a tensor (and a LoRA pair's small factors) whatever the model's
// size. Atomic: written under a temporary name beside `out`, synced, renamed over it; a failure
// or a kill leaves the previous file (or none), never part of one.
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.hpp"

namespace kktrain {

enum class LoraExport { merged, separate };

// Exports checkpoint file `checkpoint` to `out` (a new file, never one of the inputs); returns
// the bytes of tensor data written.
int64_t export_checkpoint(const std::string& checkpoint, const std::string& out, DType dtype,
                          LoraExport lora);

}  // namespace kktrain
