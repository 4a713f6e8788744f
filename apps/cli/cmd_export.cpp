// `kktrain export CHECKPOINT --out OUT [--format hdf5|safetensors|peft] [--dtype bfloat16|float32]
// [--lora merged|separate] [--max-shard-size SIZE]`: the consolidated model file of a training
// checkpoint (io/model_export.hpp), kktrain's HDF5 or a Hugging Face directory, or its LoRA
// adapters in PEFT's format (io/peft.hpp).
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "apps/cli/commands.hpp"
#include "apps/dataprep/text_model.hpp"
#include "apps/train/memory_plan.hpp"
#include "apps/train/model_source.hpp"
#include "apps/train/run_files.hpp"
#include "core/errors.hpp"
#include "core/files.hpp"
#include "core/log.hpp"
#include "core/strings.hpp"
#include "io/checkpoint.hpp"
#include "io/durable.hpp"
#include "io/hf_config.hpp"
#include "io/model_export.hpp"
#include "io/model_weights.hpp"
#include "io/peft.hpp"

namespace kktrain {

namespace {

// "5GB", "500MB", "10GiB", "123456" (bytes); Hugging Face's units (GB = 10^9, GiB = 2^30).
int64_t parse_size(const std::string& text) {
  static const std::pair<const char*, double> units[] = {
      {"GiB", 1073741824.0}, {"MiB", 1048576.0}, {"KiB", 1024.0}, {"GB", 1e9}, {"MB", 1e6},
      {"KB", 1e3},           {"kB", 1e3},        {"B", 1.0},      {"", 1.0}};
  for (const auto& [u, scale] : units) {
    const std::string unit = u;
    if (text.size() <= unit.size() || text.compare(text.size() - unit.size(), unit.size(), unit)) {
      continue;
    }
    const std::string num = text.substr(0, text.size() - unit.size());
    char* end = nullptr;
    errno = 0;
    const double v = std::strtod(num.c_str(), &end);
    if (end == num.c_str() || *end != '\0' || errno != 0 || !(v * scale >= 1) || v * scale > 9e18) {
      break;
    }
    return static_cast<int64_t>(std::floor(v * scale));
  }
  throw UsageError("export: --max-shard-size must be a size such as 5GB, 500MB or 2GiB, got '" +
                   text + "'");
}

// The directory --out names for a safetensors or PEFT export: new, empty, or a previous export
// (`refusal`: why not, "" when it is), in a directory that takes new entries (the export is built
// beside it and renamed into place).
void check_output_dir(const std::string& out, const std::string& refusal) {
  namespace fs = std::filesystem;
  if (out.empty()) throw UsageError("--out: an output directory name is required");
  if (!refusal.empty()) throw UsageError("--out: " + refusal);
  fs::path p(out);
  if (p.filename().empty()) p = p.parent_path();  // "dir/"
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw UsageError("--out: cannot write '" + out + "': directory '" + dir.string() +
                     "' does not exist");
  }
  const fs::path probe = dir / (".kktrain-probe." + std::to_string(::getpid()));
  if (!fs::create_directory(probe, ec) || ec) {
    throw UsageError("--out: cannot create a directory in '" + dir.string() + "' to write '" + out +
                     "': " + (ec ? ec.message() : std::string("it exists")));
  }
  fs::remove(probe, ec);
}

int run_export(const ParsedArgs& args, AppContext& ctx) {
  if (ctx.mpi->size() > 1) throw UsageError("kktrain export runs on one rank");
  check_model_path(args.positionals.at(0), "export");
  if (is_hf_directory(args.positionals.at(0))) {
    throw InputError("export: '" + args.positionals.at(0) +
                     "' is a Hugging Face model directory; export writes the model of a kktrain "
                     "training checkpoint (train from the directory with model.init_from)");
  }
  const std::string file = resolve_checkpoint(args.positionals.at(0), "export");
  DType dtype = DType::bfloat16;  // an empty --dtype: bfloat16, or (peft) the adapters' own
  const std::string& d = args.options.at("--dtype");
  if (!d.empty() && (!parse_dtype(d, &dtype) || dtype == DType::float16)) {
    throw UsageError("export: --dtype must be bfloat16 or float32, got '" + d + "'");
  }
  const std::optional<LoraExport> lora = parse_lora_export(args.options.at("--lora"));
  if (!lora) {
    throw UsageError("export: --lora must be merged or separate, got '" +
                     args.options.at("--lora") + "'");
  }
  const std::optional<ExportKind> kind = parse_export_kind(args.options.at("--format"));
  if (!kind) {
    throw UsageError("export: --format must be hdf5, safetensors or peft, got '" +
                     args.options.at("--format") + "'");
  }
  const std::string format = export_kind_name(*kind);
  ExportOptions o;
  o.dtype = dtype;
  o.lora = *lora;
  o.format = *kind == ExportKind::hdf5 ? ExportFormat::hdf5 : ExportFormat::safetensors;
  o.max_shard_bytes = parse_size(args.options.at("--max-shard-size"));
  o.check_source = export_source_check(o);
  o.extra_files = export_text_files(file);
  const std::string& out = args.options.at("--out");
  // Never where kktrain prunes or moves: the exported checkpoint's root, or any other.
  const std::filesystem::path step_dir = std::filesystem::path(file).parent_path();
  const std::string refusal = checkpoint_root_refusal(
      out, {step_of(step_dir.filename().string()) >= 0 ? step_dir.parent_path().string() : ""});
  if (!refusal.empty()) throw UsageError("--out: " + refusal);
  // A directory export through a symbolic link writes into its target (the link stays).
  const std::string target = export_directory_target(out);
  if (*kind == ExportKind::peft) {
    check_output_dir(target, peft_out_refusal(out));
  } else if (o.format == ExportFormat::hdf5) {
    check_output_file("--out", out, {{"checkpoint being exported", file}});
  } else {
    check_output_dir(target, safetensors_out_refusal(out));
  }
  const double t0 = now_s();
  const int64_t bytes =
      *kind == ExportKind::peft
          ? export_peft(file, out,
                        PeftExportOptions{d.empty() ? std::nullopt : std::optional(dtype)})
          : export_checkpoint(file, out, o);
  // The export streams tensor by tensor: its peak RSS (this program's own, VmHWM) stays near
  // the program's and runtime's size whatever the model's.
  char tail[96];
  std::snprintf(tail, sizeof(tail), " bytes of weights in %.2f s, peak RSS %.1f MiB)", now_s() - t0,
                peak_rss_bytes() / double(1 << 20));
  const std::string dt =
      d.empty() && *kind == ExportKind::peft ? "the adapters' dtype" : dtype_name(dtype);
  log::info("export: " + file + " -> " + out + " (" + format + ", " + dt + ", " +
            std::to_string(bytes) + tail);
  return 0;
}

}  // namespace

