// Parameter registration, the roles' roundings and initialization (model/params.hpp).
#include "model/params.hpp"

#include <algorithm>
#include <cmath>

#include "core/errors.hpp"
#include "core/glob.hpp"
#include "core/host_sync.hpp"
#include "core/random.hpp"
#include "model/dense_block.hpp"
#include "model/lora.hpp"
#include "model/mtp_head.hpp"
#include "ops/kernels.hpp"

namespace kktrain {

int add_param(ModelState& s, const std::string& module, std::vector<int64_t> shape, ParamRole role,
              DType dtype) {
  const std::string name = module + (role == ParamRole::bias ? ".bias" : ".weight");
  // Model-protected parameters (model.keep_in_fp32 globs) are fp32 in storage and compute.
  const bool keep = glob_match_any(s.cfg.keep_in_fp32, name);
  const int i = s.params.add(name, module, std::move(shape), role, keep ? DType::float32 : dtype);
  s.params.info_mut(i).keep_fp32 = keep;
  return i;
}

void register_params(ModelState& s) {
  const DType st = s.prec.storage;
  const int64_t C = s.cfg.hidden_size, V = s.cfg.vocab_size;
  s.embed = add_param(s, "model.embed_tokens", {V, C}, ParamRole::embedding, st);
  for (int64_t l = 0; l < s.cfg.num_layers; ++l) {
    s.layers.push_back(register_block(s, "model.layers." + std::to_string(l), st));
    s.layers.back().window = s.cfg.window_of(l);
    s.layers.back().rope = s.cfg.rope_of(l);
  }
  s.final_norm = add_param(s, "model.norm", {C}, ParamRole::norm, st);
  if (s.cfg.tie_word_embeddings) {
    s.lm_head = s.embed;
    s.params.add_alias(s.embed, "lm_head.weight");
  } else {
    s.lm_head = add_param(s, "lm_head", {V, C}, ParamRole::linear, st);
  }
  register_mtp_head(s);
  // A protection glob that protects nothing is a mistake the run would not show.
  for (const auto& g : s.cfg.keep_in_fp32) {
    bool matched = false;
    for (const auto& pi : s.params.all()) matched = matched || glob_match(g, pi.name);
    if (!matched) {
      throw ConfigError("model.keep_in_fp32",
                        "'" + g +
                            "' matches no parameter (names look like "
                            "'model.layers.0.input_layernorm.weight'; `kktrain audit` lists "
                            "them)");
    }
  }
  // LoRA adapters are registered after every base parameter, so the base layout (and the fused
  // q/k/v and gate/up compute weights) does not change.
  if (s.peft.enabled) register_lora_adapters(s);
}

void assign_roundings(ModelState& s) {
  s.round.compute = rounding_for(s.prec.compute);
  const Rounding rc = s.round.compute;
  const ParamInfo& emb = s.params.info(s.embed);
  if (s.prec.world_size == 1) {
    // Autocast semantics: the stream keeps the storage dtype promoted with the compute dtype.
    s.round.stream = rc == Rounding::bf16 ? rounding_for(emb.dtype) : Rounding::fp32;
    s.round.between = s.round.stream;
  } else {
    // FSDP2 units compute in the compute dtype (their inputs are cast to it and all their
    // weights are gathered in it); their outputs are cast to output_dtype.
    s.round.stream = rc;
    s.round.between = s.prec.output_applied ? rounding_for(*s.prec.output) : rc;
  }
  s.round_compute.resize(s.params.size());
  for (int i = 0; i < s.params.size(); ++i) {
    const ParamInfo& p = s.params.info(i);
    Rounding r = Rounding::fp32;
    if (!p.keep_fp32) {
      switch (p.role) {
        case ParamRole::linear:
        case ParamRole::bias:
        case ParamRole::lora_a:
        case ParamRole::lora_b:
          r = rc;
          break;
        case ParamRole::embedding:
          r = s.lm_head == s.embed
                  ? rc
                  : s.round.stream;  // a tied embedding is also the LM head's weight
          break;
        case ParamRole::norm:
          r = s.round.stream;
          break;
      }
    }
    s.round_compute[i] = r;
  }
}

void lower_frozen_storage(ModelState& s) {
  // FSDP2's frozen-storage preparation: ordinary frozen parameters are reduced to the compute
  // dtype before sharding (never widened: bf16 storage with fp32 compute stays bf16); trainable
  // parameters, model-protected fp32 ones and LoRA adapters keep theirs.
  for (int i = 0; i < s.params.size(); ++i) {
    ParamInfo& p = s.params.info_mut(i);
    const bool adapter = p.role == ParamRole::lora_a || p.role == ParamRole::lora_b;
    const bool narrower = dtype_size(s.prec.compute) < dtype_size(p.dtype);
    if (!p.trainable && !p.keep_fp32 && !adapter && narrower) p.dtype = s.prec.compute;
  }
}

void init_weights(ModelState& s, const std::function<bool(const std::string&)>& which) {
  const double std = s.cfg.init_std;
  const double out_std = std / std::sqrt(2.0 * std::max<int64_t>(1, s.cfg.num_layers));
  for (int i = 0; i < s.params.size(); ++i) {
    const ParamInfo& p = s.params.info(i);
    if (which && !which(p.name)) continue;
    const uint64_t seed = s.cfg.seed, stream = name_stream(p.name);
    const bool is_out = p.name.find("o_proj") != std::string::npos ||
                        p.name.find("down_proj") != std::string::npos ||
                        p.name.find(".w2.weight") != std::string::npos;  // an expert's down
    const float scale = static_cast<float>(is_out ? out_std : std);
    // Norm weights start at the identity: 1, or 0 where the norm multiplies by 1 + w (Gemma's).
    const bool norm = p.role == ParamRole::norm;
    const float norm_value = s.cfg.norm_weight == NormWeight::one_plus_fp32 ? 0.0f : 1.0f;
    // Keyed on the element's index in the full tensor, so every rank count builds the same model.
    const int64_t first = p.row_begin * p.row_len;
    dispatch_dtype(p.dtype, [&](auto tag) {
      using T = decltype(tag);
      T* out = s.params.data<T>(i).data();
      if (p.role == ParamRole::lora_a) {
        // PEFT's kaiming_uniform_(a = sqrt(5)): U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
        const float bound = 1.0f / std::sqrt(static_cast<float>(p.shape[1]));
        init_uniform<T>(s.space, out, p.local_numel, seed, stream, -bound, bound, first);
      } else if (p.role == ParamRole::lora_b) {
        init_normal<T>(s.space, out, p.local_numel, seed, stream, 0.0f, 0.0f, first);  // zeros
      } else {
        // Biases start at zero (as nn.Linear's under Hugging Face's _init_weights).
        const float sd = norm || p.role == ParamRole::bias ? 0.0f : scale;
        init_normal<T>(s.space, out, p.local_numel, seed, stream, sd, norm ? norm_value : 0.0f,
                       first);
      }
    });
  }
  host_sync();
}

}  // namespace kktrain
