// The model choices the kernels also take (core/config.hpp reads them: model.norm_weight,
// model.norm_placement, model.mlp_activation, model.embed_scale), in a header of their own so
// that ops/ needs no configuration.
#pragma once

#include <cstdint>

namespace kktrain {

// model.norm_weight: how every RMSNorm applies its weight w to the normalized x_hat (fp32):
// plain: rnd(x_hat) * w in the stream dtype (Llama, Qwen, Mistral); fp32: rnd(w * x_hat), the
// product in fp32, rounded once (OLMo 2); one_plus_fp32: rnd((1 + w) * x_hat) likewise (Gemma).
enum class NormWeight : uint8_t { plain, fp32, one_plus_fp32 };
// model.norm_placement: where a decoder layer's norms sit. pre: x + attn(norm(x)), then
// h + mlp(norm(h)) (Llama). sandwich: also a norm on each sub-layer's output before the residual
// add, x + norm(attn(norm(x))) (Gemma 2 and 3: four norms a layer). post: only those,
// x + norm(attn(x)) (OLMo 2).
enum class NormPlacement : uint8_t { pre, sandwich, post };
// model.mlp_activation: act(gate) * up with SiLU (SwiGLU) or tanh-approximated GELU (GeGLU,
// Gemma's gelu_pytorch_tanh).
enum class MlpActivation : uint8_t { silu, gelu_tanh };
// model.embed_scale: the input embeddings multiplied by sqrt(hidden_size), the factor rounded to
// the stream dtype (Gemma), or not (none). Never the tied head's.
enum class EmbedScale : uint8_t { none, sqrt_hidden };
// model.qk_norm (core/config.hpp).
enum class QkNorm : uint8_t { none, per_head, whole };

}  // namespace kktrain
