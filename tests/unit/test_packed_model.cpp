// Packed rows in the model (ForwardOptions::row_starts, loss_tokens), fp32 storage and compute:
//  - one row packing 3 examples and trailing padding gives each example's logits (so its
//    per-token losses), the same loss sum and the same gradients as running every example alone
//    as its own B = 1 sequence, on both attention kernels with tiles that the examples straddle;
//  - the same with activation checkpointing gives the bits of the run without it;
//  - loss_tokens: two micro-batches each normalized by the pair's token count accumulate the
//    gradients (and losses) of one micro-batch holding both rows;
//  - bad starts are an InputError, starts with an MTP head computing an InternalError.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "model/param_io.hpp"
#include "model/transformer.hpp"
#include "tests/unit/model_test_util.hpp"

namespace kktrain {
namespace {

ModelConfig tiny_model() {
  ModelConfig m = testing_util::tiny_model_config();
  m.tie_word_embeddings = false;
  return m;
}

// One example: ids and targets (-1: not a loss token).
struct Example {
  std::vector<int32_t> ids, targets;
};

// Examples of 5, 6 and 3 tokens (the first target of the second one not counted, as a prompt's).
std::vector<Example> examples(int64_t V) {
  std::mt19937 rng(17);
  std::vector<Example> ex;
  for (int len : {5, 6, 3}) {
    Example e;
    for (int i = 0; i < len; ++i) {
      e.ids.push_back(static_cast<int32_t>(rng() % V));
      e.targets.push_back(static_cast<int32_t>(rng() % V));
    }
    ex.push_back(e);
  }
  ex[1].targets[0] = -1;
  return ex;
}

// A row of T tokens: the examples back to back, then padding (id 0, target -1, start at the
// padding's first position).
struct Row {
  std::vector<int32_t> ids, targets, starts;
  std::vector<int64_t> offsets;  // where each example begins
};
Row pack(const std::vector<Example>& ex, int64_t T) {
  Row r;
  for (const Example& e : ex) {
    const int32_t start = static_cast<int32_t>(r.ids.size());
    r.offsets.push_back(start);
    r.ids.insert(r.ids.end(), e.ids.begin(), e.ids.end());
    r.targets.insert(r.targets.end(), e.targets.begin(), e.targets.end());
    r.starts.insert(r.starts.end(), e.ids.size(), start);
  }
  const int32_t pad = static_cast<int32_t>(r.ids.size());
  r.ids.resize(T, 0);
  r.targets.resize(T, -1);
  r.starts.resize(T, pad);
  return r;
}

int64_t loss_tokens(const std::vector<int32_t>& targets) {
  return std::count_if(targets.begin(), targets.end(), [](int32_t t) { return t >= 0; });
}

std::vector<std::vector<float>> all_grads(const Transformer& m) {
  std::vector<std::vector<float>> g;
  for (int i = 0; i < m.params().size(); ++i)
    g.push_back(param_to_host(m.params(), i, ParamPart::grad));
  return g;
}

std::vector<float> host_logits(const Transformer& m) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), m.logits());
  return std::vector<float>(h.data(), h.data() + h.extent(0));
}

// max |a - b| / max |b| over every tensor, each against its own largest element.
double worst_rel(const std::vector<std::vector<float>>& a,
                 const std::vector<std::vector<float>>& b) {
  double worst = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    double num = 0.0, den = 0.0;
    for (std::size_t e = 0; e < a[i].size(); ++e) {
      num = std::max(num, std::fabs(double(a[i][e]) - b[i][e]));
      den = std::max(den, std::fabs(double(b[i][e])));
    }
    worst = std::max(worst, num / std::max(den, 1e-30));
  }
  return worst;
}

// The packed row's run: loss sum, logits (T, V) and gradients.
struct RunResult {
  double loss_sum = 0.0;
  std::vector<float> logits;
  std::vector<std::vector<float>> grads;
};
RunResult packed_run(Transformer& m, const Row& r, int64_t T) {
  m.params().zero_grads();
  ForwardOptions fo;
  fo.prepare_backward = true;
  fo.keep_logits = true;
  fo.row_starts = r.starts.data();
  const ForwardResult res = m.forward(r.ids.data(), r.targets.data(), 1, T, fo);
  m.backward();
  return RunResult{res.loss * static_cast<double>(res.tokens), host_logits(m), all_grads(m)};
}

