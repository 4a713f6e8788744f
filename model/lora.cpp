// LoRA adapters on the block projections (q, k, v, o, gate, up, down; MTP blocks included):
//   y = x W^T + (alpha / r) * (x A^T) B^T,   A (r, in) ~ U(+-1/sqrt(in)), B (out, r) = 0
// Adapters have their own storage dtype (peft.lora_dtype; null inherits the base layer's), so
// torch-style Adam moments follow it. With adapters, every base parameter starts frozen
// (freeze_config can unfreeze some). In compute the adapter path rounds like PEFT under
// autocast: t = rnd(x A^T), d = rnd(t B^T), y = rnd(y + rnd(d * scale)).
#include "core/errors.hpp"
#include "core/glob.hpp"
#include "model/gemm.hpp"
#include "model/kernels.hpp"
#include "model/transformer.hpp"
#include "model/transformer_buffers.hpp"

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

// Sizes of one adapter pair: A (r, in), B (out, r), and its scale alpha / r.
struct LoraShape {
  int64_t r, in, out;
  float scale;
};

static LoraShape lora_shape(const ParamRegistry& reg, int a, int b, const PeftConfig& peft) {
  return {reg.info(a).shape[0], reg.info(a).shape[1], reg.info(b).shape[0],
          static_cast<float>(peft.alpha / static_cast<double>(peft.dim))};
}

void Transformer::register_lora(LayerParams& p) {
  for (int k = 0; k < kNumProj; ++k) {
    const ParamInfo base = params_.info(p.weight(k));
    if (!targeted(peft_.target_modules, base.module)) continue;
    const DType d = peft_.lora_dtype.value_or(base.dtype);
    const int64_t out = base.shape[0], in = base.shape[1], r = peft_.dim;
    p.lora_a[k] = add_param(base.module + ".lora_A", {r, in}, ParamRole::lora_a, d);
    p.lora_b[k] = add_param(base.module + ".lora_B", {out, r}, ParamRole::lora_b, d);
  }
}

template <class TC>
void Transformer::lora_forward(const LayerParams& p, int proj, TC* y, int64_t ld, int64_t col,
                               const TC* x) {
  const int a = p.lora_a[proj], bb = p.lora_b[proj];
  if (a < 0) return;
  Buffers& b = *buf_;
  const int64_t N = b.B * b.T;
  const auto [r, in, out, scale] = lora_shape(params_, a, bb, peft_);
  TC* t = b.lora_t.p<TC>();
  TC* delta = b.lora_y.p<TC>();
  matmul_forward(t, x, w(a), N, in, r);        // t (N, r)
  matmul_forward(delta, t, w(bb), N, r, out);  // delta (N, out)
  add_scaled_slice(y, ld, col, delta, N, out, scale, rc_);
}

template <class TC>
void Transformer::lora_backward(const LayerParams& p, int proj, const TC* dy, int64_t ld,
                                int64_t col, const TC* x, float* dx) {
  const int a = p.lora_a[proj], bb = p.lora_b[proj];
  if (a < 0) return;
  Buffers& b = *buf_;
  const int64_t N = b.B * b.T;
  const auto [r, in, out, scale] = lora_shape(params_, a, bb, peft_);
  TC* t = b.lora_t.p<TC>();
  TC* g = b.lora_y.p<TC>();
  TC* dt = b.lora_dt.p<TC>();
  // Recompute t = rnd(x A^T) rather than keeping it: (N, r) is cheap to redo.
  matmul_forward(t, x, w(a), N, in, r);
  scaled_slice(g, dy, ld, col, N, out, scale, rc_);  // g = d(delta) (N, out)
  if (params_.info(bb).trainable) {
    matmul_backward_weight(b.dw.data(), g, t, N, r, out);  // (out, r)
    accumulate(bb, b.dw.data(), rc_);
  }
  matmul_backward_input(dt, g, w(bb), N, r, out, false);  // (N, r)
  if (params_.info(a).trainable) {
    matmul_backward_weight(b.dw.data(), dt, x, N, in, r);  // (r, in)
    accumulate(a, b.dw.data(), rc_);
  }
  matmul_backward_input(dx, dt, w(a), N, in, r, /*accumulate=*/true);
}

#define KKTRAIN_INST_LORA(TC)                                                                 \
  template void Transformer::lora_forward<TC>(const LayerParams&, int, TC*, int64_t, int64_t, \
                                              const TC*);                                     \
  template void Transformer::lora_backward<TC>(const LayerParams&, int, const TC*, int64_t,   \
                                               int64_t, const TC*, float*);
KKTRAIN_INST_LORA(float)
KKTRAIN_INST_LORA(bf16)
#undef KKTRAIN_INST_LORA

}  // namespace kktrain
