// A thin RAII layer over the HDF5 C API: files, groups, datasets and attributes, with errors
// turned into exceptions that name the file and object. Also the 2-byte bfloat16 file type
// (HDF5 1.10 has none): an IEEE float with sign bit 15, exponent bits 7..14 (bias 127) and a
// 7-bit mantissa, which h5dump prints and h5py reads as float32.
//
// Files can be opened collectively over an MPI communicator (parallel HDF5, MPI-IO driver): then
// every rank makes the same create/attribute calls, and each rank writes or reads its own rows
// of a dataset as a hyperslab in one collective transfer (a rank without rows still takes part,
// with an empty selection). Row I/O moves elements in the dataset's own type, bit for bit.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/bf16.hpp"

namespace kktrain {
namespace h5 {

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

 private:
  hid_t id_ = -1;
  herr_t (*close_)(hid_t) = nullptr;
};

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
  // Collective create / read-only open over `comm` (every rank calls; MPI_COMM_NULL: this process
  // alone, as above).
  static File create(const std::string& path, MPI_Comm comm);
  static File open_read(const std::string& path, MPI_Comm comm);
  bool parallel() const { return parallel_; }
  // Flushes and closes, reporting failures (the destructor closes silently).
  void close();

  // Collective: a dataset of the full shape, in element type e.
  void create_dataset(const std::string& name, Elem e, const std::vector<int64_t>& shape);
  // Collective: rows [row_begin, row_begin + rows) of dataset `name` (rows of row_len elements of
  // type e) from / into host memory. rows = 0: this rank takes part without data.
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
  File(Handle h, std::string path, bool parallel = false)
      : h_(std::move(h)), path_(std::move(path)), parallel_(parallel) {}
  Handle transfer_plist() const;
  void rows_io(const std::string& name, Elem e, int64_t row_begin, int64_t rows, int64_t row_len,
               void* buf, bool write) const;
  void write(const std::string& name, hid_t type, const void* data,
             const std::vector<int64_t>& shape);
  Handle open_obj(const std::string& obj) const;
  Handle h_;
  std::string path_;
  bool parallel_ = false;
};

}  // namespace h5
}  // namespace kktrain
