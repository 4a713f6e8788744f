// Forward+backward throughput of the kktrain model, for bench/model_bench.py and
// bench/long_context_bench.py to set side by side with the same model in PyTorch. Also measures
// the best rate of one GEMM through gemm() (the interface the model uses) in fp32 and bf16 at a
// model-like shape, so the step's model FLOP utilization can be read against the GEMM rate of its
// compute dtype.
//
//   bench_model --hidden 384 --layers 6 --heads 6 --kv-heads 6 --ffn 1024 --vocab 256
//               --seq 256 --batch 8 --compute bfloat16 --storage float32 --warmup 2 --iters 5
//               [--family llama|qwen3|gemma3|phi3] [--head-dim D] [--window W]
//               [--attention auto|tiled_gemm|team]
// --attention is kktrain's model.attention (auto: the build's kernel). --family sets the
// ModelConfig fields kktrain's Hugging Face reader (io/hf_config.cpp) sets for that architecture
// (family_config below); --head-dim an explicit head_dim (0: hidden / heads);
// --window the sliding window of the family's sliding layers (-1: the family's default).
// Prints one JSON object per line: {"kind": "gemm_peak", "dtype": ...} (two) and
// {"kind": "step", ...}: wall and process CPU seconds per step (CPU time is less disturbed by
// other processes on a shared machine), tokens/s, model GFLOP/s, peak RSS, the parameter count
// and the first step's loss.
#include <sys/resource.h>
#include <Kokkos_Core.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.hpp"
#include "model/transformer.hpp"
#include "ops/gemm.hpp"
#include "optim/optimizer.hpp"

using namespace kktrain;
using bench::median;
using bench::now;

