// Model tests that need no reference implementation:
//  - gradients against central finite differences of the model's own loss (fp32 storage and
//    compute; the loss is summed in double, so its rounding noise is ~1e-7 relative),
//  - activation checkpointing gives bitwise-identical gradients,
//  - compute_logits = false returns the same hidden states without computing logits,
//  - the LM head and loss in chunks of rows give the same loss, gradients and logits,
//  - compute_mtp = false skips the MTP head exactly (main gradients unchanged, MTP grads zero),
//  - gradients accumulate over backward calls,
//  - bad token ids are rejected with an error naming the position,
//  - the RMSNorm weight gradient sums in its documented order, bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "core/errors.hpp"
#include "model/param_io.hpp"
#include "model/transformer.hpp"
#include "ops/kernels.hpp"
#include "tests/unit/dtype_types.hpp"
#include "tests/unit/model_test_util.hpp"

namespace kktrain {
namespace {

ModelConfig tiny_model() {
  ModelConfig m;
  m.vocab_size = 23;  // not a multiple of 8
  m.hidden_size = 16;
  m.num_layers = 2;
  m.num_heads = 4;
  m.num_kv_heads = 2;  // grouped-query attention
  m.intermediate_size = 24;
  m.max_seq_len = 16;
  m.tie_word_embeddings = false;
  m.init_std = 0.3;  // large weights -> large gradients, well above the finite-difference noise
  m.seed = 7;
  return m;
}

using testing_util::precision;

struct Tokens {
  int64_t B = 2, T = 7;  // odd sequence length
  std::vector<int32_t> ids, targets;
};

Tokens random_tokens(int64_t V, uint32_t seed, int64_t B = 2, int64_t T = 7) {
  Tokens t;
  t.B = B;
  t.T = T;
  std::mt19937 rng(seed);
  std::vector<int32_t> stream(B * (T + 1));
  for (auto& x : stream) x = static_cast<int32_t>(rng() % V);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < T; ++i) {
      t.ids.push_back(stream[b * (T + 1) + i]);
      t.targets.push_back(stream[b * (T + 1) + i + 1]);
    }
  }
  return t;
}

double loss_of(Transformer& m, const Tokens& t) {
  ForwardOptions fo;
  const ForwardResult r = m.forward(t.ids.data(), t.targets.data(), t.B, t.T, fo);
  return r.loss + m.config().mtp_loss_weight * r.mtp_loss;
}

std::vector<std::vector<float>> all_grads(const Transformer& m) {
  std::vector<std::vector<float>> g;
  for (int i = 0; i < m.params().size(); ++i) {
    // Frozen parameters have no gradient buffer: an empty vector stands for them.
    const bool has = m.params().info(i).has_grad;
    g.push_back(has ? param_to_host(m.params(), i, ParamPart::grad) : std::vector<float>());
  }
  return g;
}

std::vector<std::vector<float>> run_grads(Transformer& m, const Tokens& t, ForwardOptions fo = {}) {
  m.params().zero_grads();
  fo.prepare_backward = true;
  m.forward(t.ids.data(), t.targets.data(), t.B, t.T, fo);
  m.backward();
  return all_grads(m);
}

