// Files that appear whole or not at all: written under a temporary name in the same directory,
// synced to disk, renamed over the final name, and the directory synced, so that a kill, a crash
// or a full disk at any moment leaves either the previous file or the new one, never part of one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kktrain {

// What fsync_path opens: a file, or a directory (O_DIRECTORY: its entries, after a rename).
enum class FsyncTarget { file, directory };

// fsync of a file or a directory; RuntimeFailure naming it and the system's reason.
void fsync_path(const std::string& path, FsyncTarget target);
// The temporary name a new `final_path` is written under: ".<name>.tmp.<pid>" beside it.
std::string temporary_name(const std::string& final_path);
// Renames `tmp` (complete and synced) over `final_path` and syncs the directory.
void commit_file(const std::string& tmp, const std::string& final_path);
// A small text file written that way.
void write_text_atomically(const std::string& path, const std::string& text);
// A new file (never one that exists) holding `text`, synced to disk; for files inside a temporary
// directory that is renamed into place whole. RuntimeFailure naming the path and the reason.
void write_new_file_synced(const std::string& path, const std::string& text);

// What remove_stale_temporaries did: the paths it removed and the bytes their files held, and the
// temporary it put back in place of the missing final name ("" when none).
struct RemovedTemporaries {
  std::vector<std::string> paths;
  int64_t bytes = 0;
  std::string restored;
};
// Removes the temporaries that killed processes left beside `final_path`: the entries of its
// directory named exactly temporary_name's ".<name>.tmp.<pid>" (or that with ".old", the
// previous export stepping aside), pid in decimal without sign or leading zero, whose pid is no
// live process (kill(pid, 0) fails with ESRCH; this process's own is alive), owned by this
// process's user, and that are what kktrain makes there: a regular file, or a directory holding
// only regular files named as an export's (export_directory_file). A symbolic link, a
// directory holding anything else (a user's directory that happens to be named so) and every
// other name are kept. Except: when nothing is at `final_path` and such a ".old" is there (the
// previous export, stepped aside when the process was killed), it is renamed back to
// `final_path`. Errors are ignored (whatever cannot be removed stays). Caveat: a pid is a
// process of this host (and PID namespace); the same directory written from another host at
// this moment may be taken for a dead one's.
RemovedTemporaries remove_stale_temporaries(const std::string& final_path);
// True for the name of a file kktrain's directory exports write (safetensors: config.json,
// model*.safetensors, model.safetensors.index.json, the tokenizer's files; PEFT:
// adapter_config.json, adapter_model.safetensors): what a temporary directory of theirs holds.
bool export_directory_file(const std::string& name);

// `out`, or the directory its last component leads to when that is a symbolic link (followed to
// the end; a dangling one is returned as it is, for the callers' checks to refuse): where a
// directory export writes, so that it replaces the target's files and never the link itself.
std::string export_directory_target(const std::string& out);

// One line for the log ("removed 2 stale temporaries of killed kktrain processes (8192 bytes): A,
// B"), or "" when nothing was removed.
std::string removed_temporaries_text(const RemovedTemporaries& removed);

}  // namespace kktrain
