// Sparse MLP (mixture of experts, model/moe.hpp) tests that need no reference implementation
// (tests/parity checks loss, load-balancing loss, routing and every gradient against PyTorch):
//  - activation-checkpoint recompute gives bitwise the same routing and gradients, in fp32 and
//    bf16 compute, with a shared expert and the load-balancing loss on,
//  - the router is a protected fp32 parameter whatever the storage dtype, the experts are not,
//  - freezing: module globs over experts, exact expert names refused under expert parallelism
//    naming the owning expert module (the router by exact name stays allowed),
//  - dropless top-k: every token has k distinct experts, and the routing is the same at every
//    micro-batch size a token is seen in (no capacity, no dependence on the other tokens).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "model/freeze.hpp"
#include "model/param_io.hpp"
#include "model/transformer.hpp"
#include "tests/unit/model_test_util.hpp"

namespace kktrain {
namespace {

ModelConfig tiny_moe() {
  ModelConfig m = testing_util::tiny_model_config();
  m.num_layers = 3;
  m.moe.num_experts = 5;
  m.moe.top_k = 2;
  m.moe.intermediate_size = 12;
  m.moe.shared_expert_intermediate_size = 8;
  m.moe.aux_loss_coef = 0.1;
  return m;
}

using testing_util::precision;

struct Tokens {
  int64_t B = 2, T = 7;
  std::vector<int32_t> ids, targets;
};

Tokens random_tokens(int64_t V, uint32_t seed, int64_t B = 2, int64_t T = 7) {
  Tokens t;
  t.B = B;
  t.T = T;
  std::mt19937 rng(seed);
  for (int64_t i = 0; i < B * T; ++i) {
    t.ids.push_back(static_cast<int32_t>(rng() % V));
    t.targets.push_back(static_cast<int32_t>(rng() % V));
  }
  return t;
}

struct RunResult {
  std::vector<std::vector<float>> grads;
  std::vector<std::vector<int32_t>> routing;
  ForwardResult r;
};

RunResult run(Transformer& m, const Tokens& t) {
  RunResult out;
  m.zero_grads();
  ForwardOptions fo;
  fo.prepare_backward = true;
  fo.keep_routing = true;
  out.r = m.forward(t.ids.data(), t.targets.data(), t.B, t.T, fo);
  m.backward();
  for (int i = 0; i < m.params().size(); ++i) {
    out.grads.push_back(m.params().info(i).has_grad ? param_to_host(m.params(), i, ParamPart::grad)
                                                    : std::vector<float>());
  }
  for (int64_t l = 0; l < m.config().num_layers; ++l) out.routing.push_back(m.routing(l));
  return out;
}

class MoeCheckpointing : public ::testing::TestWithParam<DType> {};

TEST_P(MoeCheckpointing, RecomputeGivesBitwiseTheSameRoutingAndGradients) {
  ModelConfig cfg = tiny_moe();
  const ResolvedPrecision p = precision(DType::float32, GetParam());
  Transformer plain(cfg, p);
  plain.init_weights();
  cfg.activation_checkpointing = true;
  Transformer ckpt(cfg, p);
  ckpt.init_weights();
  const Tokens t = random_tokens(cfg.vocab_size, 5);
  const RunResult a = run(plain, t), b = run(ckpt, t);
  EXPECT_EQ(a.r.loss, b.r.loss);
  EXPECT_EQ(a.r.aux_loss, b.r.aux_loss);
  EXPECT_GT(a.r.aux_loss, 0.0);
  EXPECT_EQ(a.routing, b.routing);
  ASSERT_EQ(a.grads.size(), b.grads.size());
  double norm = 0.0;
  for (std::size_t i = 0; i < a.grads.size(); ++i) {
    ASSERT_EQ(a.grads[i].size(), b.grads[i].size());
    EXPECT_EQ(0, std::memcmp(a.grads[i].data(), b.grads[i].data(), a.grads[i].size() * 4))
        << plain.params().info(static_cast<int>(i)).name;
    for (float x : a.grads[i]) norm += static_cast<double>(x) * x;
  }
  EXPECT_GT(norm, 1e-6);
}

INSTANTIATE_TEST_SUITE_P(ComputeDtypes, MoeCheckpointing,
                         ::testing::Values(DType::float32, DType::bfloat16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(MoeModel, RouterIsProtectedFp32AndExpertsFollowTheStorageDtype) {
  const ModelConfig cfg = tiny_moe();
  Transformer m(cfg, precision(DType::bfloat16, DType::bfloat16));
  int routers = 0, experts = 0;
  for (const ParamInfo& p : m.params().all()) {
    if (p.name.find("block_sparse_moe.gate.weight") != std::string::npos) {
      ++routers;
      EXPECT_EQ(p.dtype, DType::float32) << p.name;
      EXPECT_TRUE(p.keep_fp32) << p.name;
      EXPECT_EQ(p.shape, (std::vector<int64_t>{5, 16}));
    } else if (p.name.find(".experts.") != std::string::npos) {
      ++experts;
      EXPECT_EQ(p.dtype, DType::bfloat16) << p.name;
      EXPECT_FALSE(p.keep_fp32) << p.name;
    }
    EXPECT_EQ(p.name.find(".mlp."), std::string::npos) << "dense MLP in a sparse model: " << p.name;
  }
  EXPECT_EQ(routers, 3);
  EXPECT_EQ(experts, 3 * 5 * 3);
  EXPECT_GE(m.params().find("model.layers.2.block_sparse_moe.experts.4.w2.weight"), 0);
  EXPECT_GE(m.params().find("model.layers.0.block_sparse_moe.shared_expert.down_proj.weight"), 0);
}

TEST(MoeModel, DroplessRoutingDependsOnlyOnTheToken) {
  ModelConfig cfg = tiny_moe();
  cfg.num_layers = 1;  // the first layer's input depends only on the token and its prefix
  Transformer m(cfg, precision(DType::float32, DType::bfloat16));
  m.init_weights();
  const Tokens two = random_tokens(cfg.vocab_size, 9, 2, 7);
  Tokens one = two;  // the second sequence alone
  one.B = 1;
  one.ids.erase(one.ids.begin(), one.ids.begin() + 7);
  one.targets.erase(one.targets.begin(), one.targets.begin() + 7);
  const RunResult a = run(m, two), b = run(m, one);
  const std::vector<int32_t>& ra = a.routing[0];
  ASSERT_EQ(ra.size(), 2u * 7 * 2);
  for (int64_t n = 0; n < 14; ++n) {
    const std::set<int32_t> chosen(ra.begin() + 2 * n, ra.begin() + 2 * n + 2);
    EXPECT_EQ(chosen.size(), 2u) << "token " << n;
    for (int32_t e : chosen) EXPECT_TRUE(e >= 0 && e < 5) << e;
  }
  EXPECT_EQ(std::vector<int32_t>(ra.begin() + 14, ra.end()), b.routing[0]);
}

TEST(MoeFreeze, GlobsSelectExpertsAndFrozenExpertsGetNoGradient) {
  const ModelConfig cfg = tiny_moe();
  Transformer m(cfg, precision(DType::float32, DType::float32), Allocation::after_prepare);
  FreezeConfig f;
  f.freeze_modules = {"model.layers.*.block_sparse_moe.experts.*"};
  f.unfreeze_modules = {"model.layers.2.block_sparse_moe.experts.3"};
  apply_freeze(m.params(), f, "test.yaml", 1);
  for (const ParamInfo& p : m.params().all()) {
    const bool expert = p.name.find(".experts.") != std::string::npos;
    const bool kept = p.name.find("layers.2.block_sparse_moe.experts.3.") != std::string::npos;
    EXPECT_EQ(p.trainable, !expert || kept) << p.name;
  }
  m.prepare(ShardOptions());
  m.init_weights();
  const RunResult r = run(m, random_tokens(cfg.vocab_size, 3));
  for (int i = 0; i < m.params().size(); ++i) {
    const ParamInfo& p = m.params().info(i);
    EXPECT_EQ(p.has_grad, p.trainable) << p.name;
  }
  const int kept = m.params().find("model.layers.2.block_sparse_moe.experts.3.w1.weight");
  double norm = 0.0;
  for (float x : r.grads[kept]) norm += static_cast<double>(x) * x;
  EXPECT_GT(norm, 0.0);  // the unfrozen expert trains (it was chosen by some token)
}

TEST(MoeFreeze, ExactExpertNamesAreRefusedUnderExpertParallelism) {
  const ModelConfig cfg = tiny_moe();
  const std::string name = "model.layers.1.block_sparse_moe.experts.3.w2.weight";
  for (const bool freeze : {true, false}) {
    Transformer m(cfg, precision(DType::float32, DType::float32), Allocation::after_prepare);
    FreezeConfig f;
    (freeze ? f.freeze_parameters : f.unfreeze_parameters) = {name};
    try {
      apply_freeze(m.params(), f, "test.yaml", 2);
      ADD_FAILURE() << "an exact expert name was accepted with expert_parallel_size 2";
    } catch (const ConfigError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(freeze ? "freeze_config.freeze_parameters"
                                : "freeze_config.unfreeze_parameters"),
                std::string::npos)
          << msg;
      EXPECT_NE(msg.find("'model.layers.1.block_sparse_moe.experts.3'"), std::string::npos) << msg;
    }
    // One rank of experts per group: the name is stable and allowed.
    Transformer one(cfg, precision(DType::float32, DType::float32), Allocation::after_prepare);
    apply_freeze(one.params(), f, "test.yaml", 1);
    EXPECT_EQ(one.params().info(one.params().find(name)).trainable, !freeze);
  }
  // The router is not an expert parameter: its exact name is fine under expert parallelism.
  Transformer m(cfg, precision(DType::float32, DType::float32), Allocation::after_prepare);
  FreezeConfig f;
  f.freeze_parameters = {"model.layers.0.block_sparse_moe.gate.weight"};
  EXPECT_NO_THROW(apply_freeze(m.params(), f, "test.yaml", 2));
}

}  // namespace
}  // namespace kktrain
