// torch Adam/AdamW, TE FusedAdam and torch SGD over the trainable parameters of a registry.
#include "optim/optimizer.hpp"

#include <algorithm>
#include <cmath>

#include "core/errors.hpp"
#include "core/glob.hpp"
#include "core/host_sync.hpp"
#include "core/log.hpp"
#include "optim/update_kernels.hpp"

namespace kktrain {

const char* master_kind_name(MasterKind k) {
  switch (k) {
    case MasterKind::none:
      return "none";
    case MasterKind::float32:
      return "float32";
    case MasterKind::remainder:
      return "remainder";
  }
  return "?";
}

const char* param_rounding_name(ParamRounding r) {
  switch (r) {
    case ParamRounding::float32:
      return "float32";
    case ParamRounding::nearest:
      return "nearest";
    case ParamRounding::stochastic:
      return "stochastic";
    case ParamRounding::master:
      return "master";
  }
  return "?";
}

void StateTensor::allocate(const std::string& label, DType d, int64_t n) {
  dtype = d;
  present = true;
  if (d == DType::float32) {
    f32 = DView<float>(label, n);
  } else {
    b16 = DView<bf16>(label, n);  // value-initialized: +0.0
  }
}

StateTensor StateTensor::window(int64_t offset, int64_t n) const {
  StateTensor w;
  w.dtype = dtype;
  w.present = present;
  const auto range = std::make_pair(offset, offset + n);
  if (dtype == DType::float32) {
    w.f32 = Kokkos::subview(f32, range);
  } else {
    w.b16 = Kokkos::subview(b16, range);
  }
  return w;
}

template <>
float* StateTensor::data<float>() const {
  return f32.data();
}
template <>
bf16* StateTensor::data<bf16>() const {
  return b16.data();
}

ParamStateInfo plan_state(const OptimizerConfig& c, const ParamInfo& p) {
  ParamStateInfo s;
  if (!p.trainable) return s;
  switch (c.kind) {
    case OptimizerKind::adam:
    case OptimizerKind::adamw:
      // torch creates exp_avg / exp_avg_sq with zeros_like(param): the parameter's dtype.
      s.has_state = true;
      s.exp_avg = s.exp_avg_sq = p.dtype;
      break;
    case OptimizerKind::fused_adam:
      s.has_state = true;
      s.exp_avg = c.exp_avg_dtype;
      s.exp_avg_sq = c.exp_avg_sq_dtype;
      // A master copy only helps a parameter that is not already fp32; remainders need bf16.
      if (c.master_weights && p.dtype != DType::float32) {
        s.master = c.store_param_remainders && p.dtype == DType::bfloat16 ? MasterKind::remainder
                                                                          : MasterKind::float32;
      }
      break;
    case OptimizerKind::sgd:
      if (c.momentum != 0.0) {
        s.has_state = true;
        s.momentum = p.dtype;
      }
      break;
  }
  return s;
}

namespace {

// c(at) = no counts, on the device's queue. (A free function: CUDA's extended lambdas cannot live
// in a private member function.)
void zero_update_counts(const Kokkos::View<UpdateCounts*, MemSpace>& c, int64_t at) {
  Kokkos::parallel_for(
      "update_counts_zero", RangePolicy(0, 1),
      KOKKOS_LAMBDA(const int64_t) { c(at) = UpdateCounts(); });
}

}  // namespace

UpdateCounts* Optimizer::counts_for(std::size_t k) {
  rounding_[k].counts = UpdateCounts();
  if (!count_rounding_) return nullptr;
  if (device_counts_.extent(0) < 2 * rounding_.size()) {
    device_counts_ = Kokkos::View<UpdateCounts*, MemSpace>("update_counts", 2 * rounding_.size());
  }
  const int64_t at = static_cast<int64_t>(2 * k);
  zero_update_counts(device_counts_, at);
  counted_.resize(rounding_.size(), false);
  counted_[k] = true;
  return device_counts_.data() + at;
}

const std::vector<GroupRoundingCounts>& Optimizer::rounding_counts() const {
  if (std::find(counted_.begin(), counted_.end(), true) != counted_.end()) {
    const auto host = Kokkos::create_mirror_view_and_copy(HostSpace(), device_counts_);
    count_host_sync();
    for (std::size_t k = 0; k < counted_.size(); ++k) {
      if (counted_[k]) rounding_[k].counts = host(2 * k);
      counted_[k] = false;
    }
  }
  return rounding_;
}

namespace {

using HostF = Kokkos::View<float*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

std::vector<float> state_host(const StateTensor& s, int64_t n) {
  std::vector<float> out(static_cast<std::size_t>(n));
  DView<float> tmp("state_host", n);
  if (s.dtype == DType::float32) {
    Kokkos::deep_copy(tmp, s.f32);
  } else {
    widen_to_float<bf16>(tmp.data(), s.b16.data(), n);
  }
  Kokkos::deep_copy(HostF(out.data(), out.size()), tmp);
  return out;
}

StateRef ref(const char* name, StateTensor& t) {
  StateRef r;
  r.name = name;
  r.dtype = t.dtype;
  r.data = t.dtype == DType::float32 ? bytes_of(t.f32) : bytes_of(t.b16);
  return r;
}

RoundingMode rounding(bool stochastic, uint64_t seed, int64_t step, DType d) {
  RoundingMode r;
  r.stochastic = stochastic && d == DType::bfloat16;
  r.seed = seed;
  r.step = static_cast<uint64_t>(step);
  return r;
}

// The trainable parameters of one storage dtype: their state lives in flat buffers of the
// group's numel (a parameter's shard at state_offset), and one launch updates them all.
struct StateGroup {
  DType dtype = DType::float32;  // the parameters' (and their gradients') storage dtype
  std::vector<int> params;       // registry indices, in registration order
  std::vector<int64_t> state_offset;
  int64_t numel = 0;
  std::vector<UpdatePlan> plans;  // one (grouped launch) or one per parameter
};

std::vector<StateGroup> state_groups(const ParamRegistry& reg) {
  std::vector<StateGroup> groups;
  for (DType d : {DType::float32, DType::bfloat16}) {
    StateGroup g;
    g.dtype = d;
    for (int i = 0; i < reg.size(); ++i) {
      const ParamInfo& p = reg.info(i);
      if (p.dtype != d || !p.trainable) continue;
      g.params.push_back(i);
      g.state_offset.push_back(g.numel);
      g.numel += p.local_numel;
    }
    if (!g.params.empty()) groups.push_back(std::move(g));
  }
  return groups;
}

// The group's launch plans over the registry's flat buffers and the group's state arrays.
void plan_group(StateGroup& g, const ParamRegistry& reg, const std::vector<FlatArray>& state,
                UpdateLaunch launch) {
  const int bytes = static_cast<int>(dtype_size(g.dtype));
  FlatArray param, grad;
  dispatch_dtype(g.dtype, [&](auto tag) {
    using T = decltype(tag);
    param = FlatArray{reg.flat_data<T>().data(), bytes};
    grad = FlatArray{reg.flat_grad<T>().data(), bytes};
  });
  std::vector<UpdateTensor> tensors;
  for (std::size_t k = 0; k < g.params.size(); ++k) {
    const ParamInfo& p = reg.info(g.params[k]);
    if (!p.has_grad) reg.grad<float>(g.params[k]);  // trainable without a gradient: the error
    UpdateTensor u;
    u.param = static_cast<int64_t>(p.offset);
    u.grad = static_cast<int64_t>(p.grad_offset);
    u.state = g.state_offset[k];
    u.n = p.local_numel;
    // The element's index in the whole model, wherever its shard lives.
    u.index = static_cast<int64_t>(p.index_offset) + p.row_begin * p.row_len;
    u.decay = p.no_weight_decay ? 0 : 1;
    tensors.push_back(u);
  }
  g.plans.clear();
  if (launch == UpdateLaunch::grouped) {
    g.plans.emplace_back(tensors, param, grad, state);
  } else {
    for (const UpdateTensor& u : tensors)
      g.plans.emplace_back(std::vector<UpdateTensor>{u}, param, grad, state);
  }
}

// The counting entry of group g (Optimizer::rounding_counts): how its parameters take updates,
// its moment arrays, its elements on all ranks. `master`: the group's master copy (none: its
// bf16 parameters take updates by rounding).
GroupRoundingCounts rounding_entry(const StateGroup& g, const ParamRegistry& reg, bool stochastic,
                                   MasterKind master_kind,
                                   std::vector<std::pair<std::string, DType>> moments) {
  const bool master = master_kind != MasterKind::none;
  GroupRoundingCounts c;
  c.dtype = g.dtype;
  c.rounding = g.dtype != DType::bfloat16 ? ParamRounding::float32
               : master                   ? ParamRounding::master
               : stochastic               ? ParamRounding::stochastic
                                          : ParamRounding::nearest;
  c.moments = std::move(moments);
  for (int i : g.params) c.elements += reg.info(i).numel;
  return c;
}

FlatArray flat(const StateTensor& t) {
  if (!t.present) return {};
  return t.dtype == DType::float32 ? FlatArray{t.f32.data(), 4} : FlatArray{t.b16.data(), 2};
}

// ---- the Adam family's shared state: exp_avg and exp_avg_sq per trainable parameter ------------

class AdamBase : public Optimizer {
 public:
  AdamBase(const OptimizerConfig& c, ParamRegistry& reg, uint64_t seed)
      : cfg_(c),
        reg_(reg),
        seed_(seed),
        groups_(state_groups(reg)),
        m_(reg.size()),
        v_(reg.size()),
        gm_(groups_.size()),
        gv_(groups_.size()) {
    for (std::size_t k = 0; k < groups_.size(); ++k) {
      const StateGroup& g = groups_[k];
      const ParamStateInfo plan = plan_state(c, reg.info(g.params[0]));
      const std::string label = std::string(dtype_name(g.dtype)) + "_params";
      gm_[k].allocate("exp_avg." + label, *plan.exp_avg, g.numel);
      gv_[k].allocate("exp_avg_sq." + label, *plan.exp_avg_sq, g.numel);
      for (std::size_t j = 0; j < g.params.size(); ++j) {
        const int i = g.params[j];
        m_[i] = gm_[k].window(g.state_offset[j], reg.info(i).local_numel);
        v_[i] = gv_[k].window(g.state_offset[j], reg.info(i).local_numel);
      }
    }
  }
  const char* name() const override { return optimizer_kind_name(cfg_.kind); }

