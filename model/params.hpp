// The model's parameters: registration under Hugging Face's canonical names (ties, model-protected
// fp32 parameters, every feature's own), the precision roles' roundings, and the deterministic
// initialization. Free functions over ModelState (model/model_state.hpp).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "model/model_state.hpp"

namespace kktrain {

// Registers `module`.weight (ParamRole::bias: `module`.bias) with `shape`, `role` and storage
// `dtype` (fp32 when model.keep_in_fp32 protects it); returns its registry index.
int add_param(ModelState& s, const std::string& module, std::vector<int64_t> shape, ParamRole role,
              DType dtype);
// Every parameter of the model in its canonical order: the embedding, the layers (each feature's
// own: model/dense_block.hpp, model/sparse_mlp.hpp), the final norm, the LM head (or its tie),
// the MTP depths; LoRA adapters after every base parameter.
void register_params(ModelState& s);
// The roles' roundings (model/model_types.hpp Roundings) and each parameter's compute rounding,
// from the precision and the registered parameters.
void assign_roundings(ModelState& s);
// FSDP2's frozen-storage preparation (several ranks): ordinary frozen parameters are reduced to
// the compute dtype before sharding.
void lower_frozen_storage(ModelState& s);
// Deterministic init from cfg.seed (Transformer::init_weights).
void init_weights(ModelState& s, const std::function<bool(const std::string& name)>& which);

}  // namespace kktrain
