// One loader and one validation for every command that reads a model (model.init_from for train
// and grads, generate, export, audit, inspect), so that what one accepts the others accept and
// what one refuses the others refuse with the same line.
//
//   - the path: a Hugging Face model's file given for its directory, or a directory of
//     safetensors without config.json, is named as such (open_weights, check_model_path in
//     io/model_weights.hpp);
//   - the architecture a file records (config.json, or a kktrain file's attributes) goes through
//     the config's own keys and bounds (model_file_config), so max_position_embeddings: 10^12
//     is refused as it is in a training config;
//   - the tensors against the model: none it does not use, none missing, none of another shape,
//     a tied weight not given separately (check_model_file), from the headers alone;
//   - the values as they stream in: none NaN or infinite (io/finite_weights.hpp).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "core/config.hpp"
#include "core/param_registry.hpp"
#include "io/model_export.hpp"
#include "io/model_weights.hpp"

namespace kktrain {

// What a checked file's LoRA adapters may be: refused unless the model has them (init_from,
// generate after merging), or listed as they are (an HDF5 export with --lora separate).
enum class AdapterTensors { refuse, keep };

// What in the file model `reg` cannot take, before anything is read: adapters the model does
// not have (their training would be lost), tensors it does not use, a tied weight given
// separately, missing or mis-shaped parameters. InputError naming `what`, the file and the
// tensor. Every rank sees the same file and model.
void check_model_file(const WeightSource& src, const ParamRegistry& reg, const std::string& what,
                      AdapterTensors adapters = AdapterTensors::refuse);

// The architecture a file records (a Hugging Face directory's config.json, a kktrain file's
// attributes) as model.* values, for a config whose model.init_from is the file. InputError
// naming `what`.
ModelFileArchitecture source_architecture(const WeightSource& src, const std::string& what);

// The model a file records (a Hugging Face directory's config.json, a kktrain file's
// attributes), read through the config's keys and bounds as model.init_from's architecture is:
// a value no training config may hold is refused the same way, naming the file.
ModelConfig model_file_config(const WeightSource& src, const std::string& what);

// model_file_config, then check_model_file against the model it describes (one process).
ModelConfig check_self_described(const WeightSource& src, const std::string& what,
                                 AdapterTensors adapters = AdapterTensors::refuse);

// The checks an export applies to the checkpoint it reads (ExportOptions::check_source, for
// `kktrain export` and a run's own export): check_self_described (adapters kept when exported
// separately), then every value finite in the dtype it is exported in.
std::function<std::unique_ptr<WeightSource>(std::unique_ptr<WeightSource>)> export_source_check(
    const ExportOptions& o);

}  // namespace kktrain