  ParamStateInfo state_info(int i) const override {
    ParamStateInfo s;
    if (m_[i].empty()) return s;
    s.has_state = true;
    s.exp_avg = m_[i].dtype;
    s.exp_avg_sq = v_[i].dtype;
    return s;
  }

  std::vector<std::pair<std::string, std::vector<float>>> state_to_host(int i) const override {
    if (m_[i].empty()) return {};
    const int64_t n = reg_.info(i).local_numel;
    return {{"exp_avg", state_host(m_[i], n)}, {"exp_avg_sq", state_host(v_[i], n)}};
  }

  std::vector<StateRef> state_refs(int i) override {
    if (m_[i].empty()) return {};
    return {ref("exp_avg", m_[i]), ref("exp_avg_sq", v_[i])};
  }

 protected:
  OptimizerConfig cfg_;
  ParamRegistry& reg_;
  uint64_t seed_;
  std::vector<StateGroup> groups_;
  std::vector<StateTensor> m_, v_;    // per parameter: windows of the group buffers
  std::vector<StateTensor> gm_, gv_;  // per group: flat moments
};

// ---- torch.optim.Adam / AdamW ------------------------------------------------------------------

class TorchAdam final : public AdamBase {
 public:
  TorchAdam(const OptimizerConfig& c, ParamRegistry& reg, uint64_t seed, UpdateLaunch launch)
      : AdamBase(c, reg, seed) {
    for (std::size_t k = 0; k < groups_.size(); ++k) {
      plan_group(groups_[k], reg, {flat(gm_[k]), flat(gv_[k])}, launch);
      rounding_.push_back(
          rounding_entry(groups_[k], reg, c.stochastic_rounding, MasterKind::none,
                         {{"exp_avg", gm_[k].dtype}, {"exp_avg_sq", gv_[k].dtype}}));
    }
  }

