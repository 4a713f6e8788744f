// Runtime dtypes and their compile-time scalar types.
//
// A config names dtypes as strings in many spellings (float32, fp32, torch.float32, ...); the
// precision policy holds them as DType; kernels need a C++ scalar type. dispatch_dtype() is the
// one bridge: it calls a generic lambda with a tag value of the matching scalar type, so code that
// allocates policy-typed Views is written once instead of switching on dtype everywhere.
#pragma once

#include <cstddef>
#include <string>
#include <utility>

#include "core/bf16.hpp"
#include "core/errors.hpp"

namespace kktrain {

enum class DType { float32, bfloat16, float16 };

// Canonical spelling: "float32", "bfloat16", "float16".
const char* dtype_name(DType d);
std::size_t dtype_size(DType d);

// Accepted spellings, for error messages and help text.
const char* dtype_spellings();

// Parses any accepted spelling; returns false (leaving *out untouched) for anything else.
// "auto" and null are not dtypes: callers that allow them check for them first.
bool parse_dtype(const std::string& s, DType* out);

template <class T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::float32;
};
template <>
struct dtype_of<bf16> {
  static constexpr DType value = DType::bfloat16;
};

// A device pointer whose element type is known only at run time (e.g. a parameter's compute
// copy, fp32 or bf16).
struct CRef {
  const void* data = nullptr;
  DType dtype = DType::float32;
};

// Calls f(T{}) with T the scalar type of d. float16 is a parseable dtype but kktrain computes
// and stores only float32 and bfloat16; config validation rejects float16 before any dispatch.
template <class F>
decltype(auto) dispatch_dtype(DType d, F&& f) {
  switch (d) {
    case DType::float32:
      return std::forward<F>(f)(float{});
    case DType::bfloat16:
      return std::forward<F>(f)(bf16{});
    case DType::float16:
      break;
  }
  throw InternalError("dispatch_dtype: float16 tensors are not supported");
}

// Calls f(A{}, B{}) with A and B the scalar types of a and b.
template <class F>
void dispatch_dtypes(DType a, DType b, F&& f) {
  dispatch_dtype(a, [&](auto x) { dispatch_dtype(b, [&](auto y) { f(x, y); }); });
}

}  // namespace kktrain
