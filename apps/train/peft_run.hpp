// A run's LoRA adapters in PEFT's format (io/peft.hpp): peft.init_from read into a built model,
// and checkpoint.export_format: peft's adapter directory at the end of a run.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/config.hpp"
#include "io/peft.hpp"
#include "model/transformer.hpp"

namespace kktrain {

class Communicator;

// How the model was given its values: its own initialization (or model.init_from), or a
// checkpoint to resume from, which then provides every value, adapters included.
enum class ModelValues { initialized, from_checkpoint };

// peft.init_from (when set), opened once the model is built and laid out, before any value is
// read: checked against the run (io/peft.hpp PeftAdapterDir), InputError naming the file and the
// key or tensor, agreed by every rank. Null without peft.init_from, and with
// ModelValues::from_checkpoint, where one line says the checkpoint's adapters win. Collective.
std::unique_ptr<PeftAdapterDir> open_peft_init(const Transformer& model, const Config& cfg,
                                               Communicator& comm, ModelValues values);
// After the model's initialization (or model.init_from) and before any optimizer state exists:
// every adapter outside the MTP head takes the directory's values (each rank its rows; bf16
// adapters round the file's values once). Nothing for a null `dir`. Collective over comm.
void load_peft_init(Transformer& model, const PeftAdapterDir* dir, Communicator& comm);

// <train.output_dir>/adapter: where checkpoint.export_format: peft writes the adapters.
std::string run_adapter_path(const Config& cfg);

// For apps/train/run_files.hpp check_run_files, which refuses an input that is a file the run
// writes: (role, path) of every file of run_adapter_path (checkpoint.export_format: peft; the
// export replaces the directory), and (key, path) of every file peft.init_from reads (none when the
// run resumes from a checkpoint, whose adapters it continues).
std::vector<std::pair<std::string, std::string>> peft_run_outputs(const Config& cfg);
std::vector<std::pair<std::string, std::string>> peft_run_inputs(const Config& cfg,
                                                                 ModelValues values);

// What the adapter export at the end of a run needs, checked before its first step (UsageError):
// with checkpoint.export_format: peft, run_adapter_path replaceable by an export
// (io/peft.hpp peft_out_refusal) and outside the checkpoint root, the root not inside it.
void check_peft_run_end(const Config& cfg);

// With checkpoint.export_format: peft, writes run_adapter_path from checkpoint file `file` (the
// adapters in their own storage dtype) and logs it; otherwise nothing. One process.
void export_run_adapters(const Config& cfg, const std::string& file);

}  // namespace kktrain
