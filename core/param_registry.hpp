// The parameter registry: every model parameter registered once under its canonical name, with
// the module it belongs to (for selectors), its shape, its storage dtype and tie aliases.
//
// Storage is one flat allocation per dtype (llm.c style): parameters of dtype D live in
// data_<D> at `offset`, their gradients in grad_<D> at the same offset. Gradients have the
// parameter's storage dtype (torch semantics). A tied parameter has one storage and several
// names: `lm_head.weight` is an alias of `model.embed_tokens.weight` when embeddings are tied.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/kokkos_compat.hpp"

namespace kktrain {

enum class ParamRole { embedding, linear, norm, lora_a, lora_b };

struct ParamInfo {
  std::string name;                  // canonical name
  std::string module;                // owning module path, e.g. model.layers.0.self_attn.q_proj
  std::vector<std::string> aliases;  // other names of the same storage (ties)
  std::vector<int64_t> shape;
  int64_t numel = 0;
  ParamRole role = ParamRole::linear;
  DType dtype = DType::float32;  // storage dtype
  std::size_t offset = 0;        // element offset in the flat buffer of `dtype`
  std::size_t index_offset = 0;  // element offset over all parameters in registration order
  bool trainable = true;
  bool keep_fp32 = false;  // model-protected: stays fp32 in storage and compute
  bool no_weight_decay = false;
};

class ParamRegistry {
 public:
  // Registers a parameter; returns its index. Must precede allocate().
  int add(const std::string& name, const std::string& module, std::vector<int64_t> shape,
          ParamRole role, DType dtype);
  void add_alias(int index, const std::string& alias);
  // Allocates the flat parameter and gradient buffers (zero-filled).
  void allocate();
  bool allocated() const { return allocated_; }

  int size() const { return static_cast<int>(params_.size()); }
  const ParamInfo& info(int i) const { return params_[i]; }
  ParamInfo& info_mut(int i) { return params_[i]; }
  const std::vector<ParamInfo>& all() const { return params_; }
  // Index of a canonical name or alias; -1 when unknown.
  int find(const std::string& name) const;
  int64_t total_numel() const { return total_numel_; }
  int64_t numel_of(DType d) const { return d == DType::float32 ? n_f32_ : n_bf16_; }

  template <class T>
  DViewU<T> data(int i) const {
    return DViewU<T>(flat_data<T>().data() + params_[i].offset, params_[i].numel);
  }
  template <class T>
  DViewU<T> grad(int i) const {
    return DViewU<T>(flat_grad<T>().data() + params_[i].offset, params_[i].numel);
  }
  template <class T>
  const DView<T>& flat_data() const;
  template <class T>
  const DView<T>& flat_grad() const;

  void zero_grads() const;

 private:
  std::vector<ParamInfo> params_;
  int64_t total_numel_ = 0, n_f32_ = 0, n_bf16_ = 0;
  bool allocated_ = false;
  DView<float> data_f32_, grad_f32_;
  DView<bf16> data_bf16_, grad_bf16_;
};

template <>
inline const DView<float>& ParamRegistry::flat_data<float>() const {
  return data_f32_;
}
template <>
inline const DView<bf16>& ParamRegistry::flat_data<bf16>() const {
  return data_bf16_;
}
template <>
inline const DView<float>& ParamRegistry::flat_grad<float>() const {
  return grad_f32_;
}
template <>
inline const DView<bf16>& ParamRegistry::flat_grad<bf16>() const {
  return grad_bf16_;
}

std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace kktrain
