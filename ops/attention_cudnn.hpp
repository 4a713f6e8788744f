// Causal grouped-query attention through cuDNN's fused scaled-dot-product attention (the
// FlashAttention-2 engines of cuDNN 9), written against the backend graph API in C (cudnn_graph.h;
// the C++ frontend is not used). CUDA builds with cuDNN only (KKTRAIN_HAVE_CUDNN, see
// cmake/KktrainDependencies.cmake); the file needs the CUDA and cuDNN headers, not Kokkos.
//
// NOT WIRED YET: attention_forward / attention_backward (ops/attention.hpp) do not call this file.
// Wiring needs a GPU to validate it (parity against the team kernel, recompute-bitwise backward);
// the steps are listed at the end of ops/attention_cudnn.cpp.
//
// Layouts are those of ops/attention.hpp, element for element, so a caller passes the same
// device buffers as to the team kernel:
//   q (B, H, T, D) bf16, k and v (B, KV, T, D) bf16,
//   out (B*T, H*D) bf16 (token layout), lse (B, H, T) fp32,
//   dout (B, H, T, D) bf16, dq (B, H, T, D), dk and dv (B, KV, T, D).
// Query head h reads KV head h / (H / KV) (GQA; MQA is KV = 1). The mask is causal (key j is seen
// by query i iff j <= i), banded with a sliding window W > 0 (Shape::window: also i - W < j, the
// diagonal band's left bound of cudnn-frontend's SDPA, top-left aligned), the scores are scale * q
// k^T in fp32 with scale = 1 / sqrt(D), the softmax statistics are fp32 and P is rounded to bf16
// for the P V product (as in the team kernel).
//
// lse: cuDNN's softmax statistics are built here as max + log(sum(exp(S - max))) of the scaled,
// masked scores, with natural exp and log: exactly kktrain's lse = m + log(l), so the forward's lse
// feeds the team kernel's backward and this backward alike.
//
// Backward outputs are bf16: cuDNN's fused backward writes dq, dk, dv in the input dtype (its fp32
// sums stay inside it), where kktrain's team kernel hands fp32 sums to a consumer that rounds them
// once. The caller that wires this in converts (or gives rope_backward a bf16 input); the values
// are the rounding of the same sums, not bit-equal to the team kernel's.
//
// Not supported here (supported() says so; the caller keeps the portable kernels): packed rows
// (AttentionDims::starts, a block-diagonal mask), attention-logit soft-capping
// (AttentionDims::softcap), fp32 compute, head dims other than 64 and 128,
// H not a multiple of KV, a cuDNN older than 9.6 at run time, and any shape for which cuDNN's
// heuristics return no engine that finalizes (probe() answers that, having built the plan).
//
// Plans are built once per (B, T, H, KV, D, window, pass, determinism) and cached for the process
// (built with the handle of the first stream that asks, run with the caller's: one GPU per
// process); a cudnnHandle is created once per CUDA stream. One mutex guards both caches. Every call
// runs on the stream it is given. Errors are one-line RuntimeFailure exceptions naming the cuDNN
// call and cudnnGetErrorString.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace kktrain {
namespace cudnn_attention {

struct Shape {
  int64_t B, T, H, KV, D;
  int64_t window = 0;    // AttentionDims::window: sliding window (<= 0 or >= T: none)
  float softcap = 0.0f;  // AttentionDims::softcap (> 0: refused, Support::softcap)
};

enum class Pass { forward, backward };
// deterministic: the same inputs give the same bits (activation-checkpoint recompute and resume
// need it); fastest: cuDNN may accumulate dq with atomics in an fp32 buffer.
enum class Determinism { deterministic, fastest };
enum class Rows { one_sequence, packed };  // packed: AttentionDims::starts is set
enum class Compute { bf16, fp32 };         // the compute dtype of the attention's operands

enum class Support {
  yes,
  packed_rows,        // block-diagonal mask of packed examples: not built here
  softcap,            // attention-logit soft-capping: not built here
  fp32_compute,       // cuDNN's fused attention is fp16/bf16 only
  head_dim,           // D not 64 or 128
  heads_not_grouped,  // H % KV != 0, or a size below 1
  library_too_old,    // cuDNN < 9.6 at run time (dq accumulation needs its own zeroing)
  no_engine,          // cuDNN's heuristics gave no engine that finalizes for this graph
};
const char* support_name(Support s);

// Whether this path can run the shape, without touching the GPU (the run-time library version is
// read, nothing else).
Support supported(const Shape& s, Rows rows, Compute compute);

// supported(), then the plan of this pass built (or found in the cache): no_engine when cuDNN
// refuses the graph. Needs the GPU; the stream picks the handle.
Support probe(cudaStream_t stream, Pass pass, Determinism det, const Shape& s);

// Device bytes the pass needs as `workspace` (cuDNN's plan workspace plus the fp32 buffers this
// graph keeps outside it: the backward's rowsum(dout * out) and, in the fastest mode, the dq
// accumulator). Builds and caches the plan; throws when cuDNN refuses it. Aligned to 256 bytes.
int64_t workspace_bytes(cudaStream_t stream, Pass pass, Determinism det, const Shape& s);

// out = rnd(softmax(scale q k^T + causal (and window) mask) v) in token layout, lse fp32; layouts
// above. workspace: workspace_bytes(stream, Pass::forward, deterministic, s) device bytes (the
// forward is deterministic in either mode), 256-byte aligned; every pointer 16-byte aligned.
void forward(void* out, float* lse, const void* q, const void* k, const void* v, void* workspace,
             float scale, const Shape& s, cudaStream_t stream);

// dq, dk, dv (bf16) from dout, the forward's out and lse, and q, k, v; layouts above.
// workspace: workspace_bytes(stream, Pass::backward, det, s) device bytes.
void backward(void* dq, void* dk, void* dv, const void* dout, const void* out, const float* lse,
              const void* q, const void* k, const void* v, void* workspace, float scale,
              Determinism det, const Shape& s, cudaStream_t stream);

}  // namespace cudnn_attention
}  // namespace kktrain
