// Input files: kktrain reads configs, token files, safetensors and HDF5 files only when they are
// regular files, so a FIFO, a device or a directory gets a clear error instead of blocking or
// reading as empty. Every reader opens its files through open_regular_file: the open itself
// never blocks (O_NONBLOCK), and the type is that of the file opened (fstat), not of a path
// looked up earlier.
#pragma once

#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kktrain {

// An open file descriptor, closed when the holder goes (move-only).
class FileDescriptor {
 public:
  FileDescriptor() = default;
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() { reset(); }
  FileDescriptor(FileDescriptor&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  FileDescriptor& operator=(FileDescriptor&& o) noexcept;
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void reset();  // closes it now

 private:
  int fd_ = -1;
};

// Opens `path` for reading as a regular file: open(O_RDONLY | O_NONBLOCK | O_CLOEXEC) (a FIFO
// without a writer does not block it), fstat of what was opened, then O_NONBLOCK cleared. On
// success *out holds the descriptor, *st (when given) its fstat, and the result is nullopt;
// otherwise *out is empty and the result says why: "is a FIFO (named pipe), not a regular file",
// "is a directory, not a file", "is a device, not a regular file", "is a socket, not a regular
// file", or the system's reason ("No such file or directory", "Permission denied"). The reasons
// that name the file's type start with "is ".
std::optional<std::string> open_regular_file(FileDescriptor* out, const std::string& path,
                                             struct stat* st = nullptr);

// The whole of the regular file `path` into *out (open_regular_file, then read to its end), or
// the reason it cannot be read (as open_regular_file, the system's reason for a failed read, or
// "is larger than 4 MiB" for a file over max_bytes, refused before it is read).
std::optional<std::string> read_regular_file(std::string* out, const std::string& path,
                                             std::size_t max_bytes = SIZE_MAX);

// The lines of a regular file, opened through open_regular_file, read one at a time, a block at
// a time (a JSONL file shown, rendered or classified line by line). A line is returned without
// its '\n'; a last line without one counts.
class FileLines {
 public:
  // nullopt when `path` was opened, else the reason (open_regular_file's).
  std::optional<std::string> open(const std::string& path);
  // The next line into *line: false at the end. A read error throws RuntimeFailure; a line longer
  // than max_bytes throws InputError naming the file and the line's number, once that much of it
  // is read (memory stays bounded by the limit, whatever the file holds).
  bool next(std::string* line, std::size_t max_bytes = SIZE_MAX);
  // The number of the line next() returned last (from 1).
  int64_t line_number() const { return line_no_; }

 private:
  std::string path_;
  FileDescriptor fd_;
  std::vector<char> block_;
  std::size_t pos_ = 0, len_ = 0;  // the unread bytes of block_
  int64_t line_no_ = 0;
  bool at_end_ = false;
};

// Why `path` cannot be read as a regular file (open_regular_file's reasons), or nullopt when it
// can. For readers that hand a path to a library (HDF5): checked right before the library opens.
std::optional<std::string> unreadable_regular_file(const std::string& path);

// Makes sure this process may hold `count` more open files than it could need otherwise: raises
// the soft RLIMIT_NOFILE (often 1024) towards the hard limit when it is below count plus a
// reserve of 256 for libraries (MPI, HDF5). Returns the hard limit when even that is too low
// (nothing changed), nullopt when there is room.
std::optional<uint64_t> make_room_for_open_files(uint64_t count);

// True when a and b name the same existing file (hard links and symlinks included).
bool same_file(const std::string& a, const std::string& b);

// Checks, before any work, that option `opt` (e.g. "--out") may write the file `out`: not a
// directory, not one of `inputs` ({what, path}: the config file, the data file, ...), and its
// directory exists and is writable. UsageError (exit 2) naming the reason otherwise.
void check_output_file(const std::string& opt, const std::string& out,
                       const std::vector<std::pair<std::string, std::string>>& inputs);

// Why directory `dir` could not be made or written: the nearest part of it that exists is not a
// directory, or cannot take new entries ("" when it can). Makes nothing. The check before a
// command makes the directories it writes into (train.output_dir, tokenize --out's).
std::string unwritable_dir(const std::string& dir);

}  // namespace kktrain
