// core/config + core/precision: what valid configs resolve to. The storage dtype precedence table
// of docs/precision.md (model.dtype vs model.torch_dtype vs auto vs init_from), the FSDP2 mixed
// precision policy on one and many ranks, optimizer components and their defaults, overrides,
// and printing the resolved config back in. Error paths are in test_config_errors.cpp.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/log.hpp"
#include "core/log_testing.hpp"
#include "unit/config_test_util.hpp"

namespace kktrain {
namespace {

using testing_util::contains;
using testing_util::has_warning;
using testing_util::load;

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override { test_hooks::clear_warnings(); }
};

// ---- (a) model.dtype / model.torch_dtype / auto / init_from ----------------------------------

enum class Val { absent, null, autov, f32, bf16 };
const char* val_yaml(Val v) {
  switch (v) {
    case Val::absent:
      return nullptr;
    case Val::null:
      return "null";
    case Val::autov:
      return "auto";
    case Val::f32:
      return "float32";
    case Val::bf16:
      return "bfloat16";
  }
  return nullptr;
}
const char* val_name(Val v) {
  const char* names[] = {"absent", "null", "auto", "float32", "bfloat16"};
  return names[static_cast<int>(v)];
}
bool is_set(Val v) {
  return v != Val::absent && v != Val::null;
}

struct PrecedenceCase {
  Val dtype, torch_dtype;
  bool init_from;
};

class StoragePrecedence : public ::testing::TestWithParam<PrecedenceCase> {};

TEST_P(StoragePrecedence, FollowsTheReferenceTable) {
  const PrecedenceCase c = GetParam();
  test_hooks::clear_warnings();
  std::string yaml = "model:\n  hidden_size: 64\n";
  if (val_yaml(c.dtype)) yaml += std::string("  dtype: ") + val_yaml(c.dtype) + "\n";
  if (val_yaml(c.torch_dtype))
    yaml += std::string("  torch_dtype: ") + val_yaml(c.torch_dtype) + "\n";
  if (c.init_from) yaml += "  init_from: ckpt.h5\n";
  int calls = 0;
  std::string asked;
  LoadOptions opts;
  opts.checkpoint_dtype = [&](const std::string& path) {
    ++calls;
    asked = path;
    return DType::float32;  // differs from the fresh-model default, so the two are told apart
  };
  const Config cfg = load(yaml, {}, opts);

  const bool from_dtype = is_set(c.dtype);  // non-null model.dtype wins, including auto
  const bool from_torch = !from_dtype && is_set(c.torch_dtype);
  const Val effective = from_dtype ? c.dtype : from_torch ? c.torch_dtype : Val::autov;
  DType want;
  if (effective == Val::autov) {
    want = c.init_from ? DType::float32 : DType::bfloat16;
  } else {
    want = effective == Val::f32 ? DType::float32 : DType::bfloat16;
  }
  EXPECT_EQ(cfg.precision.storage, want) << yaml;
  EXPECT_EQ(calls, effective == Val::autov && c.init_from ? 1 : 0) << yaml;
  if (calls) {
    EXPECT_EQ(asked, "ckpt.h5");
  }

  const std::string& src = cfg.precision.storage_source;
  ASSERT_FALSE(src.empty());
  if (from_dtype) {
    EXPECT_TRUE(contains(src, "model.dtype")) << src;
    EXPECT_FALSE(contains(src, "torch_dtype")) << src;
  } else if (from_torch) {
    EXPECT_TRUE(contains(src, "model.torch_dtype")) << src;
  } else {
    EXPECT_TRUE(contains(src, "unset")) << src;
  }
  EXPECT_EQ(contains(src, "auto"), effective == Val::autov) << src;
  EXPECT_EQ(contains(src, "ckpt.h5"), calls == 1) << src;
  EXPECT_TRUE(contains(src, dtype_name(want))) << src;

  // The printed config carries the resolved dtype in canonical spelling.
  const YAML::Node& r = cfg.resolved;
  EXPECT_EQ(r["model"]["dtype"].as<std::string>(), dtype_name(want));
  EXPECT_EQ(r["resolved_precision"]["storage_dtype"].as<std::string>(), dtype_name(want));
  EXPECT_EQ(r["resolved_precision"]["storage_dtype_source"].as<std::string>(), src);
  // Using the deprecated spelling warns.
  EXPECT_EQ(has_warning("model.torch_dtype is deprecated"), is_set(c.torch_dtype));
}

std::vector<PrecedenceCase> all_precedence_cases() {
  std::vector<PrecedenceCase> v;
  const Val vals[] = {Val::absent, Val::null, Val::autov, Val::f32, Val::bf16};
  for (Val d : vals) {
    for (Val t : vals) {
      for (bool init : {false, true}) v.push_back({d, t, init});
    }
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(AllCombinations, StoragePrecedence,
                         ::testing::ValuesIn(all_precedence_cases()),
                         [](const ::testing::TestParamInfo<PrecedenceCase>& info) {
                           return std::string("dtype_") + val_name(info.param.dtype) + "_torch_" +
                                  val_name(info.param.torch_dtype) +
                                  (info.param.init_from ? "_init_from" : "_fresh");
                         });

TEST_F(ConfigTest, BothStorageKeysAcceptEverySpelling) {
  const std::vector<std::pair<std::string, DType>> spellings = {
      {"float32", DType::float32},       {"fp32", DType::float32},
      {"torch.float32", DType::float32}, {"bfloat16", DType::bfloat16},
      {"bf16", DType::bfloat16},         {"torch.bfloat16", DType::bfloat16}};
  for (const auto& s : spellings) {
    for (const char* key : {"dtype", "torch_dtype"}) {
      SCOPED_TRACE(std::string(key) + ": " + s.first);
      const Config cfg = load(std::string("model:\n  ") + key + ": " + s.first + "\n");
      EXPECT_EQ(cfg.precision.storage, s.second);
      EXPECT_EQ(cfg.resolved["model"][key].as<std::string>(), dtype_name(s.second));
    }
  }
}

TEST_F(ConfigTest, Float16StorageIsRejectedOnlyWhereItWouldApply) {
  for (const char* spelling : {"float16", "half", "torch.float16"}) {
    for (const char* key : {"dtype", "torch_dtype"}) {
      SCOPED_TRACE(std::string(key) + ": " + spelling);
      const auto e = testing_util::catch_config_error(std::string("model:\n  ") + key + ": " +
                                                      spelling + "\n");
      ASSERT_TRUE(e.thrown);
      EXPECT_EQ(e.key, std::string("model.") + key);
      EXPECT_TRUE(contains(e.message, "float16 is not supported")) << e.message;
    }
  }
  // An ignored torch_dtype (model.dtype wins) does not matter.
  EXPECT_EQ(load("model:\n  dtype: float32\n  torch_dtype: float16\n").precision.storage,
            DType::float32);
  // A float16 checkpoint cannot be the storage dtype.
  LoadOptions opts;
  opts.checkpoint_dtype = [](const std::string&) { return DType::float16; };
  const auto e = testing_util::catch_config_error("model:\n  init_from: c.h5\n", {}, opts);
  ASSERT_TRUE(e.thrown);
  EXPECT_EQ(e.key, "model.init_from");
  EXPECT_TRUE(contains(e.message, "float16")) << e.message;
}

// ---- (b) mixed-precision policy -------------------------------------------------------------

const char* const kTwoRankData = "data:\n  global_batch_size: 16\n";

TEST_F(ConfigTest, PolicyDefaultsOnOneRank) {
  const Config cfg = load("");
  const auto& mp = cfg.distributed.mp_policy;
  EXPECT_EQ(mp.param_dtype, DType::bfloat16);
  EXPECT_EQ(mp.reduce_dtype, DType::float32);
  EXPECT_EQ(mp.output_dtype, DType::bfloat16);
  EXPECT_TRUE(mp.cast_forward_inputs);
  EXPECT_FALSE(cfg.distributed.autocast_dtype.has_value());
  EXPECT_EQ(cfg.distributed.strategy, DistributedStrategy::fsdp2);
  const auto& p = cfg.precision;
  EXPECT_EQ(p.world_size, 1);
  EXPECT_EQ(p.storage, DType::bfloat16);
  EXPECT_EQ(p.compute, DType::bfloat16);
  EXPECT_EQ(p.reduce, DType::float32);
  EXPECT_EQ(p.output, DType::bfloat16);
  EXPECT_FALSE(p.output_applied);  // one rank: output_dtype is not applied
  EXPECT_TRUE(p.cast_forward_inputs);
  EXPECT_TRUE(contains(p.compute_source, "param_dtype")) << p.compute_source;
  EXPECT_TRUE(contains(p.reduce_source, "reduce_dtype")) << p.reduce_source;
  EXPECT_EQ(cfg.resolved["distributed"]["mp_policy"]["_target_"].as<std::string>(),
            "torch.distributed.fsdp.MixedPrecisionPolicy");
}

TEST_F(ConfigTest, ComputeOnOneRankIsParamDtypeNotStorage) {
  const Config cfg =
      load("model:\n  dtype: bfloat16\ndistributed:\n  mp_policy:\n    param_dtype: float32\n");
  EXPECT_EQ(cfg.precision.storage, DType::bfloat16);
  EXPECT_EQ(cfg.precision.compute, DType::float32);
  const Config cfg2 = load("model:\n  dtype: float32\n");
  EXPECT_EQ(cfg2.precision.storage, DType::float32);
  EXPECT_EQ(cfg2.precision.compute, DType::bfloat16);
}

TEST_F(ConfigTest, AutocastDtypeOverridesComputeOnOneRankOnly) {
  const std::string yaml = "distributed:\n  autocast_dtype: float32\n";
  const Config one = load(yaml);
  EXPECT_EQ(one.precision.compute, DType::float32);
  EXPECT_TRUE(contains(one.precision.compute_source, "autocast_dtype"));
  EXPECT_FALSE(has_warning("autocast_dtype"));

  LoadOptions two;
  two.world_size = 2;
  const Config sharded = load(yaml + kTwoRankData, {}, two);
  EXPECT_EQ(sharded.precision.compute, DType::bfloat16);
  EXPECT_FALSE(contains(sharded.precision.compute_source, "autocast"));
  EXPECT_TRUE(has_warning("distributed.autocast_dtype has no effect with 2 ranks"));
  EXPECT_TRUE(sharded.precision.output_applied);
  EXPECT_EQ(sharded.precision.world_size, 2);
  EXPECT_EQ(sharded.resolved["resolved_precision"]["world_size"].as<int>(), 2);
}

TEST_F(ConfigTest, NullPolicyDtypesFallBack) {
  // null param_dtype computes in the storage dtype; null reduce_dtype reduces in compute.
  const Config a = load(
      "model:\n  dtype: float32\ndistributed:\n  mp_policy:\n    param_dtype: null\n"
      "    reduce_dtype: null\n    output_dtype: null\n");
  EXPECT_EQ(a.precision.compute, DType::float32);
  EXPECT_EQ(a.precision.reduce, DType::float32);
  EXPECT_FALSE(a.precision.output.has_value());
  EXPECT_TRUE(contains(a.precision.compute_source, "storage")) << a.precision.compute_source;
  EXPECT_TRUE(contains(a.precision.reduce_source, "compute")) << a.precision.reduce_source;
  EXPECT_TRUE(a.resolved["distributed"]["mp_policy"]["param_dtype"].IsNull());

  const Config b = load("distributed:\n  mp_policy:\n    reduce_dtype: ~\n");
  EXPECT_EQ(b.precision.compute, DType::bfloat16);
  EXPECT_EQ(b.precision.reduce, DType::bfloat16);

  LoadOptions two;
  two.world_size = 2;
  const Config c = load(
      std::string("distributed:\n  mp_policy:\n    output_dtype: null\n") + kTwoRankData, {}, two);
  EXPECT_FALSE(c.precision.output_applied);  // nothing to apply
  const Config d =
      load(std::string("distributed:\n  mp_policy:\n    output_dtype: float32\n") + kTwoRankData,
           {}, two);
  EXPECT_TRUE(d.precision.output_applied);
  EXPECT_EQ(d.precision.output, DType::float32);
}

TEST_F(ConfigTest, PolicyTargetSpellingsAndCastForwardInputs) {
  for (const char* t : {"torch.distributed.fsdp.MixedPrecisionPolicy", "MixedPrecisionPolicy"}) {
    const Config cfg = load(std::string("distributed:\n  mp_policy:\n    _target_: ") + t +
                            "\n    cast_forward_inputs: false\n    param_dtype: torch.float32\n");
    EXPECT_FALSE(cfg.precision.cast_forward_inputs);
    EXPECT_FALSE(cfg.distributed.mp_policy.cast_forward_inputs);
    EXPECT_EQ(cfg.precision.compute, DType::float32);
    EXPECT_EQ(cfg.resolved["distributed"]["mp_policy"]["_target_"].as<std::string>(),
              "torch.distributed.fsdp.MixedPrecisionPolicy");
    EXPECT_EQ(cfg.resolved["distributed"]["mp_policy"]["param_dtype"].as<std::string>(), "float32");
  }
  EXPECT_EQ(load("distributed:\n  strategy: fsdp2\n").distributed.strategy,
            DistributedStrategy::fsdp2);
}

TEST_F(ConfigTest, LoraDtype) {
  const Config off = load("");
  EXPECT_FALSE(off.peft.enabled);
  EXPECT_TRUE(off.resolved["peft"].IsNull());
  const Config inherit = load("peft:\n  target_modules: ['*.q_proj', '*.v_proj']\n  dim: 4\n");
  EXPECT_TRUE(inherit.peft.enabled);
  EXPECT_FALSE(inherit.precision.lora.has_value());
  EXPECT_EQ(inherit.resolved["resolved_precision"]["lora_dtype"].as<std::string>(), "inherit");
  EXPECT_EQ(inherit.peft.target_modules, (std::vector<std::string>{"*.q_proj", "*.v_proj"}));
  const Config f32 = load("peft:\n  target_modules: [{glob: '*.q_proj'}]\n  lora_dtype: fp32\n");
  EXPECT_EQ(f32.precision.lora, DType::float32);
  EXPECT_EQ(f32.peft.target_modules, std::vector<std::string>{"*.q_proj"});
  EXPECT_EQ(f32.resolved["resolved_precision"]["lora_dtype"].as<std::string>(), "float32");
}

// ---- (c) optimizers ---------------------------------------------------------------------------

struct OptimizerName {
  const char* target;
  OptimizerKind kind;
};

class OptimizerTargets : public ::testing::TestWithParam<OptimizerName> {};

TEST_P(OptimizerTargets, ResolveToComponentWithItsDefaults) {
  const OptimizerName n = GetParam();
  const Config cfg = load(std::string("optimizer:\n  _target_: ") + n.target + "\n");
  const OptimizerConfig& o = cfg.optimizer;
  EXPECT_EQ(o.kind, n.kind);
  const YAML::Node& r = cfg.resolved["optimizer"];
  EXPECT_EQ(r["_target_"].as<std::string>(), optimizer_kind_name(n.kind));
  EXPECT_DOUBLE_EQ(o.lr, 1e-3);
  EXPECT_DOUBLE_EQ(o.weight_decay, n.kind == OptimizerKind::adamw ? 1e-2 : 0.0);
  EXPECT_DOUBLE_EQ(r["weight_decay"].as<double>(), o.weight_decay);
  EXPECT_EQ(o.is_adam_family(), n.kind != OptimizerKind::sgd);
  if (o.is_adam_family()) {
    EXPECT_DOUBLE_EQ(o.beta1, 0.9);
    EXPECT_DOUBLE_EQ(o.beta2, 0.999);
    EXPECT_DOUBLE_EQ(o.eps, 1e-8);
  } else {
    EXPECT_FALSE(r["betas"].IsDefined());
    EXPECT_DOUBLE_EQ(o.momentum, 0.0);
  }
  const bool fused = n.kind == OptimizerKind::fused_adam;
  EXPECT_EQ(r["master_weights"].IsDefined(), fused);
  if (fused) {
    EXPECT_TRUE(o.adam_w_mode);
    EXPECT_TRUE(o.bias_correction);
    EXPECT_FALSE(o.master_weights);
    EXPECT_FALSE(o.store_param_remainders);
    EXPECT_EQ(o.exp_avg_dtype, DType::float32);
    EXPECT_EQ(o.exp_avg_sq_dtype, DType::float32);
    EXPECT_EQ(r["exp_avg_dtype"].as<std::string>(), "float32");
  }
}

INSTANTIATE_TEST_SUITE_P(
    LongAndShortNames, OptimizerTargets,
    ::testing::Values(OptimizerName{"torch.optim.AdamW", OptimizerKind::adamw},
                      OptimizerName{"AdamW", OptimizerKind::adamw},
                      OptimizerName{"adamw", OptimizerKind::adamw},
                      OptimizerName{"torch.optim.Adam", OptimizerKind::adam},
                      OptimizerName{"Adam", OptimizerKind::adam},
                      OptimizerName{"transformer_engine.pytorch.optimizers.fused_adam.FusedAdam",
                                    OptimizerKind::fused_adam},
                      OptimizerName{"transformer_engine.pytorch.optimizers.FusedAdam",
                                    OptimizerKind::fused_adam},
                      OptimizerName{"FusedAdam", OptimizerKind::fused_adam},
                      OptimizerName{"torch.optim.SGD", OptimizerKind::sgd},
                      OptimizerName{"SGD", OptimizerKind::sgd}),
    [](const ::testing::TestParamInfo<OptimizerName>& info) {
      std::string s = info.param.target;
      for (auto& ch : s) {
        if (ch == '.') ch = '_';
      }
      return s;
    });

TEST_F(ConfigTest, DefaultOptimizerIsTorchAdamW) {
  const Config cfg = load("");
  EXPECT_EQ(cfg.optimizer.kind, OptimizerKind::adamw);
  EXPECT_TRUE(cfg.optimizer.is_torch_adam());
  EXPECT_DOUBLE_EQ(cfg.optimizer.weight_decay, 0.01);
}

TEST_F(ConfigTest, ReferencePatternAFusedAdamBf16) {
  const Config cfg = load(R"(model:
  dtype: bfloat16
optimizer:
  _target_: transformer_engine.pytorch.optimizers.fused_adam.FusedAdam
  lr: 3.0e-4
  adam_w_mode: true
  bias_correction: true
  master_weights: true
  store_param_remainders: true
  exp_avg_dtype: torch.float32
  exp_avg_sq_dtype: torch.bfloat16
distributed:
  strategy: fsdp2
  mp_policy:
    _target_: torch.distributed.fsdp.MixedPrecisionPolicy
    param_dtype: bfloat16
    reduce_dtype: float32
    output_dtype: bfloat16
    cast_forward_inputs: true
)");
  EXPECT_EQ(cfg.optimizer.kind, OptimizerKind::fused_adam);
  EXPECT_DOUBLE_EQ(cfg.optimizer.lr, 3e-4);
  EXPECT_TRUE(cfg.optimizer.master_weights);
  EXPECT_TRUE(cfg.optimizer.store_param_remainders);
  EXPECT_EQ(cfg.optimizer.exp_avg_dtype, DType::float32);
  EXPECT_EQ(cfg.optimizer.exp_avg_sq_dtype, DType::bfloat16);
  EXPECT_EQ(cfg.precision.storage, DType::bfloat16);
  EXPECT_TRUE(log::warnings().empty()) << log::warnings().front();
  EXPECT_EQ(cfg.resolved["optimizer"]["lr"].Scalar(), "0.0003");
}

TEST_F(ConfigTest, ReferencePatternBAdamWFp32) {
  const Config cfg = load(
      "model:\n  dtype: float32\noptimizer:\n  _target_: torch.optim.AdamW\n  lr: 3.0e-4\n"
      "  betas: [0.9, 0.95]\n  weight_decay: 0.1\n");
  EXPECT_EQ(cfg.precision.storage, DType::float32);
  EXPECT_EQ(cfg.precision.compute, DType::bfloat16);
  EXPECT_DOUBLE_EQ(cfg.optimizer.beta2, 0.95);
  EXPECT_DOUBLE_EQ(cfg.optimizer.weight_decay, 0.1);
}

TEST_F(ConfigTest, StoreParamRemainderWarnings) {
  const std::string fused = "optimizer:\n  _target_: FusedAdam\n  store_param_remainders: true\n";
  load(fused);
  EXPECT_TRUE(has_warning("no effect without master_weights")) << log::warnings().size();
  test_hooks::clear_warnings();
  load(fused + "  master_weights: true\nmodel:\n  dtype: float32\n");
  EXPECT_TRUE(has_warning("storage dtype is float32"));
  EXPECT_FALSE(has_warning("without master_weights"));
  test_hooks::clear_warnings();
  load(fused + "  master_weights: true\nmodel:\n  dtype: bfloat16\n");
  EXPECT_FALSE(has_warning("store_param_remainders"));
}

TEST_F(ConfigTest, StochasticRoundingWarnings) {
  load("optimizer:\n  stochastic_rounding: true\nmodel:\n  dtype: float32\n");
  EXPECT_TRUE(has_warning("stochastic_rounding has no effect"));
  test_hooks::clear_warnings();
  load("optimizer:\n  _target_: FusedAdam\n  master_weights: true\n  stochastic_rounding: true\n");
  EXPECT_TRUE(has_warning("stochastic_rounding has no effect"));
  test_hooks::clear_warnings();
  const Config cfg = load("optimizer:\n  stochastic_rounding: true\n");
  EXPECT_TRUE(cfg.optimizer.stochastic_rounding);
  EXPECT_FALSE(has_warning("stochastic_rounding"));
}

TEST_F(ConfigTest, SgdOptions) {
  const Config cfg = load("optimizer:\n  _target_: SGD\n  momentum: 0.9\n  nesterov: true\n");
  EXPECT_DOUBLE_EQ(cfg.optimizer.momentum, 0.9);
  EXPECT_TRUE(cfg.optimizer.nesterov);
}

// model.gemm and model.gemm_fp32 (were KKTRAIN_GEMM and KKTRAIN_GEMM_FP32): parsed once into
// their enums; the defaults are auto.
TEST_F(ConfigTest, GemmChoices) {
  const Config def = load("");
  EXPECT_EQ(def.model.gemm.bf16, GemmChoice::automatic);
  EXPECT_EQ(def.model.gemm.fp32, GemmFp32Choice::automatic);
  const Config w = load("model:\n  gemm: widened\n  gemm_fp32: onednn\n");
  EXPECT_EQ(w.model.gemm.bf16, GemmChoice::widened);
  EXPECT_EQ(w.model.gemm.fp32, GemmFp32Choice::onednn);
  EXPECT_EQ(load("", {"model.gemm_fp32=kokkos-kernels"}).model.gemm.fp32,
            GemmFp32Choice::kokkos_kernels);
  EXPECT_EQ(load("", {"model.gemm=auto", "model.gemm_fp32=auto"}).model.gemm.bf16,
            GemmChoice::automatic);
}

// ---- (e) overrides --------------------------------------------------------------------------

TEST_F(ConfigTest, OverridesParseValuesAsYaml) {
  const Config cfg = load("model:\n  hidden_size: 128\n  dtype: float32\n  torch_dtype: bfloat16\n",
                          {"model.hidden_size=64", "optimizer.betas=[0.8, 0.9]",
                           "freeze_config.freeze_modules=[{glob: \"*\"}]", "model.dtype=null",
                           "freeze_config.unfreeze_parameters=[model.norm.weight]"});
  EXPECT_EQ(cfg.model.hidden_size, 64);
  EXPECT_DOUBLE_EQ(cfg.optimizer.beta1, 0.8);
  EXPECT_DOUBLE_EQ(cfg.optimizer.beta2, 0.9);
  EXPECT_EQ(cfg.freeze.freeze_modules, std::vector<std::string>{"*"});
  EXPECT_EQ(cfg.freeze.unfreeze_parameters, std::vector<std::string>{"model.norm.weight"});
  // dtype: null falls back to torch_dtype.
  EXPECT_EQ(cfg.precision.storage, DType::bfloat16);
  EXPECT_TRUE(contains(cfg.precision.storage_source, "model.torch_dtype"));
}

TEST_F(ConfigTest, OverridesCreateSectionsAndLaterOnesWin) {
  const Config cfg =
      load("", {"lr_scheduler.min_lr=0.0001", "distributed.mp_policy.param_dtype=fp32",
                "model.hidden_size=256", "model.hidden_size=64", "data.path=corpus=v2.txt"});
  EXPECT_DOUBLE_EQ(cfg.lr_scheduler.min_lr, 1e-4);
  EXPECT_EQ(cfg.precision.compute, DType::float32);
  EXPECT_EQ(cfg.model.hidden_size, 64);
  EXPECT_EQ(cfg.data.paths,
            std::vector<std::string>{"corpus=v2.txt"});  // only the first '=' splits
  // A null section in the file becomes a mapping; a whole section can be replaced.
  EXPECT_EQ(load("model:\n", {"model.num_layers=2"}).model.num_layers, 2);
  const Config whole = load("model:\n  num_layers: 7\n", {"model={hidden_size: 32}"});
  EXPECT_EQ(whole.model.hidden_size, 32);
  EXPECT_EQ(whole.model.num_layers, 4);  // back to the default
  // An empty VALUE is null.
  EXPECT_EQ(load("model:\n  dtype: float32\n", {"model.dtype="}).precision.storage,
            DType::bfloat16);
}

// ---- (f) round trip ---------------------------------------------------------------------------

class RoundTrip : public ::testing::TestWithParam<const char*> {};

TEST_P(RoundTrip, PrintedConfigReadsBackToTheSameConfig) {
  test_hooks::clear_warnings();
  LoadOptions opts;
  opts.checkpoint_dtype = [](const std::string&) { return DType::float32; };
  const std::string first = to_yaml(load(GetParam(), {}, opts));
  const Config again = load(first, {}, opts);
  const std::string second = to_yaml(again);
  // Identical except where the storage dtype came from (now an explicit model.dtype).
  EXPECT_EQ(testing_util::without_storage_source(first),
            testing_util::without_storage_source(second));
  EXPECT_TRUE(contains(again.precision.storage_source, "model.dtype")) << second;
  // From then on printing is a fixed point.
  EXPECT_EQ(to_yaml(load(second, {}, opts)), second);
  // Canonical dtype spellings only.
  for (const char* alias : {": fp32", ": bf16", ": torch.float32", ": torch.bfloat16", ": half"}) {
    EXPECT_FALSE(contains(first, alias)) << alias << " in\n" << first;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Configs, RoundTrip,
    ::testing::Values(
        "", "model:\n  dtype: fp32\noptimizer:\n  lr: 3e-4\n  betas: [0.9, 0.95]\n",
        "model:\n  torch_dtype: torch.bfloat16\n  rms_norm_eps: 1e-6\n  keep_in_fp32: ['*norm*']\n",
        "model:\n  init_from: ckpt.h5\n  dtype: auto\n",
        "optimizer:\n  _target_: FusedAdam\n  master_weights: true\n"
        "  store_param_remainders: true\n  exp_avg_dtype: torch.bfloat16\n",
        "optimizer:\n  _target_: torch.optim.SGD\n  momentum: 0.9\n  weight_decay: 1e-4\n",
        "peft:\n  target_modules: [{glob: '*.q_proj'}]\n  lora_dtype: bf16\n  alpha: 16\n"
        "freeze_config:\n  freeze_modules: [{glob: '*'}]\n  unfreeze_parameters: [a.weight]\n",
        "distributed:\n  mp_policy:\n    param_dtype: null\n    reduce_dtype: bf16\n"
        "  autocast_dtype: torch.float32\nlr_scheduler:\n  lr_decay_style: cosine\n"
        "  lr_decay_steps: 100\n  min_lr: 1e-5\ncheckpoint:\n  export_dtype: float32\n"
        "data:\n  path: corpus.txt\n  seq_len: 64\n  micro_batch_size: 2\n"
        "  global_batch_size: 8\n"));

TEST_F(ConfigTest, RoundTripIsExactWithExplicitDtype) {
  const std::string first = to_yaml(load("model:\n  dtype: bfloat16\n  hidden_size: 96\n"));
  EXPECT_EQ(to_yaml(load(first)), first);
  EXPECT_TRUE(contains(first, "hidden_size: 96\n"));
  EXPECT_TRUE(contains(first, "storage_dtype_source: \"model.dtype: bfloat16\"\n")) << first;
}

TEST_F(ConfigTest, DifferencesNameEachChangedKeyInTheNewOrder) {
  const std::string a = to_yaml(load("train:\n  max_steps: 300\n"));
  EXPECT_TRUE(config_differences(a, a, {}).empty());
  const std::string b =
      to_yaml(load("train:\n  max_steps: 80\noptimizer:\n  betas: [0.9, 0.95]\n"
                   "peft:\n  target_modules: [q_proj]\ncheckpoint:\n  resume: none\n"));
  const auto d = config_differences(a, b, {"checkpoint.resume", "resolved_precision"});
  // peft's seven keys appear (to_yaml writes peft before optimizer), then the two changed values;
  // the null peft goes last; checkpoint.resume is ignored.
  ASSERT_EQ(d.size(), 10u) << ::testing::PrintToString(d);
  EXPECT_EQ(d[1], "peft.target_modules: (absent) -> [q_proj]");
  EXPECT_EQ(d[6], "peft.init_from: (absent) -> null");
  EXPECT_EQ(d[7], "optimizer.betas: [0.9, 0.999] -> [0.9, 0.95]");
  EXPECT_EQ(d[8], "train.max_steps: 300 -> 80");
  EXPECT_EQ(d[9], "peft: null -> (absent)");
  // Ignoring a section ignores the keys under it, not keys that merely share its prefix.
  EXPECT_EQ(config_differences("a: {b: 1, bc: 2}", "a: {b: 3, bc: 4}", {"a.b"}),
            std::vector<std::string>{"a.bc: 2 -> 4"});
  EXPECT_EQ(config_differences("not: [a map", "x: 1", {}).size(), 2u);
}

}  // namespace
}  // namespace kktrain
