// Inference: one token at a time through the model with a KV cache, so each new token costs one
// position of every layer, not a re-run of the prefix. A small set of functions beside the
// training path (model/transformer*), built from the same kernels (ops/kernels.hpp) and the
// same GEMM interface (ops/gemm.hpp); the training path is not touched.
//
// Weights stay in the dtype they were given in (float32 or bfloat16 GEMM operands; norm weights
// fp32); every activation, the attention scores and the logits are fp32, so greedy decoding
// picks the argmax of the same logits a full fp32 forward computes, up to the order of fp32
// sums (tests/unit/test_generate.cpp checks it at every position).
//
//   per token at position p: x = embed[token]
//     per layer: h = rmsnorm(x); q, k, v = h Wq^T, h Wk^T, h Wv^T; rotary at p on q, k;
//                K[:, p], V[:, p] = k, v; per query head: softmax(scale q K[:, :p+1]^T) V[:, :p+1]
//                x += o Wo^T; x += down(silu(gate(rmsnorm(x))) * up(rmsnorm(x)))
//     logits = rmsnorm(x) Wlm^T, then cap * tanh(logits / cap) with model.final_logit_softcapping
//   Phi-3: q, k, v from the one qkv_proj and gate, up from gate_up_proj; rotary on the first
//   model.rotary_dim values of each head; longrope: the short factors' tables until the sequence
//   passes original_max_position_embeddings, then (as transformers' Phi-3 drops its cache) every
//   position seen is run again with the long factors' tables and those are used from then on.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/kokkos_compat.hpp"

namespace kktrain {

class Decoder {
 public:
  // Reads every weight the decoder needs through `read(name)` (the tensor's fp32 values, whole;
  // called once per tensor and uploaded at once) and keeps matrices in `dtype` (float32 or
  // bfloat16: bf16 weights round once, and bf16 values read as fp32 are kept exactly). A KV cache
  // for `max_positions` positions (at most cfg.max_seq_len).
  Decoder(const ModelConfig& cfg, DType dtype,
          const std::function<std::vector<float>(const std::string& name)>& read,
          int64_t max_positions);
  ~Decoder();
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;

  // Runs `token` at the next position and returns the logits (V) for the token after it.
  std::vector<float> step(int32_t token);
  int64_t position() const { return pos_; }
  int64_t max_positions() const { return max_pos_; }
  // Bytes of the weights and of the KV cache on the device.
  int64_t weight_bytes() const { return weight_bytes_; }
  int64_t cache_bytes() const;

 private:
  std::vector<float> forward(int32_t token);  // one position's forward, the cache updated
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int64_t pos_ = 0, max_pos_ = 0, weight_bytes_ = 0;
};

struct SamplingOptions {
  int64_t max_new_tokens = 32;
  double temperature = 0.0;  // 0: greedy (the first of equal maxima)
  int64_t top_k = 0;         // 0: every token
  uint64_t seed = 0;
  std::vector<int32_t> stop_tokens;  // stop after generating one of them (none: never)
};

// The token chosen from `logits` at generation step `index`: greedy, or a draw from
// softmax(logits / temperature) over the top_k largest, keyed on (seed, index).
int32_t sample_token(const std::vector<float>& logits, const SamplingOptions& o, int64_t index);

// Runs `prompt` (at least one token) through the decoder, then generates up to max_new_tokens
// tokens; returns the generated tokens (not the prompt). `on_token`, if set, is called with each
// token as soon as it is chosen (to print it while the next one is computed).
std::vector<int32_t> generate_tokens(Decoder& d, const std::vector<int32_t>& prompt,
                                     const SamplingOptions& o,
                                     const std::function<void(int32_t)>& on_token = {});

}  // namespace kktrain
