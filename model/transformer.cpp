// Transformer setup: parameter registration (canonical names, ties, protected fp32), precision
// flags, deterministic initialization, units and gradient routing (working buffers:
// model/transformer_buffers.cpp).
#include "model/transformer.hpp"
#include "core/host_sync.hpp"

#include <algorithm>
#include <cmath>

#include "core/errors.hpp"
#include "core/glob.hpp"
#include "core/log.hpp"
#include "core/random.hpp"
#include "model/transformer_buffers.hpp"
#include "ops/attention.hpp"
#include "ops/kernels.hpp"
#include "ops/rope.hpp"

namespace kktrain {

Transformer::Transformer(const ModelConfig& cfg, const ResolvedPrecision& precision, bool allocate,
                         const PeftConfig& peft)
    : cfg_(cfg), prec_(precision), peft_(peft), buf_(std::make_unique<Buffers>()) {
  round_.compute = rounding_for(prec_.compute);
  const Rounding rc = round_.compute;
  register_params();
  moe_counts_.resize(cfg_.moe.enabled() ? cfg_.num_layers : 0);
  moe_prob_sums_.resize(moe_counts_.size());
  moe_choices_.resize(moe_counts_.size());
  const ParamInfo& emb = params_.info(embed_);
  if (prec_.world_size == 1) {
    // Autocast semantics: the stream keeps the storage dtype promoted with the compute dtype.
    round_.stream = rc == Rounding::bf16 ? rounding_for(emb.dtype) : Rounding::fp32;
    round_.between = round_.stream;
  } else {
    // FSDP2 units compute in the compute dtype (their inputs are cast to it and all their
    // weights are gathered in it); their outputs are cast to output_dtype.
    round_.stream = rc;
    round_.between = prec_.output_applied ? rounding_for(*prec_.output) : rc;
  }
  round_compute_.resize(params_.size());
  for (int i = 0; i < params_.size(); ++i) {
    const ParamInfo& p = params_.info(i);
    Rounding r = Rounding::fp32;
    if (!p.keep_fp32) {
      switch (p.role) {
        case ParamRole::linear:
        case ParamRole::lora_a:
        case ParamRole::lora_b:
          r = rc;
          break;
        case ParamRole::embedding:
          r = lm_head_ == embed_ ? rc
                                 : round_.stream;  // a tied embedding is also the LM head's weight
          break;
        case ParamRole::norm:
          r = round_.stream;
          break;
      }
    }
    round_compute_[i] = r;
  }
  if (allocate) prepare(ShardOptions());
}

void Transformer::lower_frozen_storage() {
  // FSDP2's frozen-storage preparation: ordinary frozen parameters are reduced to the compute
  // dtype before sharding (never widened: bf16 storage with fp32 compute stays bf16); trainable
  // parameters, model-protected fp32 ones and LoRA adapters keep theirs.
  for (int i = 0; i < params_.size(); ++i) {
    ParamInfo& p = params_.info_mut(i);
    const bool adapter = p.role == ParamRole::lora_a || p.role == ParamRole::lora_b;
    const bool narrower = dtype_size(prec_.compute) < dtype_size(p.dtype);
    if (!p.trainable && !p.keep_fp32 && !adapter && narrower) p.dtype = prec_.compute;
  }
}

void Transformer::plan_layout(int rank, int world, int expert_parallel) {
  if (world != prec_.world_size) {
    throw InternalError("model laid out for " + std::to_string(world) +
                        " ranks, precision resolved for " + std::to_string(prec_.world_size));
  }
  const int64_t E = cfg_.moe.num_experts;
  if (expert_parallel > 1 && (E % expert_parallel != 0 || world % expert_parallel != 0)) {
    throw InternalError("expert_parallel_size " + std::to_string(expert_parallel) +
                        " does not divide the experts and the ranks");
  }
  ep_ = expert_parallel;
  expert0_ = ep_ > 1 ? (rank % ep_) * (E / ep_) : 0;
  if (ep_ > 1) {  // expert e lives on the ranks of expert-parallel rank e / (E / P)
    for (const LayerParams& p : layers_) {
      for (int64_t e = 0; e < E; ++e) {
        for (int i : {p.w1[e], p.w3[e], p.w2[e]}) {
          params_.info_mut(i).expert_owner = static_cast<int>(e / (E / ep_));
        }
      }
    }
  }
  if (world > 1) lower_frozen_storage();
  params_.shard(rank, world, ep_);
}

std::vector<UnitSpec> Transformer::unit_specs(bool reshard) const {
  // Weight slots: with resharding the layers share one buffer; otherwise every unit keeps its
  // own. Gradient slots: layers always share one (their backwards do not overlap).
  std::vector<UnitSpec> units;
  auto add = [&](const std::string& name, std::vector<int> params, int slot) {
    UnitSpec u;
    u.name = name;
    u.params = std::move(params);
    u.weight_slot = reshard ? slot : static_cast<int>(units.size());
    u.grad_slot = slot;
    units.push_back(std::move(u));
  };
  auto block_params = [&](const LayerParams& p) {
    std::vector<int> v = {p.ln1, p.q, p.k, p.v, p.o, p.ln2};
    if (p.router < 0) {
      v.insert(v.end(), {p.gate, p.up, p.down});
    } else {
      v.push_back(p.router);
      if (ep_ == 1) {
        const std::vector<int> x = expert_params(p);
        v.insert(v.end(), x.begin(), x.end());
      }
      if (p.shared_gate >= 0) v.insert(v.end(), {p.shared_gate, p.shared_up, p.shared_down});
    }
    for (int k = 0; k < kNumProj; ++k) {
      if (p.lora_a[k] >= 0) v.insert(v.end(), {p.lora_a[k], p.lora_b[k]});
    }
    return v;
  };
  add("embed", {embed_}, 0);
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    add("layer" + std::to_string(l), block_params(layers_[l]), 1);
  }
  std::vector<int> head = {final_norm_};
  if (lm_head_ != embed_) head.push_back(lm_head_);
  add("head", head, 2);
  if (!mtp_.empty()) {
    std::vector<int> m;
    for (const auto& d : mtp_) {
      m.insert(m.end(), {d.enorm, d.hnorm, d.eh_proj});
      const auto b = block_params(d.block);
      m.insert(m.end(), b.begin(), b.end());
      m.push_back(d.norm);
    }
    add("mtp", m, 3);
  }
  if (ep_ > 1) {  // this rank's experts of each layer, sharded over the ranks holding them
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      add("layer" + std::to_string(l) + ".experts", expert_params(layers_[l]), 4);
      units.back().experts = true;
    }
  }
  return units;
}

