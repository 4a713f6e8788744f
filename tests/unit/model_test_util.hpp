// Helpers shared by the model tests (test_model.cpp, test_moe.cpp).
#pragma once

#include "core/dtype.hpp"
#include "core/precision.hpp"

namespace kktrain {
namespace testing_util {

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