// Every example alone (B = 1, T = its length), each normalized by the examples' total loss-token
// count (loss_tokens), the gradients accumulated over the three backward calls; logits in the
// packed row's positions (padding rows left 0).
RunResult alone_run(Transformer& m, const std::vector<Example>& ex, const Row& r, int64_t T) {
  m.params().zero_grads();
  RunResult run;
  run.logits.assign(T * m.config().vocab_size, 0.0f);
  const int64_t total = loss_tokens(r.targets), V = m.config().vocab_size;
  for (std::size_t i = 0; i < ex.size(); ++i) {
    ForwardOptions fo;
    fo.prepare_backward = true;
    fo.keep_logits = true;
    fo.loss_tokens = total;
    const int64_t L = static_cast<int64_t>(ex[i].ids.size());
    const ForwardResult res = m.forward(ex[i].ids.data(), ex[i].targets.data(), 1, L, fo);
    m.backward();
    run.loss_sum += res.loss * static_cast<double>(total);  // loss = sum / loss_tokens
    const std::vector<float> lg = host_logits(m);
    std::copy(lg.begin(), lg.end(), run.logits.begin() + r.offsets[i] * V);
  }
  run.grads = all_grads(m);
  return run;
}

struct KernelCase {
  AttentionKernel kernel;
  int64_t tile;  // query rows = keys per block
};

class PackedModel : public ::testing::TestWithParam<KernelCase> {
 protected:
  // tiny_model() with this case's attention kernel and tiles (model.attention, attention_tiles).
  ModelConfig model() const {
    ModelConfig m = tiny_model();
    m.attention.kernel = GetParam().kernel == AttentionKernel::team ? AttentionChoice::team
                                                                    : AttentionChoice::tiled_gemm;
    m.attention.q_rows = m.attention.k_cols = GetParam().tile;
    return m;
  }
};

// fp32 throughout, so the packed and the alone runs differ only in the order of fp32 sums: the
// GEMMs' blocking over 16 rows against 5, 6 or 3, the attention's online softmax over blocks
// that begin at different places, and (gradients) the weight-gradient sums over the row's tokens
// against three accumulated backward calls. A few ulps per sum, amplified by cancellation in the
// smallest gradient tensors: measured worst 3.6e-7 (logits) and 1.4e-6 (gradients) relative to
// each tensor's largest element; tolerances 2e-6 and 2e-5. Attention crossing examples or
// positions not restarting err by 1e-2 .. 1 (measured before the model read row_starts: logits
// 1.07, gradients 2.19).
// The packed row's logits, loss sum and gradients against every example alone (tolerances above).
void expect_packed_equals_alone(const ModelConfig& cfg) {
  const int64_t T = cfg.max_seq_len, V = cfg.vocab_size;
  Transformer m(cfg, testing_util::precision(DType::float32, DType::float32));
  m.init_weights();
  const std::vector<Example> ex = examples(V);
  const Row r = pack(ex, T);
  ASSERT_EQ(r.offsets.back() + 3, 14);  // 2 padding tokens
  const RunResult packed = packed_run(m, r, T), alone = alone_run(m, ex, r, T);
  // Logits of every example token (so each per-token loss: a function of its logits and target).
  double num = 0.0, den = 0.0;
  for (int64_t n = 0; n < 14 * V; ++n) {
    num = std::max(num, std::fabs(double(packed.logits[n]) - alone.logits[n]));
    den = std::max(den, std::fabs(double(alone.logits[n])));
  }
  EXPECT_LT(num / den, 2e-6) << "logits";
  EXPECT_NEAR(packed.loss_sum, alone.loss_sum, 1e-5 * alone.loss_sum);
  const double g = worst_rel(packed.grads, alone.grads);
  EXPECT_LT(g, 2e-5) << "gradients";
  std::printf("packed vs alone: logits %.3g, loss sum %.9g vs %.9g, gradients %.3g\n", num / den,
              packed.loss_sum, alone.loss_sum, g);
}

TEST_P(PackedModel, PackedRowEqualsEveryExampleAlone) {
  expect_packed_equals_alone(model());
}

// A mixture-of-experts model with activation checkpointing (the blocks recomputed with the same
// starts): the same agreement. Without the load-balancing loss, whose batch statistics differ
// between a row of three examples and each alone; dropless routing is per token.
TEST_P(PackedModel, MoeWithCheckpointingEqualsEveryExampleAlone) {
  ModelConfig cfg = model();
  cfg.moe.num_experts = 5;
  cfg.moe.top_k = 2;
  cfg.moe.intermediate_size = 12;
  cfg.moe.shared_expert_intermediate_size = 8;
  cfg.moe.aux_loss_coef = 0.0;
  cfg.activation_checkpointing = true;
  expect_packed_equals_alone(cfg);
}