std::vector<int> Transformer::expert_params(const LayerParams& p) const {
  // This rank's experts: w1, w3 interleaved (one (El, 2F, C) stack), then the w2 (El, C, F).
  std::vector<int> v;
  for (int64_t e = expert0_; e < expert0_ + local_experts(); ++e) {
    v.insert(v.end(), {p.w1[e], p.w3[e]});
  }
  for (int64_t e = expert0_; e < expert0_ + local_experts(); ++e) v.push_back(p.w2[e]);
  return v;
}

ComputeLayout Transformer::compute_layout() const {
  // bf16 compute copies are 2-byte bf16 except norm weights (fp32 containers: their kernels read
  // fp32) and model-protected fp32 parameters; a fused group (q/k/v, gate/up) with any fp32
  // member is fp32 throughout, so it stays one matrix of one dtype.
  ComputeLayout l;
  const int n = params_.size();
  l.round.resize(n);
  for (int i = 0; i < n; ++i) l.round[i] = round_compute_[i] == Rounding::bf16;
  l.dtype.assign(n, DType::float32);
  l.group.assign(n, -1);
  for (int i = 0; i < n; ++i) {
    if (l.round[i] && params_.info(i).role != ParamRole::norm) l.dtype[i] = DType::bfloat16;
  }
  int next = 0;
  auto fuse = [&](std::vector<int> members) {
    bool all_bf16 = true;
    for (int m : members) all_bf16 = all_bf16 && l.dtype[m] == DType::bfloat16;
    for (int m : members) {
      l.group[m] = next;
      if (!all_bf16) l.dtype[m] = DType::float32;
    }
    ++next;
  };
  auto block = [&](const LayerParams& p) {
    fuse({p.q, p.k, p.v});
    if (p.router < 0) {
      fuse({p.gate, p.up});
      return;
    }
    const std::vector<int> x = expert_params(p);  // [w1, w3 of each] then the w2
    const std::size_t half = x.size() * 2 / 3;
    fuse(std::vector<int>(x.begin(), x.begin() + half));
    fuse(std::vector<int>(x.begin() + half, x.end()));
    if (p.shared_gate >= 0) fuse({p.shared_gate, p.shared_up});
  };
  for (const auto& p : layers_) block(p);
  for (const auto& m : mtp_) block(m.block);
  return l;
}