namespace {

// Best-of GEMM rate at a transformer-like shape: (B*T, C) x (C, 4C), operands and result in T
// (bf16 products run oneDNN's native kernels where the CPU has them).
template <class T>
double gemm_peak(int64_t M, int64_t K, int64_t N) {
  DView<T> a("a", M * K), b("b", K * N), c("c", M * N);
  Kokkos::deep_copy(a, from_f32<T>(0.5f));
  Kokkos::deep_copy(b, from_f32<T>(0.25f));
  double best = 0.0;
  for (int r = 0; r < 7; ++r) {
    const double t0 = now();
    gemm(ExecSpace(), GemmOptions{}, 'N', 'T', 1.0f, gin(a.data(), M, K), gin(b.data(), N, K), 0.0f,
         gout(c.data(), M, N));
    Kokkos::fence();
    best = std::max(best, 2.0 * M * N * K / (now() - t0) / 1e9);
  }
  return best;
}

double cpu_now() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

double peak_rss_mib() {
  rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / 1024.0;  // KiB on Linux
}

double rss_mib() {  // resident now: the second field of /proc/self/statm, in pages
  std::ifstream f("/proc/self/statm");
  long long size = 0, resident = 0;
  f >> size >> resident;
  return resident * 4096.0 / (1 << 20);
}

// The family's fields on a Llama-shaped config, as kktrain's Hugging Face reader sets them for a
// config.json of that architecture with the bench's sizes (io/hf_config.cpp: kHfFamilies and
// HfBlock; rms_norm_eps 1e-6 as that reader's default; head_dim hidden / heads unless
// --head-dim says otherwise). window < 0: the family's default window for a T-token sequence.
// Returns false for a family it does not know. (A new family: one more branch.)
bool family_config(const std::string& family, int64_t T, int64_t window, ModelConfig* m) {
  if (family == "llama") {
    if (window > 0) m->sliding_window = window;  // every layer (Mistral's)
    return true;
  }
  if (family == "qwen3") {  // Qwen3ForCausalLM: q_norm / k_norm over each head, untied head
    m->family = ModelFamily::qwen3;
    m->qk_norm = QkNorm::per_head;
    m->rms_norm_eps = 1e-6;
    if (m->explicit_head_dim == 0) m->explicit_head_dim = m->hidden_size / m->num_heads;
    if (window > 0) m->sliding_window = window;  // use_sliding_window: every layer
    return true;
  }
  if (family == "gemma3") {  // Gemma3ForCausalLM (gemma-3-1b's layout)
    m->family = ModelFamily::gemma3;
    m->qk_norm = QkNorm::per_head;
    m->rms_norm_eps = 1e-6;
    if (m->explicit_head_dim == 0) m->explicit_head_dim = m->hidden_size / m->num_heads;
    m->norm_weight = NormWeight::one_plus_fp32;
    m->norm_placement = NormPlacement::sandwich;
    m->mlp_activation = MlpActivation::gelu_tanh;
    m->embed_scale = EmbedScale::sqrt_hidden;
    m->tie_word_embeddings = true;
    m->query_pre_attn_scalar = static_cast<double>(m->head_dim());
    m->rope_theta = 1e6;  // the global layers'
    m->rope_local_theta = 1e4;
    // Five sliding layers of every six (sliding_window_pattern 6), rotated with the local base.
    m->sliding_window = window >= 0 ? window : T / 2;
    m->layer_types.clear();
    m->layer_rope.clear();
    for (int64_t l = 0; l < m->num_layers; ++l) {
      const bool slides = (l + 1) % 6 != 0;
      m->layer_types.push_back(slides ? LayerAttention::sliding : LayerAttention::full);
      m->layer_rope.push_back(slides ? LayerRope::local : LayerRope::rope);
    }
    return true;
  }
  if (family == "phi3") {  // Phi3ForCausalLM laid out as Phi-4-mini
    // Fused qkv_proj / gate_up_proj parameters, rotary on int(head_dim * 0.75) values of each
    // head (partial_rotary_factor 0.75; the rest pass through), the head tied to the embedding,
    // rms_norm_eps 1e-5 and rope_theta 1e4 (kPhi3Block's, Phi-4-mini's). Phi-4-mini's longrope
    // (original_max_position_embeddings 4096 >= T) and sliding_window (262144 >= T) do not act
    // at the bench's T: rotary unscaled (rope_scaling null, as Phi-3-mini-4k's) and no window.
    m->family = ModelFamily::phi3;
    m->tie_word_embeddings = true;
    m->rms_norm_eps = 1e-5;
    m->rope_theta = 1e4;
    const int64_t D = m->head_dim();
    const int64_t rotary = D * 3 / 4;  // int(D * 0.75)
    if (rotary < 2 || rotary % 2 != 0) {
      std::fprintf(stderr, "bench_model: phi3 needs int(head_dim * 0.75) even (head_dim %lld)\n",
                   static_cast<long long>(D));
      std::exit(2);
    }
    m->explicit_rotary_dim = rotary == D ? 0 : rotary;
    if (window > 0) m->sliding_window = window;  // Phi3Config's sliding_window: every layer
    return true;
  }
  return false;
}

// (query, key) pairs one sequence of T tokens attends to in a layer with window W (0: causal).
double attended_pairs(int64_t T, int64_t W) {
  if (W <= 0 || W >= T) return 0.5 * static_cast<double>(T) * static_cast<double>(T + 1);
  return 0.5 * static_cast<double>(W) * static_cast<double>(W + 1) +
         static_cast<double>(T - W) * static_cast<double>(W);
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
  bool with_optimizer = true, measure_gemm = true;
  std::string compute = "float32", storage = "float32", family = "llama";
  int64_t window = -1;
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
    else if (k == "--gemm-peak")
      measure_gemm = std::atoi(v) != 0;
    else if (k == "--family")
      family = v;
    else if (k == "--head-dim")
      m.explicit_head_dim = std::atoll(v);
    else if (k == "--window")
      window = std::atoll(v);
    else if (k == "--ckpt")
      m.activation_checkpointing = std::atoi(v) != 0;
    else if (k == "--attention") {
      const std::string a = v;
      if (a != "auto" && a != "tiled_gemm" && a != "team") {
        std::fprintf(stderr, "bench_model: --attention %s: auto, tiled_gemm or team\n", v);
        return 2;
      }
      m.attention.kernel = a == "team"         ? AttentionChoice::team
                           : a == "tiled_gemm" ? AttentionChoice::tiled_gemm
                                               : AttentionChoice::automatic;
    } else {
      std::fprintf(stderr, "bench_model: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  m.max_seq_len = T;
  if (!family_config(family, T, window, &m)) {
    std::fprintf(stderr, "bench_model: unknown family %s (llama, qwen3, gemma3, phi3)\n",
                 family.c_str());
    return 2;
  }
  ResolvedPrecision p;
  if (!parse_dtype(compute, &p.compute) || !parse_dtype(storage, &p.storage)) {
    std::fprintf(stderr, "bench_model: bad dtype\n");
    return 2;
  }
  if (measure_gemm) {  // (its buffers count in the peak RSS: --gemm-peak 0 for memory runs)
    std::printf("{\"kind\": \"gemm_peak\", \"dtype\": \"float32\", \"gflops\": %.2f}\n",
                gemm_peak<float>(B * T, m.hidden_size, 4 * m.hidden_size));
    std::printf("{\"kind\": \"gemm_peak\", \"dtype\": \"bfloat16\", \"gflops\": %.2f}\n",
                gemm_peak<bf16>(B * T, m.hidden_size, 4 * m.hidden_size));
  }
  const double base_rss = rss_mib();  // the process before the model
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
  std::vector<double> times, cpu_times;
  double first_loss = 0.0;
  for (int it = 0; it < warmup + iters; ++it) {
    model.params().zero_grads();
    if (it >= warmup) Kokkos::Profiling::pushRegion("bench_step");  // bench/kernel_timer.cpp
    const double t0 = now(), c0 = cpu_now();
    const ForwardResult r = model.forward(ids.data(), targets.data(), B, T, fo);
    if (it == 0) first_loss = r.loss;
    model.backward();
    if (opt) opt->step(1e-4);
    Kokkos::fence();
    if (it >= warmup) Kokkos::Profiling::popRegion();
    if (it >= warmup) {
      times.push_back(now() - t0);
      cpu_times.push_back(cpu_now() - c0);
    }
  }
  // Model FLOPs of one forward+backward: 6 per matmul parameter per token (the tied head's
  // product counted), plus the attention's QK^T and PV over the (query, key) pairs each layer
  // attends to (T (T + 1) / 2 causal, fewer in a window): 2 products x 2 flops x H D per pair
  // forward, twice that backward, 12 H D per pair (about 6 L T H D per token without windows).
  // Matmuls only: norms, activations, rotary and softmax are not counted. (The recomputation in
  // backward and the masked halves of diagonal tiles are work the implementation adds, not model
  // FLOPs.)
  int64_t matmul_params = 0, params = 0;
  for (const auto& pi : model.params().all()) {
    if (pi.role == ParamRole::linear) matmul_params += pi.numel;
    params += pi.numel;
  }
  matmul_params += m.tie_word_embeddings ? m.vocab_size * m.hidden_size : 0;
  const double tokens = static_cast<double>(B * T);
  double pairs = 0.0;
  for (int64_t l = 0; l < m.num_layers; ++l) pairs += attended_pairs(T, m.window_of(l));
  const double flops = 6.0 * matmul_params * tokens +
                       12.0 * static_cast<double>(m.num_heads * m.head_dim()) * pairs * B;
  const double med = median(times);
  std::printf(
      "{\"kind\": \"step\", \"impl\": \"kktrain\", \"compute\": \"%s\", \"storage\": \"%s\", "
      "\"median_s\": %.5f, \"min_s\": %.5f, \"cpu_median_s\": %.5f, \"tokens_per_s\": %.1f, "
      "\"gflops\": %.2f, \"peak_rss_mib\": %.1f, \"base_rss_mib\": %.1f, \"iters\": %d, "
      "\"optimizer\": %s, \"family\": \"%s\", \"params\": %lld, \"first_loss\": %.6f}\n",
      compute.c_str(), storage.c_str(), med, *std::min_element(times.begin(), times.end()),
      median(cpu_times), tokens / med, flops / med / 1e9, peak_rss_mib(), base_rss, iters,
      with_optimizer ? "true" : "false", family.c_str(), static_cast<long long>(params),
      first_loss);
  return 0;
}
