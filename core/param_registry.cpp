#include "core/param_registry.hpp"

#include <algorithm>

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
  p.rows = p.shape.empty() ? 1 : p.shape[0];
  p.row_len = p.rows > 0 ? p.numel / p.rows : 0;
  p.shard_rows = p.local_rows = p.rows;
  p.local_numel = p.numel;
  total_numel_ += p.numel;
  params_.push_back(std::move(p));
  return static_cast<int>(params_.size()) - 1;
}

int64_t ParamRegistry::shard_rows_of(int64_t rows, int rank, int world) {
  const int64_t chunk = (rows + world - 1) / world;
  const int64_t begin = std::min<int64_t>(rows, chunk * rank);
  return std::min<int64_t>(rows, begin + chunk) - begin;
}

void ParamRegistry::shard(int rank, int world, int expert_parallel) {
  if (allocated_) throw InternalError("registry sharded after allocation");
  if (world < 1 || rank < 0 || rank >= world) {
    throw InternalError("bad shard rank " + std::to_string(rank) + " of " + std::to_string(world));
  }
  if (expert_parallel < 1 || world % expert_parallel != 0) {
    throw InternalError("expert parallel size " + std::to_string(expert_parallel) +
                        " does not divide " + std::to_string(world) + " ranks");
  }
  rank_ = rank;
  world_ = world;
  expert_parallel_ = expert_parallel;
  const int groups = world / expert_parallel;
  for (auto& p : params_) {
    if (p.expert_owner >= expert_parallel) {
      throw InternalError(p.name + " is owned by expert-parallel rank " +
                          std::to_string(p.expert_owner) + " of " +
                          std::to_string(expert_parallel));
    }
    const bool expert = p.expert_owner >= 0;
    const int w = expert ? groups : world;
    const int r = expert ? rank / expert_parallel : rank;
    p.shard_rows = (p.rows + w - 1) / w;
    p.row_begin = std::min<int64_t>(p.rows, p.shard_rows * r);
    p.local_rows = rows_on_rank(p, rank);
    if (p.local_rows == 0) p.row_begin = p.rows;  // no rows: an empty range at the end
    p.local_numel = p.local_rows * p.row_len;
  }
}

int64_t ParamRegistry::rows_on_rank(const ParamInfo& p, int rank) const {
  if (p.expert_owner < 0) return shard_rows_of(p.rows, rank, world_);
  if (rank % expert_parallel_ != p.expert_owner) return 0;
  return shard_rows_of(p.rows, rank / expert_parallel_, world_ / expert_parallel_);
}

void ParamRegistry::add_alias(int index, const std::string& alias) {
  if (find(alias) >= 0) throw InternalError("alias '" + alias + "' already names a parameter");
  params_[index].aliases.push_back(alias);
}

void ParamRegistry::allocate() {
  if (allocated_) throw InternalError("registry allocated twice");
  int64_t grad_f32 = 0, grad_bf16 = 0;
  n_f32_ = n_bf16_ = 0;
  for (auto& p : params_) {
    if (p.dtype == DType::float16) throw InternalError("float16 parameter storage");
    const bool f32 = p.dtype == DType::float32;
    int64_t& n = f32 ? n_f32_ : n_bf16_;
    p.offset = static_cast<std::size_t>(n);
    n += p.local_numel;
    int64_t& g = f32 ? grad_f32 : grad_bf16;
    p.grad_offset = static_cast<std::size_t>(g);
    p.has_grad = p.trainable;
    if (p.has_grad) g += p.local_numel;
  }
  data_f32_ = DView<float>("params_f32", n_f32_);
  grad_f32_ = DView<float>("grads_f32", grad_f32);
  data_bf16_ = DView<bf16>("params_bf16", n_bf16_);
  grad_bf16_ = DView<bf16>("grads_bf16", grad_bf16);
  zero_grads();
  allocated_ = true;
}

void ParamRegistry::throw_no_grad(int i) const {
  throw InternalError("gradient of frozen parameter '" + params_[i].name + "' (frozen parameters " +
                      "have no gradient buffer)");
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
  Kokkos::deep_copy(ExecSpace(), grad_f32_, 0.0f);
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
