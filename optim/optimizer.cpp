// torch Adam/AdamW, TE FusedAdam and torch SGD over the trainable parameters of a registry.
#include "optim/optimizer.hpp"

#include <cmath>

#include "core/errors.hpp"
#include "core/glob.hpp"
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

void StateTensor::allocate(const std::string& label, DType d, int64_t n) {
  dtype = d;
  present = true;
  if (d == DType::float32) {
    f32 = DView<float>(label, n);
  } else {
    b16 = DView<bf16>(label, n);  // value-initialized: +0.0
  }
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
  r.data = t.dtype == DType::float32 ? static_cast<void*>(t.f32.data())
                                     : static_cast<void*>(t.b16.data());
  return r;
}

RoundingMode rounding(bool stochastic, uint64_t seed, int64_t step, const ParamInfo& p) {
  RoundingMode r;
  r.stochastic = stochastic && p.dtype == DType::bfloat16;
  r.seed = seed;
  r.step = static_cast<uint64_t>(step);
  // The element's index in the whole model, wherever its shard lives.
  r.index_offset = static_cast<int64_t>(p.index_offset) + p.row_begin * p.row_len;
  return r;
}

// ---- the Adam family's shared state: exp_avg and exp_avg_sq per trainable parameter ------------

class AdamBase : public Optimizer {
 public:
  AdamBase(const OptimizerConfig& c, ParamRegistry& reg, uint64_t seed)
      : cfg_(c), reg_(reg), seed_(seed), m_(reg.size()), v_(reg.size()) {
    for (int i = 0; i < reg.size(); ++i) {
      const ParamInfo& p = reg.info(i);
      const ParamStateInfo plan = plan_state(c, p);
      if (!plan.has_state) continue;
      m_[i].allocate(p.name + ".exp_avg", *plan.exp_avg, p.local_numel);
      v_[i].allocate(p.name + ".exp_avg_sq", *plan.exp_avg_sq, p.local_numel);
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
  std::vector<StateTensor> m_, v_;
};

// ---- torch.optim.Adam / AdamW ------------------------------------------------------------------

class TorchAdam final : public AdamBase {
 public:
  using AdamBase::AdamBase;

  void step(double lr, float grad_scale) override {
    ++step_;
    // Host scalars in double, as torch computes them in Python, then cast to fp32 for the
    // tensor ops (torch casts Python scalars to the tensor's dtype).
    const double bc1 = 1.0 - std::pow(cfg_.beta1, static_cast<double>(step_));
    const double bc2 = 1.0 - std::pow(cfg_.beta2, static_cast<double>(step_));
    for (int i = 0; i < reg_.size(); ++i) {
      const ParamInfo& p = reg_.info(i);
      if (!p.trainable) continue;
      const double wd = p.no_weight_decay ? 0.0 : cfg_.weight_decay;
      TorchAdamHyper h;
      h.beta1 = static_cast<float>(cfg_.beta1);
      h.beta2 = static_cast<float>(cfg_.beta2);
      h.one_minus_beta1 = static_cast<float>(1.0 - cfg_.beta1);
      h.one_minus_beta2 = static_cast<float>(1.0 - cfg_.beta2);
      h.eps = static_cast<float>(cfg_.eps);
      h.bias_correction2_sqrt = static_cast<float>(std::sqrt(bc2));
      h.neg_step_size = static_cast<float>(-(lr / bc1));
      h.decoupled = cfg_.kind == OptimizerKind::adamw;
      h.decay_factor = static_cast<float>(1.0 - lr * wd);
      h.weight_decay = static_cast<float>(wd);
      h.grad_scale = grad_scale;
      const RoundingMode r = rounding(cfg_.stochastic_rounding, seed_, step_, p);
      dispatch_dtype(p.dtype, [&](auto tag) {
        using T = decltype(tag);
        torch_adam_update<T>(reg_.data<T>(i).data(), reg_.grad<T>(i).data(), m_[i].data<T>(),
                             v_[i].data<T>(), p.local_numel, h, r);
      });
    }
    Kokkos::fence();
  }
};

// ---- Transformer Engine FusedAdam ----------------------------------------------------------

class FusedAdam final : public AdamBase {
 public:
  FusedAdam(const OptimizerConfig& c, ParamRegistry& reg, uint64_t seed)
      : AdamBase(c, reg, seed),
        master_(reg.size()),
        remainder_(reg.size()),
        kind_(reg.size(), MasterKind::none) {
    for (int i = 0; i < reg.size(); ++i) {
      const ParamInfo& p = reg.info(i);
      const ParamStateInfo plan = plan_state(c, p);
      kind_[i] = plan.master;
      if (plan.master == MasterKind::remainder) {
        // fp32 master = bf16 param bits + int16 remainder; remainders start at zero.
        remainder_[i] = Kokkos::View<int16_t*, MemSpace>(p.name + ".remainder", p.local_numel);
      } else if (plan.master == MasterKind::float32) {
        master_[i] = DView<float>(p.name + ".master", p.local_numel);
        dispatch_dtype(p.dtype, [&](auto tag) {
          using T = decltype(tag);
          widen_to_float<T>(master_[i].data(), reg.data<T>(i).data(), p.local_numel);
        });
      }
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
    h.adam_w_mode = cfg_.adam_w_mode;
    h.grad_scale = grad_scale;
    for (int i = 0; i < reg_.size(); ++i) {
      const ParamInfo& p = reg_.info(i);
      if (!p.trainable) continue;
      h.weight_decay = static_cast<float>(p.no_weight_decay ? 0.0 : cfg_.weight_decay);
      const RoundingMode r = rounding(cfg_.stochastic_rounding, seed_, step_, p);
      float* master = kind_[i] == MasterKind::float32 ? master_[i].data() : nullptr;
      int16_t* rem = kind_[i] == MasterKind::remainder ? remainder_[i].data() : nullptr;
      dispatch_dtype(p.dtype, [&](auto pt) {
        using P = decltype(pt);
        dispatch_dtype(m_[i].dtype, [&](auto mt) {
          using M = decltype(mt);
          dispatch_dtype(v_[i].dtype, [&](auto vt) {
            using V = decltype(vt);
            fused_adam_update<P, M, V>(reg_.data<P>(i).data(), reg_.grad<P>(i).data(),
                                       m_[i].data<M>(), v_[i].data<V>(), master, rem, p.local_numel,
                                       h, r);
          });
        });
      });
    }
    Kokkos::fence();
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
      r.data = master_[i].data();
      out.push_back(r);
    } else if (kind_[i] == MasterKind::remainder) {
      StateRef r;
      r.name = "remainder";
      r.int16 = true;
      r.data = remainder_[i].data();
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
  std::vector<DView<float>> master_;
  std::vector<Kokkos::View<int16_t*, MemSpace>> remainder_;
  std::vector<MasterKind> kind_;
};

// ---- torch.optim.SGD -------------------------------------------------------------------------

class Sgd final : public Optimizer {
 public:
  Sgd(const OptimizerConfig& c, ParamRegistry& reg, uint64_t seed)
      : cfg_(c), reg_(reg), seed_(seed), buf_(reg.size()) {
    for (int i = 0; i < reg.size(); ++i) {
      const ParamInfo& p = reg.info(i);
      const ParamStateInfo plan = plan_state(c, p);
      if (plan.has_state)
        buf_[i].allocate(p.name + ".momentum_buffer", *plan.momentum, p.local_numel);
    }
  }
  const char* name() const override { return optimizer_kind_name(cfg_.kind); }

  void step(double lr, float grad_scale) override {
    ++step_;
    for (int i = 0; i < reg_.size(); ++i) {
      const ParamInfo& p = reg_.info(i);
      if (!p.trainable) continue;
      SgdHyper h;
      h.lr = static_cast<float>(lr);
      h.momentum = static_cast<float>(cfg_.momentum);
      h.one_minus_dampening = static_cast<float>(1.0 - cfg_.dampening);
      h.weight_decay = static_cast<float>(p.no_weight_decay ? 0.0 : cfg_.weight_decay);
      h.nesterov = cfg_.nesterov;
      h.first_step = step_ == 1;
      h.grad_scale = grad_scale;
      const RoundingMode r = rounding(cfg_.stochastic_rounding, seed_, step_, p);
      dispatch_dtype(p.dtype, [&](auto tag) {
        using T = decltype(tag);
        T* buf = buf_[i].empty() ? nullptr : buf_[i].data<T>();
        sgd_update<T>(reg_.data<T>(i).data(), reg_.grad<T>(i).data(), buf, p.local_numel, h, r);
      });
    }
    Kokkos::fence();
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
  std::vector<StateTensor> buf_;
};

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& cfg, ParamRegistry& params,
                                          uint64_t seed) {
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
      return std::make_unique<TorchAdam>(cfg, params, seed);
    case OptimizerKind::fused_adam:
      return std::make_unique<FusedAdam>(cfg, params, seed);
    case OptimizerKind::sgd:
      return std::make_unique<Sgd>(cfg, params, seed);
  }
  throw InternalError("unknown optimizer kind");
}

}  // namespace kktrain
