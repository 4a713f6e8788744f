// Training checkpoints on disk: sharded tensors written into full-shape HDF5 datasets (every rank
// its own rows, io/h5_rows.hpp), per-dataset checksums, and the directory protocol that keeps a
// good checkpoint safe.
//
// Layout of a checkpoint root (checkpoint.dir):
//   step_00000100/checkpoint.h5   one directory per saved step
//   latest                        a one-line file naming the newest complete step directory
//   earlier_1/, earlier_2/, ...   checkpoints of runs that did not continue from them (moved)
// A save writes .tmp_step_NNNNNNNN/ first (every rank its rows), syncs it, renames it to
// step_NNNNNNNN/ and syncs the root, then replaces `latest` the same way (a temporary file,
// synced, renamed, the root synced). A kill at any moment therefore leaves the previous
// checkpoint intact and `latest` naming a complete one; older step directories beyond
// checkpoint.keep_last are removed only after the new one is in place (and, should a kill have
// interrupted that, at the start of the next save: never the one `latest` names). A failed save
// (a full disk, a write error on any rank) leaves .tmp_ debris that the next save clears.
//
// Every dataset carries "dtype" and "checksum" attributes. The checksum is the sum modulo 2^64
// of mix64(bits ^ index * 0x9e3779b97f4a7c15) over all elements (bits: the element's raw bits
// as an unsigned integer; index: its position in the full tensor; mix64: the SplitMix64
// finalizer of core/random.hpp), as 16 hex digits: each rank adds up
// its own rows and the ranks' partial sums are all-reduced, so it is the same whatever rank
// count wrote or reads the file, and any changed element changes it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/kokkos_compat.hpp"
#include "io/h5.hpp"
#include "io/h5_rows.hpp"
#include "parallel/communicator.hpp"

namespace kktrain {

// This rank's rows of one tensor, in device memory.
struct ShardRef {
  std::string dataset;  // absolute dataset path, e.g. "/params/model.norm.weight"
  h5::Elem elem = h5::Elem::f32;
  std::vector<int64_t> shape;  // the full logical shape
  int64_t row_begin = 0, rows = 0, row_len = 0;
  DBytesU data;                              // rows * row_len elements of `elem`, in device memory
  std::map<std::string, std::string> attrs;  // extra string attributes of the dataset
};

// Checksum of n elements of `elem` at `data` (host) whose first element has index `first` in the
// full tensor (the partial sum of this rank's rows).
uint64_t shard_checksum(const void* data, h5::Elem elem, int64_t n, int64_t first);
std::string checksum_hex(uint64_t c);

// Collectively writes a new file: the root attributes and every shard (same list on every rank;
// each rank writes its own rows). Errors on any rank end the write on every rank (agreed).
void write_shards(const std::string& path, const std::vector<ShardRef>& shards,
                  const FileAttrs& attrs, Communicator& comm);

// ---- the directory protocol -------------------------------------------------------------------

std::string step_dir_name(int64_t step);  // "step_00000100"
// The step of a step directory's name ("step_00000100" -> 100), or -1 for any other name.
int64_t step_of(const std::string& name);
constexpr const char* kCheckpointFile = "checkpoint.h5";

// What keeps step directory `dir` from being a complete checkpoint ("checkpoint.h5 is missing",
// "checkpoint.h5 is a FIFO (named pipe), not a regular file", ...), "" when its checkpoint file
// is a regular file. Never opens the file.
std::string step_dir_damage(const std::string& dir);

// When `latest` under root names an existing step directory that is not a complete checkpoint:
// "'ROOT/latest' names step_N, but its checkpoint.h5 is ..."; otherwise "".
std::string damaged_latest(const std::string& root);

// Saves step `step` under `root`: `write(file)` must write the checkpoint file (collectively);
// then the atomic rename, `latest`, and pruning beyond keep_last (see the file comment). Errors
// on any rank are agreed on: all ranks throw, and the previous checkpoint stays as it was. A step
// directory is never replaced (one of this step must not exist). Pruning removes only what
// kktrain wrote in a step directory (its checkpoint file; the directory when that leaves it
// empty): one holding anything else stays, with a warning.
// Returns the step directory.
std::string save_checkpoint_dir(const std::string& root, int64_t step, int64_t keep_last,
                                Communicator& comm,
                                const std::function<void(const std::string& file)>& write);

// Steps of the complete step directories under root (step_N/ holding its checkpoint file),
// ascending.
std::vector<int64_t> complete_steps(const std::string& root);

// The newest complete checkpoint under root, if any. `latest` names it after every completed
// save; when it does not (a kill between the directory's rename and the pointer's update, or a
// pointer removed, damaged, looping or replaced by a directory, or naming a step directory whose
// checkpoint file is missing or not a regular file), the newest complete step directory is still
// the one, and *note (when given) says what was wrong. `latest` is never opened unless it is a
// regular file (a FIFO there does not block).
std::optional<std::string> latest_checkpoint(const std::string& root, std::string* note = nullptr);

// Moves the step directories after `keep_through_step` (all of them when it is -1), complete
// or not (a damaged one, one holding a user's files; an empty one, left by an interrupted
// pruning, is removed), into root/earlier_N/ (the first free N), with `latest` kept naming a
// checkpoint that is still there; nothing else is deleted. Used before a run writes into a root
// that holds checkpoints it did not resume from (a fresh start, or a resume from an earlier step),
// so that its saves and pruning never replace or remove them. Returns a line saying what moved (""
// when nothing).
std::string set_aside_checkpoints(const std::string& root, int64_t keep_through_step);

// The checkpoint file for what a user named: a checkpoint file, a step directory, a root with a
// `latest` pointer, or a run directory (train.output_dir) with checkpoints/latest. InputError
// (naming `what`, e.g. "checkpoint.resume") when there is none, saying what it found (a damaged
// step directory `latest` names, a checkpoint file that is not a regular file).
std::string resolve_checkpoint(const std::string& path, const std::string& what);

}  // namespace kktrain
