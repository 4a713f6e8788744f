// LoRA adapters on the block projections (q, k, v, o, gate, up, down; MTP blocks included):
//   y = x W^T + (alpha / r) * (x A^T) B^T,   A (r, in) ~ U(+-1/sqrt(in)), B (out, r) = 0
// Adapters have their own storage dtype (peft.lora_dtype; null inherits the base layer's), so
// torch-style Adam moments follow it. With adapters, every base parameter starts frozen
// (freeze_config can unfreeze some). In compute the adapter path rounds like PEFT under
// autocast: t = rnd(x A^T), d = rnd(t B^T), y = rnd(y + rnd(d * scale)).
#include "core/errors.hpp"
#include "core/glob.hpp"
#include "model/block.hpp"
#include "model/transformer.hpp"
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

}  // namespace

void Transformer::register_lora(LayerParams& p) {
  for (int k = 0; k < kNumProj; ++k) {
    if (p.weight(k) < 0) continue;  // a sparse MLP's layer: no dense gate/up/down
    const ParamInfo base = params_.info(p.weight(k));
    if (!targeted(peft_.target_modules, base.module)) continue;
    const DType d = peft_.lora_dtype.value_or(base.dtype);
    const int64_t out = base.shape[0], in = base.shape[1], r = peft_.dim;
    p.lora_a[k] = add_param(base.module + ".lora_A", {r, in}, ParamRole::lora_a, d);
    p.lora_b[k] = add_param(base.module + ".lora_B", {out, r}, ParamRole::lora_b, d);
  }
}

template <class TC>
void lora_forward(const ExecSpace& space, TC* y, int64_t ld, int64_t col, const TC* x,
                  const LoraWeights& l, int64_t N, int64_t in, int64_t out, TC* t, TC* delta) {
  if (!l.present()) return;
  matmul_forward(space, t, x, l.a, N, in, l.r);       // t (N, r)
  matmul_forward(space, delta, t, l.b, N, l.r, out);  // delta (N, out)
  add_scaled_slice(space, y, ld, col, delta, N, out, l.scale);
}

template <class TC>
void lora_backward(const ExecSpace& space, float* dx, const TC* dy, int64_t ld, int64_t col,
                   const TC* x, const LoraWeights& l, int64_t N, int64_t in, int64_t out, TC* t,
                   TC* dt, TC* g, float* dw, BlockGrads& grads, int wa, int wb) {
  if (!l.present()) return;
  // Recompute t = rnd(x A^T) rather than keeping it: (N, r) is cheap to redo.
  matmul_forward(space, t, x, l.a, N, in, l.r);
  scaled_slice(space, g, dy, ld, col, N, out, l.scale);  // g = d(delta) (N, out)
  if (grads.trainable(wb)) {
    matmul_backward_weight(space, dw, g, t, N, l.r, out);  // (out, r)
    grads.accumulate(wb, dw);
  }
  matmul_backward_input(space, dt, g, l.b, N, l.r, out, Into::overwrite);  // (N, r)
  if (grads.trainable(wa)) {
    matmul_backward_weight(space, dw, dt, x, N, in, l.r);  // (r, in)
    grads.accumulate(wa, dw);
  }
  matmul_backward_input(space, dx, dt, l.a, N, in, l.r, Into::accumulate);
}

#define KKTRAIN_INST_LORA(TC)                                                                    \
  template void lora_forward<TC>(const ExecSpace&, TC*, int64_t, int64_t, const TC*,             \
                                 const LoraWeights&, int64_t, int64_t, int64_t, TC*, TC*);       \
  template void lora_backward<TC>(const ExecSpace&, float*, const TC*, int64_t, int64_t,         \
                                  const TC*, const LoraWeights&, int64_t, int64_t, int64_t, TC*, \
                                  TC*, TC*, float*, BlockGrads&, int, int);
KKTRAIN_INST_LORA(float)
KKTRAIN_INST_LORA(bf16)
#undef KKTRAIN_INST_LORA

}  // namespace kktrain
