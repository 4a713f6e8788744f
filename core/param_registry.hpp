// The parameter registry: every model parameter registered once under its canonical name, with
// the module it belongs to (for selectors), its shape, its storage dtype and tie aliases.
//
// Storage is one flat allocation per dtype (llm.c style): parameters of dtype D live in
// data_<D> at `offset`; gradients exist only for trainable parameters, in grad_<D> at
// `grad_offset`. Gradients have the parameter's storage dtype (torch semantics). A tied parameter
// has one storage and several names: `lm_head.weight` is an alias of `model.embed_tokens.weight`
// when embeddings are tied.
//
// Sharding (FSDP2 layout, parallel/): with W ranks every parameter is split along dim 0 into
// chunks of ceil(rows / W) rows; rank r holds rows [r * chunk, min(rows, (r + 1) * chunk)), so the
// last ranks may hold fewer rows or none. Each rank stores only its own rows (no padding), and
// data()/grad() are views of that shard. One rank holds everything. The shard's global position
// (row_begin, local_rows) is what checkpoints and the collectives use.
//
// Expert parallelism (docs/moe.md): with expert_parallel_size E the ranks form groups of E
// consecutive ranks; rank r is expert-parallel rank r % E of group r / E. An expert parameter
// (expert_owner >= 0) lives only on the ranks whose expert-parallel rank is its owner, one per
// group, and is split over those W / E ranks as above (chunks of ceil(rows / (W / E)) rows, rank
// r holding chunk r / E); every other rank holds none of its rows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/kokkos_compat.hpp"

namespace kktrain {

// bias: a projection's bias (computes in the compute dtype like its weight; starts at zero).
enum class ParamRole { embedding, linear, norm, bias, lora_a, lora_b };
// A sparse MLP's parameters: its router, or one of its experts' matrices (whatever the family's
// names for them).
enum class MoePart : uint8_t { none, router, expert };

struct ParamInfo {
  std::string name;                  // canonical name
  std::string module;                // owning module path, e.g. model.layers.0.self_attn.q_proj
  std::vector<std::string> aliases;  // other names of the same storage (ties)
  std::vector<int64_t> shape;
  int64_t numel = 0;
  ParamRole role = ParamRole::linear;
  DType dtype = DType::float32;  // storage dtype (may be lowered before allocation, model/)
  std::size_t offset = 0;        // element offset of the local shard in the flat buffer of `dtype`
  std::size_t grad_offset = 0;   // same for the gradient (trainable parameters only)
  std::size_t index_offset = 0;  // element offset over all parameters in registration order
  // dim-0 sharding: `rows` = shape[0] rows of `row_len` elements; this rank holds local_rows rows
  // starting at row_begin, at most shard_rows = ceil(rows / world).
  int64_t rows = 0, row_len = 0;
  int64_t shard_rows = 0, row_begin = 0, local_rows = 0;
  int64_t local_numel = 0;  // local_rows * row_len
  bool trainable = true;
  bool has_grad = false;   // a gradient buffer was allocated (trainable at allocate())
  bool keep_fp32 = false;  // model-protected: stays fp32 in storage and compute
  bool no_weight_decay = false;
  MoePart moe = MoePart::none;
  // Expert parallelism: the expert-parallel rank holding this expert parameter (-1: not an
  // expert parameter; sharded over every rank).
  int expert_owner = -1;
};

class ParamRegistry {
 public:
  // Registers a parameter; returns its index. Must precede allocate().
  int add(const std::string& name, const std::string& module, std::vector<int64_t> shape,
          ParamRole role, DType dtype);
  void add_alias(int index, const std::string& alias);
  // Splits every parameter for `rank` of `world` ranks, expert parameters over the groups of
  // `expert_parallel` ranks (before allocate(); default: one rank).
  void shard(int rank, int world, int expert_parallel = 1);
  int shard_rank() const { return rank_; }
  int shard_world() const { return world_; }
  int expert_parallel() const { return expert_parallel_; }
  // The ranks an expert parameter is split over (world / expert_parallel), and this rank's place
  // among them.
  int expert_data_parallel() const { return world_ / expert_parallel_; }
  // Rows of dim 0 that rank r of `world` holds of a tensor with `rows` rows (may be 0).
  static int64_t shard_rows_of(int64_t rows, int rank, int world);
  // Rows of parameter p that rank `rank` of this layout holds (expert parameters included).
  int64_t rows_on_rank(const ParamInfo& p, int rank) const;
  // Allocates the flat parameter buffers (zero-filled) and the gradient buffers of the trainable
  // parameters, with the dtypes, trainability and shards as they are now.
  void allocate();
  bool allocated() const { return allocated_; }

  int size() const { return static_cast<int>(params_.size()); }
  const ParamInfo& info(int i) const { return params_[i]; }
  ParamInfo& info_mut(int i) { return params_[i]; }
  const std::vector<ParamInfo>& all() const { return params_; }
  // Index of a canonical name or alias; -1 when unknown.
  int find(const std::string& name) const;
  int64_t total_numel() const { return total_numel_; }
  // Local (this rank's) elements stored in dtype d, after allocate().
  int64_t numel_of(DType d) const { return d == DType::float32 ? n_f32_ : n_bf16_; }

  // This rank's shard of parameter i (local_numel elements) and of its gradient (trainable
  // parameters only).
  template <class T>
  DViewU<T> data(int i) const {
    return DViewU<T>(flat_data<T>().data() + params_[i].offset, params_[i].local_numel);
  }
  template <class T>
  DViewU<T> grad(int i) const {
    if (!params_[i].has_grad) throw_no_grad(i);
    return DViewU<T>(flat_grad<T>().data() + params_[i].grad_offset, params_[i].local_numel);
  }
  template <class T>
  const DView<T>& flat_data() const;
  template <class T>
  const DView<T>& flat_grad() const;

  void zero_grads() const;

 private:
  [[noreturn]] void throw_no_grad(int i) const;
  std::vector<ParamInfo> params_;
  int64_t total_numel_ = 0, n_f32_ = 0, n_bf16_ = 0;
  int rank_ = 0, world_ = 1, expert_parallel_ = 1;
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
