// What callers hand the model and get back: the forward's options and results, the layout over
// ranks, the buffer plan's entries and the precision roles' roundings (model/transformer.hpp runs
// the model; model/model_state.hpp holds it).
#pragma once

#include <cstdint>
#include <string>

#include "core/bf16.hpp"
#include "core/device_sums.hpp"
#include "core/dtype.hpp"
#include "core/tensor_probe.hpp"
#include "parallel/communicator.hpp"
#include "parallel/fsdp.hpp"

namespace kktrain {

struct PairBatch;  // model/preference_loss.hpp

// The rounding of each tensor role, fixed when the model is built (see the header comment): the
// compute dtype (matmuls, attention, MLP), the residual stream inside a unit, and (several ranks)
// what passes between units (mp_policy.output_dtype).
struct Roundings {
  Rounding compute = Rounding::fp32;
  Rounding stream = Rounding::fp32;
  Rounding between = Rounding::fp32;
};
inline Rounding rounding_for(DType d) {
  return d == DType::bfloat16 ? Rounding::bf16 : Rounding::fp32;
}

// Whether a pass also prepares its backward (the head computes dlogits, the load-balancing loss
// its gradient factor).
enum class Pass : uint8_t { forward_only, with_backward };
// What a sparse layer's forward leaves on the host: its routing statistics, or also each token's
// chosen experts (ForwardOptions::keep_routing).
enum class RoutingCopy : uint8_t { statistics, with_choices };

struct ForwardOptions {
  bool compute_logits = true;         // false: stop after the final norm (no logits, no loss)
  bool output_hidden_states = false;  // keep the final-norm hidden states for hidden_states()
  // Also copy the main head's (B*T, V) logits, fp32, for logits(): a debugging aid that allocates
  // B*T*V*4 bytes (the head itself only ever holds model.loss_chunk_tokens rows of them).
  bool keep_logits = false;
  bool compute_mtp = true;        // run the multi-token-prediction head if the model has one
  bool prepare_backward = false;  // also compute dlogits so backward() can run
  float grad_scale = 1.0f;        // multiplies the gradient of the mean loss (accumulation)
  // Packed rows: a (B, T) host array, for each token the position in its row where its example
  // begins (0 <= row_starts[b*T + t] <= t; the tokens of one example share it). Attention of
  // query t sees keys [start, t] only, and the rotary position of token t is t - start. Read
  // during forward() only (the model keeps its own copy for backward()). Null: every row is one
  // sequence (start 0), as before. Not with an MTP head computing (InternalError).
  const int32_t* row_starts = nullptr;
  // Shared prefixes, with row_starts (a preference pair whose rejected side follows its chosen
  // side and sees their prompt once): a (B, T, 2) host array, for each token a range
  // [begin, end) of positions of its example it does not see (begin == end: none; otherwise
  // start <= begin < end <= t). Its rotary position is t - start - (end - begin). Null: none.
  const int32_t* row_gaps = nullptr;
  // > 0: the loss and its gradient are sum(token losses) * grad_scale / loss_tokens (the mean
  // over a global batch's loss tokens, however it is split into micro-batches and ranks); 0: the
  // mean over this micro-batch's counted tokens, as before. The value added to loss_sums /
  // returned as loss is sum / loss_tokens. The MTP head's loss stays its own mean. Several
  // ranks: the gradient reduce-scatter divides the ranks' sum by W (parallel/fsdp.hpp), so the
  // global batch's mean needs grad_scale = W (times any other factor) with the global count here.
  int64_t loss_tokens = 0;
  // Several ranks: the backward of this forward ends the step's gradient accumulation and
  // reduce-scatters (the last micro-batch); false keeps gradients unsharded and accumulated.
  bool sync_grads = true;
  // Set: the losses are not read back (no host wait; ForwardResult's losses are NaN) but added
  // on the device: slot kLossSlot += the mean loss, kMtpSlot += the MTP loss (kMtpScratchSlot is
  // the forward's own). Null: read back into ForwardResult.
  DeviceSums* loss_sums = nullptr;
  static constexpr int kLossSlot = 0, kMtpSlot = 1, kMtpScratchSlot = 2;
  static constexpr int kForwardSlots = 3;  // the slots above: a caller's own come after them
  // Mixture of experts: keep each layer's chosen experts for routing() (a host copy per layer).
  bool keep_routing = false;
  // Tests: shown the tensors at the boundaries core/tensor_probe.hpp names (null: none).
  TensorProbe* probe = nullptr;
  // Preference pairs (train.objective dpo, model/preference_loss.hpp): the loss is the mean over
  // the pairs of their objective (over pairs->global_pairs when > 0, times grad_scale for the
  // gradient) instead of the token mean; loss_tokens is not read. The head runs twice with a
  // backward: once for the token losses the pairs' weights come from, once for the gradient.
  // Set with loss_sums: the pairs' means (kPairMeans values, PairMeans' order) are added into
  // slots [pair_slots, pair_slots + kPairMeans). Read during forward() only.
  const PairBatch* pairs = nullptr;
  int pair_slots = -1;
  // Evaluation (apps/eval/): a (B, T) host array receiving each token's loss, the negative
  // log-probability of its target (0 where the target is ignored). Null: not copied. Not with
  // pairs (InternalError).
  float* token_losses = nullptr;
};

// How the model is laid out over ranks; see Transformer::prepare().
struct ShardOptions {
  Communicator* comm = nullptr;       // null: one rank
  bool reshard_after_forward = true;  // several ranks: gather layers again for backward
  GradSync grad_sync = GradSync::every_micro_batch;  // several ranks: parallel/fsdp.hpp
  // Mixture of experts: split the experts over groups of this many consecutive ranks
  // (distributed.expert_parallel_size; docs/moe.md).
  int expert_parallel = 1;
};

// One buffer of the model's working memory for a micro-batch shape (Transformer::buffer_plan).
struct BufferSpec {
  std::string name;
  // "batch" (token ids), "activations" (kept from forward to backward), "recompute" (one layer's
  // activations with activation checkpointing), "head" (final norm, one chunk of logits),
  // "scratch" (one layer's working tensors and gradients, the attention's tiles), "mtp" (the
  // multi-token-prediction head's per-depth tensors).
  std::string group;
  int64_t bytes = 0;  // of one copy
  int64_t copies = 1;
};

struct ForwardResult {
  double loss = 0.0;      // mean cross-entropy over counted tokens (main head)
  double mtp_loss = 0.0;  // mean over MTP depths of their mean losses (0 without MTP)
  // The gradient is that of loss + model.mtp_loss_weight * mtp_loss.
  int64_t tokens = 0;  // counted (non-ignored) target tokens of the main head
  // Mixture of experts: the load-balancing loss (unweighted; the gradient is that of
  // loss + model.moe.aux_loss_coef * aux_loss), 0 for a dense model.
  double aux_loss = 0.0;
  int64_t pairs = 0;  // preference pairs: this micro-batch's (Transformer::pair_results)
};

}  // namespace kktrain
