// Packed rows on several ranks (ctest runs it with mpirun -np 2): rank r runs row r of a batch of
// W packed rows (three examples and padding each) on a sharded model, with loss_tokens = the
// batch's loss-token count and grad_scale = W (the reduce-scatter divides the ranks' sum by W);
// the sum of the ranks' losses and each rank's gradient shard equal a one-rank model's loss and
// gradient rows for the whole batch in one micro-batch (B = W, loss_tokens 0), within fp32
// summation order (2e-5 of each tensor's largest element, as tests/unit/test_packed_model.cpp).
// Exits non-zero on any mismatch, naming it.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "core/kokkos_compat.hpp"
#include "model/param_io.hpp"
#include "model/transformer.hpp"
#include "parallel/communicator.hpp"

using namespace kktrain;

namespace {

ModelConfig tiny_model() {
  ModelConfig m;
  m.vocab_size = 23;
  m.hidden_size = 16;
  m.num_layers = 2;
  m.num_heads = 4;
  m.num_kv_heads = 2;
  m.intermediate_size = 24;
  m.max_seq_len = 16;
  m.tie_word_embeddings = false;
  m.init_std = 0.3;
  m.seed = 7;
  return m;
}

// W rows of T tokens: row i packs examples of 5, 6 and 3 tokens (seeded by i), then padding
// (id 0, target -1, its own start).
struct Batch {
  std::vector<int32_t> ids, targets, starts;
};
Batch make_batch(int64_t W, int64_t T, int64_t V) {
  Batch b;
  for (int64_t i = 0; i < W; ++i) {
    std::mt19937 rng(static_cast<uint32_t>(17 + i));
    int32_t pos = 0;
    for (int len : {5, 6, 3}) {
      for (int k = 0; k < len; ++k) {
        b.ids.push_back(static_cast<int32_t>(rng() % V));
        b.targets.push_back(k == 0 && len == 6 ? -1 : static_cast<int32_t>(rng() % V));
        b.starts.push_back(pos);
      }
      pos += len;
    }
    for (int64_t t = pos; t < T; ++t) {
      b.ids.push_back(0);
      b.targets.push_back(-1);
      b.starts.push_back(pos);
    }
  }
  return b;
}

// fp32 storage, compute and reduction, resolved for `world` ranks.
ResolvedPrecision fp32(int world) {
  ResolvedPrecision p;
  p.storage = p.compute = p.reduce = DType::float32;
  p.world_size = world;
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  MpiRuntime mpi(&argc, &argv);
  Kokkos::ScopeGuard kokkos(argc, argv);  // after MPI, finalized before it
  int failures = 0;
  {
    auto comm = mpi.make_communicator();
    const int r = comm->rank(), W = comm->size();
    auto fail = [&](const std::string& what) {
      std::fprintf(stderr, "rank %d/%d: %s\n", r, W, what.c_str());
      ++failures;
    };
    const ModelConfig cfg = tiny_model();
    const int64_t T = cfg.max_seq_len;
    const Batch all = make_batch(W, T, cfg.vocab_size);
    const int64_t total =
        std::count_if(all.targets.begin(), all.targets.end(), [](int32_t t) { return t >= 0; });
    // The whole batch on one rank, one micro-batch.
    Transformer ref(cfg, fp32(1));
    ref.init_weights();
    ForwardOptions fo;
    fo.prepare_backward = true;
    fo.row_starts = all.starts.data();
    const double ref_loss = ref.forward(all.ids.data(), all.targets.data(), W, T, fo).loss;
    ref.backward();
    // Row r on this rank, sharded over the W ranks.
    Transformer sh(cfg, fp32(W), Allocation::after_prepare);
    ShardOptions so;
    so.comm = comm.get();
    sh.prepare(so);
    sh.init_weights();
    sh.zero_grads();
    ForwardOptions fr;
    fr.prepare_backward = true;
    fr.row_starts = all.starts.data() + r * T;
    fr.loss_tokens = total;
    fr.grad_scale = static_cast<float>(W);
    const double loss = comm->allreduce_sum_host(
        sh.forward(all.ids.data() + r * T, all.targets.data() + r * T, 1, T, fr).loss);
    sh.backward();
    if (!(std::fabs(loss - ref_loss) <= 1e-6 * ref_loss)) {
      fail("loss " + std::to_string(loss) + ", one rank " + std::to_string(ref_loss));
    }
    double worst = 0.0;
    for (int i = 0; i < sh.params().size(); ++i) {
      const ParamInfo& p = sh.params().info(i);
      if (!p.has_grad) continue;
      const std::vector<float> full = param_to_host(ref.params(), i, ParamPart::grad);
      const std::vector<float> local = param_to_host(sh.params(), i, ParamPart::grad);
      const std::vector<float> wl = param_to_host(sh.params(), i);
      const std::vector<float> wf = param_to_host(ref.params(), i);
      const int64_t off = p.row_begin * p.row_len;
      double num = 0.0, den = 0.0;
      for (float x : full) den = std::max(den, std::fabs(double(x)));
      for (std::size_t e = 0; e < local.size(); ++e) {
        num = std::max(num, std::fabs(double(local[e]) - full[off + e]));
        if (wl[e] != wf[off + e]) {
          fail(p.name + ": the sharded model's weights differ from the one-rank model's");
          break;
        }
      }
      const double err = num / std::max(den, 1e-30);
      worst = std::max(worst, err);
      if (!(err < 2e-5)) fail(p.name + ": gradient error " + std::to_string(err));
    }
    std::fprintf(stderr, "rank %d/%d: loss %.9g (one rank %.9g), worst gradient error %.3g\n", r, W,
                 loss, ref_loss, worst);
  }
  return failures == 0 ? 0 : 1;
}