void Transformer::prepare(const ShardOptions& opts) {
  if (opts.comm) comm_ = opts.comm;
  plan_layout(comm_->rank(), comm_->size(), opts.expert_parallel);
  if (ep_ > 1) {  // collective over comm_, in the same order on every rank
    const int r = comm_->rank();
    ep_comm_ = comm_->split(r / ep_, r % ep_);
    edp_comm_ = comm_->split(r % ep_, r / ep_);
  }
  params_.allocate();
  reshard_ = comm_->size() > 1 && opts.reshard_after_forward;
  // One rank: the layers share one compute-weight slot (cast again for backward) so the compute
  // copy exists one layer at a time; several ranks: as reshard_after_forward says.
  units_ = std::make_unique<FsdpUnits>(params_, *comm_, unit_specs(reshard_ || comm_->size() == 1),
                                       compute_layout(), prec_.reduce);
  units_->set_grad_sync(opts.grad_sync);
  if (ep_ > 1) units_->set_expert_comm(edp_comm_.get());
  embed_unit_ = 0;
  head_unit_ = 1 + static_cast<int>(layers_.size());
  mtp_unit_ = mtp_.empty() ? -1 : head_unit_ + 1;
  expert_unit_.assign(layers_.size(), -1);
  for (std::size_t l = 0; ep_ > 1 && l < layers_.size(); ++l) {
    expert_unit_[l] = head_unit_ + 1 + static_cast<int>(l);  // no MTP head with experts
  }
  staged_grad_.resize(params_.size());
  for (const BufferSpec& s : model_buffer_plan()) {
    DView<float> v(s.name, s.bytes / static_cast<int64_t>(sizeof(float)));
    if (s.name == "staged_grad_embed") staged_grad_[embed_] = v;
    if (s.name == "staged_grad_lm_head") staged_grad_[lm_head_] = v;
    if (s.name == "rope_cos") rope_cos_ = v;
    if (s.name == "rope_sin") rope_sin_ = v;
  }
  rope_tables(rope_cos_.data(), rope_sin_.data(), cfg_.max_seq_len, cfg_.head_dim(),
              rope_inv_freq(cfg_.head_dim(), cfg_.rope_theta, cfg_.rope_scaling));
}

CommStats Transformer::moe_comm_stats() const {
  CommStats s;
  for (const auto* c : {ep_comm_.get(), edp_comm_.get()}) {
    if (!c) continue;
    s.bytes_sent += c->stats().bytes_sent;
    s.seconds += c->stats().seconds;
    s.calls += c->stats().calls;
    s.alltoall_bytes_sent += c->stats().alltoall_bytes_sent;
  }
  return s;
}

std::vector<BufferSpec> Transformer::model_buffer_plan() const {
  std::vector<BufferSpec> plan;
  auto add = [&](const char* name, int64_t numel) {
    plan.push_back(BufferSpec{name, "model", numel * static_cast<int64_t>(sizeof(float)), 1});
  };
  const ParamInfo& emb = params_.info(embed_);
  if (params_.shard_world() == 1) {
    // One rank: parameters with several gradient contributions per backward sum them in fp32
    // and round into their storage-dtype gradient once (sharded runs sum in the unit buffers).
    const bool multi_use_embed = lm_head_ == embed_ || !mtp_.empty();
    if (multi_use_embed && emb.trainable) add("staged_grad_embed", emb.numel);
    if (lm_head_ != embed_ && !mtp_.empty() && params_.info(lm_head_).trainable) {
      add("staged_grad_lm_head", params_.info(lm_head_).numel);
    }
  }
  const int64_t half = cfg_.head_dim() / 2;
  add("rope_cos", cfg_.max_seq_len * half);
  add("rope_sin", cfg_.max_seq_len * half);
  return plan;
}

