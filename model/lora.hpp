// LoRA adapters as a feature of the model, on the block projections (q, k, v, o, gate, up, down;
// MTP blocks included):
//   y = x W^T + (alpha / r) * (x A^T) B^T,   A (r, in) ~ U(+-1/sqrt(in)), B (out, r) = 0
// Adapters have their own storage dtype (peft.lora_dtype; null inherits the base layer's), so
// torch-style Adam moments follow it. With adapters, every base parameter starts frozen
// (freeze_config can unfreeze some). In compute the adapter path rounds like PEFT under
// autocast: t = rnd(x A^T), d = rnd(t B^T), y = rnd(y + rnd(d * scale)) (model/block.hpp's
// lora_forward / lora_backward).
#pragma once

#include <cstdint>

#include "model/model_state.hpp"

namespace kktrain {

class BufferMaker;

// The adapters' scratch: (N, r) activations and their gradient; (N, widest output) delta.
struct LoraBuffers {
  TBuf t, dt, y;
};

// Registers the adapters of every targeted projection (peft.target_modules) after every base
// parameter, and freezes the base model; a selection that targets nothing is a ConfigError.
void register_lora_adapters(ModelState& s);
// The block's adapters' compute weights into w->lora.
void add_lora_weights(const ModelState& s, const LayerParams& p, BlockWeights* w);
void make_lora_buffers(BufferMaker& mk, LoraBuffers& b, const ModelState& s, int64_t N);

}  // namespace kktrain
