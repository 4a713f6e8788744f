#include "io/h5.hpp"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/errors.hpp"
#include "core/files.hpp"

namespace kktrain {
namespace h5 {

namespace {
// A file was given up after a failure (File::abandon): HDF5 must never be closed in this process.
bool g_abandoned = false;
}  // namespace

void start_library() {
  // No clean-up at exit: after a failed close (a full disk), HDF5 keeps the file's object, and
  // its exit-time clean-up closes it again and crashes (SIGSEGV in H5F__close_cb). An HDF5 built
  // for MPI that starts after MPI_Init also hooks MPI_Finalize (an attribute on MPI_COMM_SELF
  // whose delete callback ends the library) and crashed there the same way on 2 ranks; started
  // before MPI, it hooks nothing. kktrain ends the library itself (finish_library).
  static const bool started = [] {
    H5dont_atexit();
    return H5open() >= 0;
  }();
  (void)started;
}

void finish_library() {
  if (!g_abandoned) H5close();
}

namespace {

void quiet() {
  start_library();
  // kktrain reports HDF5 failures itself, as one line; silence the library's stack dumps.
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

herr_t collect_error(unsigned, const H5E_error2_t* e, void* out) {
  if (e->desc) static_cast<std::vector<std::string>*>(out)->push_back(e->desc);
  return 0;
}

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw RuntimeFailure("HDF5 file '" + path + "': " + what + ": " + os_reason(path));
}

Handle space_for(const std::vector<int64_t>& shape) {
  if (shape.empty()) return Handle(H5Screate(H5S_SCALAR), H5Sclose);
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  return Handle(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
}

}  // namespace

std::string os_reason(const std::string& path) {
  // HDF5's error stack holds the system's message where a read or write failed ("... errno = 28,
  // error message = 'No space left on device' ...").
  std::vector<std::string> descs;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, collect_error, &descs);
  for (const auto& d : descs) {
    const std::string key = "error message = '";
    const std::size_t at = d.find(key);
    if (at != std::string::npos) {
      const std::size_t end = d.find('\'', at + key.size());
      return d.substr(at + key.size(), end - at - key.size());
    }
  }
  // Without one, a full file system is the usual cause.
  struct statvfs fs {};
  const std::string dir = std::filesystem::path(path).parent_path().string();
  if (::statvfs(dir.empty() ? "." : dir.c_str(), &fs) == 0 && fs.f_bavail == 0) {
    return std::strerror(ENOSPC);
  }
  return descs.empty() ? "input/output error" : descs.back();
}

Handle bf16_type() {
  // Start from IEEE binary32 and narrow it: sign at bit 15, exponent at 7..14, mantissa 0..6.
  Handle t(H5Tcopy(H5T_IEEE_F32LE), H5Tclose);
  H5Tset_fields(t.id(), 15, 7, 8, 0, 7);
  H5Tset_precision(t.id(), 16);
  H5Tset_size(t.id(), 2);
  H5Tset_ebias(t.id(), 127);
  return t;
}

std::size_t elem_size(Elem e) {
  return e == Elem::f32 ? 4 : 2;
}

const char* elem_name(Elem e) {
  switch (e) {
    case Elem::f32:
      return "float32";
    case Elem::bf16:
      return "bfloat16";
    case Elem::i16:
      return "int16";
  }
  return "?";
}

namespace {

// File and memory type of an element type (the same: row I/O never converts).
Handle elem_type(Elem e) {
  switch (e) {
    case Elem::f32:
      return Handle(H5Tcopy(H5T_IEEE_F32LE), H5Tclose);
    case Elem::bf16:
      return bf16_type();
    case Elem::i16:
      return Handle(H5Tcopy(H5T_STD_I16LE), H5Tclose);
  }
  return Handle();
}

}  // namespace

void File::flush() {
  if (h_.valid() && H5Fflush(h_.id(), H5F_SCOPE_GLOBAL) < 0) fail(path_, "cannot flush");
}

void File::close() {
  if (!h_.valid()) return;
  if (H5Fflush(h_.id(), H5F_SCOPE_GLOBAL) < 0) {
    const std::string why = os_reason(path_);
    abandon();  // closing a file whose flush failed can crash inside HDF5
    throw RuntimeFailure("HDF5 file '" + path_ + "': cannot flush: " + why);
  }
  const herr_t closed = H5Fclose(h_.id());
  h_.release();
  if (closed < 0) fail(path_, "cannot close");
}

void File::abandon() {
  g_abandoned = true;
  h_.release();
}

void File::create_dataset(const std::string& name, Elem e, const std::vector<int64_t>& shape) {
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.id(), 1);
  Handle space = space_for(shape);
  Handle t = elem_type(e);
  // Contiguous storage allocated at creation and never filled: the data is one byte range whose
  // offset is known before any element is written (io/h5_rows.hpp writes it with pwrite).
  Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  H5Pset_layout(dcpl.id(), H5D_CONTIGUOUS);
  H5Pset_alloc_time(dcpl.id(), H5D_ALLOC_TIME_EARLY);
  H5Pset_fill_time(dcpl.id(), H5D_FILL_TIME_NEVER);
  Handle ds(
      H5Dcreate2(h_.id(), name.c_str(), t.id(), space.id(), lcpl.id(), dcpl.id(), H5P_DEFAULT),
      H5Dclose);
  if (!ds.valid()) fail(path_, "cannot create dataset '" + name + "'");
}

void File::rows_io(const std::string& name, Elem e, int64_t row_begin, int64_t rows,
                   int64_t row_len, void* buf, RowsIo dir) const {
  const bool write = dir == RowsIo::write;
  Handle ds(H5Dopen2(h_.id(), name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!ds.valid()) throw InputError("HDF5 file '" + path_ + "' has no dataset '" + name + "'");
  // The dataset as (total rows, row_len); this rank's rows as one hyperslab.
  Handle fspace(H5Dget_space(ds.id()), H5Sclose);
  const hssize_t total = H5Sget_simple_extent_npoints(fspace.id());
  const hsize_t all_rows = row_len > 0 ? static_cast<hsize_t>(total / row_len) : 0;
  hsize_t dims2[2] = {all_rows, static_cast<hsize_t>(row_len)};
  Handle file2(H5Screate_simple(2, dims2, nullptr), H5Sclose);
  hsize_t mdims[1] = {static_cast<hsize_t>(std::max<int64_t>(1, rows * row_len))};
  Handle mem(H5Screate_simple(1, mdims, nullptr), H5Sclose);
  if (rows > 0) {
    hsize_t start[2] = {static_cast<hsize_t>(row_begin), 0};
    hsize_t count[2] = {static_cast<hsize_t>(rows), static_cast<hsize_t>(row_len)};
    H5Sselect_hyperslab(file2.id(), H5S_SELECT_SET, start, nullptr, count, nullptr);
  } else {
    H5Sselect_none(file2.id());
    H5Sselect_none(mem.id());
  }
  Handle t = elem_type(e);
  const herr_t r = write ? H5Dwrite(ds.id(), t.id(), mem.id(), file2.id(), H5P_DEFAULT, buf)
                         : H5Dread(ds.id(), t.id(), mem.id(), file2.id(), H5P_DEFAULT, buf);
  if (r < 0) {
    if (write) fail(path_, "cannot write dataset '" + name + "'");
    throw InputError("HDF5 file '" + path_ + "': cannot read dataset '" + name + "'");
  }
}

void File::write_rows(const std::string& name, Elem e, int64_t row_begin, int64_t rows,
                      int64_t row_len, const void* data) {
  rows_io(name, e, row_begin, rows, row_len, const_cast<void*>(data), RowsIo::write);
}

void File::read_rows(const std::string& name, Elem e, int64_t row_begin, int64_t rows,
                     int64_t row_len, void* out) const {
  rows_io(name, e, row_begin, rows, row_len, out, RowsIo::read);
}

int64_t File::raw_offset(const std::string& name) const {
  Handle ds(H5Dopen2(h_.id(), name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!ds.valid()) throw InputError("HDF5 file '" + path_ + "' has no dataset '" + name + "'");
  const std::string k = kind(name);
  if (k != "float32" && k != "bfloat16" && k != "int16") return -1;
  Handle t(H5Dget_type(ds.id()), H5Tclose);
  if (H5Tget_order(t.id()) != H5T_ORDER_LE) return -1;
  Handle dcpl(H5Dget_create_plist(ds.id()), H5Pclose);
  if (H5Pget_layout(dcpl.id()) != H5D_CONTIGUOUS || H5Pget_nfilters(dcpl.id()) != 0) return -1;
  const haddr_t a = H5Dget_offset(ds.id());
  return a == HADDR_UNDEF ? -1 : static_cast<int64_t>(a);
}

std::string File::kind(const std::string& name) const {
  const std::string k = float_kind(name);
  if (k != "other") return k;
  Handle ds(H5Dopen2(h_.id(), name.c_str(), H5P_DEFAULT), H5Dclose);
  Handle t(H5Dget_type(ds.id()), H5Tclose);
  const std::size_t bits = 8 * H5Tget_size(t.id());
  switch (H5Tget_class(t.id())) {
    case H5T_INTEGER:
      return std::string(H5Tget_sign(t.id()) == H5T_SGN_NONE ? "uint" : "int") +
             std::to_string(bits);
    case H5T_STRING:
      return "string";
    default:
      return "non-numeric";
  }
}

Elem File::elem_of(const std::string& name) const {
  const std::string k = float_kind(name);
  if (k == "float32") return Elem::f32;
  if (k == "bfloat16") return Elem::bf16;
  Handle ds(H5Dopen2(h_.id(), name.c_str(), H5P_DEFAULT), H5Dclose);
  Handle t(H5Dget_type(ds.id()), H5Tclose);
  if (H5Tget_class(t.id()) == H5T_INTEGER && H5Tget_size(t.id()) == 2 &&
      H5Tget_sign(t.id()) == H5T_SGN_2) {
    return Elem::i16;
  }
  throw InputError("HDF5 file '" + path_ + "': dataset '" + name +
                   "' is not float32, bfloat16 or int16");
}

File File::create(const std::string& path) {
  quiet();
  Handle h(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
  if (!h.valid()) {
    throw RuntimeFailure("cannot create HDF5 file '" + path + "': " + os_reason(path));
  }
  return File(std::move(h), path);
}

File File::open_write(const std::string& path) {
  quiet();
  if (const auto why = unreadable_regular_file(path)) {
    throw RuntimeFailure("cannot open HDF5 file '" + path + "' for writing: " + *why);
  }
  Handle h(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
  if (!h.valid()) throw RuntimeFailure("cannot open HDF5 file '" + path + "' for writing");
  return File(std::move(h), path);
}

File File::open_read(const std::string& path) {
  quiet();
  // The system's reason first, where there is one (a missing file, a FIFO, a read error): HDF5
  // only says that it is not a readable HDF5 file, and would block on a FIFO. HDF5 opens the
  // path itself, so the path is checked again right before each of its opens.
  {
    FileDescriptor f;
    if (const auto why = open_regular_file(&f, path)) {
      throw InputError("cannot read '" + path + "': " + *why);
    }
    char head[8];
    if (::pread(f.get(), head, sizeof(head), 0) < 0) {
      throw InputError("cannot read '" + path + "': " + std::strerror(errno));
    }
  }
  if (H5Fis_hdf5(path.c_str()) <= 0) {
    throw InputError("'" + path + "' is not a readable HDF5 file");
  }
  if (const auto why = unreadable_regular_file(path)) {
    throw InputError("cannot read '" + path + "': " + *why);
  }
  Handle h(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!h.valid()) throw InputError("cannot open HDF5 file '" + path + "': truncated or damaged");
  return File(std::move(h), path);
}

void File::write(const std::string& name, hid_t type, const void* data,
                 const std::vector<int64_t>& shape) {
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.id(), 1);
  Handle space = space_for(shape);
  Handle ds(
      H5Dcreate2(h_.id(), name.c_str(), type, space.id(), lcpl.id(), H5P_DEFAULT, H5P_DEFAULT),
      H5Dclose);
  if (!ds.valid()) fail(path_, "cannot create dataset '" + name + "'");
  if (H5Dwrite(ds.id(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0) {
    fail(path_, "cannot write dataset '" + name + "'");
  }
}

void File::write_f32(const std::string& name, const float* data,
                     const std::vector<int64_t>& shape) {
  write(name, H5T_NATIVE_FLOAT, data, shape);
}

void File::write_bf16(const std::string& name, const bf16* data,
                      const std::vector<int64_t>& shape) {
  Handle t = bf16_type();
  write(name, t.id(), data, shape);
}

void File::write_i32(const std::string& name, const int32_t* data,
                     const std::vector<int64_t>& shape) {
  write(name, H5T_NATIVE_INT32, data, shape);
}

void File::write_f64(const std::string& name, const double* data,
                     const std::vector<int64_t>& shape) {
  write(name, H5T_NATIVE_DOUBLE, data, shape);
}

void File::write_i64(const std::string& name, const int64_t* data,
                     const std::vector<int64_t>& shape) {
  write(name, H5T_NATIVE_INT64, data, shape);
}

void File::write_scalar_f64(const std::string& name, double v) {
  write(name, H5T_NATIVE_DOUBLE, &v, {});
}

bool File::exists(const std::string& name) const {
  // Check each path component: H5Lexists fails on a missing intermediate group.
  std::size_t pos = 0;
  while ((pos = name.find('/', pos + 1)) != std::string::npos) {
    if (H5Lexists(h_.id(), name.substr(0, pos).c_str(), H5P_DEFAULT) <= 0) return false;
  }
  return H5Lexists(h_.id(), name.c_str(), H5P_DEFAULT) > 0;
}

Handle File::open_obj(const std::string& obj) const {
  Handle o(H5Oopen(h_.id(), obj.c_str(), H5P_DEFAULT), H5Oclose);
  if (!o.valid()) throw InputError("HDF5 file '" + path_ + "' has no object '" + obj + "'");
  return o;
}

std::vector<int64_t> File::shape(const std::string& name) const {
  Handle ds(H5Dopen2(h_.id(), name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!ds.valid()) throw InputError("HDF5 file '" + path_ + "' has no dataset '" + name + "'");
  Handle sp(H5Dget_space(ds.id()), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(sp.id());
  std::vector<hsize_t> dims(rank > 0 ? rank : 0);
  if (rank > 0) H5Sget_simple_extent_dims(sp.id(), dims.data(), nullptr);
  return std::vector<int64_t>(dims.begin(), dims.end());
}

std::string File::float_kind(const std::string& name) const {
  Handle ds(H5Dopen2(h_.id(), name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!ds.valid()) throw InputError("HDF5 file '" + path_ + "' has no dataset '" + name + "'");
  Handle t(H5Dget_type(ds.id()), H5Tclose);
  if (H5Tget_class(t.id()) != H5T_FLOAT) return "other";
  const std::size_t size = H5Tget_size(t.id());
  if (size == 4) return "float32";
  if (size == 8) return "float64";
  if (size == 2) return H5Tget_ebias(t.id()) == 127 ? "bfloat16" : "float16";
  return "other";
}

namespace {
template <class T>
std::vector<T> read_all(hid_t file, const std::string& path, const std::string& name,
                        const std::vector<int64_t>& shape, hid_t mem_type, const char* what) {
  Handle ds(H5Dopen2(file, name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!ds.valid()) throw InputError("HDF5 file '" + path + "' has no dataset '" + name + "'");
  int64_t n = 1;
  for (auto d : shape) n *= d;
  std::vector<T> out(static_cast<std::size_t>(n));
  if (H5Dread(ds.id(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0) {
    throw InputError("HDF5 file '" + path + "': cannot read '" + name + "' as " + what);
  }
  return out;
}
}  // namespace

std::vector<float> File::read_f32(const std::string& name) const {
  return read_all<float>(h_.id(), path_, name, shape(name), H5T_NATIVE_FLOAT, "float32");
}

std::vector<double> File::read_f64(const std::string& name) const {
  return read_all<double>(h_.id(), path_, name, shape(name), H5T_NATIVE_DOUBLE, "float64");
}

std::vector<std::string> File::list(const std::string& group) const {
  std::vector<std::string> names;
  Handle g(H5Gopen2(h_.id(), group.c_str(), H5P_DEFAULT), H5Gclose);
  if (!g.valid()) throw InputError("HDF5 file '" + path_ + "' has no group '" + group + "'");
  H5G_info_t info;
  H5Gget_info(g.id(), &info);
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t len = H5Lget_name_by_idx(g.id(), ".", H5_INDEX_CRT_ORDER, H5_ITER_INC, i, nullptr,
                                           0, H5P_DEFAULT);
    std::string s;
    if (len < 0) {  // no creation-order index: fall back to name order
      const ssize_t l2 =
          H5Lget_name_by_idx(g.id(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
      s.resize(static_cast<std::size_t>(l2));
      H5Lget_name_by_idx(g.id(), ".", H5_INDEX_NAME, H5_ITER_INC, i, &s[0], l2 + 1, H5P_DEFAULT);
    } else {
      s.resize(static_cast<std::size_t>(len));
      H5Lget_name_by_idx(g.id(), ".", H5_INDEX_CRT_ORDER, H5_ITER_INC, i, &s[0], len + 1,
                         H5P_DEFAULT);
    }
    names.push_back(s);
  }
  return names;
}

namespace {

herr_t visit_dataset(hid_t, const char* name, const H5O_info_t* info, void* out) {
  if (info->type == H5O_TYPE_DATASET) {
    static_cast<std::vector<std::string>*>(out)->push_back(std::string("/") + name);
  }
  return 0;
}

herr_t visit_attr(hid_t, const char* name, const H5A_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->push_back(name);
  return 0;
}

}  // namespace

std::vector<std::string> File::datasets() const {
  std::vector<std::string> out;
  H5Ovisit(h_.id(), H5_INDEX_NAME, H5_ITER_INC, visit_dataset, &out);
  return out;
}

std::vector<std::string> File::attr_names(const std::string& obj) const {
  Handle o = open_obj(obj);
  std::vector<std::string> out;
  hsize_t idx = 0;
  H5Aiterate2(o.id(), H5_INDEX_NAME, H5_ITER_INC, &idx, visit_attr, &out);
  return out;
}

namespace {

void write_attr(hid_t obj, const std::string& name, hid_t type, const void* v,
                const std::string& path) {
  if (H5Aexists(obj, name.c_str()) > 0) {
    // An attribute of the same type and size is rewritten in place (no new space in the file).
    Handle a(H5Aopen(obj, name.c_str(), H5P_DEFAULT), H5Aclose);
    Handle t(H5Aget_type(a.id()), H5Tclose);
    if (H5Tequal(t.id(), type) > 0) {
      if (H5Awrite(a.id(), type, v) < 0) fail(path, "cannot write attribute " + name);
      return;
    }
    a.reset();
    H5Adelete(obj, name.c_str());
  }
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  Handle a(H5Acreate2(obj, name.c_str(), type, space.id(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!a.valid() || H5Awrite(a.id(), type, v) < 0) fail(path, "cannot write attribute " + name);
}

}  // namespace

void File::attr_str(const std::string& obj, const std::string& name, const std::string& v) {
  Handle o = open_obj(obj);
  Handle t(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(t.id(), v.size() + 1);
  H5Tset_strpad(t.id(), H5T_STR_NULLTERM);
  write_attr(o.id(), name, t.id(), v.c_str(), path_);
}

void File::attr_i64(const std::string& obj, const std::string& name, int64_t v) {
  Handle o = open_obj(obj);
  write_attr(o.id(), name, H5T_NATIVE_INT64, &v, path_);
}

void File::attr_f64(const std::string& obj, const std::string& name, double v) {
  Handle o = open_obj(obj);
  write_attr(o.id(), name, H5T_NATIVE_DOUBLE, &v, path_);
}

bool File::has_attr(const std::string& obj, const std::string& name) const {
  Handle o = open_obj(obj);
  return H5Aexists(o.id(), name.c_str()) > 0;
}

namespace {
Handle open_attr(hid_t obj, const std::string& name, const std::string& path) {
  Handle a(H5Aopen(obj, name.c_str(), H5P_DEFAULT), H5Aclose);
  if (!a.valid()) throw InputError("HDF5 file '" + path + "' has no attribute '" + name + "'");
  return a;
}
}  // namespace

std::string File::attr_class(const std::string& obj, const std::string& name) const {
  Handle o = open_obj(obj);
  Handle a = open_attr(o.id(), name, path_);
  Handle t(H5Aget_type(a.id()), H5Tclose);
  switch (H5Tget_class(t.id())) {
    case H5T_STRING:
      return "string";
    case H5T_INTEGER:
      return "integer";
    case H5T_FLOAT:
      return "float";
    default:
      return "other";
  }
}

std::string File::read_attr_str(const std::string& obj, const std::string& name) const {
  Handle o = open_obj(obj);
  Handle a = open_attr(o.id(), name, path_);
  Handle t(H5Aget_type(a.id()), H5Tclose);
  if (H5Tget_class(t.id()) != H5T_STRING) {
    throw InputError("HDF5 file '" + path_ + "': attribute '" + name + "' is not a string");
  }
  const auto failed = [&]() {
    return InputError("HDF5 file '" + path_ + "': cannot read string attribute '" + name + "'");
  };
  if (H5Tis_variable_str(t.id()) > 0) {
    // Variable-length strings (h5py writes Python str this way, UTF-8): read with the file's
    // character set, or HDF5 refuses the conversion.
    char* s = nullptr;
    Handle mt(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mt.id(), H5T_VARIABLE);
    H5Tset_cset(mt.id(), H5Tget_cset(t.id()));
    if (H5Aread(a.id(), mt.id(), &s) < 0) throw failed();
    std::string out = s ? s : "";
    H5free_memory(s);
    return out;
  }
  std::string s(H5Tget_size(t.id()), '\0');
  if (H5Aread(a.id(), t.id(), &s[0]) < 0) throw failed();
  return std::string(s.c_str());
}

int64_t File::read_attr_i64(const std::string& obj, const std::string& name) const {
  Handle o = open_obj(obj);
  Handle a = open_attr(o.id(), name, path_);
  int64_t v = 0;
  if (H5Aread(a.id(), H5T_NATIVE_INT64, &v) < 0) {
    throw InputError("HDF5 file '" + path_ + "': attribute '" + name + "' is not an integer");
  }
  return v;
}

double File::read_attr_f64(const std::string& obj, const std::string& name) const {
  Handle o = open_obj(obj);
  Handle a = open_attr(o.id(), name, path_);
  double v = 0;
  if (H5Aread(a.id(), H5T_NATIVE_DOUBLE, &v) < 0) {
    throw InputError("HDF5 file '" + path_ + "': attribute '" + name + "' is not a number");
  }
  return v;
}

}  // namespace h5
}  // namespace kktrain
