// peft.init_from and the run's adapter export (apps/train/peft_run.hpp).
#include "apps/train/peft_run.hpp"

#include <filesystem>

#include "apps/train/checkpointing.hpp"
#include "apps/train/run_files.hpp"
#include "core/errors.hpp"
#include "core/log.hpp"
#include "core/param_registry.hpp"
#include "core/strings.hpp"
#include "io/peft.hpp"
#include "model/param_io.hpp"
#include "parallel/agree.hpp"

namespace kktrain {

namespace {

bool is_adapter(const ParamInfo& p) {
  return p.role == ParamRole::lora_a || p.role == ParamRole::lora_b;
}

// What the model holds, for checking the directory against it.
PeftExpectation expectation(const ParamRegistry& reg, const PeftConfig& peft) {
  PeftExpectation e;
  e.r = peft.dim;
  e.alpha = peft.alpha;
  for (int i = 0; i < reg.size(); ++i) {
    const ParamInfo& p = reg.info(i);
    if (is_adapter(p) && !starts_with(p.name, "mtp.")) e.adapters[p.name] = p.shape;
    if (p.role == ParamRole::linear && peft_projection_module(p.module)) {
      e.modules.push_back(p.module);
    }
  }
  return e;
}

}  // namespace

std::unique_ptr<PeftAdapterDir> open_peft_init(const Transformer& model, const Config& cfg,
                                               Communicator& comm, ModelValues values) {
  if (!cfg.peft.enabled || !cfg.peft.init_from) return nullptr;
  const std::string& dir = *cfg.peft.init_from;
  if (values == ModelValues::from_checkpoint) {
    log::info("peft.init_from: " + dir +
              " is not read: the run resumes from a checkpoint, whose adapters it continues");
    return nullptr;
  }
  const PeftExpectation e = expectation(model.params(), cfg.peft);
  return collectively(comm, [&] { return std::make_unique<PeftAdapterDir>(dir, e); });
}

void load_peft_init(Transformer& model, const PeftAdapterDir* dir, Communicator& comm) {
  if (!dir) return;
  ParamRegistry& reg = model.params();
  int n = 0, mtp = 0;
  for (int i = 0; i < reg.size(); ++i) {
    const ParamInfo& p = reg.info(i);
    if (is_adapter(p) && starts_with(p.name, "mtp.")) ++mtp;
    if (!is_adapter(p) || starts_with(p.name, "mtp.")) continue;
    const std::vector<float> rows =
        collectively(comm, [&] { return dir->read_rows_f32(p.name, p.row_begin, p.local_rows); });
    shard_from_host(reg, i, rows);
    ++n;
  }
  log::info("peft.init_from: " + dir->dir() + ": " + std::to_string(n) +
            " LoRA adapter tensors read; training starts from them" +
            (mtp > 0 ? " (the multi-token-prediction head's " + std::to_string(mtp) +
                           " keep their initialization: PEFT's files have no such head)"
                     : std::string()));
}

std::string run_adapter_path(const Config& cfg) {
  return (std::filesystem::path(cfg.train.output_dir) / "adapter").string();
}

namespace {

// (what, path) of each entry of directory `dir` (none when it is not one).
std::vector<std::pair<std::string, std::string>> entries(const std::string& dir,
                                                         const std::string& what) {
  std::vector<std::pair<std::string, std::string>> out;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return out;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    out.emplace_back(what, e.path().string());
  }
  return out;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> peft_run_outputs(const Config& cfg) {
  if (cfg.checkpoint.export_format != ExportKind::peft) return {};
  return entries(run_adapter_path(cfg), "a file of the run's adapter export directory");
}

std::vector<std::pair<std::string, std::string>> peft_run_inputs(const Config& cfg,
                                                                 ModelValues values) {
  if (!cfg.peft.enabled || !cfg.peft.init_from || values == ModelValues::from_checkpoint) {
    return {};
  }
  return entries(*cfg.peft.init_from, "peft.init_from");
}

void check_peft_run_end(const Config& cfg) {
  if (cfg.checkpoint.export_format != ExportKind::peft) return;
  const std::string out = run_adapter_path(cfg);
  const std::string key = "checkpoint.export_format: peft writes " + out + ", but ";
  const std::string refusal = peft_out_refusal(out);
  if (!refusal.empty()) throw UsageError(key + refusal);
  const std::string inside = checkpoint_root_refusal(out, {checkpoint_root(cfg)});
  if (!inside.empty()) throw UsageError(key + inside);
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path root = fs::weakly_canonical(fs::absolute(checkpoint_root(cfg)), ec);
  const fs::path dir = fs::weakly_canonical(fs::absolute(out), ec);
  if (root.string().rfind(dir.string() + "/", 0) == 0 || root == dir) {
    throw UsageError(key + "the checkpoint root '" + checkpoint_root(cfg) +
                     "' lies inside it, and every export replaces it whole");
  }
}

void export_run_adapters(const Config& cfg, const std::string& file) {
  if (cfg.checkpoint.export_format != ExportKind::peft) return;
  const std::string out = run_adapter_path(cfg);
  const int64_t bytes = export_peft(file, out, PeftExportOptions{});
  log::info("export: " + out + " (peft, the adapters in their own dtype, " + std::to_string(bytes) +
            " bytes)");
}

}  // namespace kktrain
