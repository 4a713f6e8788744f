// The causal attention alone, forward + backward: the tiled kernels (ops/attention.hpp) against
// the materialized attention kktrain ran before them (tests/unit/attention_reference.hpp: full
// (B, H, T, T) fp32 scores, batched GEMMs per KV group), alternating in one process, so machine
// noise hits both alike. Prints one JSON line per implementation: median seconds per forward +
// backward, and GFLOP/s counting the causal products only (6 B H T^2 D: forward QK^T and PV,
// backward dV, dP, dQ, dK, over the causal half).
//
//   bench_attention --batch 8 --seq 256 --heads 6 --kv-heads 6 --head-dim 64 --compute bfloat16
//                   --iters 5 [--materialized 1] [--kernel tiled_gemm|team] [--tiles QxK]
// (--kernel and --tiles: kktrain's model.attention and model.attention_tiles; the build's default
// kernel and tiles otherwise.)
#include <Kokkos_Core.hpp>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "bench/bench_util.hpp"
#include "ops/attention.hpp"
#include "tests/unit/attention_reference.hpp"

using namespace kktrain;
using bench::median;
using bench::now;

namespace {

template <class TC>
DView<TC> random_view(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  auto h = Kokkos::create_mirror_view(DView<TC>("x", n));
  for (int64_t i = 0; i < n; ++i) h(i) = from_f32<TC>(dist(rng));
  DView<TC> d("x", n);
  Kokkos::deep_copy(d, h);
  return d;
}

template <class TC>
int run(const AttentionDims& d, int iters, bool materialized) {
  constexpr Rounding rc = rounding_of<TC>();
  const int64_t nq = d.B * d.H * d.T * d.D, nkv = d.B * d.KV * d.T * d.D;
  DView<TC> q = random_view<TC>(nq, 1), k = random_view<TC>(nkv, 2), v = random_view<TC>(nkv, 3);
  DView<TC> dout = random_view<TC>(nq, 4), out("out", nq);
  DView<float> lse("lse", d.B * d.H * d.T), dq("dq", nq), dk("dk", nkv), dv("dv", nkv);
  const AttentionWorkspaceSizes ws = attention_workspace_sizes(d, rc);
  DView<float> scores("s", ws.scores), dprobs("dp", ws.dprobs), acc("acc", ws.out_acc);
  DView<float> mx("m", ws.row_stats), l("l", ws.row_stats), delta("delta", ws.delta);
  DView<TC> probs("p", ws.probs), dscores("ds", ws.dscores);
  AttentionScratch<TC> s;
  s.scores = scores.data();
  s.dprobs = dprobs.data();
  s.probs = ws.probs > 0 ? probs.data() : nullptr;
  s.dscores = ws.dscores > 0 ? dscores.data() : nullptr;
  s.out_acc = acc.data();
  s.row_max = mx.data();
  s.row_sum = l.data();
  s.delta = delta.data();
  std::unique_ptr<reference::Buffers<TC>> ref;
  if (materialized) ref = std::make_unique<reference::Buffers<TC>>(d);
  std::vector<double> tiled_s, ref_s;
  for (int it = 0; it <= iters; ++it) {  // the first round warms up
    double t0 = now();
    attention_forward(ExecSpace(), out.data(), lse.data(), q.data(), k.data(), v.data(), d, s);
    attention_backward(ExecSpace(), dq.data(), dk.data(), dv.data(), dout.data(), out.data(),
                       lse.data(), q.data(), k.data(), v.data(), d, s);
    Kokkos::fence();
    if (it > 0) tiled_s.push_back(now() - t0);
    if (!materialized) continue;
    t0 = now();
    reference::forward(out.data(), *ref, q.data(), k.data(), v.data(), d, rc);
    reference::backward(dq.data(), dk.data(), dv.data(), *ref, dout.data(), q.data(), k.data(),
                        v.data(), d, rc);
    Kokkos::fence();
    if (it > 0) ref_s.push_back(now() - t0);
  }
  const double flops = 6.0 * d.B * d.H * static_cast<double>(d.T) * d.T * d.D;
  auto print = [&](const char* impl, const std::vector<double>& t) {
    const double m = median(t);
    std::printf(
        "{\"kind\": \"attention\", \"impl\": \"%s\", \"compute\": \"%s\", \"T\": %lld, "
        "\"median_s\": %.6f, \"gflops\": %.2f}\n",
        impl, rc == Rounding::bf16 ? "bfloat16" : "float32", static_cast<long long>(d.T), m,
        flops / m / 1e9);
  };
  print(attention_kernel_name(d.options.kernel), tiled_s);
  if (materialized) print("materialized", ref_s);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Kokkos::ScopeGuard kokkos(argc, argv);
  int64_t B = 8, T = 256, H = 6, KV = 6, D = 64;
  int iters = 5;
  bool materialized = true;
  std::string compute = "bfloat16";
  AttentionOptions options;  // --kernel, --tiles (kktrain's model.attention, attention_tiles)
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--batch")
      B = std::atoll(v);
    else if (k == "--seq")
      T = std::atoll(v);
    else if (k == "--heads")
      H = std::atoll(v);
    else if (k == "--kv-heads")
      KV = std::atoll(v);
    else if (k == "--head-dim")
      D = std::atoll(v);
    else if (k == "--iters")
      iters = std::atoi(v);
    else if (k == "--materialized")
      materialized = std::atoi(v) != 0;
    else if (k == "--compute")
      compute = v;
    else if (k == "--kernel" && std::string(v) == "team")
      options.kernel = AttentionKernel::team;
    else if (k == "--kernel" && std::string(v) == "tiled_gemm")
      options.kernel = AttentionKernel::tiled_gemm;
    else if (k == "--tiles" &&
             std::sscanf(v, "%" SCNd64 "x%" SCNd64, &options.q_rows, &options.k_cols) == 2)
      continue;
    else {
      std::fprintf(stderr, "bench_attention: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  AttentionDims d{B, T, H, KV, D, 1.0f / std::sqrt(static_cast<float>(D))};
  d.options = options;
  return compute == "float32" ? run<float>(d, iters, materialized)
                              : run<bf16>(d, iters, materialized);
}
