// The working buffers of one micro-batch shape (B, T), private to model/: the batch, the
// activations kept from forward to backward, the scratch every layer reuses, the head's chunk of
// logits, and each feature's own (model/sparse_mlp.hpp, model/mtp_head.hpp, model/lora.hpp).
// One code path allocates them and plans their bytes (BufferMaker), so the memory prediction and
// the allocation cannot disagree. Reallocated when the shape changes.
#pragma once

#include <string>
#include <vector>

#include "core/bf16.hpp"
#include "core/kokkos_compat.hpp"
#include "model/block.hpp"
#include "model/lora.hpp"
#include "model/model_state.hpp"
#include "model/mtp_head.hpp"
#include "model/sparse_mlp.hpp"
#include "ops/tbuf.hpp"

namespace kktrain {

// Allocates buffers, or only records their sizes (planning), through one code path.
class BufferMaker {
 public:
  enum class Mode : uint8_t { allocate, plan_only };
  BufferMaker(Mode mode, Rounding compute, std::vector<BufferSpec>* plan)
      : mode_(mode), compute_(compute), plan_(plan) {}
  void group(const char* g) { group_ = g; }
  template <class T>
  DView<T> view(const char* name, int64_t n) {
    record(name, n * static_cast<int64_t>(sizeof(T)));
    return mode_ == Mode::allocate ? DView<T>(std::string(name), n) : DView<T>();
  }
  TBuf compute(const char* name, int64_t n);  // a compute-dtype tensor

 private:
  void record(const char* name, int64_t bytes);
  Mode mode_;
  Rounding compute_;
  std::vector<BufferSpec>* plan_;
  std::string group_;
};

struct ModelBuffers {
  int64_t B = 0, T = 0;
  DView<int32_t> ids, targets;          // (N)
  DView<int32_t> row_start, positions;  // (V + 1), (N): token positions grouped by id
  int64_t count = 0;                    // non-ignored targets
  std::vector<DView<float>> res;        // L + 1 residual-stream tensors (N, C)
  std::vector<BlockActs> acts;          // L blocks (1 shared set with checkpointing)
  DView<float> recompute_out;           // (N, C) block output during recompute
  TBuf qkv;                             // (N, (H + 2 KV) * D)  compute dtype
  TBuf proj;                            // (N, C)               compute dtype
  // The tiled attention's workspace (ops/attention.hpp: attention_workspace_sizes): fp32 tiles
  // of scores and their gradients, their compute-dtype copies, the forward's output accumulator
  // and row statistics, and delta (B, H, T).
  DView<float> att_scores, att_dprobs, att_out_acc, att_row_max, att_row_sum, att_delta;
  TBuf att_probs, att_dscores;
  TBuf xf;                      // (N, C) final norm output, compute dtype
  DView<float> rstd_f, losses;  // (N), (N) final norm statistics and per-token loss
  // (chunk, V) compute dtype: one chunk of model.loss_chunk_tokens rows at a time, dlogits in
  // place after the loss; shared by the main and the MTP heads.
  TBuf logits;
  DView<float> hidden;  // (N, C) final hidden states (output_hidden_states)
  DView<float> dxf;     // (N, C) gradient of xf, computed right after the loss
  // backward scratch
  DView<float> dw;            // largest weight (group): one dW at a time
  DView<float> norm_partial;  // RMSNorm weight-gradient chunk sums (rmsnorm_partial_size)
  DView<float> dres, dxn;     // (N, C) fp32: the stream gradient; GEMM + LoRA input gradients
  DView<float> dbranch;       // (N, C) a sub-layer output's gradient (norm_placement not pre)
  TBuf dc;                    // (N, C) the stream gradient rounded to the compute dtype
  TBuf dgu;                   // (N, 2F) compute dtype
  DView<float> da;            // (N, F) fp32 until its one rounding (GEMM + LoRA contributions)
  TBuf dqkv;                  // (N, (H + 2 KV) * D) compute dtype
  DView<float> dq, dk, dv;    // head layout, fp32 sums over a KV group's heads
  DView<float> dtok;          // (N, H * D) fp32 (GEMM + LoRA contributions)
  TBuf dheads;                // (B, H, T, D) compute dtype
  SparseMlpBuffers moe;       // a sparse MLP's scratch, reused by every layer
  LoraBuffers lora;           // the adapters' scratch
  MtpBuffers mtp;             // the multi-token-prediction head's
  // Packed rows (ForwardOptions::row_starts) of the last upload: (N) example starts on the device
  // (always allocated, "example_starts" in the plan; uploaded only when given) and their host
  // copy (the tiled attention's block skipping); packed: whether this batch has them.
  DView<int32_t> starts;
  std::vector<int32_t> host_starts;
  bool packed = false;
  // Shared prefixes (ForwardOptions::row_gaps) of the last upload: (N, 2) gaps and (N) the starts
  // rotary positions count from (start + the gap's length), on the device, allocated when first
  // given; gapped: whether this batch has them.
  DView<int32_t> gaps, rope_starts;
  bool gapped = false;
  // The batch's rotary length, its largest position + 1 (T, or with packed rows the longest
  // example's): longrope uses its long factors beyond original_max_position_embeddings (0: T).
  int64_t rotary_positions = 0;
};

// Fills b for shape (B, T) (Mode::allocate), or only records the plan.
void make_buffers(const ModelState& s, ModelBuffers& b, int64_t B, int64_t T, BufferMaker& mk);
// Allocates s.buf for (B, T) unless it already has that shape.
void ensure_buffers(ModelState& s, int64_t B, int64_t T);
// The bytes of each host-to-device upload of one training micro-batch (Transformer::upload_plan),
// with the packed rows' starts (an upper bound for a batch without them).
std::vector<std::size_t> upload_plan(const ModelState& s, int64_t B, int64_t T);
// ids, targets (B*T host tokens; targets may be null), row_starts (B*T, or null: one sequence per
// row) -> s.buf, through pinned staging; checks every id against the vocabulary and every start
// (0 <= start <= t), an InputError naming the position.
void upload_batch(ModelState& s, const int32_t* ids, const int32_t* targets,
                  const int32_t* row_starts, int64_t B, int64_t T,
                  const int32_t* row_gaps = nullptr);
// Token positions grouped by token id (counting sort): row_start (V + 1), positions (N).
void token_csr(const std::vector<int32_t>& ids, int64_t V, std::vector<int32_t>* row_start,
               std::vector<int32_t>* positions);

}  // namespace kktrain
