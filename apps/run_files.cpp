#include "apps/run_files.hpp"

#include <sys/stat.h>

#include <filesystem>
#include <set>
#include <utility>
#include <vector>

#include "apps/checkpointing.hpp"
#include "core/errors.hpp"
#include "io/checkpoint.hpp"
#include "io/data.hpp"
#include "io/model_export.hpp"

namespace kktrain {

namespace fs = std::filesystem;

namespace {

using FileId = std::pair<dev_t, ino_t>;

std::optional<FileId> id_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return FileId{st.st_dev, st.st_ino};
}

}  // namespace

std::string run_export_path(const Config& cfg) {
  const fs::path out(cfg.train.output_dir);
  return (out / (cfg.checkpoint.export_format == "safetensors" ? "export" : "export.h5")).string();
}

void check_run_files(const Config& cfg, const std::optional<std::string>& resume_file) {
  // What the run writes, renames or removes: every file it may touch, by identity.
  const fs::path out(cfg.train.output_dir);
  const std::string export_path = run_export_path(cfg);
  std::vector<std::pair<std::string, std::string>> outputs = {
      {"the run's metrics file", (out / "metrics.jsonl").string()},
      {"the run's export", export_path},
  };
  std::error_code ec;
  if (cfg.checkpoint.export_format == "safetensors") {
    const std::string refusal = safetensors_out_refusal(export_path);
    if (!refusal.empty()) {
      throw UsageError("checkpoint.export_format: safetensors writes " + export_path + ", but " +
                       refusal);
    }
    if (fs::is_directory(export_path, ec)) {
      for (const auto& e : fs::directory_iterator(export_path, ec)) {
        outputs.emplace_back("a file of the run's export directory", e.path().string());
      }
    }
  }
  std::set<FileId> skip;  // the checkpoint the run resumes from is read, then left alone
  if (resume_file) {
    if (auto id = id_of(*resume_file)) skip.insert(*id);
  }
  const std::string root = checkpoint_root(cfg);
  if (fs::is_directory(root, ec)) {
    for (auto it = fs::recursive_directory_iterator(root, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (it->is_regular_file(ec)) {
        outputs.emplace_back("a file under the checkpoint root " + root, it->path().string());
      }
    }
  }
  std::vector<std::pair<std::string, std::string>> inputs = {{"CONFIG", cfg.source}};
  try {
    for (const auto& f : data_files(cfg.data)) inputs.emplace_back("data.path", f);
  } catch (const InputError&) {  // a glob matching nothing: the data loader says so
  }
  if (cfg.model.init_from && !resume_file && fs::is_directory(*cfg.model.init_from, ec) &&
      fs::exists(fs::path(*cfg.model.init_from) / "config.json", ec)) {
    for (const auto& e : fs::directory_iterator(*cfg.model.init_from, ec)) {
      inputs.emplace_back("model.init_from", e.path().string());  // a Hugging Face directory
    }
  } else if (cfg.model.init_from && !resume_file) {
    inputs.emplace_back("model.init_from", *cfg.model.init_from);
    if (fs::is_directory(*cfg.model.init_from, ec)) {
      try {
        inputs.back().second = resolve_checkpoint(*cfg.model.init_from, "model.init_from");
      } catch (const Error&) {
      }
    }
  }
  for (const auto& [what, in] : inputs) {
    const auto in_id = id_of(in);
    if (!in_id || skip.count(*in_id)) continue;
    for (const auto& [role, path] : outputs) {
      const auto out_id = id_of(path);
      if (out_id && *out_id == *in_id) {
        throw UsageError(what + ": '" + in + "' is " + role + " ('" + path +
                         "'), which this run writes over, moves or removes; refusing to touch an "
                         "input (copy it elsewhere or choose another train.output_dir)");
      }
    }
  }
}

}  // namespace kktrain