void expect_fd_matches(ModelConfig cfg, const PeftConfig& peft = PeftConfig()) {
  Transformer m(cfg, precision(DType::float32, DType::float32), Allocation::one_rank_now, peft);
  m.init_weights();
  // LoRA B starts at zero, which would leave A with no gradient: give B values.
  std::mt19937 init_rng(5);
  std::normal_distribution<float> bdist(0.0f, 0.3f);
  for (int i = 0; i < m.params().size(); ++i) {
    if (m.params().info(i).role != ParamRole::lora_b) continue;
    std::vector<float> v(m.params().info(i).numel);
    for (auto& x : v) x = bdist(init_rng);
    param_from_host(m.params(), i, v);
  }
  const Tokens t = random_tokens(cfg.vocab_size, 3);
  const auto grads = run_grads(m, t);
  std::mt19937 rng(11);
  const float h = 2.5e-3f;
  double worst = 0.0;
  for (int i = 0; i < m.params().size(); ++i) {
    const ParamInfo& p = m.params().info(i);
    if (!p.trainable) continue;  // frozen parameters get no gradient
    std::vector<float> w = param_to_host(m.params(), i);
    double gmax = 0.0;
    for (float g : grads[i]) gmax = std::max(gmax, std::fabs(static_cast<double>(g)));
    for (int s = 0; s < 6; ++s) {
      const std::size_t e = rng() % w.size();
      const float orig = w[e];
      w[e] = orig + h;
      param_from_host(m.params(), i, w);
      const double lp = loss_of(m, t);
      w[e] = orig - h;
      param_from_host(m.params(), i, w);
      const double lm = loss_of(m, t);
      w[e] = orig;
      param_from_host(m.params(), i, w);
      const double fd = (lp - lm) / (2.0 * h);
      // Central differences err by O(h^2 f''') (measured worst 8e-4 of the tensor's largest
      // gradient, with LoRA adapters; 1.2e-2 at h = 1e-2, shrinking as h^2: truncation) plus
      // loss rounding / h ~ 1e-4. Each element is judged against the tensor's largest gradient
      // so that tiny entries do not dominate.
      const double err = std::fabs(fd - grads[i][e]) / std::max(gmax, 1e-3);
      worst = std::max(worst, err);
      EXPECT_LT(err, 5e-3) << p.name << "[" << e << "]: backward " << grads[i][e] << ", fd " << fd;
    }
  }
  ::testing::Test::RecordProperty("worst_relative_error", std::to_string(worst));
  std::printf("worst finite-difference error (relative to the tensor max): %.3g\n", worst);
}

TEST(ModelGradients, FiniteDifferencesUntiedGqa) {
  expect_fd_matches(tiny_model());
}

TEST(ModelGradients, FiniteDifferencesTiedMha) {
  ModelConfig cfg = tiny_model();
  cfg.tie_word_embeddings = true;
  cfg.num_kv_heads = cfg.num_heads;
  expect_fd_matches(cfg);
}

TEST(ModelGradients, FiniteDifferencesWithMtpHead) {
  ModelConfig cfg = tiny_model();
  cfg.mtp_num_layers = 2;
  cfg.num_layers = 1;
  expect_fd_matches(cfg);
}

TEST(ModelGradients, FiniteDifferencesWithLoraAdapters) {
  ModelConfig cfg = tiny_model();
  cfg.mtp_num_layers = 1;
  PeftConfig peft;
  peft.enabled = true;
  peft.target_modules = {"q_proj", "*.v_proj", "*.o_proj", "*mlp*"};  // every projection but k
  peft.dim = 3;
  peft.alpha = 6.0;
  expect_fd_matches(cfg, peft);
}

TEST(ModelLora, AdaptersHaveTheirDtypeAndTheBaseIsFrozen) {
  ModelConfig cfg = tiny_model();
  PeftConfig peft;
  peft.enabled = true;
  peft.target_modules = {"*.q_proj", "*.down_proj"};
  peft.dim = 4;
  for (const std::optional<DType> lora :
       {std::optional<DType>(), std::optional<DType>(DType::float32)}) {
    peft.lora_dtype = lora;
    Transformer m(cfg, precision(DType::bfloat16, DType::bfloat16), Allocation::after_prepare,
                  peft);
    int adapters = 0;
    for (const auto& p : m.params().all()) {
      const bool adapter = p.role == ParamRole::lora_a || p.role == ParamRole::lora_b;
      EXPECT_EQ(p.trainable, adapter) << p.name;
      if (!adapter) continue;
      ++adapters;
      EXPECT_EQ(p.dtype, lora.value_or(DType::bfloat16)) << p.name;  // null inherits the base
      const bool is_a = p.role == ParamRole::lora_a;
      EXPECT_EQ(p.shape[is_a ? 0 : 1], 4) << p.name;
    }
    EXPECT_EQ(adapters, 2 * 2 * static_cast<int>(cfg.num_layers));
    EXPECT_GE(m.params().find("model.layers.1.mlp.down_proj.lora_B.weight"), 0);
  }
  peft.target_modules = {"*.nothing"};
  EXPECT_THROW(
      Transformer(cfg, precision(DType::float32, DType::float32), Allocation::after_prepare, peft),
      ConfigError);
}

