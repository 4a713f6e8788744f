// Application glue shared by the commands: building the model a config describes, and reading
// model files (init_from) through io/.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "core/config.hpp"
#include "io/data.hpp"
#include "io/model_weights.hpp"
#include "model/transformer.hpp"

namespace kktrain {

// Constructs the model (with LoRA adapters when peft is set), applies freeze_config, lays it out
// over comm's ranks (frozen-storage lowering and sharding on several ranks) and allocates it;
// weights come from model.init_from when set, else the seeded init (the same full tensors on
// every rank count; each rank keeps its shard). initialize = false leaves the values to a
// checkpoint load.
std::unique_ptr<Transformer> build_model(const Config& cfg, Communicator& comm,
                                         bool initialize = true);
// The same up to the layout of rank `rank` of `world`, without allocating (planning: the audit).
// The run's starting values (model.init_from's or the seeded ones, then peft.init_from's) into a
// model build_model made without them (collective).
void initialize_model(Transformer& model, const Config& cfg, Communicator& comm);
std::unique_ptr<Transformer> plan_model(const Config& cfg, int rank, int world);

// How train and grads open token files: data.validate_at_load_tokens N checks every id of files up
// to N tokens when they are opened (default kValidateAtLoadTokens; 0: ids only as windows are
// drawn).
TokenLoadOptions token_load_options(const DataConfig& data);

// distributed.grad_sync as the FSDP units take it.
GradSync grad_sync_of(const Config& cfg);

// The storage dtype of a model file (for model.dtype: auto with model.init_from): a kktrain
// file's storage_dtype; a Hugging Face directory's torch_dtype, checked against its tensors.
// Under mpirun every rank reads the file and the ranks agree on a failure (CollectiveError: the
// lowest failing rank names it); model_file_dtype_here is one process's read.
DType model_file_dtype(const std::string& path);
DType model_file_dtype_here(const std::string& path);

// The architecture a model file records for the config (a Hugging Face directory's config.json;
// nullopt for kktrain's files, whose architecture the config gives). InputError naming the file;
// agreed on as model_file_dtype.
std::optional<ModelFileArchitecture> model_file_architecture(const std::string& path);
std::optional<ModelFileArchitecture> model_file_architecture_here(const std::string& path);

// Loads every parameter of a model file (a kktrain export, checkpoint or `kktrain grads` dump):
// each rank reads only the rows of its shard (collective over comm). Refuses, naming the file,
// tensors the model would not use (trained LoRA adapters of a model without them included), a
// tied weight given separately, and missing or mis-shaped parameters; adapters the file lacks
// take their seeded initialization (Transformer::init_weights).
void load_model_file(Transformer& model, const std::string& path, Communicator& comm);
// The same from a source already opened on every rank (kktrain eval: a LoRA checkpoint's
// adapters merged, io/lora_merge.hpp).
void load_model_source(Transformer& model, std::unique_ptr<WeightSource> src, Communicator& comm);

}  // namespace kktrain
