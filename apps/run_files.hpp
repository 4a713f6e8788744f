// The files a training run reads and the files it writes, kept apart: checked against each other
// before any work (the same file under any name, hard and symbolic links included), and the
// checkpoint root made the run's own before its first save.
#pragma once

#include <optional>
#include <string>

#include "core/config.hpp"

namespace kktrain {

// UsageError (exit 2) when an input of the run (the CONFIG file, data.path, model.init_from, the
// checkpoint resumed from) is a file the run would overwrite, rename or remove: metrics.jsonl
// (kept as metrics.jsonl.N), the export (a file, or every file of the export directory, which is
// replaced whole), or anything under the checkpoint root other than the checkpoint it resumes
// from. data.path's files (lists and globs expanded) and every file of a Hugging Face
// model.init_from directory are inputs. Also refuses an export directory that holds files an
// export does not write (it would be replaced). `resume_file`: the checkpoint file the run resumes
// from, if any.
void check_run_files(const Config& cfg, const std::optional<std::string>& resume_file);

// Where the run writes its export: <train.output_dir>/export.h5, or the directory
// <train.output_dir>/export with checkpoint.export_format: safetensors.
std::string run_export_path(const Config& cfg);

}  // namespace kktrain
