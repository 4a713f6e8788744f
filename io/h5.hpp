// A thin RAII layer over the HDF5 C API: files, groups, datasets and attributes, with errors
// turned into exceptions that name the file and object. Also the 2-byte bfloat16 file type
// (HDF5 1.10 has none): an IEEE float with sign bit 15, exponent bits 7..14 (bias 127) and a
// 7-bit mantissa, which h5dump prints and h5py reads as float32.
//
// One process at a time uses a file through this layer (several ranks share files through
// io/h5_rows.hpp: one rank does the HDF5 metadata work, every rank moves its own bytes). Row I/O
// moves elements in the dataset's own type, bit for bit.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/bf16.hpp"

namespace kktrain {
namespace h5 {

// The library's life in the process. start_library() before MPI_Init (also called by the first
// file operation): HDF5 then registers no exit-time clean-up, neither atexit nor inside
// MPI_Finalize. finish_library() before MPI_Finalize ends it, unless a file was given up after a
// failure (File::abandon): then nothing of HDF5 runs again, since closing that file can crash.
void start_library();
void finish_library();

// Owns one hid_t and closes it with the right H5*close.
class Handle {
 public:
  Handle() = default;
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = -1; }
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = o.id_;
      close_ = o.close_;
      o.id_ = -1;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t id() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset() {
    if (id_ >= 0 && close_) close_(id_);
    id_ = -1;
  }
  // Forgets the id without closing it.
  void release() { id_ = -1; }

 private:
  hid_t id_ = -1;
  herr_t (*close_)(hid_t) = nullptr;
};

// Why the last HDF5 call on a file under `path` failed, as the system says it ("No space left on
// device", "Input/output error"), from HDF5's error stack (read it before the next HDF5 call).
std::string os_reason(const std::string& path);

// The bf16 file/memory datatype (a committed copy is not needed; a transient type is fine).
Handle bf16_type();

// Element types of row-wise datasets.
enum class Elem { f32, bf16, i16 };
std::size_t elem_size(Elem e);
const char* elem_name(Elem e);  // "float32", "bfloat16", "int16"

class File {
 public:
  // Creates (truncating) or opens an HDF5 file; throws InputError/RuntimeFailure with the path.
  static File create(const std::string& path);
  static File open_read(const std::string& path);
  static File open_write(const std::string& path);  // an existing file, read-write
  // Flushes and closes, reporting failures with the system's reason (the destructor closes
  // silently). A file whose flush failed is abandoned, not closed (below).
  void close();
  void flush();
  // Gives the file up without closing it (closing a file whose flush failed can crash inside
  // HDF5). It stays open until the process ends.
  void abandon();

  // A dataset of the full shape in element type e, stored contiguously and allocated now (not
  // filled): its bytes are one range of the file from the start (raw_offset).
  void create_dataset(const std::string& name, Elem e, const std::vector<int64_t>& shape);
  // The byte offset of a contiguous dataset's data in the file; -1 when it has none (chunked or
  // compressed storage, no elements, not allocated, or not little-endian float32/bfloat16/int16).
  int64_t raw_offset(const std::string& name) const;
  // What a dataset holds: "float32", "bfloat16", "int16", or another description ("float64",
  // "float16", "int32", "uint8", "string", ...).
  std::string kind(const std::string& name) const;
  // Rows [row_begin, row_begin + rows) of dataset `name` (rows of row_len elements of type e)
  // from / into host memory.
  void write_rows(const std::string& name, Elem e, int64_t row_begin, int64_t rows, int64_t row_len,
                  const void* data);
  void read_rows(const std::string& name, Elem e, int64_t row_begin, int64_t rows, int64_t row_len,
                 void* out) const;
  // The element type of a dataset; InputError naming it for anything else.
  Elem elem_of(const std::string& name) const;
  const std::string& path() const { return path_; }
  hid_t id() const { return h_.id(); }

  // Datasets at absolute paths ("/grads/model.norm.weight"); intermediate groups are created.
  void write_f32(const std::string& name, const float* data, const std::vector<int64_t>& shape);
  void write_bf16(const std::string& name, const bf16* data, const std::vector<int64_t>& shape);
  void write_i32(const std::string& name, const int32_t* data, const std::vector<int64_t>& shape);
  void write_f64(const std::string& name, const double* data, const std::vector<int64_t>& shape);
  void write_i64(const std::string& name, const int64_t* data, const std::vector<int64_t>& shape);
  void write_scalar_f64(const std::string& name, double v);

  bool exists(const std::string& name) const;
  std::vector<int64_t> shape(const std::string& name) const;
  // Reads any float dataset (float32, bfloat16 file type, float64) converted to float32.
  std::vector<float> read_f32(const std::string& name) const;
  std::vector<double> read_f64(const std::string& name) const;
  // The on-disk element type of a float dataset: "float32", "bfloat16", "float64" or "other".
  std::string float_kind(const std::string& name) const;
  // Names of the datasets directly below a group, in the file's order.
  std::vector<std::string> list(const std::string& group) const;
  // Absolute paths of every dataset in the file.
  std::vector<std::string> datasets() const;
  // "string", "integer", "float" or "other": the type class of an attribute.
  std::string attr_class(const std::string& obj, const std::string& name) const;
  // Names of the attributes of an object.
  std::vector<std::string> attr_names(const std::string& obj) const;

  // Attributes on an object (group or dataset path, "/" for the root).
  void attr_str(const std::string& obj, const std::string& name, const std::string& v);
  void attr_i64(const std::string& obj, const std::string& name, int64_t v);
  void attr_f64(const std::string& obj, const std::string& name, double v);
  bool has_attr(const std::string& obj, const std::string& name) const;
  std::string read_attr_str(const std::string& obj, const std::string& name) const;
  int64_t read_attr_i64(const std::string& obj, const std::string& name) const;
  double read_attr_f64(const std::string& obj, const std::string& name) const;

 private:
  File(Handle h, std::string path) : h_(std::move(h)), path_(std::move(path)) {}
  // Which way rows_io moves the rows: from buf into the file, or from the file into buf.
  enum class RowsIo { write, read };
  void rows_io(const std::string& name, Elem e, int64_t row_begin, int64_t rows, int64_t row_len,
               void* buf, RowsIo dir) const;
  void write(const std::string& name, hid_t type, const void* data,
             const std::vector<int64_t>& shape);
  Handle open_obj(const std::string& obj) const;
  Handle h_;
  std::string path_;
};

}  // namespace h5
}  // namespace kktrain
