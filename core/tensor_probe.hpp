// A test hook: lets a test look at the model's tensors at a few named boundaries of a forward
// (ForwardOptions::probe). Production code passes no probe; the model then does nothing more.
//
// Contract: when ForwardOptions::probe is set, the model calls seen() once per named boundary
// it reaches, in program order, with the tensor as it leaves that boundary:
//   data  n fp32 elements in device memory (the default execution space's), written by kernels
//         queued before the call: a probe that reads them copies them to the host first (a
//         deep_copy, which waits for those kernels). Valid only during the call.
// Names (one call per layer, head or MTP depth that runs):
//   "block.out"    (N, C) a decoder layer's output, after the unit boundary's rounding
//   "head.hidden"  (N, C) the final norm's output in the stream dtype (output_hidden_states only)
//   "head.dxf"     (N, C) gradient w.r.t. the LM head's input, flowing into the final norm
//                  (prepare_backward only)
//   "mtp.dxf"      (N, C) the same for an MTP depth's head (prepare_backward only)
// A probe must not change the tensors or launch work that writes them; copying to the host inside
// seen() is fine (tests only: it waits for the device).
#pragma once

#include <cstdint>

namespace kktrain {

class TensorProbe {
 public:
  virtual ~TensorProbe() = default;
  virtual void seen(const char* name, const float* data, int64_t n) = 0;
};

}  // namespace kktrain
