// Optimizer state layout, remainder masters, schedules, clipping and freezing. (Step-by-step
// agreement with torch.optim lives in tests/optim/check_optim.py.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "core/errors.hpp"
#include "model/freeze.hpp"
#include "model/param_io.hpp"
#include "model/transformer.hpp"
#include "optim/audit.hpp"
#include "optim/grad_norm.hpp"
#include "optim/optimizer.hpp"
#include "optim/schedule.hpp"
#include "optim/update_kernels.hpp"
#include "unit/device_test_util.hpp"
#include "unit/dtype_types.hpp"

namespace kktrain {
namespace {

// Every parameter (ParamPart::grad: every gradient buffer) drawn from N(0, scale^2) with `seed`.
void fill_normal(ParamRegistry& reg, uint32_t seed, float scale, ParamPart part) {
  const bool grad = part == ParamPart::grad;
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  for (int i = 0; i < reg.size(); ++i) {
    if (grad && !reg.info(i).has_grad) continue;
    std::vector<float> v(reg.info(i).numel);
    for (auto& x : v) x = dist(rng);
    param_from_host(reg, i, v, part);
  }
}

ParamRegistry make_registry(DType d, int64_t n = 1000) {
  ParamRegistry reg;
  reg.add("a.weight", "a", {n}, ParamRole::linear, d);
  reg.add("b.weight", "b", {n / 10, 10}, ParamRole::linear, d);
  reg.add("c.weight", "c", {7}, ParamRole::norm, DType::float32);  // protected-fp32-like
  reg.allocate();
  fill_normal(reg, 3, 1.0f, ParamPart::values);
  return reg;
}

void random_grads(ParamRegistry& reg, uint32_t seed) {
  fill_normal(reg, seed, 1e-2f, ParamPart::grad);
}

OptimizerConfig fused(bool master, bool remainders) {
  OptimizerConfig c;
  c.kind = OptimizerKind::fused_adam;
  c.weight_decay = 0.05;
  c.master_weights = master;
  c.store_param_remainders = remainders;
  return c;
}

std::vector<float> master_of(const Optimizer& o, int i) {
  for (auto& s : o.state_to_host(i)) {
    if (s.first == "master") return s.second;
  }
  return {};
}

TEST(Optimizer, RemainderMasterIsBitwiseTheFp32Master) {
  // Same bf16 parameters, same gradients: one optimizer keeps a full fp32 master, the other the
  // bf16 parameter plus an int16 remainder. The rebuilt masters must match bit for bit.
  ParamRegistry full = make_registry(DType::bfloat16), rem = make_registry(DType::bfloat16);
  auto o_full = make_optimizer(fused(true, false), full, 1);
  auto o_rem = make_optimizer(fused(true, true), rem, 1);
  EXPECT_EQ(o_full->state_info(0).master, MasterKind::float32);
  EXPECT_EQ(o_rem->state_info(0).master, MasterKind::remainder);
  for (int step = 0; step < 200; ++step) {
    random_grads(full, 100 + step);
    random_grads(rem, 100 + step);
    o_full->step(1e-2 * (1 + step % 7), 1.0f);
    o_rem->step(1e-2 * (1 + step % 7), 1.0f);
  }
  for (int i = 0; i < 2; ++i) {
    const auto a = master_of(*o_full, i), b = master_of(*o_rem, i);
    ASSERT_EQ(a.size(), b.size());
    ASSERT_FALSE(a.empty());
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
    // The bf16 parameters: round-to-nearest-even of the master vs TE's split (ties away from
    // zero): equal except where the master's low half is exactly 0x8000.
    const auto pa = param_to_host(full, i), pb = param_to_host(rem, i);
    for (std::size_t e = 0; e < a.size(); ++e) {
      uint32_t bits;
      std::memcpy(&bits, &a[e], 4);
      if ((bits & 0xffffu) != 0x8000u) {
        ASSERT_EQ(pa[e], pb[e]) << e;
      }
    }
  }
  // The fp32 parameter has no master in either (it is its own master).
  EXPECT_EQ(o_rem->state_info(2).master, MasterKind::none);
}

// ---- update kernels: word-by-word and element-by-element paths agree bitwise --------------------
// The all-16-bit kernels (bf16 parameter and moments, int16 remainders) run two elements per
// 32-bit word when the arrays are 4-byte aligned alike (from element 0, or from element 1 when all
// are 2 bytes past), element by element otherwise. Run each on the same inputs with all arrays
// aligned, all misaligned, and mixed (element path), over random bit patterns (NaN, inf,
// subnormals included) and ordinary values, n odd; every output bit must agree.
using testing_util::download;
using testing_util::upload;

struct KernelInputs {
  std::vector<bf16> p, g, m, v;
  std::vector<int16_t> r;
};

KernelInputs kernel_inputs(std::size_t n) {
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  KernelInputs in;
  auto val = [&](float scale, std::size_t i) {
    // Every fourth element a random bit pattern (NaN, inf, subnormal, huge, negative moments).
    return i % 4 == 3 ? bf16::from_bits(static_cast<uint16_t>(rng())) : bf16(scale * dist(rng));
  };
  for (std::size_t i = 0; i < n; ++i) {
    in.p.push_back(val(1.0f, i));
    in.g.push_back(val(1e-2f, i));
    in.m.push_back(val(1e-3f, i));
    in.v.push_back(bf16(std::fabs(val(1e-5f, i).to_float())));
    in.r.push_back(static_cast<int16_t>(rng()));
  }
  return in;
}

// Runs `kernel` with the parameter at element offset op and the gradient, moments and remainder
// at om, cut into blocks of block_len elements (0: the default); returns every output's bits.
template <class Kernel>
std::vector<uint32_t> run_at(const KernelInputs& in, int64_t op, int64_t om, int64_t block_len,
                             Kernel kernel) {
  const std::size_t n = in.p.size();
  auto p = upload(in.p, op), g = upload(in.g, om), m = upload(in.m, om), v = upload(in.v, om);
  auto r = upload(in.r, om);
  UpdateTensor u;
  u.n = static_cast<int64_t>(n);
  u.index = 12345;
  // The tensor at element offsets of arrays that start 64-byte aligned: the word alignment
  // follows the offsets' parity.
  u.param = op;
  u.grad = u.state = om;
  const UpdatePlan plan({u}, FlatArray{p.data(), 2}, FlatArray{g.data(), 2},
                        {FlatArray{m.data(), 2}, FlatArray{v.data(), 2}, FlatArray{r.data(), 2}},
                        block_len);
  kernel(plan, p.data(), g.data(), m.data(), v.data(), r.data());
  Kokkos::fence();
  std::vector<uint32_t> out;
  for (const auto& x : download(p, op, n)) out.push_back(x.bits);
  for (const auto& x : download(m, om, n)) out.push_back(x.bits);
  for (const auto& x : download(v, om, n)) out.push_back(x.bits);
  for (const auto& x : download(r, om, n)) out.push_back(static_cast<uint16_t>(x));
  return out;
}

template <class Kernel>
void expect_paths_agree(const char* what, Kernel kernel) {
  const KernelInputs in = kernel_inputs(1001);
  const auto aligned = run_at(in, 0, 0, 0, kernel);  // words from element 0
  const auto odd = run_at(in, 1, 1, 0, kernel);      // words from element 1
  const auto mixed = run_at(in, 1, 0, 0, kernel);    // element by element
  // Blocks of 6 elements: every block but the first starts inside a word pair of the odd layout.
  const auto odd_blocks = run_at(in, 1, 1, 6, kernel);
  EXPECT_TRUE(aligned == mixed) << what << ": word path (aligned) differs from element path";
  EXPECT_TRUE(odd == mixed) << what << ": word path (from element 1) differs from element path";
  EXPECT_TRUE(odd_blocks == mixed) << what << ": word path in small blocks differs";
  std::vector<uint32_t> before;
  for (const auto* a : {&in.p, &in.m, &in.v})
    for (const auto& x : *a) before.push_back(x.bits);
  for (const auto& x : in.r) before.push_back(static_cast<uint16_t>(x));
  EXPECT_TRUE(aligned != before) << what << ": nothing was updated";
}

TEST(UpdateKernels, WordByWordMatchesElementByElementBitwise) {
  for (bool sr : {false, true}) {
    for (bool decoupled : {true, false}) {
      TorchAdamHyper h{0.9f,   0.999f,  0.1f,  0.001f,    1e-8f, 0.3f,
                       -1e-3f, 0.9999f, 0.01f, decoupled, 0.5f};
      RoundingMode rm;
      rm.stochastic = sr;
      rm.seed = 7;
      rm.step = 3;
      expect_paths_agree("torch adam",
                         [&](const UpdatePlan& plan, bf16* p, const bf16* g, bf16* m, bf16* v,
                             int16_t*) { torch_adam_update<bf16>(plan, p, g, m, v, h, rm); });
    }
  }
  for (bool adam_w : {true, false}) {
    FusedAdamHyper h{0.9f, 0.999f, 0.19f, 0.002f, 1e-8f, 1e-3f, 0.01f, adam_w, 0.5f};
    for (int mode = 0; mode < 3; ++mode) {  // remainder, plain, plain with stochastic rounding
      RoundingMode rm;
      rm.stochastic = mode == 2;
      rm.seed = 9;
      rm.step = 2;
      expect_paths_agree("fused adam", [&](const UpdatePlan& plan, bf16* p, const bf16* g, bf16* m,
                                           bf16* v, int16_t* r) {
        fused_adam_update<bf16, bf16, bf16>(plan, p, g, m, v, nullptr, mode == 0 ? r : nullptr, h,
                                            rm);
      });
    }
  }
}

// ---- one launch per dtype group vs one launch per parameter -----------------------------------
// Training updates all trainable parameters of a storage dtype in one launch over flat buffers
// (tensor table, blocks, per-tensor weight decay and rounding keys). The same optimizer launched
// once per parameter must give every parameter and state bit the same: a wrong offset, block edge,
// word alignment, weight-decay flag or stochastic-rounding index would show here. Odd sizes put
// tensors at odd element offsets; the large ones span several blocks; "frozen" sits between
// trainable ones in the flat buffers.
ParamRegistry mixed_registry() {
  ParamRegistry reg;
  reg.add("a.weight", "a", {333}, ParamRole::linear, DType::bfloat16);
  reg.add("frozen.weight", "frozen", {7, 11}, ParamRole::linear, DType::bfloat16);
  reg.add("c.weight", "c", {5, 13}, ParamRole::linear, DType::float32);
  reg.add("d.weight", "d", {50001}, ParamRole::linear, DType::bfloat16);
  reg.add("e.norm", "e", {17}, ParamRole::norm, DType::bfloat16);
  reg.add("f.weight", "f", {40000}, ParamRole::linear, DType::float32);
  reg.info_mut(1).trainable = false;
  reg.allocate();
  fill_normal(reg, 5, 1.0f, ParamPart::values);
  return reg;
}

std::vector<uint32_t> all_bits(const ParamRegistry& reg, const Optimizer& o) {
  std::vector<uint32_t> out;
  auto add = [&](const std::vector<float>& v) {
    for (float x : v) {
      uint32_t b;
      std::memcpy(&b, &x, 4);
      out.push_back(b);
    }
  };
  for (int i = 0; i < reg.size(); ++i) {
    add(param_to_host(reg, i));
    for (const auto& s : o.state_to_host(i)) add(s.second);
  }
  return out;
}

TEST(Optimizer, GroupedLaunchMatchesPerParameterLaunchesBitwise) {
  std::vector<std::pair<const char*, OptimizerConfig>> cfgs;
  OptimizerConfig c;
  c.weight_decay = 0.1;
  c.weight_decay_exclude = {"*.norm"};
  c.kind = OptimizerKind::adamw;
  c.stochastic_rounding = true;
  cfgs.emplace_back("adamw + stochastic rounding", c);
  c.kind = OptimizerKind::adam;
  c.stochastic_rounding = false;
  cfgs.emplace_back("adam (L2)", c);
  cfgs.emplace_back("fused_adam remainders", fused(true, true));
  cfgs.back().second.weight_decay_exclude = {"*.norm"};
  OptimizerConfig f = fused(true, false);
  f.exp_avg_sq_dtype = DType::bfloat16;
  cfgs.emplace_back("fused_adam fp32 master, bf16 exp_avg_sq", f);
  f = fused(false, false);
  f.exp_avg_dtype = f.exp_avg_sq_dtype = DType::bfloat16;
  f.stochastic_rounding = true;
  cfgs.emplace_back("fused_adam no master, bf16 moments, stochastic rounding", f);
  OptimizerConfig s;
  s.kind = OptimizerKind::sgd;
  s.momentum = 0.9;
  s.nesterov = true;
  s.weight_decay = 0.01;
  cfgs.emplace_back("sgd nesterov", s);
  for (const auto& [what, cfg] : cfgs) {
    ParamRegistry a = mixed_registry(), b = mixed_registry();
    auto grouped = make_optimizer(cfg, a, 3, UpdateLaunch::grouped);
    auto single = make_optimizer(cfg, b, 3, UpdateLaunch::per_parameter);
    const auto before = all_bits(a, *grouped);
    for (int step = 0; step < 4; ++step) {
      random_grads(a, 40 + step);
      random_grads(b, 40 + step);
      grouped->step(1e-2, 0.7f);
      single->step(1e-2, 0.7f);
    }
    const auto ga = all_bits(a, *grouped), gb = all_bits(b, *single);
    EXPECT_TRUE(ga == gb) << what;
    EXPECT_TRUE(ga != before) << what << ": nothing was updated";
    EXPECT_EQ(param_to_host(a, 1), param_to_host(mixed_registry(), 1)) << what << ": frozen moved";
  }
}

// Typed over the parameters' dtype (float, bf16).
template <class TP>
class OptimizerParams : public ::testing::Test {};
TYPED_TEST_SUITE(OptimizerParams, testing_util::Dtypes);

TYPED_TEST(OptimizerParams, AllocatedStateMatchesThePlanAndFrozenHaveNone) {
  std::vector<OptimizerConfig> cfgs;
  for (auto k : {OptimizerKind::adamw, OptimizerKind::adam}) {
    OptimizerConfig c;
    c.kind = k;
    cfgs.push_back(c);
  }
  cfgs.push_back(fused(true, true));
  cfgs.push_back(fused(true, false));
  OptimizerConfig bf16_moments = fused(false, false);
  bf16_moments.exp_avg_dtype = DType::bfloat16;
  cfgs.push_back(bf16_moments);
  OptimizerConfig sgd;
  sgd.kind = OptimizerKind::sgd;
  sgd.momentum = 0.9;
  cfgs.push_back(sgd);
  const DType d = dtype_of<TypeParam>::value;
  for (const auto& c : cfgs) {
    ParamRegistry reg = make_registry(d, 100);
    reg.info_mut(1).trainable = false;
    auto o = make_optimizer(c, reg, 1);
    for (int i = 0; i < reg.size(); ++i) {
      const ParamStateInfo planned = plan_state(c, reg.info(i)), got = o->state_info(i);
      const std::string what =
          std::string(optimizer_kind_name(c.kind)) + " " + dtype_name(d) + " " + reg.info(i).name;
      EXPECT_EQ(planned.has_state, got.has_state) << what;
      EXPECT_EQ(planned.exp_avg, got.exp_avg) << what;
      EXPECT_EQ(planned.exp_avg_sq, got.exp_avg_sq) << what;
      EXPECT_EQ(planned.momentum, got.momentum) << what;
      EXPECT_EQ(planned.master, got.master) << what;
      if (i == 1) {
        EXPECT_FALSE(got.has_state) << what;
        EXPECT_TRUE(o->state_to_host(i).empty()) << what;
      }
    }
    // torch Adam/AdamW moments follow the parameter dtype, FusedAdam's the configured dtypes.
    const ParamStateInfo s0 = o->state_info(0);
    if (c.is_torch_adam()) {
      EXPECT_EQ(*s0.exp_avg, d);
    }
    if (c.kind == OptimizerKind::fused_adam) {
      EXPECT_EQ(*s0.exp_avg, c.exp_avg_dtype);
    }
  }
}

TEST(Optimizer, FrozenParametersAreNotUpdated) {
  ParamRegistry reg = make_registry(DType::float32, 100);
  reg.info_mut(0).trainable = false;
  const auto before = param_to_host(reg, 0), before1 = param_to_host(reg, 1);
  OptimizerConfig c;
  auto o = make_optimizer(c, reg, 1);
  random_grads(reg, 5);
  o->step(0.1, 1.0f);
  EXPECT_EQ(before, param_to_host(reg, 0));
  EXPECT_NE(before1, param_to_host(reg, 1));  // the trainable one moved
}

TEST(Schedule, WarmupThenCosineOrLinear) {
  SchedulerConfig s;
  s.lr_warmup_steps = 10;
  s.min_lr = 1e-4;
  s.lr_decay_style = LrDecayStyle::cosine;
  LrSchedule cos(s, 1e-3, 110);
  EXPECT_DOUBLE_EQ(cos.lr(0), 1e-4);                    // (0 + 1) / 10 of the peak
  EXPECT_DOUBLE_EQ(cos.lr(9), 1e-3);                    // end of warmup
  EXPECT_DOUBLE_EQ(cos.lr(10), 1e-3);                   // decay starts at the peak
  EXPECT_NEAR(cos.lr(60), 1e-4 + 0.9e-3 * 0.5, 1e-15);  // halfway: midpoint
  EXPECT_DOUBLE_EQ(cos.lr(110), 1e-4);
  EXPECT_DOUBLE_EQ(cos.lr(500), 1e-4);  // stays at the floor
  s.lr_decay_style = LrDecayStyle::linear;
  LrSchedule lin(s, 1e-3, 110);
  EXPECT_NEAR(lin.lr(35), 1e-4 + 0.9e-3 * 0.75, 1e-15);
  s.lr_decay_style = LrDecayStyle::constant;
  EXPECT_DOUBLE_EQ(LrSchedule(s, 1e-3, 110).lr(77), 1e-3);
  s.lr_decay_steps = 60;  // decay ends earlier than max_steps
  s.lr_decay_style = LrDecayStyle::linear;
  EXPECT_DOUBLE_EQ(LrSchedule(s, 1e-3, 110).lr(60), 1e-4);
}

TEST(GradNorm, SumOfSquaresAndClipFactor) {
  ParamRegistry reg;
  reg.add("x.weight", "x", {3}, ParamRole::linear, DType::float32);
  reg.add("y.weight", "y", {2}, ParamRole::linear, DType::bfloat16);
  reg.add("z.weight", "z", {2}, ParamRole::linear, DType::float32);
  reg.allocate();
  param_from_host(reg, 0, {3.0f, 0.0f, 4.0f}, ParamPart::grad);
  param_from_host(reg, 1, {1.0f, -2.0f}, ParamPart::grad);
  param_from_host(reg, 2, {100.0f, 100.0f}, ParamPart::grad);
  reg.info_mut(2).trainable = false;  // frozen gradients do not count
  DeviceSums sums(2);
  grad_sum_squares(reg, sums, 1);
  grad_sum_squares(reg, sums, 1);  // the slot starts over
  EXPECT_EQ(sums.read(), (std::vector<double>{0.0, 9.0 + 16.0 + 1.0 + 4.0}));
  EXPECT_FLOAT_EQ(clip_factor(std::sqrt(30.0), 1.0),
                  static_cast<float>(1.0 / (std::sqrt(30.0) + 1e-6)));
  EXPECT_EQ(clip_factor(0.5, 1.0), 1.0f);
  EXPECT_EQ(clip_factor(100.0, 0.0), 1.0f);  // disabled
}

ResolvedPrecision fp32() {
  ResolvedPrecision p;
  p.storage = p.compute = DType::float32;
  return p;
}

ModelConfig small_model(bool tied) {
  ModelConfig m;
  m.vocab_size = 32;
  m.hidden_size = 16;
  m.num_layers = 2;
  m.num_heads = 2;
  m.num_kv_heads = 1;
  m.intermediate_size = 24;
  m.tie_word_embeddings = tied;
  return m;
}

std::vector<std::string> trainable_names(const ParamRegistry& r) {
  std::vector<std::string> out;
  for (const auto& p : r.all()) {
    if (p.trainable) out.push_back(p.name);
  }
  return out;
}

TEST(Freeze, SelectorsAndExactNamesWithReferencePrecedence) {
  Transformer m(small_model(true), fp32(), Allocation::after_prepare);
  FreezeConfig f;
  f.freeze_modules = {"*"};
  f.unfreeze_parameters = {"model.layers.0.input_layernorm.weight", "model.norm.weight"};
  f.freeze_parameters = {"model.norm.weight"};  // exact exclusion beats exact unfreeze
  apply_freeze(m.params(), f);
  EXPECT_EQ(trainable_names(m.params()),
            std::vector<std::string>{"model.layers.0.input_layernorm.weight"});

  Transformer m2(small_model(true), fp32(), Allocation::after_prepare);
  FreezeConfig g;
  g.freeze_modules = {"model.layers.1"};  // a module freezes everything inside it
  g.unfreeze_modules = {"model.layers.1.mlp"};
  g.freeze_parameters = {"lm_head.weight"};  // an alias freezes the tied embedding
  apply_freeze(m2.params(), g);
  for (const auto& p : m2.params().all()) {
    const bool in_l1 = p.name.rfind("model.layers.1.", 0) == 0;
    const bool mlp = p.name.find(".mlp.") != std::string::npos;
    const bool expect = !(in_l1 && !mlp) && p.name != "model.embed_tokens.weight";
    EXPECT_EQ(p.trainable, expect) << p.name;
  }
}

TEST(Freeze, UnknownNamesAreErrorsWithASuggestion) {
  Transformer m(small_model(false), fp32(), Allocation::after_prepare);
  FreezeConfig f;
  f.freeze_parameters = {"model.layers.0.self_attn.q_prj.weight"};
  try {
    apply_freeze(m.params(), f);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "freeze_config.freeze_parameters");
    EXPECT_NE(std::string(e.what()).find("did you mean 'model.layers.0.self_attn.q_proj.weight'"),
              std::string::npos)
        << e.what();
  }
  FreezeConfig empty;
  apply_freeze(m.params(), empty);  // no-op
  EXPECT_EQ(trainable_names(m.params()).size(), static_cast<std::size_t>(m.params().size()));
}

}  // namespace
}  // namespace kktrain
