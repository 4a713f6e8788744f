// The files a training run reads and the files it writes, kept apart: checked against each other
// before any work (the same file under any name, hard and symbolic links included), and the
// checkpoint root made the run's own before its first save.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/config.hpp"

namespace kktrain {

// UsageError (exit 2) when an input of the run (the CONFIG file, data.path, model.init_from, the
// checkpoint resumed from) is a file the run would overwrite, rename or remove: metrics.jsonl
// (kept as metrics.jsonl.N), the export (a file, or every file of the export directory, which is
// replaced whole), anything under the checkpoint root other than the checkpoint it resumes
// from, or anything in the run's caches <train.output_dir>/examples/ and tokens/ (cleared when
// their inputs change). data.path's files (lists and globs expanded), data.val_path,
// data.chat_template, model.tokenizer (and its directory's tokenizer files) and every file of a
// Hugging Face model.init_from directory are inputs. Also refuses an export directory that holds
// files an export does not write (it would be replaced). `resume_file`: the checkpoint file the run
// resumes from, if any.
void check_run_files(const Config& cfg, const std::optional<std::string>& resume_file);

// Where the run writes its export: <train.output_dir>/export.h5, or the directory
// <train.output_dir>/export with checkpoint.export_format: safetensors.
std::string run_export_path(const Config& cfg);

// Why output `out` may not be written where it is ("" when it may): it lies inside a checkpoint
// root, where kktrain prunes and moves step directories (so a later run would remove or move it)
// - one of `roots`, or `out` or a directory above it that holds `latest` or step_N directories.
// Symbolic links in the existing part of each path are followed.
std::string checkpoint_root_refusal(const std::string& out, const std::vector<std::string>& roots);

// What the end of a run needs, checked before its first step (UsageError, exit 2), so that a
// run never trains to fail at its end: the export and metrics file outside the checkpoint root
// (and the root outside a safetensors export, which is replaced whole); the export target not a
// dangling symbolic link nor (HDF5) anything but a file; a safetensors export of a model
// Hugging Face can hold; train.output_dir and the checkpoint root makeable and writable (nothing
// is made here). Then rank 0 (`rank`: this process's), which writes them, removes stale
// temporaries beside the export and `latest` (io/durable.hpp), with a line saying what.
void check_run_end(const Config& cfg, int rank);

}  // namespace kktrain
