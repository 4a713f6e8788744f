// Units over ranks, boundaries and gradient routing (model/units.hpp).
#include "model/units.hpp"

#include <string>

#include "core/errors.hpp"
#include "model/dense_block.hpp"
#include "model/mtp_head.hpp"
#include "model/params.hpp"
#include "model/sparse_mlp.hpp"
#include "ops/kernels.hpp"
#include "ops/rope.hpp"

namespace kktrain {

namespace {

// Weight slots: with resharding (and on one rank) the layers share one buffer; otherwise every
// unit keeps its own.
enum class WeightSlots : uint8_t { shared, per_unit };

WeightSlots weight_slots(const ModelState& s, bool reshard_after_forward) {
  const bool one_rank = s.params.shard_world() == 1;
  return one_rank || reshard_after_forward ? WeightSlots::shared : WeightSlots::per_unit;
}

std::vector<UnitSpec> unit_specs(const ModelState& s, WeightSlots slots) {
  const bool reshard = slots == WeightSlots::shared;
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
  add("embed", {s.embed}, 0);
  for (std::size_t l = 0; l < s.layers.size(); ++l) {
    add("layer" + std::to_string(l), block_unit_params(s, s.layers[l]), 1);
  }
  std::vector<int> head = {s.final_norm};
  if (s.lm_head != s.embed) head.push_back(s.lm_head);
  add("head", head, 2);
  if (!s.mtp.empty()) add("mtp", mtp_unit_params(s), 3);
  if (s.moe.ep > 1) {  // this rank's experts of each layer, sharded over the ranks holding them
    for (std::size_t l = 0; l < s.layers.size(); ++l) {
      add("layer" + std::to_string(l) + ".experts", expert_params(s, s.layers[l]), 4);
      units.back().experts = true;
    }
  }
  return units;
}

}  // namespace

void plan_layout(ModelState& s, int rank, int world, int expert_parallel) {
  if (world != s.prec.world_size) {
    throw InternalError("model laid out for " + std::to_string(world) +
                        " ranks, precision resolved for " + std::to_string(s.prec.world_size));
  }
  assign_experts(s, rank, world, expert_parallel);
  if (world > 1) lower_frozen_storage(s);
  s.params.shard(rank, world, s.moe.ep);
}

void prepare_units(ModelState& s, const ShardOptions& opts) {
  if (opts.comm) s.comm = opts.comm;
  plan_layout(s, s.comm->rank(), s.comm->size(), opts.expert_parallel);
  connect_expert_groups(s);
  s.params.allocate();
  s.reshard = s.comm->size() > 1 && opts.reshard_after_forward;
  // One rank: the layers share one compute-weight slot (cast again for backward) so the compute
  // copy exists one layer at a time; several ranks: as reshard_after_forward says.
  s.units = std::make_unique<FsdpUnits>(s.params, *s.comm,
                                        unit_specs(s, weight_slots(s, opts.reshard_after_forward)),
                                        compute_layout(s), s.prec.reduce);
  s.units->set_grad_sync(opts.grad_sync);
  if (s.moe.ep > 1) s.units->set_expert_comm(s.moe.edp_comm.get());
  s.embed_unit = 0;
  s.head_unit = 1 + static_cast<int>(s.layers.size());
  s.mtp_unit = s.mtp.empty() ? -1 : s.head_unit + 1;
  assign_expert_units(s);
  s.staged_grad.resize(s.params.size());
  for (const BufferSpec& spec : model_buffer_plan(s)) {
    DView<float> v(spec.name, spec.bytes / static_cast<int64_t>(sizeof(float)));
    if (spec.name == "staged_grad_embed") s.staged_grad[s.embed] = v;
    if (spec.name == "staged_grad_lm_head") s.staged_grad[s.lm_head] = v;
    if (spec.name == "rope_cos") s.rope_cos = v;
    if (spec.name == "rope_sin") s.rope_sin = v;
    if (spec.name == "rope_cos_local") s.rope_cos_local = v;
    if (spec.name == "rope_sin_local") s.rope_sin_local = v;
    if (spec.name == "rope_cos_long") s.rope_cos_long = v;
    if (spec.name == "rope_sin_long") s.rope_sin_long = v;
  }
  // Over the rotary width R (model.rotary_dim); longrope: the short factors' tables and the long
  // ones', cos and sin times attention_factor.
  const int64_t R = s.cfg.rotary_dim();
  const RopeScaling& rs = s.cfg.rope_scaling;
  const float attention = rs.longrope() ? static_cast<float>(rs.attention_factor) : 1.0f;
  rope_tables(s.rope_cos.data(), s.rope_sin.data(), s.cfg.max_seq_len, R,
              rope_inv_freq(R, s.cfg.rope_theta, rs), attention);
  if (rs.longrope()) {
    rope_tables(s.rope_cos_long.data(), s.rope_sin_long.data(), s.cfg.max_seq_len, R,
                rope_inv_freq(R, s.cfg.rope_theta, rs, true), attention);
  }
  if (s.cfg.rope_local_theta > 0) {
    rope_tables(s.rope_cos_local.data(), s.rope_sin_local.data(), s.cfg.max_seq_len, R,
                rope_inv_freq(R, s.cfg.rope_local_theta, RopeScaling()));
  }
}

ComputeLayout compute_layout(const ModelState& s) {
  // bf16 compute copies are 2-byte bf16 except norm weights (fp32 containers: their kernels read
  // fp32) and model-protected fp32 parameters; a fused group (q/k/v, gate/up) with any fp32
  // member is fp32 throughout, so it stays one matrix of one dtype.
  ComputeLayout l;
  const int n = s.params.size();
  l.round.resize(n);
  for (int i = 0; i < n; ++i) l.round[i] = s.round_compute[i] == Rounding::bf16;
  l.dtype.assign(n, DType::float32);
  l.group.assign(n, -1);
  for (int i = 0; i < n; ++i) {
    if (l.round[i] && s.params.info(i).role != ParamRole::norm) l.dtype[i] = DType::bfloat16;
  }
  int next = 0;
  auto fuse = [&](const std::vector<int>& members) {
    bool all_bf16 = true;
    for (int m : members) all_bf16 = all_bf16 && l.dtype[m] == DType::bfloat16;
    for (int m : members) {
      l.group[m] = next;
      if (!all_bf16) l.dtype[m] = DType::float32;
    }
    ++next;
  };
  for (const auto& p : s.layers) {
    for (const auto& g : block_fused_groups(s, p)) fuse(g);
  }
  for (const auto& m : s.mtp) {
    for (const auto& g : block_fused_groups(s, m.block)) fuse(g);
  }
  return l;
}

std::vector<BufferSpec> model_buffer_plan(const ModelState& s) {
  std::vector<BufferSpec> plan;
  auto add = [&](const char* name, int64_t numel) {
    plan.push_back(BufferSpec{name, "model", numel * static_cast<int64_t>(sizeof(float)), 1});
  };
  const ParamInfo& emb = s.params.info(s.embed);
  if (s.params.shard_world() == 1) {
    // One rank: parameters with several gradient contributions per backward sum them in fp32
    // and round into their storage-dtype gradient once (sharded runs sum in the unit buffers).
    const bool multi_use_embed = s.lm_head == s.embed || !s.mtp.empty();
    if (multi_use_embed && emb.trainable) add("staged_grad_embed", emb.numel);
    if (s.lm_head != s.embed && !s.mtp.empty() && s.params.info(s.lm_head).trainable) {
      add("staged_grad_lm_head", s.params.info(s.lm_head).numel);
    }
  }
  const int64_t half = s.cfg.rotary_dim() / 2;
  add("rope_cos", s.cfg.max_seq_len * half);
  add("rope_sin", s.cfg.max_seq_len * half);
  if (s.cfg.rope_scaling.longrope()) {
    add("rope_cos_long", s.cfg.max_seq_len * half);
    add("rope_sin_long", s.cfg.max_seq_len * half);
  }
  if (s.cfg.rope_local_theta > 0) {
    add("rope_cos_local", s.cfg.max_seq_len * half);
    add("rope_sin_local", s.cfg.max_seq_len * half);
  }
  return plan;
}

std::vector<BufferSpec> unit_buffer_plan(const ModelState& s, const UnitPlanOptions& o) {
  const UnitBufferBytes u =
      FsdpUnits::plan(s.params, unit_specs(s, weight_slots(s, o.reshard_after_forward)),
                      compute_layout(s), s.prec.reduce, o.accumulates, o.sync, o.overlapped);
  std::vector<BufferSpec> plan = {{"fsdp_weights", "compute_weights", u.compute_weights, 1},
                                  {"fsdp_grads", "units", u.grad_slots, 1},
                                  {"fsdp_wire", "units", u.wire, 1},
                                  {"fsdp_grad_accumulators", "units", u.accumulators, 1}};
  for (auto& spec : model_buffer_plan(s)) plan.push_back(spec);
  return plan;
}

void gather(ModelState& s, int unit, int next) {
  s.units->gather(unit);
  if (next >= 0) s.units->prefetch(next);
}

void release_after_forward(ModelState& s, int unit) {
  if (s.reshard) s.units->release(unit);
}

void reduce(ModelState& s, int unit) {
  s.units->reduce_gradients(unit, s.sync);
}

void boundary_output(const ModelState& s, float* x, int64_t n) {
  if (s.round.between == Rounding::bf16 && s.round.stream == Rounding::fp32) {
    round_copy(s.space, x, x, n, Rounding::bf16);  // fp32 unit output cast to bf16 output_dtype
  }
}

void boundary_grad_into_unit(const ModelState& s, float* g, int64_t n) {
  // The gradient of a bf16 unit output arrives as the gradient of its fp32 cast.
  if (s.round.stream == Rounding::bf16 && s.round.between == Rounding::fp32) {
    round_copy(s.space, g, g, n, Rounding::bf16);
  }
}

void boundary_grad_out_of_unit(const ModelState& s, float* g, int64_t n) {
  // The gradient of an fp32 unit input leaves as the gradient of the bf16 tensor it was cast from.
  if (s.round.between == Rounding::bf16 && s.round.stream == Rounding::fp32) {
    round_copy(s.space, g, g, n, Rounding::bf16);
  }
}

void accumulate(ModelState& s, int param, const float* dw, Rounding round_dw) {
  const ParamInfo& p = s.params.info(param);
  if (!p.trainable) return;
  const Rounding round = p.keep_fp32 ? Rounding::fp32 : round_dw;
  if (s.units->sharded()) {  // the unit's full fp32 gradient; reduced after the unit's backward
    accumulate_grad<float>(s.space, s.units->grad_buffer(param), dw, p.numel, round);
    return;
  }
  if (s.staged_grad[param].extent(0) > 0) {  // fp32 sum now, one rounding in flush_staged_grads
    accumulate_grad<float>(s.space, s.staged_grad[param].data(), dw, p.numel, round);
    return;
  }
  dispatch_dtype(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    accumulate_grad<T>(s.space, s.params.grad<T>(param).data(), dw, p.numel, round);
  });
}

void flush_staged_grads(ModelState& s) {
  for (int i = 0; i < s.params.size(); ++i) {
    DView<float>& st = s.staged_grad[i];
    if (st.extent(0) == 0 || !s.params.info(i).trainable) continue;
    dispatch_dtype(s.params.info(i).dtype, [&](auto tag) {
      using T = decltype(tag);
      accumulate_grad<T>(s.space, s.params.grad<T>(i).data(), st.data(), s.params.info(i).numel,
                         Rounding::fp32);
    });
    Kokkos::deep_copy(s.space, st, 0.0f);
  }
}

void drop_staged_grads(ModelState& s) {
  for (auto& st : s.staged_grad) {
    if (st.extent(0) > 0) Kokkos::deep_copy(s.space, st, 0.0f);
  }
}

}  // namespace kktrain
