// Counting the updates bf16 rounding leaves unchanged (optim/update_kernels.hpp UpdateCounts,
// Optimizer::rounding_counts, optim/lost_updates.hpp): crafted parameters, gradients and moments
// whose outcome follows from bf16 spacing arithmetic, so every count is known before the kernel
// runs; the same counts from the word-by-word, element-by-element and small-block paths; counting
// launches that update bit for bit as the plain ones; the fractions and the warning's window.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "model/param_io.hpp"
#include "optim/lost_updates.hpp"
#include "optim/optimizer.hpp"
#include "optim/update_kernels.hpp"
#include "unit/device_test_util.hpp"

namespace kktrain {
namespace {

using testing_util::download;
using testing_util::upload;

// The learning rate of the crafted kernels: 2^-10 = 0.000977, with bias corrections 1 (a late
// step) and no weight decay. bf16 keeps 8 significant bits, so a value in [2^e, 2^(e+1)) has
// spacing 2^(e-7) and an update below half of it rounds back to the value:
//   3.0   spacing 2^-6 = 0.0156 (half 0.0078)  6.0 spacing 2^-5 (half 0.0156)
//   0.1   spacing 2^-11 = 0.00049 (half 0.00024)
//   1.0   spacing 2^-7 above, 2^-8 below (half 0.0039 / 0.00195)   10.0 spacing 2^-4
// Adam's update is lr m / (sqrt(v) + eps): from zero moments and g = 1, m = 0.1, v = 0.001 and the
// update is 3.16 lr = 0.0031; from m = v = 1 it is about lr.
constexpr float kLr = 1.0f / 1024.0f;

// One crafted element: stored parameter, gradient, first and second moment (SGD: momentum buffer
// in m), and what the update must do: 1 where the stored value stays as it was although the fp32
// result moved. `reps` copies of it go into the arrays.
struct Case {
  const char* what;
  float p, g, m, v;
  int param, m_lost, v_lost;
  int reps;
};

const std::vector<Case>& adam_cases() {
  static const std::vector<Case> c = {
      {"update 0.0031 at 3.0: lost", 3.0f, 1.0f, 0.0f, 0.0f, 1, 0, 0, 5},
      {"update 0.0031 at 0.1: seen", 0.1f, 1.0f, 0.0f, 0.0f, 0, 0, 0, 4},
      // m = 0.9 + 0.1008 = 1.0008 and v = 0.999 + 0.001016 = 1.000016 both round back to 1.
      {"moments and update lost", 3.0f, 1.0078125f, 1.0f, 1.0f, 1, 1, 1, 3},
      {"moments lost, update seen", 0.1f, 1.0078125f, 1.0f, 1.0f, 0, 1, 1, 6},
      {"exp_avg lost, exp_avg_sq from 0", 0.1f, 1.0078125f, 1.0f, 0.0f, 0, 1, 0, 2},
      // g = 0: m = 0.9 moves, v = 0.999 is within half a spacing (2^-9) of 1.
      {"exp_avg_sq lost", 0.1f, 0.0f, 1.0f, 1.0f, 0, 0, 1, 3},
      {"no update at all", 3.0f, 0.0f, 0.0f, 0.0f, 0, 0, 0, 7},
      {"negative: lost", -3.0f, -1.0f, 0.0f, 0.0f, 1, 0, 0, 3},
      {"from zero: seen", 0.0f, 1.0f, 0.0f, 0.0f, 0, 0, 0, 2},
  };
  return c;
}

// SGD with momentum 0.9 (not the first step): b = 0.9 b0 + g, update lr b.
const std::vector<Case>& sgd_cases() {
  static const std::vector<Case> c = {
      {"update 0.00098 at 3.0: lost", 3.0f, 1.0f, 0.0f, 0.0f, 1, 0, 0, 5},
      {"update at 0.1: seen", 0.1f, 1.0f, 0.0f, 0.0f, 0, 0, 0, 3},
      // b = 9 + 1.0078 rounds back to 10 (half spacing 2^-5); update 0.0098 at 6.0 lost.
      {"buffer and update lost", 6.0f, 1.0078125f, 10.0f, 0.0f, 1, 1, 0, 4},
      {"buffer lost, update seen", 0.1f, 1.0078125f, 10.0f, 0.0f, 0, 1, 0, 2},
      {"no update", 3.0f, 0.0f, 0.0f, 0.0f, 0, 0, 0, 6},
  };
  return c;
}

template <class T>
T stored(float x) {
  if constexpr (std::is_same<T, bf16>::value) {
    return bf16(x);
  } else {
    return x;
  }
}

// The crafted elements laid out round-robin (case k's copies spread over the arrays) and run by
// `kernel`, at element offset op for the parameter and om for everything else, in blocks of
// block_len (0: default). Returns the counts; *after gets every output's bits.
template <class P, class M, class V>
struct Crafted {
  std::vector<P> p, g;
  std::vector<M> m;
  std::vector<V> v;
  std::vector<float> master;
  std::vector<int16_t> rem;
  UpdateCounts expected;
  explicit Crafted(const std::vector<Case>& cases) {
    for (int r = 0;; ++r) {
      bool any = false;
      for (const Case& c : cases) {
        if (r >= c.reps) continue;
        any = true;
        p.push_back(stored<P>(c.p));
        g.push_back(stored<P>(c.g));
        m.push_back(stored<M>(c.m));
        v.push_back(stored<V>(c.v));
        master.push_back(to_f32(stored<P>(c.p)));
        rem.push_back(0);
        expected.param_unchanged += c.param;
        expected.moment_lost[0] += c.m_lost;
        expected.moment_lost[1] += c.v_lost;
      }
      if (!any) break;
    }
  }
};

template <class T>
void append_bits(std::vector<uint32_t>& out, const std::vector<T>& v) {
  for (const T& x : v) {
    uint32_t b = 0;
    std::memcpy(&b, &x, sizeof(T));
    out.push_back(b);
  }
}

template <class P, class M, class V, class Kernel>
UpdateCounts run_crafted(const Crafted<P, M, V>& in, int64_t op, int64_t om, int64_t block_len,
                         bool count, const Kernel& kernel, std::vector<uint32_t>* after) {
  const std::size_t n = in.p.size();
  auto p = upload(in.p, op), g = upload(in.g, om);
  auto m = upload(in.m, om);
  auto v = upload(in.v, om);
  auto w = upload(in.master, om);
  auto r = upload(in.rem, om);
  UpdateTensor u;
  u.n = static_cast<int64_t>(n);
  u.index = 777;
  u.param = op;
  u.grad = u.state = om;
  const UpdatePlan plan({u}, FlatArray{p.data(), sizeof(P)}, FlatArray{g.data(), sizeof(P)},
                        {FlatArray{m.data(), sizeof(M)}, FlatArray{v.data(), sizeof(V)},
                         FlatArray{r.data(), 2}, FlatArray{w.data(), 4}},
                        block_len);
  // The kernels add into device memory: the sum and a launch's scratch.
  Kokkos::View<UpdateCounts*, MemSpace> dc("counts", 2);
  kernel(plan, p.data(), g.data(), m.data(), v.data(), w.data(), r.data(),
         count ? dc.data() : nullptr);
  const UpdateCounts c = Kokkos::create_mirror_view_and_copy(HostSpace(), dc)(0);
  if (after) {
    after->clear();
    append_bits(*after, download(p, op, n));
    append_bits(*after, download(m, om, n));
    append_bits(*after, download(v, om, n));
    append_bits(*after, download(w, om, n));
    append_bits(*after, download(r, om, n));
  }
  return c;
}

std::string show(const UpdateCounts& c) {
  return "param " + std::to_string(c.param_unchanged) + ", m " + std::to_string(c.moment_lost[0]) +
         ", v " + std::to_string(c.moment_lost[1]);
}

bool operator==(const UpdateCounts& a, const UpdateCounts& b) {
  return a.param_unchanged == b.param_unchanged && a.moment_lost[0] == b.moment_lost[0] &&
         a.moment_lost[1] == b.moment_lost[1];
}

// Runs the crafted elements through `kernel` with the arrays aligned (word path from element 0),
// 2 bytes off alike (words from element 1), mixed (element by element) and in blocks of 6: every
// layout must give `want`, and a counting launch must store the same bits as a plain one.
template <class P, class M, class V, class Kernel>
void expect_counts(const char* what, const std::vector<Case>& cases, const UpdateCounts& want,
                   const Kernel& kernel) {
  const Crafted<P, M, V> in(cases);
  const int64_t layouts[4][3] = {{0, 0, 0}, {1, 1, 0}, {1, 0, 0}, {1, 1, 6}};
  for (const auto& l : layouts) {
    std::vector<uint32_t> counted, plain;
    const UpdateCounts c = run_crafted(in, l[0], l[1], l[2], true, kernel, &counted);
    run_crafted(in, l[0], l[1], l[2], false, kernel, &plain);
    const std::string where = std::string(what) + " (param at " + std::to_string(l[0]) +
                              ", state at " + std::to_string(l[1]) + ", blocks " +
                              std::to_string(l[2]) + ")";
    EXPECT_TRUE(c == want) << where << ": counted " << show(c) << ", expected " << show(want);
    EXPECT_TRUE(counted == plain) << where << ": counting changed the update";
  }
}

TorchAdamHyper torch_hyper() {
  // beta1, beta2, 1 - beta1, 1 - beta2, eps, sqrt(bias correction 2), -lr / bias correction 1,
  // 1 - lr wd, wd, decoupled, grad scale
  return TorchAdamHyper{0.9f, 0.999f, 0.1f, 0.001f, 1e-8f, 1.0f, -kLr, 1.0f, 0.0f, true, 1.0f};
}

FusedAdamHyper fused_hyper() {
  // beta1, beta2, bias corrections 1 and 2, eps, lr, wd, adam_w_mode, grad scale
  return FusedAdamHyper{0.9f, 0.999f, 1.0f, 1.0f, 1e-8f, kLr, 0.0f, true, 1.0f};
}

UpdateCounts flags(const std::vector<Case>& cases, bool param, bool m, bool v) {
  UpdateCounts c;
  for (const Case& k : cases) {
    c.param_unchanged += param ? k.param * k.reps : 0;
    c.moment_lost[0] += m ? k.m_lost * k.reps : 0;
    c.moment_lost[1] += v ? k.v_lost * k.reps : 0;
  }
  return c;
}

TEST(UpdateCounts, TorchAdamKnownLosses) {
  // The risky pattern: bf16 parameters and moments, round to nearest.
  const TorchAdamHyper h = torch_hyper();
  const RoundingMode nearest;
  expect_counts<bf16, bf16, bf16>(
      "torch adamw bf16", adam_cases(), flags(adam_cases(), true, true, true),
      [&](const UpdatePlan& plan, bf16* p, const bf16* g, bf16* m, bf16* v, float*, int16_t*,
          UpdateCounts* c) { torch_adam_update<bf16>(plan, p, g, m, v, h, nearest, c); });
  // Pattern B: fp32 parameters and moments count nothing.
  expect_counts<float, float, float>(
      "torch adamw fp32", adam_cases(), UpdateCounts(),
      [&](const UpdatePlan& plan, float* p, const float* g, float* m, float* v, float*, int16_t*,
          UpdateCounts* c) { torch_adam_update<float>(plan, p, g, m, v, h, nearest, c); });
}

TEST(UpdateCounts, FusedAdamKnownLossesForEveryMasterKind) {
  const FusedAdamHyper h = fused_hyper();
  const RoundingMode nearest;
  const auto& cases = adam_cases();
  // No master: lost updates; bf16 moments.
  expect_counts<bf16, bf16, bf16>("fused bf16, no master", cases, flags(cases, true, true, true),
                                  [&](const UpdatePlan& plan, bf16* p, const bf16* g, bf16* m,
                                      bf16* v, float*, int16_t*, UpdateCounts* c) {
                                    fused_adam_update<bf16, bf16, bf16>(plan, p, g, m, v, nullptr,
                                                                        nullptr, h, nearest, c);
                                  });
  // bf16 + remainder master (pattern A with bf16 moments): the same elements, held in the master.
  expect_counts<bf16, bf16, bf16>(
      "fused remainder, bf16 moments", cases, flags(cases, true, true, true),
      [&](const UpdatePlan& plan, bf16* p, const bf16* g, bf16* m, bf16* v, float*, int16_t* r,
          UpdateCounts* c) {
        fused_adam_update<bf16, bf16, bf16>(plan, p, g, m, v, nullptr, r, h, nearest, c);
      });
  // Pattern A: remainder master, fp32 moments (not counted).
  expect_counts<bf16, float, float>(
      "fused remainder, fp32 moments (pattern A)", cases, flags(cases, true, false, false),
      [&](const UpdatePlan& plan, bf16* p, const bf16* g, float* m, float* v, float*, int16_t* r,
          UpdateCounts* c) {
        fused_adam_update<bf16, float, float>(plan, p, g, m, v, nullptr, r, h, nearest, c);
      });
  // Full fp32 master, bf16 exp_avg_sq only.
  expect_counts<bf16, float, bf16>(
      "fused fp32 master, bf16 exp_avg_sq", cases, flags(cases, true, false, true),
      [&](const UpdatePlan& plan, bf16* p, const bf16* g, float* m, bf16* v, float* w, int16_t*,
          UpdateCounts* c) {
        fused_adam_update<bf16, float, bf16>(plan, p, g, m, v, w, nullptr, h, nearest, c);
      });
  // fp32 parameters with bf16 moments: only the moments count.
  expect_counts<float, bf16, bf16>(
      "fused fp32 params, bf16 moments", cases, flags(cases, false, true, true),
      [&](const UpdatePlan& plan, float* p, const float* g, bf16* m, bf16* v, float*, int16_t*,
          UpdateCounts* c) {
        fused_adam_update<float, bf16, bf16>(plan, p, g, m, v, nullptr, nullptr, h, nearest, c);
      });
}

TEST(UpdateCounts, SgdMomentumKnownLosses) {
  // lr, momentum, 1 - dampening, wd, nesterov, first step, grad scale
  const SgdHyper h{kLr, 0.9f, 1.0f, 0.0f, false, false, 1.0f};
  const RoundingMode nearest;
  expect_counts<bf16, bf16, bf16>(
      "sgd bf16 momentum", sgd_cases(), flags(sgd_cases(), true, true, false),
      [&](const UpdatePlan& plan, bf16* p, const bf16* g, bf16* m, bf16*, float*, int16_t*,
          UpdateCounts* c) { sgd_update<bf16>(plan, p, g, m, h, nearest, c); });
}

// Stochastic rounding: the update of 3.0 by u = 0.0031 lands between 3 - 2^-6 and 3, and rounds
// to 3 (unchanged) with probability 1 - u / 2^-6 = 0.80; at 0.1 the update spans several
// spacings and never leaves it unchanged. The count must be exactly the elements whose stored
// value stayed (read back), and that number within 6 sigma of the binomial expectation.
TEST(UpdateCounts, StochasticRoundingCountsTheRoundedToOld) {
  const int n_lost = 4000, n_seen = 1000;
  const std::vector<Case> cases = {{"3.0", 3.0f, 1.0f, 0.0f, 0.0f, 0, 0, 0, n_lost},
                                   {"0.1", 0.1f, 1.0f, 0.0f, 0.0f, 0, 0, 0, n_seen}};
  const Crafted<bf16, bf16, bf16> in(cases);
  const TorchAdamHyper h = torch_hyper();
  RoundingMode sr;
  sr.stochastic = true;
  sr.seed = 5;
  sr.step = 9;
  std::vector<uint32_t> after;
  const UpdateCounts c = run_crafted(
      in, 0, 0, 0, true,
      [&](const UpdatePlan& plan, bf16* p, const bf16* g, bf16* m, bf16* v, float*, int16_t*,
          UpdateCounts* k) { torch_adam_update<bf16>(plan, p, g, m, v, h, sr, k); },
      &after);
  int64_t kept = 0;  // every element's update is nonzero: kept = stored value unchanged
  for (std::size_t i = 0; i < in.p.size(); ++i) kept += (after[i] & 0xffffu) == in.p[i].bits;
  EXPECT_EQ(c.param_unchanged, kept);
  // The update as the kernel computes it (bf16 moments 0.1 and 0.001 rounded): u = lr m / sqrt(v).
  const double m = bf16(0.1f).to_float(), v = bf16(0.001f).to_float();
  const double u = kLr * m / (std::sqrt(v) + 1e-8), p_kept = 1.0 - u * 64.0;
  const double mean = n_lost * p_kept, sigma = std::sqrt(n_lost * p_kept * (1.0 - p_kept));
  EXPECT_NEAR(static_cast<double>(c.param_unchanged), mean, 6.0 * sigma)
      << "P(unchanged) " << p_kept << " over " << n_lost << " elements";
  EXPECT_EQ(c.moment_lost[0] + c.moment_lost[1], 0);
}

// ---- through the optimizer: groups, fractions, patterns ----------------------------------------
// A bf16 weight of 2000 elements, the first half 3.0 and the second 0.1, every gradient 1, plus a
// fp32 norm of 3.0 (its own dtype group). Step 1 of torch AdamW at lr 2^-10 (bias corrections
// included, m_hat / sqrt(v_hat) = 1.001) moves every element by 0.00098: lost at 3.0, seen at
// 0.1. Step 2 with zero gradients: exp_avg_sq = 0.999 v rounds back for every bf16 moment,
// exp_avg = 0.9 m moves; the update (0.67 lr) is again lost at 3.0 only. FusedAdam (TE bias
// corrections) moves every element by lr at step 1, by 0.67 lr at step 2 as well.
constexpr int64_t kHalf = 1000;

ParamRegistry crafted_registry() {
  ParamRegistry reg;
  reg.add("w.weight", "w", {2 * kHalf}, ParamRole::linear, DType::bfloat16);
  reg.add("n.norm", "n", {7}, ParamRole::norm, DType::float32);
  reg.allocate();
  std::vector<float> w(2 * kHalf, 3.0f);
  for (int64_t i = kHalf; i < 2 * kHalf; ++i) w[i] = 0.1f;
  param_from_host(reg, 0, w);
  param_from_host(reg, 1, std::vector<float>(7, 3.0f));
  return reg;
}

void set_grads(ParamRegistry& reg, float g) {
  param_from_host(reg, 0, std::vector<float>(2 * kHalf, g), ParamPart::grad);
  param_from_host(reg, 1, std::vector<float>(7, g), ParamPart::grad);
}

LostUpdates one_step(Optimizer& opt, ParamRegistry& reg, float g) {
  set_grads(reg, g);
  opt.set_count_rounding(true);
  opt.step(kLr, 1.0f);
  return lost_updates(opt.rounding_counts(), [](uint64_t v) { return v; });
}

OptimizerConfig pattern(const std::string& name) {
  OptimizerConfig c;
  c.weight_decay = 0.0;
  if (name == "SR") c.stochastic_rounding = true;
  if (name.rfind("fused", 0) == 0) {
    c.kind = OptimizerKind::fused_adam;
    c.master_weights = name != "fused no master";
    c.store_param_remainders = name == "fused A" || name == "fused A bf16 moments";
    if (name == "fused A bf16 moments" || name == "fused no master") {
      c.exp_avg_dtype = c.exp_avg_sq_dtype = DType::bfloat16;
    }
  }
  return c;
}

TEST(LostUpdates, PatternsThroughTheOptimizer) {
  for (UpdateLaunch launch : {UpdateLaunch::grouped, UpdateLaunch::per_parameter}) {
    const std::string how = launch == UpdateLaunch::grouped ? " (grouped)" : " (per parameter)";
    // The risky pattern: half the elements lose their update at both steps; every bf16
    // exp_avg_sq value loses its EMA change at step 2 (half of the group's moment values).
    {
      ParamRegistry reg = crafted_registry();
      auto opt = make_optimizer(pattern("risky"), reg, 1, launch);
      const LostUpdates s1 = one_step(*opt, reg, 1.0f), s2 = one_step(*opt, reg, 0.0f);
      EXPECT_EQ(s1.update_lost_frac, 0.5) << how;
      EXPECT_EQ(s1.ema_lost_frac, 0.0) << how;
      EXPECT_EQ(s2.update_lost_frac, 0.5) << how;
      EXPECT_EQ(s2.ema_lost_frac, 0.5) << how;
      EXPECT_TRUE(s2.can_lose && s2.bf16_moments);
      ASSERT_EQ(s2.groups.size(), 2u);
      EXPECT_EQ(s2.groups[0].dtype, DType::float32);  // the fp32 norm: nothing counted
      EXPECT_EQ(s2.groups[0].unchanged_frac, 0.0);
      EXPECT_EQ(s2.groups[1].elements, 2 * kHalf);
      EXPECT_EQ(s2.groups[1].rounding, ParamRounding::nearest);
      ASSERT_EQ(s2.groups[1].moment_lost_frac.size(), 2u);
      EXPECT_EQ(s2.groups[1].moment_lost_frac[0].second, 0.0);  // exp_avg
      EXPECT_EQ(s2.groups[1].moment_lost_frac[1].second, 1.0);  // exp_avg_sq
      EXPECT_EQ(opt->rounding_counts()[1].counts.param_unchanged, kHalf);
    }
    // Patterns A and B: nothing can be lost. A's master holds the same half of the updates.
    for (const char* name : {"fused A", "B"}) {
      ParamRegistry reg = crafted_registry();
      if (std::string(name) == "B") {
        reg = ParamRegistry();
        reg.add("w.weight", "w", {2 * kHalf}, ParamRole::linear, DType::float32);
        reg.add("n.norm", "n", {7}, ParamRole::norm, DType::float32);
        reg.allocate();
      }
      auto opt = make_optimizer(pattern(name), reg, 1, launch);
      for (float g : {1.0f, 0.0f}) {
        const LostUpdates s = one_step(*opt, reg, g);
        EXPECT_EQ(s.update_lost_frac, 0.0) << name << how;
        EXPECT_EQ(s.ema_lost_frac, 0.0) << name << how;
        EXPECT_FALSE(s.can_lose || s.bf16_moments) << name << how;
        EXPECT_EQ(s.master_held_frac, std::string(name) == "B" ? 0.0 : 0.5) << name << how;
      }
    }
    // Pattern A with bf16 moments: the master holds, the moments lose (the fp32 norm's bf16
    // moments included: 2007 elements, 2 moments each, exp_avg_sq of all of them at step 2).
    {
      ParamRegistry reg = crafted_registry();
      auto opt = make_optimizer(pattern("fused A bf16 moments"), reg, 1, launch);
      one_step(*opt, reg, 1.0f);
      const LostUpdates s = one_step(*opt, reg, 0.0f);
      EXPECT_EQ(s.update_lost_frac, 0.0) << how;
      EXPECT_EQ(s.master_held_frac, 0.5) << how;
      EXPECT_EQ(s.ema_lost_frac, 0.5) << how;
    }
    // FusedAdam without a master loses what the risky pattern loses.
    {
      ParamRegistry reg = crafted_registry();
      auto opt = make_optimizer(pattern("fused no master"), reg, 1, launch);
      EXPECT_EQ(one_step(*opt, reg, 1.0f).update_lost_frac, 0.5) << how;
    }
    // Stochastic rounding: nothing counts as lost; the share rounded back to the old value is
    // about (1 - 0.00098 / 2^-6) = 0.94 of the 3.0 half (0.1 always moves): 0.47 overall.
    {
      ParamRegistry reg = crafted_registry();
      auto opt = make_optimizer(pattern("SR"), reg, 1, launch);
      const LostUpdates s = one_step(*opt, reg, 1.0f);
      EXPECT_EQ(s.update_lost_frac, 0.0) << how;
      EXPECT_FALSE(s.can_lose);
      EXPECT_NEAR(s.sr_unchanged_frac, 0.47, 0.03) << how;
    }
  }
}

TEST(LostUpdates, CountsOnlyWhenAskedAndPerStep) {
  ParamRegistry reg = crafted_registry();
  auto opt = make_optimizer(pattern("risky"), reg, 1);
  set_grads(reg, 1.0f);
  opt->step(kLr, 1.0f);  // not counting (the default)
  EXPECT_EQ(opt->rounding_counts()[1].counts.param_unchanged, 0);
  EXPECT_EQ(one_step(*opt, reg, 1.0f).update_lost_frac, 0.5);
  opt->set_count_rounding(false);
  opt->step(kLr, 1.0f);  // the last step's counts, not a running total
  EXPECT_EQ(opt->rounding_counts()[1].counts.param_unchanged, 0);
}

TEST(LostUpdates, FractionsOverGroupsAndRanks) {
  // Four groups as two ranks would report them (sum doubles every count).
  auto group = [](DType d, ParamRounding r, DType m, int64_t n, int64_t p, int64_t m0, int64_t m1) {
    GroupRoundingCounts g;
    g.dtype = d;
    g.rounding = r;
    g.moments = {{"exp_avg", m}, {"exp_avg_sq", m}};
    g.elements = n;
    g.counts.param_unchanged = p;
    g.counts.moment_lost[0] = m0;
    g.counts.moment_lost[1] = m1;
    return g;
  };
  const std::vector<GroupRoundingCounts> groups = {
      group(DType::bfloat16, ParamRounding::nearest, DType::bfloat16, 1000, 100, 10, 200),
      group(DType::float32, ParamRounding::float32, DType::bfloat16, 600, 0, 30, 60),
      group(DType::bfloat16, ParamRounding::stochastic, DType::float32, 400, 50, 0, 0),
      group(DType::bfloat16, ParamRounding::master, DType::float32, 800, 40, 0, 0)};
  int calls = 0;
  const LostUpdates l = lost_updates(groups, [&](uint64_t v) {
    ++calls;
    return 2 * v;
  });
  EXPECT_EQ(calls, 12);
  // rounding_count_values lists the counts in the order lost_updates asks for them.
  const std::vector<uint64_t> values = rounding_count_values(groups);
  std::vector<uint64_t> asked;
  lost_updates(groups, [&](uint64_t v) {
    asked.push_back(v);
    return v;
  });
  EXPECT_EQ(values, asked);
  EXPECT_DOUBLE_EQ(l.update_lost_frac, 200.0 / 1000);
  EXPECT_DOUBLE_EQ(l.ema_lost_frac, 2.0 * (10 + 200 + 30 + 60) / (2 * 1000 + 2 * 600));
  EXPECT_DOUBLE_EQ(l.sr_unchanged_frac, 100.0 / 400);
  EXPECT_DOUBLE_EQ(l.master_held_frac, 80.0 / 800);
  EXPECT_DOUBLE_EQ(l.groups[1].moment_lost_frac[1].second, 120.0 / 600);
  EXPECT_EQ(l.groups[2].moment_lost_frac[0].second, 0.0);
  // Nothing that can lose: every fraction 0.
  const LostUpdates none = lost_updates({groups[1]}, [](uint64_t) { return uint64_t{0}; });
  EXPECT_EQ(none.update_lost_frac, 0.0);
  EXPECT_FALSE(none.can_lose);
}

TEST(LostUpdateWatch, FiresOnceWhenAboveForTheWholeWindow) {
  // Logged every 10 steps (and step 1), threshold 0.5, window 100: above from step 1 on, the
  // window is full at step 100.
  LostUpdateWatch w(0.5, 100);
  EXPECT_FALSE(w.observe(1, 0.6));
  for (int64_t s = 10; s < 100; s += 10) EXPECT_FALSE(w.observe(s, 0.7)) << s;
  EXPECT_TRUE(w.observe(100, 0.6));
  EXPECT_EQ(w.above_since(), 1);
  EXPECT_FALSE(w.observe(110, 0.9));  // once
  // A dip restarts the window: the logged step after it stands for the steps since the dip.
  LostUpdateWatch d(0.5, 100, /*first_step=*/200);
  for (int64_t s = 210; s <= 260; s += 10) EXPECT_FALSE(d.observe(s, 0.8));
  EXPECT_FALSE(d.observe(270, 0.5));  // not above: equal
  EXPECT_EQ(d.above_since(), -1);
  for (int64_t s = 280; s < 370; s += 10) EXPECT_FALSE(d.observe(s, 0.8)) << s;
  EXPECT_TRUE(d.observe(370, 0.8));  // steps 271..370
  EXPECT_EQ(d.above_since(), 271);
  // Window 0: never.
  LostUpdateWatch off(0.5, 0);
  for (int64_t s = 1; s < 500; ++s) EXPECT_FALSE(off.observe(s, 1.0));
}

}  // namespace
}  // namespace kktrain