TEST(ModelLora, ZeroInitialisedBLeavesTheModelUnchanged) {
  ModelConfig cfg = tiny_model();
  PeftConfig peft;
  peft.enabled = true;
  peft.target_modules = {"*proj"};
  Transformer base(cfg, precision(DType::float32, DType::float32));
  Transformer lora(cfg, precision(DType::float32, DType::float32), Allocation::one_rank_now, peft);
  base.init_weights();
  lora.init_weights();
  const Tokens t = random_tokens(cfg.vocab_size, 21);
  const double a = loss_of(base, t), b = loss_of(lora, t);
  EXPECT_EQ(a, b);  // B = 0: the adapter adds exactly zero
}

void expect_bitwise_equal(const std::vector<std::vector<float>>& a,
                          const std::vector<std::vector<float>>& b, const Transformer& m) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].size(), b[i].size());
    EXPECT_EQ(0, std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)))
        << m.params().info(static_cast<int>(i)).name;
  }
}

class Checkpointing : public ::testing::TestWithParam<DType> {};

TEST_P(Checkpointing, GradientsAreBitwiseIdentical) {
  ModelConfig cfg = tiny_model();
  cfg.num_layers = 3;
  cfg.mtp_num_layers = 1;
  const ResolvedPrecision p = precision(DType::bfloat16, GetParam());
  Transformer plain(cfg, p);
  plain.init_weights();
  cfg.activation_checkpointing = true;
  Transformer ckpt(cfg, p);
  ckpt.init_weights();
  const Tokens t = random_tokens(cfg.vocab_size, 5);
  const auto g1 = run_grads(plain, t);
  const auto g2 = run_grads(ckpt, t);
  expect_bitwise_equal(g1, g2, plain);
  // And the gradients are not trivially zero.
  double norm = 0.0;
  for (const auto& g : g1) {
    for (float x : g) norm += static_cast<double>(x) * x;
  }
  EXPECT_GT(norm, 1e-6);
}

