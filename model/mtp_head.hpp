// The multi-token-prediction head (DeepSeek-V3 style) as a feature of the model, depth k = 1..K:
//   h_in_k  = eh_proj([enorm(embed(t_{i+k})) | hnorm(h_{k-1})])     h_0 = last main residual
//   h_k     = block_k(h_in_k)
//   loss_k  = CE(lm_head(norm_k(h_k)), t_{i+k+1})                     lm_head/embed shared
// total loss = main + model.mtp_loss_weight * mean_k loss_k. With compute_mtp = false the head is
// skipped at run time; its parameters stay registered for load and save. Its parameters, buffers,
// batch inputs and passes, as free functions over ModelState.
#pragma once

#include <cstdint>
#include <vector>

#include "model/model_state.hpp"

namespace kktrain {

class BufferMaker;

// A depth's activations.
struct MtpActs {
  DView<int32_t> ids, targets;          // (N) shifted inputs / targets (-1 where unavailable)
  DView<int32_t> row_start, positions;  // CSR of ids by token value (embedding backward)
  DView<float> emb;                     // (N, C) embedding lookup, stream dtype
  DView<float> rstd_e, rstd_h;          // (N)
  TBuf cat;                             // (N, 2C) [enorm(emb) | hnorm(h_prev)], compute dtype
  DView<float> h_in;                    // (N, C) eh_proj output = block input, stream dtype
  DView<float> h_out;                   // (N, C) block output
  TBuf xf;                              // (N, C) final norm of this depth, compute dtype
  DView<float> rstd_f;                  // (N)
  DView<float> dxf;                     // (N, C) gradient of xf (LM head backward, at forward)
  DView<float> losses;                  // (N)
  int64_t count = 0;
};

// The head's buffers: each depth's activations and block activations; the scratch the depths
// share: (N, 2C) eh_proj input gradient; (N, C) gradients of h_out/h_prev, the two normed halves
// and the embedding lookup; the two normed halves (forward, compute dtype).
struct MtpBuffers {
  std::vector<MtpActs> depth;
  std::vector<BlockActs> block;
  DView<float> dcat, dh, dh_prev, den, dhn, demb;
  TBuf en, hn;
};

// Registers model.mtp_num_layers depths (mtp.layers.<k>.*) after the LM head.
void register_mtp_head(ModelState& s);
// The head's parameters in its unit, depth after depth.
std::vector<int> mtp_unit_params(const ModelState& s);
void make_mtp_buffers(BufferMaker& mk, MtpBuffers& b, int64_t B, int64_t T, const ModelConfig& c);
// The host-to-device uploads of upload_mtp_batch, in order.
void append_mtp_upload_plan(const ModelState& s, int64_t N, std::vector<std::size_t>* plan);
// Each depth's shifted ids and targets from the main targets ht (B*T): depth k at position t
// reads token t + k and predicts t + k + 1 (past the window: ignored).
void upload_mtp_batch(ModelState& s, const std::vector<int32_t>& ht, int64_t B, int64_t T);
// Every depth's forward (and, Pass::with_backward, its head's backward), adding the mean of the
// depths' losses to r->mtp_loss (or to the device sums).
template <class TC>
void mtp_forward(ModelState& s, const ForwardOptions& opts, Pass pass, ForwardResult* r);
// Adds the head's gradient with respect to the main model's last residual into dres (N, C).
template <class TC>
void mtp_backward(ModelState& s, float* dres);

}  // namespace kktrain
