// The consolidated export of a training checkpoint: model weights only, in files that a reader
// without kktrain can rebuild the model from. Two formats, two sinks of one streaming loop:
//
// HDF5 (export.h5; h5py, h5dump, kktrain's own init_from):
//   /params/<canonical name>   full tensors in the export dtype (bf16 by default); parameters
//                              the model keeps in fp32 (model.keep_in_fp32) stay fp32; a tied
//                              weight appears once, with an "alias" attribute naming the others
//   root attributes            format "kktrain-export", format_version, storage_dtype (the
//                              export dtype), the architecture, the checkpoint's step, and the
//                              LoRA scale when adapters are exported separately
//
// safetensors (a Hugging Face model directory; transformers, vLLM, llama.cpp's converter, and
// kktrain's own init_from): config.json (the architecture under Hugging Face's keys,
// architectures ["LlamaForCausalLM"], model_type "llama", torch_dtype), model.safetensors or
// shards model-0000K-of-0000N.safetensors of at most max_shard_bytes each (a larger tensor alone
// in its shard) with model.safetensors.index.json (metadata.total_size, weight_map), tensors
// under their canonical names, __metadata__ {"format": "pt"}. A tied LM head is not written
// (Hugging Face ties it again from tie_word_embeddings); the MTP head is left out (inference
// stacks do not know it); adapters are always merged.
//
// Values come from the fp32 master when the checkpoint has one (an fp32 master, or the bf16
// parameter rebuilt with its remainder), rounded once to nearest even: never bf16 -> bf16 of an
// already rounded value; float32 is the master bit for bit. LoRA adapters are merged into their
// base weights (io/lora_merge.hpp) or, in HDF5 only, written separately.
//
// Streamed: tensor by tensor in pieces of rows (kStreamPieceBytes of fp32 values), so one process
// never holds more than a piece of a tensor (and a LoRA pair's small factors) whatever the model's
// size. Atomic: written under a temporary name beside `out` (a file, or a directory), synced, put
// in its place by one rename (a directory replacing a previous export is swapped in with
// renameat2 RENAME_EXCHANGE where the file system has it); a failure or a kill leaves the
// previous export (or none), never part of one.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.hpp"

namespace kktrain {

class WeightSource;

struct FileAttrs;
struct ModelConfig;

// A small file a safetensors export writes beside the weights (the tokenizer's files).
struct ExportFile {
  std::string name;  // in the export directory: "tokenizer.json"
  std::string content;
};

enum class LoraExport { merged, separate };
// The choice a name spells ("merged", "separate"), if any: `kktrain export --lora`.
std::optional<LoraExport> parse_lora_export(const std::string& name);
enum class ExportFormat { hdf5, safetensors };

struct ExportOptions {
  DType dtype = DType::bfloat16;
  LoraExport lora = LoraExport::merged;
  ExportFormat format = ExportFormat::hdf5;
  int64_t max_shard_bytes = 5'000'000'000;  // safetensors: Hugging Face's default (5 GB)
  // The checks every model reader applies (apps/train/model_source.hpp), given the opened
  // checkpoint (adapters merged or not, as asked) and returning the source to stream from; unset:
  // none.
  std::function<std::unique_ptr<WeightSource>(std::unique_ptr<WeightSource>)> check_source;
  // safetensors: the files written beside the weights, given the checkpoint's root attributes
  // and the exported model; unset: none.
  std::function<std::vector<ExportFile>(const FileAttrs&, const ModelConfig&)> extra_files;
};

// Exports checkpoint file `checkpoint` to `out` (a new file or directory, never one of the
// inputs); returns the bytes of tensor data written. First removes the temporaries that killed
// exports to `out` left (io/durable.hpp remove_stale_temporaries), with one line saying so.
int64_t export_checkpoint(const std::string& checkpoint, const std::string& out,
                          const ExportOptions& options);

// Why directory `out` may not be replaced by a safetensors export ("" when it may): it exists
// and is not a directory, or holds anything but the files an export writes (config.json,
// model*.safetensors, model.safetensors.index.json, and the tokenizer's files: tokenizer.json,
// tokenizer_config.json, special_tokens_map.json, chat_template.jinja, tokenizer.model).
std::string safetensors_out_refusal(const std::string& out);

}  // namespace kktrain
