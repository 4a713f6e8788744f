// Application glue shared by the commands: building the model a config describes, and reading
// model files (init_from) through io/.
#pragma once

#include <memory>
#include <string>

#include "core/config.hpp"
#include "model/transformer.hpp"

namespace kktrain {

// Constructs the model (with LoRA adapters when peft is set) and applies freeze_config; weights
// come from model.init_from when set, else the seeded init. allocate = false registers
// parameters only (planning: the audit).
std::unique_ptr<Transformer> build_model(const Config& cfg, bool allocate = true);

// The storage dtype of a model file (for model.dtype: auto with model.init_from).
DType model_file_dtype(const std::string& path);

// Loads every parameter from /params/<canonical name> of an HDF5 file (a `kktrain grads` dump
// or an export); fails naming the first missing or mis-shaped parameter.
void load_model_file(Transformer& model, const std::string& path);

}  // namespace kktrain