  void step(double lr, float grad_scale) override {
    ++step_;
    // Host scalars in double, as torch computes them in Python, then cast to fp32 for the
    // tensor ops (torch casts Python scalars to the tensor's dtype).
    const double bc1 = 1.0 - std::pow(cfg_.beta1, static_cast<double>(step_));
    const double bc2 = 1.0 - std::pow(cfg_.beta2, static_cast<double>(step_));
    TorchAdamHyper h;
    h.beta1 = static_cast<float>(cfg_.beta1);
    h.beta2 = static_cast<float>(cfg_.beta2);
    h.one_minus_beta1 = static_cast<float>(1.0 - cfg_.beta1);
    h.one_minus_beta2 = static_cast<float>(1.0 - cfg_.beta2);
    h.eps = static_cast<float>(cfg_.eps);
    h.bias_correction2_sqrt = static_cast<float>(std::sqrt(bc2));
    h.neg_step_size = static_cast<float>(-(lr / bc1));
    h.decoupled = cfg_.kind == OptimizerKind::adamw;
    h.decay_factor = static_cast<float>(1.0 - lr * cfg_.weight_decay);
    h.weight_decay = static_cast<float>(cfg_.weight_decay);
    h.grad_scale = grad_scale;
    for (std::size_t k = 0; k < groups_.size(); ++k) {
      const StateGroup& g = groups_[k];
      const RoundingMode r = rounding(cfg_.stochastic_rounding, seed_, step_, g.dtype);
      UpdateCounts* counts = counts_for(k);
      dispatch_dtype(g.dtype, [&](auto tag) {
        using T = decltype(tag);
        for (const UpdatePlan& plan : g.plans) {
          torch_adam_update<T>(plan, reg_.flat_data<T>().data(), reg_.flat_grad<T>().data(),
                               gm_[k].data<T>(), gv_[k].data<T>(), h, r, counts);
        }
      });
    }
  }
};

// ---- Transformer Engine FusedAdam ----------------------------------------------------------

class FusedAdam final : public AdamBase {
 public:
  FusedAdam(const OptimizerConfig& c, ParamRegistry& reg, uint64_t seed, UpdateLaunch launch)
      : AdamBase(c, reg, seed),
        master_(reg.size()),
        remainder_(reg.size()),
        kind_(reg.size(), MasterKind::none),
        gmaster_(groups_.size()),
        gremainder_(groups_.size()),
        gkind_(groups_.size(), MasterKind::none) {
    for (std::size_t k = 0; k < groups_.size(); ++k) {
      StateGroup& g = groups_[k];
      const MasterKind kind = plan_state(c, reg.info(g.params[0])).master;
      gkind_[k] = kind;
      const std::string label = std::string(dtype_name(g.dtype)) + "_params";
      if (kind == MasterKind::remainder) {
        // fp32 master = bf16 param bits + int16 remainder; remainders start at zero.
        gremainder_[k] = Kokkos::View<int16_t*, MemSpace>("remainder." + label, g.numel);
      } else if (kind == MasterKind::float32) {
        gmaster_[k] = DView<float>("master." + label, g.numel);
      }
      for (std::size_t j = 0; j < g.params.size(); ++j) {
        const int i = g.params[j];
        const ParamInfo& p = reg.info(i);
        kind_[i] = kind;
        const auto w = std::make_pair(g.state_offset[j], g.state_offset[j] + p.local_numel);
        if (kind == MasterKind::remainder) {
          remainder_[i] = Kokkos::subview(gremainder_[k], w);
        } else if (kind == MasterKind::float32) {
          master_[i] = Kokkos::subview(gmaster_[k], w);
          dispatch_dtype(p.dtype, [&](auto tag) {
            using T = decltype(tag);
            widen_to_float<T>(master_[i].data(), reg.data<T>(i).data(), p.local_numel);
          });
        }
      }
      FlatArray master{gmaster_[k].data(), 4};
      FlatArray rem{gremainder_[k].data(), 2};
      plan_group(g, reg,
                 {flat(gm_[k]), flat(gv_[k]), kind == MasterKind::float32 ? master : FlatArray{},
                  kind == MasterKind::remainder ? rem : FlatArray{}},
                 launch);
      rounding_.push_back(
          rounding_entry(g, reg, c.stochastic_rounding, kind,
                         {{"exp_avg", gm_[k].dtype}, {"exp_avg_sq", gv_[k].dtype}}));
    }
  }
  void step(double lr, float grad_scale) override {
    ++step_;
    const double t = static_cast<double>(step_);
    FusedAdamHyper h;
    h.beta1 = static_cast<float>(cfg_.beta1);
    h.beta2 = static_cast<float>(cfg_.beta2);
    // TE takes the betas as floats and computes 1 - std::pow(beta, step) from those fp32 betas
    // (consistent with its fp32 1 - beta in the moment update; 1 - fp32(0.999) is 1.3e-5 below
    // 0.001, so the double beta would bias v_hat by that much in early steps).
    h.bias_correction1 = cfg_.bias_correction
                             ? static_cast<float>(1.0 - std::pow(static_cast<double>(h.beta1), t))
                             : 1.0f;
    h.bias_correction2 = cfg_.bias_correction
                             ? static_cast<float>(1.0 - std::pow(static_cast<double>(h.beta2), t))
                             : 1.0f;
    h.eps = static_cast<float>(cfg_.eps);
    h.lr = static_cast<float>(lr);
    h.weight_decay = static_cast<float>(cfg_.weight_decay);
    h.adam_w_mode = cfg_.adam_w_mode;
    h.grad_scale = grad_scale;
    for (std::size_t k = 0; k < groups_.size(); ++k) {
      const StateGroup& g = groups_[k];
      const RoundingMode r = rounding(cfg_.stochastic_rounding, seed_, step_, g.dtype);
      float* master = gkind_[k] == MasterKind::float32 ? gmaster_[k].data() : nullptr;
      int16_t* rem = gkind_[k] == MasterKind::remainder ? gremainder_[k].data() : nullptr;
      UpdateCounts* counts = counts_for(k);
      dispatch_dtype(g.dtype, [&](auto pt) {
        using P = decltype(pt);
        dispatch_dtype(gm_[k].dtype, [&](auto mt) {
          using M = decltype(mt);
          dispatch_dtype(gv_[k].dtype, [&](auto vt) {
            using V = decltype(vt);
            for (const UpdatePlan& plan : g.plans) {
              fused_adam_update<P, M, V>(plan, reg_.flat_data<P>().data(),
                                         reg_.flat_grad<P>().data(), gm_[k].data<M>(),
                                         gv_[k].data<V>(), master, rem, h, r, counts);
            }
          });
        });
      });
    }
  }