Command export_command() {
  CommandSpec s;
  s.name = "export";
  s.synopsis =
      "export CHECKPOINT --out OUT [--format hdf5|safetensors|peft] [--dtype bfloat16|float32] "
      "[--lora merged|separate] [--max-shard-size SIZE]";
  s.summary = "Write the consolidated model (weights only, bf16 by default) of a checkpoint.";
  s.details =
      "CHECKPOINT is a checkpoint file, a step directory, a checkpoint root with a 'latest'\n"
      "pointer, or a run directory. Values are rounded once from the fp32 master where the\n"
      "checkpoint has one (float32: the master itself); model.keep_in_fp32 parameters stay\n"
      "float32. Every tensor is checked against its checksum as it is read.\n"
      "--format hdf5 (default): OUT is a file holding /params/<canonical name>, a tied weight\n"
      "once with an 'alias' attribute, and the architecture as root attributes. LoRA adapters\n"
      "are merged into their base weights (default) or kept as separate datasets.\n"
      "--format safetensors: OUT is a Hugging Face model directory (new, empty, or a previous\n"
      "export, which is replaced whole): config.json, model.safetensors or shards of at most\n"
      "--max-shard-size (default 5GB; units B, KB, MB, GB, KiB, MiB, GiB) with\n"
      "model.safetensors.index.json. Tensors under their canonical names; a tied lm_head is\n"
      "not written; the multi-token-prediction head is left out; adapters are merged.\n"
      "Transformers, vLLM and llama.cpp's converter load it; so does model.init_from.\n"
      "--format peft: OUT is a PEFT LoRA adapter directory (adapter_config.json,\n"
      "adapter_model.safetensors) that PEFT and vLLM load beside the base model, and\n"
      "peft.init_from reads; --dtype defaults to the adapters' own. Refused for a checkpoint\n"
      "without LoRA adapters.\n"
      "A directory OUT keeps the user's README.md; OUT a symbolic link to a directory is\n"
      "written into its target (the link stays).\n"
      "OUT may not lie inside a checkpoint root (a later run would prune it); temporaries that\n"
      "killed exports left beside OUT are removed first (files, and directories holding only\n"
      "an export's files).\n";
  s.positionals = {"CHECKPOINT"};
  s.takes_overrides = false;
  s.options = {{"--out", ""},
               {"--dtype", ""},
               {"--lora", "merged"},
               {"--format", "hdf5"},
               {"--max-shard-size", "5GB"}};
  s.required_options = {"--out"};
  return Command{s, run_export, true};
}

}  // namespace kktrain
