// The model's two ends: the embedding lookup, and the head (final norm -> LM head -> loss) with
// its backward run right after the loss (llm.c style), chunk by chunk: a chunk's gradient at the
// logits is known as soon as its loss is, so one (chunk, V) logits buffer serves every chunk
// (head GEMM, log-softmax and loss, dlogits in place, the head's weight gradient added in fp32,
// the chunk's rows of dxf) and only the (N, C) gradient of the final hidden state is kept for
// backward. (N, V) logits never exist. The main head and each MTP depth's use it. With
// model.final_logit_softcapping the logits are soft-capped (ops/kernels.hpp LogitSoftcap) before
// the loss and the kept copy.
#pragma once

#include <cstdint>

#include "model/model_state.hpp"

namespace kktrain {

// The weights the embedding lookup reads (the compute copy, or the storage on one rank when the
// compute copy of a tied embedding is rounded and the stream is not).
CRef lookup_weights(const ModelState& s);
// out (N, C) = the stream-dtype embedding rows of ids (N), from weights of either dtype.
void embed_lookup(const ModelState& s, float* out, const int32_t* ids, const CRef& wte, int64_t N);
// model.embed_scale sqrt_hidden's factor: sqrt(hidden_size) rounded to the stream dtype.
float embed_factor(const ModelState& s);

// Whether a head computes the loss (and, with Pass::with_backward, dxf and the head's gradient)
// or stops at its logits.
enum class HeadLoss : uint8_t { none, mean };

// A head's tensors over N = B*T rows.
template <class TC>
struct HeadTensors {
  int norm = -1;                     // the norm's parameter (the final norm, an MTP depth's)
  const float* inp = nullptr;        // (N, C) the last residual, stream dtype
  TC* xf = nullptr;                  // (N, C) the norm's output, compute dtype
  float* rstd = nullptr;             // (N)
  float* hidden_out = nullptr;       // (N, C) the norm's output in the stream dtype, or null
  float* losses = nullptr;           // (N) per-token losses (HeadLoss::mean)
  const int32_t* targets = nullptr;  // (N) (< 0: ignored)
  float* dxf = nullptr;              // (N, C) the gradient of xf (Pass::with_backward)
  float* keep = nullptr;             // (N, V) fp32 copy of the logits, or null
  const float* row_scale = nullptr;  // (N) each token loss's gradient weight (replaces scale)
};

// Norm -> LM head -> loss over h.inp; scale multiplies the gradient of the summed losses. The LM
// head's weight gradient is accumulated chunk by chunk in fp32 and rounded once.
template <class TC>
void head_forward(ModelState& s, const HeadTensors<TC>& h, HeadLoss loss, float scale, Pass pass);

// The mean of a head's per-token losses (N) over its `count` counted tokens, divided by `then`
// (0 without counted tokens): read back, or (opts.loss_sums) added into `slot` on the device,
// returning NaN.
double mean_loss(const ModelState& s, const float* losses, int64_t count,
                 const ForwardOptions& opts, int slot, double then = 1.0);

}  // namespace kktrain
