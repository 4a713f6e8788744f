#include "core/dtype.hpp"

namespace kktrain {

const char* dtype_name(DType d) {
  switch (d) {
    case DType::float32:
      return "float32";
    case DType::bfloat16:
      return "bfloat16";
    case DType::float16:
      return "float16";
  }
  return "?";
}

std::size_t dtype_size(DType d) {
  return d == DType::float32 ? 4 : 2;
}

const char* dtype_spellings() {
  return "float32, fp32, torch.float32, bfloat16, bf16, torch.bfloat16, float16, half, "
         "torch.float16";
}

bool parse_dtype(const std::string& s, DType* out) {
  struct Spelling {
    const char* text;
    DType dtype;
  };
  static const Spelling table[] = {
      {"float32", DType::float32},   {"fp32", DType::float32},  {"torch.float32", DType::float32},
      {"bfloat16", DType::bfloat16}, {"bf16", DType::bfloat16}, {"torch.bfloat16", DType::bfloat16},
      {"float16", DType::float16},   {"half", DType::float16},  {"torch.float16", DType::float16},
  };
  for (const auto& sp : table) {
    if (s == sp.text) {
      *out = sp.dtype;
      return true;
    }
  }
  return false;
}

}  // namespace kktrain
