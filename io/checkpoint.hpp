// Training checkpoints on disk: sharded tensors written collectively into full-shape HDF5
// datasets, per-dataset checksums, and the directory protocol that keeps a good checkpoint safe.
//
// Layout of a checkpoint root (checkpoint.dir):
//   step_00000100/checkpoint.h5   one directory per saved step
//   latest                        a one-line file naming the newest complete step directory
// A save writes .tmp_step_NNNNNNNN/ first (every rank its rows, collectively), flushes and
// fsyncs it, renames it to step_NNNNNNNN/ and fsyncs the root, then replaces `latest` the same
// way (write latest.tmp, fsync, rename, fsync). A kill at any moment therefore leaves the
// previous checkpoint intact and `latest` naming a complete one; older step directories beyond
// checkpoint.keep_last are removed only after the new one is in place (and, should a kill have
// interrupted that, at the start of the next save: never the one `latest` names).
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

struct FileAttrs {
  std::map<std::string, std::string> str;
  std::map<std::string, int64_t> i64;
  std::map<std::string, double> f64;
};

// The MPI communicator HDF5 should use for `comm` (MPI_COMM_NULL on one rank).
MPI_Comm hdf5_comm(const Communicator& comm);

// Checksum of n elements of `elem` at `data` (host) whose first element has index `first` in the
// full tensor (the partial sum of this rank's rows).
uint64_t shard_checksum(const void* data, h5::Elem elem, int64_t n, int64_t first);
std::string checksum_hex(uint64_t c);

// One process writing a whole tensor from host memory into `f` (not opened collectively), with
// the same dtype and checksum attributes as write_shards gives.
void write_host_dataset(h5::File& f, const std::string& dataset, h5::Elem elem,
                        const std::vector<int64_t>& shape, const void* data);

// Collectively writes a new file: the root attributes and every shard (same list on every rank).
void write_shards(const std::string& path, const std::vector<ShardRef>& shards,
                  const FileAttrs& attrs, Communicator& comm);

// Collective reads of a file written by write_shards (any rank count, any shard layout).
class ShardReader {
 public:
  ShardReader(const std::string& path, Communicator& comm);
  const h5::File& file() const { return file_; }
  const std::string& path() const { return path_; }
  // Rows [row_begin, row_begin + rows) (rows of row_len elements) of a dataset into host memory,
  // in the dataset's element type, after checking the dataset's checksum over all ranks' reads
  // together: every rank must call this for the same datasets in the same order, and together
  // the ranks' rows must cover the dataset (a shard layout). InputError names the dataset.
  std::vector<char> read_rows(const std::string& dataset, int64_t row_begin, int64_t rows,
                              int64_t row_len);

 private:
  std::string path_;
  Communicator& comm_;
  h5::File file_;
};

// ---- the directory protocol -------------------------------------------------------------------

std::string step_dir_name(int64_t step);  // "step_00000100"
constexpr const char* kCheckpointFile = "checkpoint.h5";

// Saves step `step` under `root`: `write(file)` must write the checkpoint file (collectively);
// then the atomic rename, `latest`, and pruning beyond keep_last (see the file comment). Errors
// on any rank are agreed on: all ranks throw, and the previous checkpoint stays as it was.
// Returns the step directory.
std::string save_checkpoint_dir(const std::string& root, int64_t step, int64_t keep_last,
                                Communicator& comm,
                                const std::function<void(const std::string& file)>& write);

// The checkpoint file named by `latest` under root, if any (InputError when `latest` names a
// directory without a checkpoint).
std::optional<std::string> latest_checkpoint(const std::string& root);

// The checkpoint file for what a user named: a checkpoint file, a step directory, a root with a
// `latest` pointer, or a run directory (train.output_dir) with checkpoints/latest. InputError
// (naming `what`, e.g. "checkpoint.resume") when there is none.
std::string resolve_checkpoint(const std::string& path, const std::string& what);

}  // namespace kktrain
