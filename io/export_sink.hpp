// The two export formats as sinks of one streaming loop (io/model_export.cpp): the loop plans
// the tensors, reads each in pieces of rows from the checkpoint and hands the converted bytes to
// a sink, which writes them under a temporary name and commits the whole at the end.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/dtype.hpp"
#include "io/h5_rows.hpp"
#include "io/model_export.hpp"

namespace kktrain {

// One tensor of an export.
struct ExportTensor {
  std::string name;  // canonical
  std::vector<int64_t> shape;
  DType dtype = DType::bfloat16;             // as written
  std::map<std::string, std::string> attrs;  // HDF5 dataset attributes (alias)
  int64_t rows() const { return shape.empty() ? 1 : shape[0]; }
  int64_t numel() const;
  int64_t row_len() const { return rows() > 0 ? numel() / rows() : 0; }
};

class ExportSink {
 public:
  virtual ~ExportSink() = default;
  // Creates the temporary file(s) for these tensors, in this order.
  virtual void begin(const std::vector<ExportTensor>& tensors) = 0;
  // Rows [row_begin, row_begin + rows) of tensor k, in its dtype.
  virtual void write_rows(std::size_t k, int64_t row_begin, int64_t rows, const char* bytes) = 0;
  // Syncs everything and puts it in place of the final name; returns the tensor bytes.
  virtual int64_t commit() = 0;
  // After a failure: removes what begin() created.
  virtual void discard() noexcept = 0;
};

// The HDF5 file `out` with root attributes `root`.
std::unique_ptr<ExportSink> make_hdf5_sink(const std::string& out, const FileAttrs& root);
// The Hugging Face directory `out` of model `m` exported in `dtype` (config.json's torch_dtype).
// `files` are written beside config.json (io/model_export.hpp ExportFile).
std::unique_ptr<ExportSink> make_safetensors_sink(const std::string& out, const ModelConfig& m,
                                                  DType dtype, int64_t max_shard_bytes,
                                                  std::vector<ExportFile> files = {});

}  // namespace kktrain
