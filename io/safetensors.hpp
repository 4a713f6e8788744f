// The safetensors file format (Hugging Face's weight files), read and written by byte ranges.
//
//   bytes [0, 8)          N, the header's length: a little-endian unsigned 64-bit integer
//   bytes [8, 8 + N)      the header: a UTF-8 JSON object {name: {"dtype": "F32", "shape": [...],
//                         "data_offsets": [begin, end]}, ..., "__metadata__": {str: str}}
//                         (writers pad it with spaces to a multiple of 8 bytes)
//   bytes [8 + N, EOF)    the data section: each tensor's little-endian elements in C order at
//                         [begin, end) relative to the section's start
//
// The header is validated whole before any tensor is read: its length bounded (100 MB) and
// inside the file, a JSON object without duplicate names, each tensor's dtype known, its shape
// non-negative, its byte size shape x element size, the tensors' ranges contiguous from 0
// without gaps or overlaps, and the last one ending exactly at the end of the file. Every error
// names the file and, where there is one, the tensor.
//
// Tensors are row-major, so rows [r0, r0 + n) of a tensor are one byte range: a rank reads only
// the rows of its shard (pread), and a writer streams a tensor in pieces of rows (pwrite).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/files.hpp"

namespace kktrain {

// Longest header accepted (the reference implementation's limit).
constexpr int64_t kMaxSafetensorsHeaderBytes = 100'000'000;

struct StTensor {
  std::string name;
  std::string dtype;  // as the file says: "F32", "BF16", "F16", "I64", ...
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0;  // byte range in the data section
  int64_t numel() const;
  int64_t rows() const { return shape.empty() ? 1 : shape[0]; }
  int64_t row_bytes() const;  // bytes of one row (the whole tensor for a scalar)
};

// A validated file: its tensors in data order and where its data section starts.
struct StFile {
  std::string path;
  int64_t data_offset = 0;  // 8 + N
  int64_t file_bytes = 0;
  std::vector<StTensor> tensors;
  std::map<std::string, std::string> metadata;  // __metadata__
  const StTensor* find(const std::string& name) const;
};

// Bytes per element of a safetensors dtype name; 0 for a name the format does not define.
int64_t st_dtype_bytes(const std::string& dtype);
// The kktrain dtype of "F32", "BF16", "F16"; InputError naming `where` for any other.
DType st_dtype_to_dtype(const std::string& dtype, const std::string& where);
// "F32", "BF16", "F16".
const char* dtype_to_st(DType d);

// Reads the header of `path` (one process) and validates it (above). InputError naming the file.
StFile read_safetensors_header(const std::string& path);
// Only reads it: the N header bytes (its length checked against the limit and the file) and the
// file's size.
std::string read_safetensors_header_bytes(const std::string& path, int64_t* file_bytes);
// The same validation of a header already read: `header` (N bytes) of a file of `file_bytes`.
StFile parse_safetensors_header(const std::string& path, const std::string& header,
                                int64_t file_bytes);

// An open safetensors file whose header was validated; reads rows of its tensors with pread.
class StReader {
 public:
  // Opens file.path (a regular file of file.file_bytes bytes, opened without blocking);
  // InputError naming it and the reason.
  explicit StReader(StFile file);
  ~StReader();
  StReader(const StReader&) = delete;
  StReader& operator=(const StReader&) = delete;
  const StFile& file() const { return file_; }
  // Rows [row_begin, row_begin + rows) of tensor t as fp32 (F32/BF16/F16 widened exactly).
  // InputError naming the file and tensor (an I/O error, a file shorter than its header says).
  std::vector<float> read_rows_f32(const StTensor& t, int64_t row_begin, int64_t rows) const;

 private:
  StFile file_;
  FileDescriptor fd_;
};

// A new safetensors file: the header for `tensors` (names, dtypes, shapes; offsets assigned in
// this order) with __metadata__ `metadata`, padded with spaces to a multiple of 8 bytes, written
// at creation; tensor data then streamed in by byte ranges. Errors: RuntimeFailure naming the
// file and the system's reason.
class StWriter {
 public:
  StWriter(const std::string& path, std::vector<StTensor> tensors,
           const std::map<std::string, std::string>& metadata);
  ~StWriter();
  StWriter(const StWriter&) = delete;
  StWriter& operator=(const StWriter&) = delete;
  const std::vector<StTensor>& tensors() const { return tensors_; }
  // Bytes [byte_begin, byte_begin + bytes) of tensor k.
  void write(std::size_t k, int64_t byte_begin, const void* data, int64_t bytes);
  // Checks that every tensor byte was written, syncs the file to disk and closes it.
  void finish();
  // The header bytes (length prefix included) for these tensors; assigns their offsets.
  static std::string header_bytes(std::vector<StTensor>& tensors,
                                  const std::map<std::string, std::string>& metadata);

 private:
  std::string path_;
  std::vector<StTensor> tensors_;
  std::vector<int64_t> written_;  // bytes written per tensor
  int64_t data_offset_ = 0;
  int fd_ = -1;
};

}  // namespace kktrain