  ParamStateInfo state_info(int i) const override {
    ParamStateInfo s = AdamBase::state_info(i);
    s.master = kind_[i];
    return s;
  }

  std::vector<StateRef> state_refs(int i) override {
    auto out = AdamBase::state_refs(i);
    if (kind_[i] == MasterKind::float32) {
      StateRef r;
      r.name = "master";
      r.data = bytes_of(master_[i]);
      out.push_back(r);
    } else if (kind_[i] == MasterKind::remainder) {
      StateRef r;
      r.name = "remainder";
      r.int16 = true;
      r.data = bytes_of(remainder_[i]);
      out.push_back(r);
    }
    return out;
  }

  std::vector<std::pair<std::string, std::vector<float>>> state_to_host(int i) const override {
    auto out = AdamBase::state_to_host(i);
    if (out.empty()) return out;
    const int64_t n = reg_.info(i).local_numel;
    if (kind_[i] == MasterKind::float32) {
      StateTensor s;
      s.dtype = DType::float32;
      s.f32 = master_[i];
      out.emplace_back("master", state_host(s, n));
    } else if (kind_[i] == MasterKind::remainder) {
      StateTensor s;
      s.allocate("rebuilt_master", DType::float32, n);
      rebuild_master(s.f32.data(), reg_.data<bf16>(i).data(), remainder_[i].data(), n);
      out.emplace_back("master", state_host(s, n));
    }
    return out;
  }