INSTANTIATE_TEST_SUITE_P(ComputeDtypes, Checkpointing,
                         ::testing::Values(DType::float32, DType::bfloat16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

std::vector<float> to_host(const DView<float>& v) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  return std::vector<float>(h.data(), h.data() + h.extent(0));
}

TEST(ModelForward, HiddenStatesWithoutLogitsMatchFullForward) {
  ModelConfig cfg = tiny_model();
  Transformer m(cfg, precision(DType::float32, DType::bfloat16));
  m.init_weights();
  const Tokens t = random_tokens(cfg.vocab_size, 9);
  ForwardOptions hidden_only;
  hidden_only.compute_logits = false;
  hidden_only.output_hidden_states = true;
  const ForwardResult r0 = m.forward(t.ids.data(), t.targets.data(), t.B, t.T, hidden_only);
  EXPECT_EQ(r0.loss, 0.0);
  EXPECT_EQ(m.logits().extent(0), 0u) << "logits reported although none were computed";
  const auto h0 = to_host(m.hidden_states());

  ForwardOptions full;
  full.output_hidden_states = true;
  const ForwardResult r1 = m.forward(t.ids.data(), t.targets.data(), t.B, t.T, full);
  EXPECT_GT(r1.loss, 0.0);
  const auto h1 = to_host(m.hidden_states());
  ASSERT_EQ(h0.size(), h1.size());
  EXPECT_EQ(0, std::memcmp(h0.data(), h1.data(), h0.size() * sizeof(float)));
  double norm = 0.0;
  for (float x : h0) norm += std::fabs(x);
  EXPECT_GT(norm, 0.0);
}

TEST(ModelForward, ComputeMtpFalseSkipsTheHeadExactly) {
  ModelConfig with = tiny_model();
  with.mtp_num_layers = 2;
  ModelConfig without = tiny_model();
  const ResolvedPrecision p = precision(DType::float32, DType::float32);
  Transformer a(with, p), b(without, p);
  a.init_weights();  // init is keyed by parameter name: shared parameters start identical
  b.init_weights();
  const Tokens t = random_tokens(with.vocab_size, 13);
  ForwardOptions skip;
  skip.compute_mtp = false;
  const auto ga = run_grads(a, t, skip);
  const auto gb = run_grads(b, t);
  for (int i = 0; i < a.params().size(); ++i) {
    const std::string& name = a.params().info(i).name;
    const int j = b.params().find(name);
    if (j < 0) {
      ASSERT_EQ(name.rfind("mtp.", 0), 0u) << name;
      for (float x : ga[i]) ASSERT_EQ(x, 0.0f) << name << " has a gradient with compute_mtp off";
    } else {
      EXPECT_EQ(0, std::memcmp(ga[i].data(), gb[j].data(), ga[i].size() * sizeof(float))) << name;
    }
  }
  // With the head on, the MTP parameters do get gradients and the loss reports the MTP part.
  ForwardOptions on;
  on.prepare_backward = true;
  a.params().zero_grads();
  const ForwardResult r = a.forward(t.ids.data(), t.targets.data(), t.B, t.T, on);
  a.backward();
  EXPECT_GT(r.mtp_loss, 0.0);
  const int eh = a.params().find("mtp.layers.1.eh_proj.weight");
  ASSERT_GE(eh, 0);
  double n = 0.0;
  for (float x : param_to_host(a.params(), eh, ParamPart::grad)) n += std::fabs(x);
  EXPECT_GT(n, 0.0);
}

// The LM head and loss run in chunks of model.loss_chunk_tokens rows. Chunks of 3 rows (N = 14:
// four full chunks and a partial one, main and MTP heads) against one chunk: the same loss and
// gradients up to the order of fp32 sums (the head's weight gradient adds the chunks' products
// one after another), and the kept logits are the ones the loss was computed from.
// Typed over the compute dtype (float, bf16), fp32 storage.
template <class TC>
class ModelCompute : public ::testing::Test {};
TYPED_TEST_SUITE(ModelCompute, testing_util::Dtypes);

TYPED_TEST(ModelCompute, LossChunksGiveTheSameLossGradientsAndLogits) {
  const DType compute = dtype_of<TypeParam>::value;
  ModelConfig one = tiny_model(), chunked = tiny_model();
  one.mtp_num_layers = chunked.mtp_num_layers = 1;
  chunked.loss_chunk_tokens = 3;
  const ResolvedPrecision p = precision(DType::float32, compute);
  Transformer a(one, p), b(chunked, p);
  a.init_weights();
  b.init_weights();
  const Tokens t = random_tokens(one.vocab_size, 19);
  ForwardOptions keep;
  keep.keep_logits = true;
  const ForwardResult ra = a.forward(t.ids.data(), t.targets.data(), t.B, t.T, keep);
  const ForwardResult rb = b.forward(t.ids.data(), t.targets.data(), t.B, t.T, keep);
  EXPECT_NEAR(ra.loss, rb.loss, 1e-6 * ra.loss) << dtype_name(compute);
  EXPECT_NEAR(ra.mtp_loss, rb.mtp_loss, 1e-6 * ra.mtp_loss) << dtype_name(compute);
  // The loss from the kept logits (host, double): mean of logsumexp - logit[target].
  const auto logits = to_host(b.logits());
  const int64_t V = one.vocab_size;
  ASSERT_EQ(static_cast<int64_t>(logits.size()), t.B * t.T * V);
  double sum = 0.0;
  for (int64_t n = 0; n < t.B * t.T; ++n) {
    double mx = -1e300, z = 0.0;
    for (int64_t v = 0; v < V; ++v) mx = std::max(mx, double(logits[n * V + v]));
    for (int64_t v = 0; v < V; ++v) z += std::exp(logits[n * V + v] - mx);
    sum += mx + std::log(z) - logits[n * V + t.targets[n]];
  }
  EXPECT_NEAR(sum / (t.B * t.T), rb.loss, 1e-5 * rb.loss) << dtype_name(compute);
  const auto ga = run_grads(a, t), gb = run_grads(b, t);
  for (std::size_t i = 0; i < ga.size(); ++i) {
    double num = 0.0, den = 0.0;
    for (std::size_t e = 0; e < ga[i].size(); ++e) {
      num = std::max(num, std::fabs(double(ga[i][e]) - gb[i][e]));
      den = std::max(den, std::fabs(double(ga[i][e])));
    }
    // fp32: summation order only, the head's weight gradient's order carried back through two
    // layers (measured up to 1.1e-6 of the tensor's largest value, the first layer's norm weight,
    // whose sum over the rows cancels; 4e-6 is 32 fp32 ulps); bf16 compute: a sum that lands on
    // the other side of a bf16 rounding boundary moves by one bf16 ulp (2^-8 relative).
    const double tol = compute == DType::float32 ? 4e-6 : std::ldexp(1.0, -7);
    EXPECT_LE(num, tol * den) << a.params().info(static_cast<int>(i)).name << " "
                              << dtype_name(compute);
  }
}

TEST(ModelGradients, BackwardAccumulates) {
  ModelConfig cfg = tiny_model();
  Transformer m(cfg, precision(DType::float32, DType::float32));
  m.init_weights();
  const Tokens t = random_tokens(cfg.vocab_size, 17);
  const auto once = run_grads(m, t);
  ForwardOptions fo;
  fo.prepare_backward = true;
  m.forward(t.ids.data(), t.targets.data(), t.B, t.T, fo);
  m.backward();  // on top of the first: twice the gradient, exactly (x + x is exact)
  const auto twice = all_grads(m);
  for (std::size_t i = 0; i < once.size(); ++i) {
    for (std::size_t e = 0; e < once[i].size(); ++e) ASSERT_EQ(twice[i][e], 2.0f * once[i][e]);
  }
}

TEST(ModelGradients, TiedEmbeddingHasOneStorageTwoNames) {
  ModelConfig cfg = tiny_model();
  cfg.tie_word_embeddings = true;
  Transformer m(cfg, precision(DType::float32, DType::float32));
  EXPECT_EQ(m.params().find("lm_head.weight"), m.params().find("model.embed_tokens.weight"));
  ModelConfig untied = tiny_model();
  Transformer u(untied, precision(DType::float32, DType::float32));
  EXPECT_NE(u.params().find("lm_head.weight"), u.params().find("model.embed_tokens.weight"));
}

TEST(ModelPrecision, StorageDtypesFollowThePolicyAndKeepInFp32) {
  ModelConfig cfg = tiny_model();
  cfg.keep_in_fp32 = {"*norm*"};
  Transformer m(cfg, precision(DType::bfloat16, DType::bfloat16));
  for (const auto& p : m.params().all()) {
    const bool norm = p.name.find("norm") != std::string::npos;
    EXPECT_EQ(p.dtype, norm ? DType::float32 : DType::bfloat16) << p.name;
    EXPECT_EQ(p.keep_fp32, norm) << p.name;
  }
  m.init_weights();
  // bf16 storage holds bf16 values: every stored weight round-trips through bf16 unchanged.
  const int q = m.params().find("model.layers.0.self_attn.q_proj.weight");
  for (float x : param_to_host(m.params(), q)) ASSERT_EQ(x, round_to_bf16(x));
}

TEST(ModelInput, OutOfVocabularyTokenIsAnInputError) {
  ModelConfig cfg = tiny_model();
  Transformer m(cfg, precision(DType::float32, DType::float32));
  m.init_weights();
  Tokens t = random_tokens(cfg.vocab_size, 1);
  t.ids[5] = static_cast<int32_t>(cfg.vocab_size);
  try {
    m.forward(t.ids.data(), t.targets.data(), t.B, t.T, ForwardOptions{});
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("position 5"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kktrain

namespace kktrain {
namespace {

// The memory prediction (docs/memory.md) reads the unit buffers from FsdpUnits::plan without
// allocating: after a forward + backward the allocated unit buffers are exactly that many bytes
// (one rank: the compute-weight slots), for every storage / compute pair: typed over
// DtypePair<storage, compute>.
template <class Storage_Compute>
class ModelMemory : public ::testing::Test {};
TYPED_TEST_SUITE(ModelMemory, testing_util::DtypePairs);

TYPED_TEST(ModelMemory, UnitBufferPlanMatchesAllocatedBuffers) {
  const DType storage = TypeParam::first_dtype, compute = TypeParam::second_dtype;
  const ResolvedPrecision prec = precision(storage, compute);
  Transformer planned(tiny_model(), prec, Allocation::after_prepare);
  planned.plan_layout(0, 1);
  int64_t predicted = 0;
  for (const BufferSpec& s : planned.unit_buffer_plan(UnitPlanOptions{true, false})) {
    if (s.group != "model") predicted += s.bytes * s.copies;
  }
  Transformer m(tiny_model(), prec);
  m.init_weights();
  run_grads(m, random_tokens(23, 5));
  EXPECT_EQ(m.units().buffer_bytes(), predicted)
      << dtype_name(storage) << " storage, " << dtype_name(compute) << " compute";
  if (storage == DType::float32 && compute == DType::float32) {
    EXPECT_EQ(predicted, 0);
  }
}

// ---- kernels -----------------------------------------------------------------------------------

// The RMSNorm weight gradient is summed in a fixed, documented order on every backend: rows in
// order within chunks of kRmsnormRowsPerPartial, then the chunk sums in order. A host loop in that
// order must give the same bits (N = 200: three full chunks and a partial one), for both stream
// dtypes; and the sums must be the right ones (double reference, fp32 summation noise). Typed
// over the stream's dtype (float, bf16), as its Rounding.
template <class TS>
class ModelKernelsStream : public ::testing::Test {};
TYPED_TEST_SUITE(ModelKernelsStream, testing_util::Dtypes);

TYPED_TEST(ModelKernelsStream, RmsnormWeightGradientSumsInItsDocumentedOrder) {
  const int64_t N = 200, C = 37;
  std::mt19937 rng(17);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> dout(N * C), inp(N * C), weight(C), rstd(N);
  for (auto& x : dout) x = dist(rng);
  for (auto& x : inp) x = dist(rng);
  for (auto& x : weight) x = dist(rng);
  for (auto& x : rstd) x = 0.5f + std::fabs(dist(rng));
  auto dev = [](const std::vector<float>& h) {
    DView<float> d("buf", h.size());
    Kokkos::deep_copy(d, HViewU<const float>(h.data(), h.size()));
    return d;
  };
  const DView<float> d_dout = dev(dout), d_inp = dev(inp), d_weight = dev(weight),
                     d_rstd = dev(rstd);
  constexpr Rounding rs = rounding_of<TypeParam>();
  DView<float> dinp("dinp", N * C), dweight("dweight", C);
  DView<float> partial("partial", rmsnorm_partial_size(N, C));
  rmsnorm_backward(ExecSpace(), dinp.data(), dweight.data(), partial.data(), d_dout.data(),
                   d_inp.data(), d_weight.data(), d_rstd.data(), N, C, rs);
  std::vector<float> got(C);
  Kokkos::deep_copy(HViewU<float>(got.data(), got.size()), dweight);
  const int64_t R = kRmsnormRowsPerPartial;
  for (int64_t c = 0; c < C; ++c) {
    float total = 0.0f;
    double exact = 0.0;
    for (int64_t p = 0; p * R < N; ++p) {
      float chunk = 0.0f;
      for (int64_t n = p * R; n < std::min(N, (p + 1) * R); ++n) {
        const float xhat = inp[n * C + c] * rstd[n];
        const float term = dout[n * C + c] * (rs == Rounding::bf16 ? round_to_bf16(xhat) : xhat);
        chunk += term;
        exact += static_cast<double>(term);
      }
      total += chunk;
    }
    EXPECT_EQ(got[c], total) << "channel " << c << " bf16 stream " << (rs == Rounding::bf16);
    EXPECT_NEAR(got[c], exact, 1e-5 * (1.0 + std::fabs(exact))) << "channel " << c;
  }
}

}  // namespace
}  // namespace kktrain
