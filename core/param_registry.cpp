#include "core/param_registry.hpp"

#include "core/errors.hpp"

namespace kktrain {

int ParamRegistry::add(const std::string& name, const std::string& module,
                       std::vector<int64_t> shape, ParamRole role, DType dtype) {
  if (allocated_) throw InternalError("parameter '" + name + "' registered after allocation");
  if (find(name) >= 0) throw InternalError("parameter '" + name + "' registered twice");
  if (dtype == DType::float16) throw InternalError("float16 parameter storage");
  ParamInfo p;
  p.name = name;
  p.module = module;
  p.shape = std::move(shape);
  p.numel = 1;
  for (auto d : p.shape) p.numel *= d;
  p.role = role;
  p.dtype = dtype;
  p.index_offset = static_cast<std::size_t>(total_numel_);
  int64_t& n = dtype == DType::float32 ? n_f32_ : n_bf16_;
  p.offset = static_cast<std::size_t>(n);
  n += p.numel;
  total_numel_ += p.numel;
  params_.push_back(std::move(p));
  return static_cast<int>(params_.size()) - 1;
}

void ParamRegistry::add_alias(int index, const std::string& alias) {
  if (find(alias) >= 0) throw InternalError("alias '" + alias + "' already names a parameter");
  params_[index].aliases.push_back(alias);
}

void ParamRegistry::allocate() {
  data_f32_ = DView<float>("params_f32", n_f32_);
  grad_f32_ = DView<float>("grads_f32", n_f32_);
  data_bf16_ = DView<bf16>("params_bf16", n_bf16_);
  grad_bf16_ = DView<bf16>("grads_bf16", n_bf16_);
  zero_grads();
  allocated_ = true;
}

int ParamRegistry::find(const std::string& name) const {
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].name == name) return static_cast<int>(i);
    for (const auto& a : params_[i].aliases) {
      if (a == name) return static_cast<int>(i);
    }
  }
  return -1;
}

void ParamRegistry::zero_grads() const {
  // bf16 +0 is all-zero bits; a kernel writes them (deep_copy needs arithmetic value types).
  Kokkos::deep_copy(grad_f32_, 0.0f);
  auto g = grad_bf16_;
  Kokkos::parallel_for(
      "zero_grads_bf16", RangePolicy(0, g.extent(0)),
      KOKKOS_LAMBDA(const std::size_t i) { g(i) = bf16::from_bits(0); });
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    s += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return s + (shape.size() == 1 ? ",)" : ")");
}

}  // namespace kktrain
