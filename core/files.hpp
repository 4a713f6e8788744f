// Input files: kktrain reads configs, token files and HDF5 files only when they are regular files,
// so a FIFO, a device or a directory gets a clear error instead of blocking or reading as empty.
#pragma once

#include <optional>
#include <string>

namespace kktrain {

// Why `path` cannot be read as a regular file ("is a directory", "is a FIFO (named pipe), not a
// regular file", "No such file or directory", ...), or nullopt when it can be opened for reading.
std::optional<std::string> unreadable_regular_file(const std::string& path);

// True when a and b name the same existing file (hard links and symlinks included).
bool same_file(const std::string& a, const std::string& b);

}  // namespace kktrain
