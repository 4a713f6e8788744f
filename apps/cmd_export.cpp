// `kktrain export CHECKPOINT --out FILE.h5 [--dtype bfloat16|float32] [--lora merged|separate]`:
// the consolidated model file of a training checkpoint (io/model_export.hpp).
#include <cstdio>
#include <string>

#include "apps/commands.hpp"
#include "core/errors.hpp"
#include "core/log.hpp"
#include "io/checkpoint.hpp"
#include "io/model_export.hpp"

namespace kktrain {

namespace {

int run_export(const ParsedArgs& args, AppContext& ctx) {
  if (ctx.mpi->size() > 1) throw UsageError("kktrain export runs on one rank");
  const std::string file = resolve_checkpoint(args.positionals.at(0), "export");
  DType dtype;
  const std::string& d = args.options.at("--dtype");
  if (!parse_dtype(d, &dtype) || dtype == DType::float16) {
    throw UsageError("export: --dtype must be bfloat16 or float32, got '" + d + "'");
  }
  const std::string& l = args.options.at("--lora");
  if (l != "merged" && l != "separate") {
    throw UsageError("export: --lora must be merged or separate, got '" + l + "'");
  }
  const std::string& out = args.options.at("--out");
  check_output_file("--out", out, {{"checkpoint being exported", file}});
  const int64_t bytes = export_checkpoint(
      file, out, dtype, l == "merged" ? LoraExport::merged : LoraExport::separate);
  log::info("export: " + file + " -> " + out + " (" + dtype_name(dtype) + ", " +
            std::to_string(bytes) + " bytes of weights)");
  return 0;
}

}  // namespace

Command export_command() {
  CommandSpec s;
  s.name = "export";
  s.synopsis =
      "export CHECKPOINT --out FILE.h5 [--dtype bfloat16|float32] [--lora merged|separate]";
  s.summary = "Write the consolidated model file (weights only, bf16 by default) of a checkpoint.";
  s.details =
      "CHECKPOINT is a checkpoint file, a step directory, or a checkpoint root with a 'latest'\n"
      "pointer. FILE.h5 holds /params/<canonical name> in --dtype (model.keep_in_fp32\n"
      "parameters stay float32), a tied weight once with an 'alias' attribute, and the\n"
      "architecture as root attributes. Values are rounded once from the fp32 master where the\n"
      "checkpoint has one. LoRA adapters are merged into their base weights (default) or kept\n"
      "as separate datasets. Every dataset is checked against its checksum first.\n";
  s.positionals = {"CHECKPOINT"};
  s.takes_overrides = false;
  s.options = {{"--out", ""}, {"--dtype", "bfloat16"}, {"--lora", "merged"}};
  s.required_options = {"--out"};
  return Command{s, run_export, true};
}

}  // namespace kktrain