 private:
  std::vector<DView<float>> master_;  // per parameter: windows of the group buffers
  std::vector<Kokkos::View<int16_t*, MemSpace>> remainder_;
  std::vector<MasterKind> kind_;
  std::vector<DView<float>> gmaster_;  // per group
  std::vector<Kokkos::View<int16_t*, MemSpace>> gremainder_;
  std::vector<MasterKind> gkind_;
};

// ---- torch.optim.SGD -------------------------------------------------------------------------

class Sgd final : public Optimizer {
 public:
  Sgd(const OptimizerConfig& c, ParamRegistry& reg, uint64_t seed, UpdateLaunch launch)
      : cfg_(c),
        reg_(reg),
        seed_(seed),
        groups_(state_groups(reg)),
        buf_(reg.size()),
        gbuf_(groups_.size()) {
    for (std::size_t k = 0; k < groups_.size(); ++k) {
      StateGroup& g = groups_[k];
      const ParamStateInfo plan = plan_state(c, reg.info(g.params[0]));
      if (plan.has_state) {
        gbuf_[k].allocate("momentum_buffer." + std::string(dtype_name(g.dtype)) + "_params",
                          *plan.momentum, g.numel);
        for (std::size_t j = 0; j < g.params.size(); ++j) {
          const int i = g.params[j];
          buf_[i] = gbuf_[k].window(g.state_offset[j], reg.info(i).local_numel);
        }
      }
      plan_group(g, reg, {flat(gbuf_[k])}, launch);
      std::vector<std::pair<std::string, DType>> moments;
      if (plan.has_state) moments.emplace_back("momentum_buffer", gbuf_[k].dtype);
      rounding_.push_back(rounding_entry(g, reg, c.stochastic_rounding, MasterKind::none, moments));
    }
  }
  const char* name() const override { return optimizer_kind_name(cfg_.kind); }

