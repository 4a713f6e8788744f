#include "apps/train/run_files.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <utility>
#include <vector>

#include "apps/train/checkpointing.hpp"
#include "apps/train/peft_run.hpp"
#include "core/errors.hpp"
#include "core/files.hpp"
#include "core/log.hpp"
#include "io/checkpoint.hpp"
#include "io/data.hpp"
#include "io/durable.hpp"
#include "io/hf_config.hpp"
#include "io/model_export.hpp"
#include "text/tokenizer_files.hpp"

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
  return (out / (cfg.checkpoint.export_format == ExportKind::safetensors ? "export" : "export.h5"))
      .string();
}

namespace {

using NamedPaths = std::vector<std::pair<std::string, std::string>>;  // {what, path}

// Every regular file below `dir` (if it is a directory), named `what`.
void add_files_below(NamedPaths* out, const std::string& dir, const std::string& what) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec)) out->emplace_back(what, it->path().string());
  }
}

// What the run writes, renames or removes: every file it may touch.
NamedPaths run_outputs(const Config& cfg) {
  const fs::path out(cfg.train.output_dir);
  const std::string export_path = run_export_path(cfg);
  NamedPaths outputs = {
      {"the run's metrics file", (out / "metrics.jsonl").string()},
      {"the run's export", export_path},
  };
  std::error_code ec;
  if (cfg.checkpoint.export_format == ExportKind::safetensors) {
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
  for (auto& o : peft_run_outputs(cfg)) outputs.push_back(std::move(o));
  const std::string root = checkpoint_root(cfg);
  add_files_below(&outputs, root, "a file under the checkpoint root " + root);
  // The run's caches, cleared whenever what they were made from changes
  // (apps/dataprep/example_cache.hpp, apps/dataprep/text_data.hpp): every file in them.
  for (const char* cache : {"examples", "tokens"}) {
    const std::string dir = (out / cache).string();
    add_files_below(&outputs, dir, "a file in the run's cache directory " + dir);
  }
  return outputs;
}

// The model's inputs: model.tokenizer (its files, present or not: no output may go there) and
// model.init_from (a Hugging Face directory's files, or the checkpoint file it names).
void add_model_inputs(NamedPaths* inputs, const Config& cfg,
                      const std::optional<std::string>& resume_file) {
  std::error_code ec;
  if (cfg.model.tokenizer) {
    inputs->emplace_back("model.tokenizer", *cfg.model.tokenizer);
    if (fs::is_directory(*cfg.model.tokenizer, ec)) {
      const text::TokenizerFiles files = text::locate_tokenizer(*cfg.model.tokenizer);
      inputs->emplace_back("model.tokenizer", files.json);
      for (const char* f : {"tokenizer_config.json", "chat_template.jinja"}) {
        inputs->emplace_back("model.tokenizer", files.beside(f));
      }
    }
  }
  if (!cfg.model.init_from || resume_file) return;
  const std::string& from = *cfg.model.init_from;
  if (fs::is_directory(from, ec) && fs::exists(fs::path(from) / "config.json", ec)) {
    for (const auto& e : fs::directory_iterator(from, ec)) {
      inputs->emplace_back("model.init_from", e.path().string());  // a Hugging Face directory
    }
    return;
  }
  inputs->emplace_back("model.init_from", from);
  if (fs::is_directory(from, ec)) {
    try {
      inputs->back().second = resolve_checkpoint(from, "model.init_from");
    } catch (const Error&) {
    }
  }
}

// What the run reads: the config, the data, the template, the model's files, the adapters.
NamedPaths run_inputs(const Config& cfg, const std::optional<std::string>& resume_file) {
  NamedPaths inputs = {{"CONFIG", cfg.source}};
  try {
    for (const auto& f : data_files(cfg.data)) inputs.emplace_back("data.path", f);
  } catch (const InputError&) {  // a glob matching nothing: the data loader says so
  }
  if (cfg.data.val_path) inputs.emplace_back("data.val_path", *cfg.data.val_path);
  if (cfg.data.chat_template) inputs.emplace_back("data.chat_template", *cfg.data.chat_template);
  add_model_inputs(&inputs, cfg, resume_file);
  for (auto& i : peft_run_inputs(
           cfg, resume_file ? ModelValues::from_checkpoint : ModelValues::initialized)) {
    inputs.push_back(std::move(i));
  }
  return inputs;
}

}  // namespace

