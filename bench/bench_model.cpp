// Forward+backward throughput of the kktrain model, for bench/model_bench.py to set side by side
// with the same model in PyTorch. Also measures the machine's sgemm peak through the same Kokkos
// Kernels GEMM path the model uses, so achieved GFLOP/s can be read against it.
//
//   bench_model --hidden 384 --layers 6 --heads 6 --kv-heads 6 --ffn 1024 --vocab 256
//               --seq 256 --batch 8 --compute bfloat16 --storage float32 --warmup 2 --iters 5
// Prints one JSON object per line: {"kind": "sgemm_peak", ...} and {"kind": "step", ...}.
#include <Kokkos_Core.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.hpp"
#include "model/gemm.hpp"
#include "model/transformer.hpp"
#include "optim/optimizer.hpp"

using namespace kktrain;
using bench::median;
using bench::now;

namespace {

// Best-of sgemm rate at a transformer-like shape: (B*T, C) x (C, 4C).
double sgemm_peak(int64_t M, int64_t K, int64_t N) {
  DView<float> a("a", M * K), b("b", K * N), c("c", M * N);
  Kokkos::deep_copy(a, 0.5f);
  Kokkos::deep_copy(b, 0.25f);
  double best = 0.0;
  for (int r = 0; r < 7; ++r) {
    const double t0 = now();
    gemm('N', 'N', 1.0f, gin(a.data(), M, K), gin(b.data(), K, N), 0.0f, gout(c.data(), M, N));
    Kokkos::fence();
    best = std::max(best, 2.0 * M * N * K / (now() - t0) / 1e9);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  Kokkos::ScopeGuard kokkos(argc, argv);
  ModelConfig m;
  m.hidden_size = 384;
  m.num_layers = 6;
  m.num_heads = 6;
  m.num_kv_heads = 6;
  m.intermediate_size = 1024;
  m.vocab_size = 256;
  m.tie_word_embeddings = false;
  int64_t T = 256, B = 8;
  int warmup = 2, iters = 5;
  bool with_optimizer = true;
  std::string compute = "float32", storage = "float32";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--hidden")
      m.hidden_size = std::atoll(v);
    else if (k == "--layers")
      m.num_layers = std::atoll(v);
    else if (k == "--heads")
      m.num_heads = std::atoll(v);
    else if (k == "--kv-heads")
      m.num_kv_heads = std::atoll(v);
    else if (k == "--ffn")
      m.intermediate_size = std::atoll(v);
    else if (k == "--vocab")
      m.vocab_size = std::atoll(v);
    else if (k == "--seq")
      T = std::atoll(v);
    else if (k == "--batch")
      B = std::atoll(v);
    else if (k == "--compute")
      compute = v;
    else if (k == "--storage")
      storage = v;
    else if (k == "--warmup")
      warmup = std::atoi(v);
    else if (k == "--iters")
      iters = std::atoi(v);
    else if (k == "--optimizer")
      with_optimizer = std::atoi(v) != 0;
    else if (k == "--ckpt")
      m.activation_checkpointing = std::atoi(v) != 0;
    else {
      std::fprintf(stderr, "bench_model: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  m.max_seq_len = T;
  ResolvedPrecision p;
  if (!parse_dtype(compute, &p.compute) || !parse_dtype(storage, &p.storage)) {
    std::fprintf(stderr, "bench_model: bad dtype\n");
    return 2;
  }
  std::printf("{\"kind\": \"sgemm_peak\", \"gflops\": %.2f}\n",
              sgemm_peak(B * T, m.hidden_size, 4 * m.hidden_size));
  Transformer model(m, p);
  model.init_weights();
  // A full training step also updates the parameters: torch-style AdamW (the PyTorch peer runs
  // torch.optim.AdamW(foreach=True) on the same parameters).
  std::unique_ptr<Optimizer> opt;
  if (with_optimizer) opt = make_optimizer(OptimizerConfig(), model.params(), 1);
  std::mt19937 rng(1);
  std::vector<int32_t> ids(B * T), targets(B * T);
  for (auto& x : ids) x = static_cast<int32_t>(rng() % m.vocab_size);
  for (auto& x : targets) x = static_cast<int32_t>(rng() % m.vocab_size);
  ForwardOptions fo;
  fo.prepare_backward = true;
  std::vector<double> times;
  for (int it = 0; it < warmup + iters; ++it) {
    model.params().zero_grads();
    const double t0 = now();
    model.forward(ids.data(), targets.data(), B, T, fo);
    model.backward();
    if (opt) opt->step(1e-4);
    Kokkos::fence();
    if (it >= warmup) times.push_back(now() - t0);
  }
  // FLOPs of one forward+backward: 6 per matmul parameter per token, plus attention's
  // QK^T and PV (full T x T products as computed): 2 * 2 * T * C per token per layer forward,
  // twice that backward.
  int64_t matmul_params = 0;
  for (const auto& pi : model.params().all()) {
    if (pi.role == ParamRole::linear) matmul_params += pi.numel;
  }
  matmul_params += m.tie_word_embeddings ? m.vocab_size * m.hidden_size : 0;
  const double tokens = static_cast<double>(B * T);
  const double flops = 6.0 * matmul_params * tokens +
                       12.0 * m.num_layers * static_cast<double>(T) * m.hidden_size * tokens;
  const double med = median(times);
  std::printf(
      "{\"kind\": \"step\", \"impl\": \"kktrain\", \"compute\": \"%s\", \"storage\": \"%s\", "
      "\"median_s\": %.5f, \"min_s\": %.5f, \"tokens_per_s\": %.1f, \"gflops\": %.2f, "
      "\"iters\": %d, \"optimizer\": %s}\n",
      compute.c_str(), storage.c_str(), med, *std::min_element(times.begin(), times.end()),
      tokens / med, flops / med / 1e9, iters, with_optimizer ? "true" : "false");
  return 0;
}