std::vector<BufferSpec> Transformer::unit_buffer_plan(bool reshard_after_forward, bool accumulates,
                                                      GradSync sync, bool overlapped) const {
  const bool one_rank = params_.shard_world() == 1;
  const UnitBufferBytes u =
      FsdpUnits::plan(params_, unit_specs(one_rank || reshard_after_forward), compute_layout(),
                      prec_.reduce, accumulates, sync, overlapped);
  std::vector<BufferSpec> plan = {{"fsdp_weights", "compute_weights", u.compute_weights, 1},
                                  {"fsdp_grads", "units", u.grad_slots, 1},
                                  {"fsdp_wire", "units", u.wire, 1},
                                  {"fsdp_grad_accumulators", "units", u.accumulators, 1}};
  for (auto& s : model_buffer_plan()) plan.push_back(s);
  return plan;
}

Transformer::~Transformer() = default;

int Transformer::add_param(const std::string& module, std::vector<int64_t> shape, ParamRole role,
                           DType dtype) {
  const std::string name = module + ".weight";
  // Model-protected parameters (model.keep_in_fp32 globs) are fp32 in storage and compute.
  const bool keep = glob_match_any(cfg_.keep_in_fp32, name);
  const int i = params_.add(name, module, std::move(shape), role, keep ? DType::float32 : dtype);
  params_.info_mut(i).keep_fp32 = keep;
  return i;
}

Transformer::LayerParams Transformer::register_block(const std::string& prefix, DType dtype) {
  const int64_t C = cfg_.hidden_size, D = cfg_.head_dim();
  const int64_t F = cfg_.intermediate_size;
  auto add = [&](const std::string& module, std::vector<int64_t> shape, ParamRole role) {
    return add_param(prefix + "." + module, std::move(shape), role, dtype);
  };
  LayerParams p;
  p.ln1 = add("input_layernorm", {C}, ParamRole::norm);
  // q, k, v registered back to back: their compute copies form one ((H + 2 KV) D, C) matrix.
  p.q = add("self_attn.q_proj", {cfg_.num_heads * D, C}, ParamRole::linear);
  p.k = add("self_attn.k_proj", {cfg_.num_kv_heads * D, C}, ParamRole::linear);
  p.v = add("self_attn.v_proj", {cfg_.num_kv_heads * D, C}, ParamRole::linear);
  p.o = add("self_attn.o_proj", {C, cfg_.num_heads * D}, ParamRole::linear);
  p.ln2 = add("post_attention_layernorm", {C}, ParamRole::norm);
  if (cfg_.moe.enabled()) {
    register_sparse_mlp(p, prefix, dtype);
    return p;
  }
  // gate and up back to back: one (2F, C) matrix.
  p.gate = add("mlp.gate_proj", {F, C}, ParamRole::linear);
  p.up = add("mlp.up_proj", {F, C}, ParamRole::linear);
  p.down = add("mlp.down_proj", {C, F}, ParamRole::linear);
  return p;
}

