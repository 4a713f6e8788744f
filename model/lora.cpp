// LoRA adapters (model/lora.hpp): registration, their compute weights and scratch, and the
// adapter path's forward and backward (model/block.hpp).
#include "model/lora.hpp"

#include <algorithm>

#include "core/errors.hpp"
#include "core/glob.hpp"
#include "model/block.hpp"
#include "model/model_buffers.hpp"
#include "model/params.hpp"
#include "ops/gemm.hpp"
#include "ops/kernels.hpp"

namespace kktrain {

namespace {

// A target with wildcards is a glob over module paths; a plain name matches a module path
// ending in ".<name>" (PEFT's suffix matching: "q_proj" selects every q_proj).
bool targeted(const std::vector<std::string>& targets, const std::string& module) {
  for (const auto& t : targets) {
    if (t.find_first_of("*?[") != std::string::npos) {
      if (glob_match(t, module)) return true;
    } else if (module == t ||
               (module.size() > t.size() &&
                module.compare(module.size() - t.size() - 1, t.size() + 1, "." + t) == 0)) {
      return true;
    }
  }
  return false;
}

void register_block_lora(ModelState& s, LayerParams& p) {
  for (int k = 0; k < kNumProj; ++k) {
    if (p.weight(k) < 0) continue;  // a sparse MLP's layer: no dense gate/up/down
    const ParamInfo base = s.params.info(p.weight(k));
    if (!targeted(s.peft.target_modules, base.module)) continue;
    const DType d = s.peft.lora_dtype.value_or(base.dtype);
    const int64_t out = base.shape[0], in = base.shape[1], r = s.peft.dim;
    p.lora_a[k] = add_param(s, base.module + ".lora_A", {r, in}, ParamRole::lora_a, d);
    p.lora_b[k] = add_param(s, base.module + ".lora_B", {out, r}, ParamRole::lora_b, d);
  }
}

}  // namespace

void register_lora_adapters(ModelState& s) {
  for (auto& l : s.layers) register_block_lora(s, l);
  for (auto& m : s.mtp) register_block_lora(s, m.block);
  bool any = false;
  for (auto& pi : s.params.all()) any = any || pi.role == ParamRole::lora_a;
  if (!any) {
    throw ConfigError("peft.target_modules",
                      "selects no projection (q_proj, k_proj, v_proj, o_proj, gate_proj, "
                      "up_proj, down_proj of any layer; Phi-3's qkv_proj, o_proj, gate_up_proj, "
                      "down_proj)");
  }
  // Adapters train; the base model starts frozen (freeze_config may unfreeze parts of it).
  for (int i = 0; i < s.params.size(); ++i) {
    const ParamRole role = s.params.info(i).role;
    s.params.info_mut(i).trainable = role == ParamRole::lora_a || role == ParamRole::lora_b;
  }
}

void add_lora_weights(const ModelState& s, const LayerParams& p, BlockWeights* w) {
  for (int k = 0; k < kNumProj; ++k) {
    if (p.lora_a[k] < 0) continue;
    LoraWeights& l = w->lora[k];
    l.a = s.w(p.lora_a[k]);
    l.b = s.w(p.lora_b[k]);
    l.r = s.params.info(p.lora_a[k]).shape[0];
    l.scale = static_cast<float>(s.peft.alpha / static_cast<double>(s.peft.dim));
  }
}

void make_lora_buffers(BufferMaker& mk, LoraBuffers& b, const ModelState& s, int64_t N) {
  if (!s.peft.enabled) return;
  const ModelConfig& c = s.cfg;
  const int64_t C = c.hidden_size, F = c.intermediate_size;
  const int64_t Q = (c.num_heads + 2 * c.num_kv_heads) * c.head_dim();
  const int64_t widest = std::max({Q, 2 * F, C});
  b.t = mk.compute("lora_t", N * s.peft.dim);
  b.dt = mk.compute("lora_dt", N * s.peft.dim);
  b.y = mk.compute("lora_y", N * widest);
}

template <class TC>
void lora_forward(const ExecSpace& space, const GemmOptions& gemm, TC* y, int64_t ld, int64_t col,
                  const TC* x, const LoraWeights& l, int64_t N, int64_t in, int64_t out, TC* t,
                  TC* delta) {
  if (!l.present()) return;
  matmul_forward(space, gemm, t, x, l.a, N, in, l.r);       // t (N, r)
  matmul_forward(space, gemm, delta, t, l.b, N, l.r, out);  // delta (N, out)
  add_scaled_slice(space, y, ld, col, delta, N, out, l.scale);
}

template <class TC>
void lora_backward(const ExecSpace& space, const GemmOptions& gemm, float* dx, const TC* dy,
                   int64_t ld, int64_t col, const TC* x, const LoraWeights& l, int64_t N,
                   int64_t in, int64_t out, TC* t, TC* dt, TC* g, float* dw, BlockGrads& grads,
                   int wa, int wb) {
  if (!l.present()) return;
  // Recompute t = rnd(x A^T) rather than keeping it: (N, r) is cheap to redo.
  matmul_forward(space, gemm, t, x, l.a, N, in, l.r);
  scaled_slice(space, g, dy, ld, col, N, out, l.scale);  // g = d(delta) (N, out)
  if (grads.trainable(wb)) {
    matmul_backward_weight(space, gemm, dw, g, t, N, l.r, out);  // (out, r)
    grads.accumulate(wb, dw);
  }
  matmul_backward_input(space, gemm, dt, g, l.b, N, l.r, out, Into::overwrite);  // (N, r)
  if (grads.trainable(wa)) {
    matmul_backward_weight(space, gemm, dw, dt, x, N, in, l.r);  // (r, in)
    grads.accumulate(wa, dw);
  }
  matmul_backward_input(space, gemm, dx, dt, l.a, N, in, l.r, Into::accumulate);
}

#define KKTRAIN_INST_LORA(TC)                                                                   \
  template void lora_forward<TC>(const ExecSpace&, const GemmOptions&, TC*, int64_t, int64_t,   \
                                 const TC*, const LoraWeights&, int64_t, int64_t, int64_t, TC*, \
                                 TC*);                                                          \
  template void lora_backward<TC>(const ExecSpace&, const GemmOptions&, float*, const TC*,      \
                                  int64_t, int64_t, const TC*, const LoraWeights&, int64_t,     \
                                  int64_t, int64_t, TC*, TC*, TC*, float*, BlockGrads&, int, int);
KKTRAIN_INST_LORA(float)
KKTRAIN_INST_LORA(bf16)
#undef KKTRAIN_INST_LORA

}  // namespace kktrain
