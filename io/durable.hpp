// Files that appear whole or not at all: written under a temporary name in the same directory,
// synced to disk, renamed over the final name, and the directory synced, so that a kill, a crash
// or a full disk at any moment leaves either the previous file or the new one, never part of one.
#pragma once

#include <string>

namespace kktrain {

// fsync of a file or a directory; RuntimeFailure naming it and the system's reason.
void fsync_path(const std::string& path, bool directory);
// The temporary name a new `final_path` is written under: ".<name>.tmp.<pid>" beside it.
std::string temporary_name(const std::string& final_path);
// Renames `tmp` (complete and synced) over `final_path` and syncs the directory.
void commit_file(const std::string& tmp, const std::string& final_path);
// A small text file written that way.
void write_text_atomically(const std::string& path, const std::string& text);

}  // namespace kktrain
