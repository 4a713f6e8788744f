// TBuf: a flat device buffer in the compute dtype's container (model/block.hpp, model/moe.hpp).
#pragma once

#include "core/bf16.hpp"
#include "core/kokkos_compat.hpp"

namespace kktrain {

// A flat device buffer whose element type is the compute dtype: fp32, or 2-byte bf16 when the
// compute dtype is bf16. p<T>() is valid for the type it was allocated with.
struct TBuf {
  DView<float> f;
  DView<bf16> h;
  template <class T>
  T* p() const;
  bool empty() const { return f.extent(0) == 0 && h.extent(0) == 0; }
};
template <>
inline float* TBuf::p<float>() const {
  return f.data();
}
template <>
inline bf16* TBuf::p<bf16>() const {
  return h.data();
}

}  // namespace kktrain