  void step(double lr, float grad_scale) override {
    ++step_;
    SgdHyper h;
    h.lr = static_cast<float>(lr);
    h.momentum = static_cast<float>(cfg_.momentum);
    h.one_minus_dampening = static_cast<float>(1.0 - cfg_.dampening);
    h.weight_decay = static_cast<float>(cfg_.weight_decay);
    h.nesterov = cfg_.nesterov;
    h.first_step = step_ == 1;
    h.grad_scale = grad_scale;
    for (std::size_t k = 0; k < groups_.size(); ++k) {
      const StateGroup& g = groups_[k];
      const RoundingMode r = rounding(cfg_.stochastic_rounding, seed_, step_, g.dtype);
      dispatch_dtype(g.dtype, [&](auto tag) {
        using T = decltype(tag);
        T* buf = gbuf_[k].empty() ? nullptr : gbuf_[k].data<T>();
        UpdateCounts* counts = counts_for(k);
        for (const UpdatePlan& plan : g.plans) {
          sgd_update<T>(plan, reg_.flat_data<T>().data(), reg_.flat_grad<T>().data(), buf, h, r,
                        counts);
        }
      });
    }
  }

  ParamStateInfo state_info(int i) const override {
    ParamStateInfo s;
    if (buf_[i].empty()) return s;
    s.has_state = true;
    s.momentum = buf_[i].dtype;
    return s;
  }

  std::vector<std::pair<std::string, std::vector<float>>> state_to_host(int i) const override {
    if (buf_[i].empty()) return {};
    return {{"momentum_buffer", state_host(buf_[i], reg_.info(i).local_numel)}};
  }

  std::vector<StateRef> state_refs(int i) override {
    if (buf_[i].empty()) return {};
    return {ref("momentum_buffer", buf_[i])};
  }

 private:
  OptimizerConfig cfg_;
  ParamRegistry& reg_;
  uint64_t seed_;
  std::vector<StateGroup> groups_;
  std::vector<StateTensor> buf_;   // per parameter: windows of the group buffers
  std::vector<StateTensor> gbuf_;  // per group
};

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& cfg, ParamRegistry& params,
                                          uint64_t seed, UpdateLaunch launch) {
  for (int i = 0; i < params.size(); ++i) {
    ParamInfo& p = params.info_mut(i);
    bool excluded = glob_match_any(cfg.weight_decay_exclude, p.name);
    for (const auto& a : p.aliases)
      excluded = excluded || glob_match_any(cfg.weight_decay_exclude, a);
    p.no_weight_decay = excluded;
  }
  switch (cfg.kind) {
    case OptimizerKind::adam:
    case OptimizerKind::adamw:
      return std::make_unique<TorchAdam>(cfg, params, seed, launch);
    case OptimizerKind::fused_adam:
      return std::make_unique<FusedAdam>(cfg, params, seed, launch);
    case OptimizerKind::sgd:
      return std::make_unique<Sgd>(cfg, params, seed, launch);
  }
  throw InternalError("unknown optimizer kind");
}

}  // namespace kktrain