void Transformer::register_sparse_mlp(LayerParams& p, const std::string& prefix, DType dtype) {
  // Hugging Face Mixtral names (docs/moe.md). Registered in the order of the fused compute
  // copies: each expert's w1, w3 back to back, expert after expert, then every w2.
  const int64_t C = cfg_.hidden_size, E = cfg_.moe.num_experts, F = cfg_.moe.intermediate_size;
  const std::string moe = prefix + ".block_sparse_moe";
  // The router is a protected fp32 parameter: storage, compute and gradient fp32.
  p.router =
      params_.add(moe + ".gate.weight", moe + ".gate", {E, C}, ParamRole::linear, DType::float32);
  params_.info_mut(p.router).keep_fp32 = true;
  for (int64_t e = 0; e < E; ++e) {
    const std::string ex = moe + ".experts." + std::to_string(e);
    p.w1.push_back(add_param(ex + ".w1", {F, C}, ParamRole::linear, dtype));
    p.w3.push_back(add_param(ex + ".w3", {F, C}, ParamRole::linear, dtype));
  }
  for (int64_t e = 0; e < E; ++e) {
    const std::string ex = moe + ".experts." + std::to_string(e);
    p.w2.push_back(add_param(ex + ".w2", {C, F}, ParamRole::linear, dtype));
  }
  const int64_t Fs = cfg_.moe.shared_expert_intermediate_size;
  if (Fs > 0) {
    const std::string sh = moe + ".shared_expert.";
    p.shared_gate = add_param(sh + "gate_proj", {Fs, C}, ParamRole::linear, dtype);
    p.shared_up = add_param(sh + "up_proj", {Fs, C}, ParamRole::linear, dtype);
    p.shared_down = add_param(sh + "down_proj", {C, Fs}, ParamRole::linear, dtype);
  }
}

void Transformer::register_params() {
  const DType st = prec_.storage;
  const int64_t C = cfg_.hidden_size, V = cfg_.vocab_size;
  embed_ = add_param("model.embed_tokens", {V, C}, ParamRole::embedding, st);
  for (int64_t l = 0; l < cfg_.num_layers; ++l) {
    layers_.push_back(register_block("model.layers." + std::to_string(l), st));
  }
  final_norm_ = add_param("model.norm", {C}, ParamRole::norm, st);
  if (cfg_.tie_word_embeddings) {
    lm_head_ = embed_;
    params_.add_alias(embed_, "lm_head.weight");
  } else {
    lm_head_ = add_param("lm_head", {V, C}, ParamRole::linear, st);
  }
  for (int64_t k = 0; k < cfg_.mtp_num_layers; ++k) {
    const std::string pre = "mtp.layers." + std::to_string(k);
    MtpParams m;
    m.enorm = add_param(pre + ".enorm", {C}, ParamRole::norm, st);
    m.hnorm = add_param(pre + ".hnorm", {C}, ParamRole::norm, st);
    m.eh_proj = add_param(pre + ".eh_proj", {C, 2 * C}, ParamRole::linear, st);
    m.block = register_block(pre, st);
    m.norm = add_param(pre + ".norm", {C}, ParamRole::norm, st);
    mtp_.push_back(m);
  }
  // A protection glob that protects nothing is a mistake the run would not show.
  for (const auto& g : cfg_.keep_in_fp32) {
    bool matched = false;
    for (const auto& pi : params_.all()) matched = matched || glob_match(g, pi.name);
    if (!matched) {
      throw ConfigError("model.keep_in_fp32",
                        "'" + g +
                            "' matches no parameter (names look like "
                            "'model.layers.0.input_layernorm.weight'; `kktrain audit` lists "
                            "them)");
    }
  }
  // LoRA adapters are registered after every base parameter, so the base layout (and the fused
  // q/k/v and gate/up compute weights) does not change.
  if (peft_.enabled) {
    for (auto& l : layers_) register_lora(l);
    for (auto& m : mtp_) register_lora(m.block);
    bool any = false;
    for (auto& pi : params_.all()) any = any || pi.role == ParamRole::lora_a;
    if (!any) {
      throw ConfigError("peft.target_modules",
                        "selects no projection (q_proj, k_proj, v_proj, o_proj, gate_proj, "
                        "up_proj, down_proj of any layer)");
    }
    // Adapters train; the base model starts frozen (freeze_config may unfreeze parts of it).
    for (int i = 0; i < params_.size(); ++i) {
      const ParamRole role = params_.info(i).role;
      params_.info_mut(i).trainable = role == ParamRole::lora_a || role == ParamRole::lora_b;
    }
  }
}

