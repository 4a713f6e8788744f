// kktrain's HDF5 files (checkpoints, exports) read and written as an index plus raw byte ranges.
//
// Every dataset kktrain writes is contiguous, little-endian and uncompressed, so its elements are
// one byte range of the file at a known offset. One rank (rank 0) does all of HDF5's metadata work:
// it creates the file with every dataset and attribute, or reads the file's index (datasets,
// shapes, element types, offsets, attributes), and broadcasts what the others need. Every rank
// then moves its own rows with pread/pwrite at those offsets. Nothing collective happens inside
// HDF5, so a rank whose read or write fails (a full disk, an I/O error) reports the system's
// reason and the ranks agree on it (parallel/agree.hpp) without any rank waiting inside a library
// call for another; and metadata is read once per job, not once per rank (on 64 ranks, one
// reader instead of 64 reading the same headers).
//
// Datasets that are not contiguous (a file written by h5py with chunking or compression) are read
// through HDF5 itself by each rank, row range by row range.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/files.hpp"
#include "io/h5.hpp"
#include "parallel/communicator.hpp"

namespace kktrain {

// The root attributes of a file, by type.
struct FileAttrs {
  std::map<std::string, std::string> str;
  std::map<std::string, int64_t> i64;
  std::map<std::string, double> f64;
};

// One dataset of a file as its index records it.
struct DatasetInfo {
  std::string path;            // absolute: "/params/model.norm.weight"
  std::string kind;            // "float32", "bfloat16", "int16", or what else it holds ("int32")
  std::vector<int64_t> shape;  // the full shape ({} for a scalar)
  int64_t offset = -1;         // byte offset of its contiguous data; -1: read through HDF5
  std::map<std::string, std::string> attrs;  // its string attributes (dtype, checksum, ...)
  int64_t numel() const;
  // The element type of a float32/bfloat16/int16 dataset; InputError naming `file` and the
  // dataset for anything else ("holds int32 data, not float32, bfloat16 or int16").
  h5::Elem elem(const std::string& file) const;
};

// Everything about a file but its tensor data.
class FileIndex {
 public:
  // Reads the index of an HDF5 file (one process; InputError naming the file when it is not one).
  static FileIndex read(const std::string& path);
  const std::string& path() const { return path_; }
  const std::vector<DatasetInfo>& datasets() const { return datasets_; }
  const DatasetInfo* find(const std::string& dataset) const;
  // find(), or InputError naming the file and the dataset.
  const DatasetInfo& at(const std::string& dataset) const;
  // Names directly below a group ("/params" -> {"model.norm.weight", ...}; "/optim/x" -> state
  // names), in name order, for groups that hold datasets.
  std::vector<std::string> list(const std::string& group) const;
  const FileAttrs& root() const { return root_; }
  // A root attribute; InputError naming the file and attribute when absent or of another type.
  const std::string& root_str(const std::string& name) const;
  int64_t root_i64(const std::string& name) const;
  double root_f64(const std::string& name) const;
  bool has_root(const std::string& name) const;

  std::string serialize() const;
  static FileIndex deserialize(const std::string& bytes);

 private:
  std::string path_;
  std::vector<DatasetInfo> datasets_;
  std::map<std::string, std::size_t> by_path_;
  FileAttrs root_;
  void build_lookup();
};

// Reads row ranges of a file's datasets (rows of a dataset: dim 0; row_len the product of the
// other dims), every rank its own.
class RowReader {
 public:
  // Collective: rank 0 reads the index and broadcasts it; every rank opens the file. Errors
  // (missing, not HDF5, damaged) are agreed on.
  RowReader(const std::string& path, Communicator& comm);
  ~RowReader();
  RowReader(const RowReader&) = delete;
  RowReader& operator=(const RowReader&) = delete;
  const FileIndex& index() const { return index_; }
  const std::string& path() const { return index_.path(); }
  // Collective: this rank's rows [row_begin, row_begin + rows) of `dataset` in its own element
  // type, after checking the dataset's checksum (when it has one) over all ranks' reads together:
  // every rank calls this for the same datasets in the same order, and together the ranks' rows
  // cover the dataset. InputError names the file and dataset.
  std::vector<char> read_rows(const std::string& dataset, int64_t row_begin, int64_t rows);
  // One process: rows of `dataset` without the checksum (the caller checks it over its reads,
  // ChecksumCheck below: streaming a dataset in pieces).
  std::vector<char> read_rows_local(const DatasetInfo& d, int64_t row_begin, int64_t rows);

 private:
  Communicator& comm_;
  FileIndex index_;
  FileDescriptor fd_;  // the file, opened as a regular file without blocking (core/files.hpp)
  std::optional<h5::File> h5_;  // opened on first need: datasets read through HDF5
};

// A dataset's checksum accumulated over reads of its pieces (any order), checked at the end.
class ChecksumCheck {
 public:
  ChecksumCheck(const std::string& file, const DatasetInfo& d) : file_(file), d_(d) {}
  // Adds `rows` rows starting at row_begin, in element type e.
  void add(const void* data, h5::Elem e, int64_t row_begin, int64_t rows);
  // InputError naming the file and dataset when the pieces' sum is not the stored checksum.
  void verify(uint64_t sum) const;
  void verify() const { verify(sum_); }
  uint64_t partial() const { return sum_; }

 private:
  std::string file_;
  const DatasetInfo& d_;
  uint64_t sum_ = 0;
};

// A new file of datasets created first (by rank 0, with every attribute) and then filled by row
// ranges from any rank, with a checksum attribute per dataset written at the end.
struct DatasetSpec {
  std::string path;
  h5::Elem elem = h5::Elem::f32;
  std::vector<int64_t> shape;
  std::map<std::string, std::string> attrs;  // extra string attributes
};

class RowWriter {
 public:
  // Collective: checks the free space of the file system for the whole file, rank 0 creates it,
  // every rank opens it. Errors agreed on (RuntimeFailure naming the file and the reason).
  RowWriter(const std::string& path, std::vector<DatasetSpec> datasets, const FileAttrs& root,
            Communicator& comm);
  ~RowWriter();
  RowWriter(const RowWriter&) = delete;
  RowWriter& operator=(const RowWriter&) = delete;
  const std::vector<DatasetSpec>& datasets() const { return specs_; }
  // Local: rows [row_begin, row_begin + rows) of dataset k from host memory, in its element type.
  // RuntimeFailure naming the file and the system's reason ("No space left on device").
  void write_rows(std::size_t k, int64_t row_begin, int64_t rows, const void* data);
  // Collective: agrees on every rank's writes, syncs the file to disk, and writes the datasets'
  // checksums (the sums of every rank's pieces). Throws on every rank when any rank failed.
  void finish();
  int64_t bytes_written() const { return bytes_written_; }

 private:
  std::string path_;
  Communicator& comm_;
  std::vector<DatasetSpec> specs_;
  std::vector<int64_t> offsets_;     // byte offset of each dataset's data (-1: empty)
  std::vector<int64_t> row_bytes_;   // bytes per row of each dataset
  std::vector<uint64_t> checksums_;  // this rank's partial checksums
  int fd_ = -1;
  int64_t bytes_written_ = 0;
};

}  // namespace kktrain