// Activation checkpointing recomputes each block with the same starts: the same bits.
TEST_P(PackedModel, CheckpointingGivesTheSameBits) {
  ModelConfig cfg = model();
  Transformer plain(cfg, testing_util::precision(DType::float32, DType::float32));
  plain.init_weights();
  cfg.activation_checkpointing = true;
  Transformer ckpt(cfg, testing_util::precision(DType::float32, DType::float32));
  ckpt.init_weights();
  const Row r = pack(examples(cfg.vocab_size), cfg.max_seq_len);
  const RunResult a = packed_run(plain, r, cfg.max_seq_len),
                  b = packed_run(ckpt, r, cfg.max_seq_len);
  EXPECT_EQ(a.loss_sum, b.loss_sum);
  for (std::size_t i = 0; i < a.grads.size(); ++i) EXPECT_EQ(a.grads[i], b.grads[i]) << i;
}

INSTANTIATE_TEST_SUITE_P(Kernels, PackedModel,
                         ::testing::Values(KernelCase{AttentionKernel::tiled_gemm, 4},
                                           KernelCase{AttentionKernel::team, 4}),
                         [](const auto& info) {
                           return std::string(attention_kernel_name(info.param.kernel));
                         });

// loss_tokens = the pair's count: two micro-batches (one row each, the first packed) give the
// loss and, accumulated, the gradients of one micro-batch of both rows (its mean over its own
// counted tokens, loss_tokens = 0). fp32 summation order only (weight-gradient sums over 2 x 16
// rows against 32; measured 2.6e-6): tolerance 2e-5 as above.
TEST(PackedModelLoss, LossTokensMakeMicroBatchesSumToTheBatchMean) {
  const ModelConfig cfg = tiny_model();
  const int64_t T = cfg.max_seq_len, V = cfg.vocab_size;
  Transformer m(cfg, testing_util::precision(DType::float32, DType::float32));
  m.init_weights();
  const Row r0 = pack(examples(V), T);
  Row r1;  // one sequence of T tokens, every target counted
  std::mt19937 rng(3);
  for (int64_t t = 0; t < T; ++t) {
    r1.ids.push_back(static_cast<int32_t>(rng() % V));
    r1.targets.push_back(static_cast<int32_t>(rng() % V));
    r1.starts.push_back(0);
  }
  const int64_t total = loss_tokens(r0.targets) + loss_tokens(r1.targets);
  // Two micro-batches, each normalized by the pair's count.
  m.params().zero_grads();
  double split_loss = 0.0;
  for (const Row* r : std::vector<const Row*>{&r0, &r1}) {
    ForwardOptions fo;
    fo.prepare_backward = true;
    fo.row_starts = r->starts.data();
    fo.loss_tokens = total;
    split_loss += m.forward(r->ids.data(), r->targets.data(), 1, T, fo).loss;
    m.backward();
  }
  const auto split = all_grads(m);
  // One micro-batch of both rows.
  Row both = r0;
  both.ids.insert(both.ids.end(), r1.ids.begin(), r1.ids.end());
  both.targets.insert(both.targets.end(), r1.targets.begin(), r1.targets.end());
  both.starts.insert(both.starts.end(), r1.starts.begin(), r1.starts.end());
  m.params().zero_grads();
  ForwardOptions fo;
  fo.prepare_backward = true;
  fo.row_starts = both.starts.data();
  const ForwardResult whole = m.forward(both.ids.data(), both.targets.data(), 2, T, fo);
  m.backward();
  EXPECT_EQ(whole.tokens, total);
  EXPECT_NEAR(split_loss, whole.loss, 1e-6 * whole.loss);
  const double g = worst_rel(split, all_grads(m));
  EXPECT_LT(g, 2e-5);
  std::printf("two micro-batches vs one: loss %.9g vs %.9g, gradients %.3g\n", split_loss,
              whole.loss, g);
}

TEST(PackedModelInput, BadStartsAndMtpAreRefused) {
  ModelConfig cfg = tiny_model();
  const int64_t T = cfg.max_seq_len;
  Row r = pack(examples(cfg.vocab_size), T);
  {
    Transformer m(cfg, testing_util::precision(DType::float32, DType::float32));
    m.init_weights();
    Row bad = r;
    bad.starts[6] = 7;  // after its own position
    ForwardOptions fo;
    fo.row_starts = bad.starts.data();
    EXPECT_THROW(m.forward(bad.ids.data(), bad.targets.data(), 1, T, fo), InputError);
    bad.starts[6] = -1;
    EXPECT_THROW(m.forward(bad.ids.data(), bad.targets.data(), 1, T, fo), InputError);
  }
  cfg.mtp_num_layers = 1;
  Transformer m(cfg, testing_util::precision(DType::float32, DType::float32));
  m.init_weights();
  ForwardOptions fo;
  fo.row_starts = r.starts.data();
  EXPECT_THROW(m.forward(r.ids.data(), r.targets.data(), 1, T, fo), InternalError);
  fo.compute_mtp = false;  // the main head alone runs packed
  EXPECT_NO_THROW(m.forward(r.ids.data(), r.targets.data(), 1, T, fo));
}

}  // namespace
}  // namespace kktrain