void Transformer::init_weights(const std::function<bool(const std::string&)>& which) {
  const double std = cfg_.init_std;
  const double out_std = std / std::sqrt(2.0 * std::max<int64_t>(1, cfg_.num_layers));
  for (int i = 0; i < params_.size(); ++i) {
    const ParamInfo& p = params_.info(i);
    if (which && !which(p.name)) continue;
    const uint64_t seed = cfg_.seed, stream = name_stream(p.name);
    const bool is_out = p.name.find("o_proj") != std::string::npos ||
                        p.name.find("down_proj") != std::string::npos ||
                        p.name.find(".w2.weight") != std::string::npos;  // an expert's down
    const float s = static_cast<float>(is_out ? out_std : std);
    const bool ones = p.role == ParamRole::norm;
    // Keyed on the element's index in the full tensor, so every rank count builds the same model.
    const int64_t first = p.row_begin * p.row_len;
    dispatch_dtype(p.dtype, [&](auto tag) {
      using T = decltype(tag);
      T* out = params_.data<T>(i).data();
      if (p.role == ParamRole::lora_a) {
        // PEFT's kaiming_uniform_(a = sqrt(5)): U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
        const float bound = 1.0f / std::sqrt(static_cast<float>(p.shape[1]));
        init_uniform<T>(space_, out, p.local_numel, seed, stream, -bound, bound, first);
      } else if (p.role == ParamRole::lora_b) {
        init_normal<T>(space_, out, p.local_numel, seed, stream, 0.0f, 0.0f, first);  // zeros
      } else {
        init_normal<T>(space_, out, p.local_numel, seed, stream, ones ? 0.0f : s,
                       ones ? 1.0f : 0.0f, first);
      }
    });
  }
  host_sync();
}

void Transformer::release_after_forward(int unit) {
  if (reshard_) units_->release(unit);
}

void Transformer::reduce(int unit) {
  units_->reduce_gradients(unit, sync_);
}

void Transformer::boundary_output(float* x, int64_t n) const {
  if (round_.between == Rounding::bf16 && round_.stream == Rounding::fp32) {
    round_copy(space_, x, x, n, Rounding::bf16);  // fp32 unit output cast to bf16 output_dtype
  }
}

void Transformer::boundary_grad_into_unit(float* g, int64_t n) const {
  // The gradient of a bf16 unit output arrives as the gradient of its fp32 cast.
  if (round_.stream == Rounding::bf16 && round_.between == Rounding::fp32) {
    round_copy(space_, g, g, n, Rounding::bf16);
  }
}

void Transformer::boundary_grad_out_of_unit(float* g, int64_t n) const {
  // The gradient of an fp32 unit input leaves as the gradient of the bf16 tensor it was cast from.
  if (round_.between == Rounding::bf16 && round_.stream == Rounding::fp32) {
    round_copy(space_, g, g, n, Rounding::bf16);
  }
}

void Transformer::accumulate(int param, const float* dw, Rounding round_dw) {
  const ParamInfo& p = params_.info(param);
  if (!p.trainable) return;
  const Rounding round = p.keep_fp32 ? Rounding::fp32 : round_dw;
  if (units_->sharded()) {  // the unit's full fp32 gradient; reduced after the unit's backward
    accumulate_grad<float>(space_, units_->grad_buffer(param), dw, p.numel, round);
    return;
  }
  if (staged_grad_[param].extent(0) > 0) {  // fp32 sum now, one rounding in flush_staged_grads
    accumulate_grad<float>(space_, staged_grad_[param].data(), dw, p.numel, round);
    return;
  }
  dispatch_dtype(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    accumulate_grad<T>(space_, params_.grad<T>(param).data(), dw, p.numel, round);
  });
}

void Transformer::flush_staged_grads() {
  for (int i = 0; i < params_.size(); ++i) {
    DView<float>& st = staged_grad_[i];
    if (st.extent(0) == 0 || !params_.info(i).trainable) continue;
    dispatch_dtype(params_.info(i).dtype, [&](auto tag) {
      using T = decltype(tag);
      accumulate_grad<T>(space_, params_.grad<T>(i).data(), st.data(), params_.info(i).numel,
                         Rounding::fp32);
    });
    Kokkos::deep_copy(ExecSpace(), st, 0.0f);
  }
}

void Transformer::zero_grads() {
  params_.zero_grads();
  units_->discard_gradients();
}

}  // namespace kktrain
