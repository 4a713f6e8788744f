// Helpers shared by the model tests (test_model.cpp, test_moe.cpp).
#pragma once

#include "core/config.hpp"
#include "core/dtype.hpp"
#include "core/precision.hpp"

namespace kktrain {
namespace testing_util {

// The small model the model tests share: vocabulary 23, hidden 16, 2 layers of 4 heads over 2
// KV heads, MLP 24, 16 positions, init_std 0.3, seed 7 (tests change what they study).
inline ModelConfig tiny_model_config() {
  ModelConfig m;
  m.vocab_size = 23;
  m.hidden_size = 16;
  m.num_layers = 2;
  m.num_heads = 4;
  m.num_kv_heads = 2;
  m.intermediate_size = 24;
  m.max_seq_len = 16;
  m.init_std = 0.3;
  m.seed = 7;
  return m;
}

// A resolved precision with the given storage and compute dtypes, reducing in fp32.
inline ResolvedPrecision precision(DType storage, DType compute) {
  ResolvedPrecision p;
  p.storage = storage;
  p.compute = compute;
  p.reduce = DType::float32;
  return p;
}

}  // namespace testing_util
}  // namespace kktrain
