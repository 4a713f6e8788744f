// model.gemm reaches every matrix product of the model (ctest gemm.model_options; it replaced
// gemm.env_reference, which set KKTRAIN_GEMM=reference in the environment): a bf16 forward and
// backward under ModelConfig::gemm widened runs no product on the native bf16 backend, where the
// build and CPU have one (every bf16 x bf16 product takes the converted path, the attention's
// tile products and the sparse MLP's grouped ones included), and its loss and gradients agree with
// the native run's within bf16 tolerance. Dense layers with an MTP head, and a sparse MLP (shared
// expert, grouped expert products).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "model/dense_block.hpp"
#include "model/param_io.hpp"
#include "model/transformer.hpp"
#include "ops/gemm.hpp"
#include "tests/unit/model_test_util.hpp"

namespace kktrain {
namespace {

ModelConfig tiny_dense() {
  ModelConfig m = testing_util::tiny_model_config();
  m.mtp_num_layers = 1;
  return m;
}

ModelConfig tiny_moe() {
  ModelConfig m = tiny_dense();
  m.mtp_num_layers = 0;
  m.moe.num_experts = 5;
  m.moe.top_k = 2;
  m.moe.intermediate_size = 12;
  m.moe.shared_expert_intermediate_size = 8;
  return m;
}

struct GemmRun {
  double loss = 0.0;
  std::vector<std::vector<float>> grads;
  GemmCounters before, after;
  int64_t calls(GemmBackend b) const {
    const int i = static_cast<int>(b);
    return after.calls[i] - before.calls[i];
  }
};

// One bf16 forward and backward of B = 2 rows of T = 9 tokens under `choice`.
GemmRun run(ModelConfig cfg, GemmChoice choice) {
  cfg.gemm.bf16 = choice;
  Transformer m(cfg, testing_util::precision(DType::bfloat16, DType::bfloat16));
  m.init_weights();
  std::mt19937 rng(11);
  const int64_t B = 2, T = 9;
  std::vector<int32_t> ids, targets;
  for (int64_t i = 0; i < B * T; ++i) {
    ids.push_back(static_cast<int32_t>(rng() % cfg.vocab_size));
    targets.push_back(static_cast<int32_t>(rng() % cfg.vocab_size));
  }
  GemmRun out;
  m.zero_grads();
  ForwardOptions fo;
  fo.prepare_backward = true;
  out.before = gemm_counters();
  out.loss = m.forward(ids.data(), targets.data(), B, T, fo).loss;
  m.backward();
  Kokkos::fence();
  out.after = gemm_counters();
  for (int i = 0; i < m.params().size(); ++i) {
    if (m.params().info(i).has_grad) {
      out.grads.push_back(param_to_host(m.params(), i, ParamPart::grad));
    }
  }
  return out;
}

class ModelGemm : public ::testing::TestWithParam<const char*> {
 protected:
  ModelConfig config() const {
    return std::string(GetParam()) == "moe" ? tiny_moe() : tiny_dense();
  }
};

TEST_P(ModelGemm, WidenedReachesEveryProduct) {
  const ModelConfig cfg = config();
  EXPECT_EQ(gemm_options(cfg).bf16, Bf16Products::native);  // model.gemm: auto
  const GemmRun native = run(cfg, GemmChoice::automatic), wide = run(cfg, GemmChoice::widened);
  const GemmBackend nb =
      gemm_backend_for(GemmOptions{}, DType::bfloat16, DType::bfloat16, DType::float32);
  std::printf(
      "bf16 backend %s: native run %lld calls there, %lld converted; widened run %lld "
      "converted\n",
      gemm_backend_name(nb), static_cast<long long>(native.calls(nb)),
      static_cast<long long>(native.calls(GemmBackend::converted)),
      static_cast<long long>(wide.calls(GemmBackend::converted)));
  EXPECT_GT(wide.calls(GemmBackend::converted), 0);
  if (nb == GemmBackend::onednn) {
    // Every bf16 product of the native run is on oneDNN, none of the widened run's. (On CUDA and
    // HIP builds fp32 batches run on the vendor library under either choice: not counted here.)
    EXPECT_GT(native.calls(nb), 0);
    EXPECT_EQ(wide.calls(nb), 0);
    EXPECT_GT(wide.calls(GemmBackend::converted), native.calls(GemmBackend::converted));
  }
  // The same math up to the order of fp32 sums, each product's result rounded to bf16 once: the
  // runs may differ by bf16 roundings that went the other way (measured: bitwise equal at these
  // sizes with oneDNN's avx512_core_bf16 kernels; the bounds leave room for other sum orders).
  EXPECT_NEAR(wide.loss, native.loss, 1e-2 * native.loss);
  ASSERT_EQ(wide.grads.size(), native.grads.size());
  double worst = 0.0;
  for (std::size_t i = 0; i < native.grads.size(); ++i) {
    double num = 0.0, den = 0.0;
    for (std::size_t e = 0; e < native.grads[i].size(); ++e) {
      num = std::max(num, std::fabs(double(wide.grads[i][e]) - native.grads[i][e]));
      den = std::max(den, std::fabs(double(native.grads[i][e])));
    }
    worst = std::max(worst, num / std::max(den, 1e-30));
  }
  std::printf("loss native %.9g widened %.9g; gradients worst relative %.3g\n", native.loss,
              wide.loss, worst);
  EXPECT_LT(worst, 0.1);
}

INSTANTIATE_TEST_SUITE_P(Models, ModelGemm, ::testing::Values("dense_mtp", "moe"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

}  // namespace
}  // namespace kktrain