void check_run_files(const Config& cfg, const std::optional<std::string>& resume_file) {
  const NamedPaths outputs = run_outputs(cfg);
  std::set<FileId> skip;  // the checkpoint the run resumes from is read, then left alone
  if (resume_file) {
    if (auto id = id_of(*resume_file)) skip.insert(*id);
  }
  for (const auto& [what, in] : run_inputs(cfg, resume_file)) {
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

namespace {

// `p` absolute, with the symbolic links of its existing part resolved and no trailing "/".
fs::path resolved(const std::string& p) {
  std::error_code ec;
  fs::path r = fs::weakly_canonical(fs::absolute(p, ec), ec);
  if (ec) r = fs::absolute(p, ec).lexically_normal();
  while (r.has_relative_path() && r.filename().empty()) r = r.parent_path();
  return r;
}

// True when `inner` is `outer` or lies under it (whole components).
bool is_within(const fs::path& inner, const fs::path& outer) {
  auto i = inner.begin();
  for (auto o = outer.begin(); o != outer.end(); ++o, ++i) {
    if (i == inner.end() || *i != *o) return false;
  }
  return true;
}

// True when directory `d` is a checkpoint root: it holds a `latest` file or a step directory.
bool looks_like_checkpoint_root(const fs::path& d) {
  std::error_code ec;
  if (fs::is_regular_file(d / "latest", ec)) return true;
  for (const auto& e : fs::directory_iterator(d, ec)) {
    if (step_of(e.path().filename().string()) >= 0 && e.is_directory(ec)) return true;
  }
  return false;
}

// The checkpoint root holding `path` (resolved), or "": one of `roots` (empty ones skipped), or
// `path` or a directory above it that looks like one (earlier_N/ does too).
std::string checkpoint_root_holding(const fs::path& path, const std::vector<std::string>& roots) {
  for (const auto& r : roots) {
    if (!r.empty() && is_within(path, resolved(r))) return resolved(r).string();
  }
  for (fs::path a = path; a.has_relative_path(); a = a.parent_path()) {
    if (looks_like_checkpoint_root(a)) return a.string();
  }
  return "";
}

// The run's export target: a symbolic link that leads nowhere, or (HDF5) anything but a file.
void check_export_target(const Config& cfg, const std::string& path) {
  std::error_code ec;
  const auto st = fs::symlink_status(path, ec);
  if (!fs::exists(st)) return;  // the export creates it
  const std::string what = "train.output_dir: the run's export '" + path + "' ";
  const std::string fix =
      "; the export at the end of the run cannot go there (move it away, or "
      "choose another train.output_dir)";
  if (fs::is_symlink(st) && !fs::exists(path, ec)) {
    throw UsageError(what + "is a symbolic link to '" + fs::read_symlink(path, ec).string() +
                     "', which does not exist" + fix);
  }
  // safetensors: check_run_files refuses others
  if (cfg.checkpoint.export_format == ExportKind::safetensors) return;
  if (const auto why = unreadable_regular_file(path)) {
    struct stat s {};
    if (::stat(path.c_str(), &s) != 0 || !S_ISREG(s.st_mode)) throw UsageError(what + *why + fix);
  }
}

}  // namespace

std::string checkpoint_root_refusal(const std::string& out, const std::vector<std::string>& roots) {
  const std::string root = checkpoint_root_holding(resolved(out), roots);
  if (root.empty()) return "";
  return "'" + out + "' lies inside the checkpoint root '" + root +
         "', where kktrain prunes and moves step directories (a later run would remove or move "
         "it with them); choose a path outside it";
}

void check_run_end(const Config& cfg, int rank) {
  const fs::path out(cfg.train.output_dir);
  const std::string export_path = run_export_path(cfg);
  const std::string metrics = (out / "metrics.jsonl").string();
  const std::string root = checkpoint_root(cfg);
  const std::string root_key =
      cfg.checkpoint.dir ? "checkpoint.dir" : "checkpoint.dir (<train.output_dir>/checkpoints)";
  // 1. Nothing the run writes lies where its saves prune and move, nor the reverse.
  if (cfg.checkpoint.export_format == ExportKind::safetensors &&
      is_within(resolved(root), resolved(export_path))) {
    throw UsageError(root_key + ": '" + root + "' lies inside the run's export directory '" +
                     export_path +
                     "', which every export replaces whole; choose a checkpoint.dir "
                     "outside it");
  }
  for (const auto& [what, path] :
       {std::pair<std::string, std::string>{"export", export_path}, {"metrics file", metrics}}) {
    const std::string refusal = checkpoint_root_refusal(path, {root});
    if (!refusal.empty()) throw UsageError(root_key + ": the run's " + what + " " + refusal);
  }
  // 2. The export: a target it can replace, a format the model can be written in.
  check_export_target(cfg, export_path);
  check_peft_run_end(cfg);  // checkpoint.export_format: peft: the adapter directory
  if (cfg.checkpoint.export_format == ExportKind::safetensors) {
    try {
      hf_config_json(cfg.model, cfg.checkpoint.export_dtype);
    } catch (const Error& e) {
      throw UsageError(std::string("checkpoint.export_format: safetensors: ") + e.what() +
                       " (checked before the first step, not after the run)");
    }
  }
  // The earlier metrics.jsonl is moved aside and, on resume, read back: a file, nothing else.
  std::error_code ec;
  if (fs::exists(fs::symlink_status(metrics, ec))) {
    if (const auto why = unreadable_regular_file(metrics)) {
      throw UsageError("train.output_dir: '" + metrics + "' " + *why +
                       "; the run moves an earlier metrics.jsonl aside and keeps its rows (move "
                       "it away)");
    }
  }
  // 3. The directories the run writes into: makeable and writable (nothing is made here).
  if (const std::string why = unwritable_dir(cfg.train.output_dir); !why.empty()) {
    throw UsageError("train.output_dir: " + why);
  }
  if (const std::string why = unwritable_dir(root); !why.empty()) {
    throw UsageError(root_key + ": " + why);
  }
  // 4. Rank 0, which writes: what killed exports (and saves) left behind goes now.
  if (rank != 0) return;
  for (const auto& [what, p] : {std::pair<std::string, std::string>{"export", export_path},
                                {"checkpoint", (fs::path(root) / "latest").string()}}) {
    const std::string removed = removed_temporaries_text(remove_stale_temporaries(p));
    if (!removed.empty()) log::info(what + ": " + removed);
  }
}

}  // namespace kktrain
