// HDF5 files as an index plus raw byte ranges (io/h5_rows.hpp).
#include "io/h5_rows.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/errors.hpp"
#include "io/checkpoint.hpp"
#include "parallel/agree.hpp"

namespace kktrain {

namespace {

std::string sys_reason(int err) {
  return std::strerror(err);
}

// ---- a tiny length-prefixed encoding for broadcasting the index ----
void put_u64(std::string& out, uint64_t v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(v));
}
void put_str(std::string& out, const std::string& s) {
  put_u64(out, s.size());
  out += s;
}
struct Cursor {
  const std::string& in;
  std::size_t pos = 0;
  uint64_t u64() {
    if (pos + 8 > in.size()) throw InternalError("file index: truncated");
    uint64_t v;
    std::memcpy(&v, in.data() + pos, 8);
    pos += 8;
    return v;
  }
  std::string str() {
    const uint64_t n = u64();
    if (pos + n > in.size()) throw InternalError("file index: truncated");
    std::string s = in.substr(pos, n);
    pos += n;
    return s;
  }
};

void put_attrs(std::string& out, const std::map<std::string, std::string>& m) {
  put_u64(out, m.size());
  for (const auto& [k, v] : m) {
    put_str(out, k);
    put_str(out, v);
  }
}
std::map<std::string, std::string> get_attrs(Cursor& c) {
  std::map<std::string, std::string> m;
  for (uint64_t n = c.u64(); n > 0; --n) {
    std::string k = c.str();
    m[k] = c.str();
  }
  return m;
}

}  // namespace

// ---- DatasetInfo, FileIndex ----------------------------------------------------------------

int64_t DatasetInfo::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

h5::Elem DatasetInfo::elem(const std::string& file) const {
  if (kind == "float32") return h5::Elem::f32;
  if (kind == "bfloat16") return h5::Elem::bf16;
  if (kind == "int16") return h5::Elem::i16;
  throw InputError("'" + file + "': dataset '" + path + "' holds " + kind +
                   " data, not float32, bfloat16 or int16");
}

FileIndex FileIndex::read(const std::string& path) {
  const h5::File f = h5::File::open_read(path);
  FileIndex ix;
  ix.path_ = path;
  for (const auto& name : f.attr_names("/")) {
    const std::string c = f.attr_class("/", name);
    if (c == "string") ix.root_.str[name] = f.read_attr_str("/", name);
    if (c == "integer") ix.root_.i64[name] = f.read_attr_i64("/", name);
    if (c == "float") ix.root_.f64[name] = f.read_attr_f64("/", name);
  }
  for (const auto& ds : f.datasets()) {
    DatasetInfo d;
    d.path = ds;
    d.kind = f.kind(ds);
    d.shape = f.shape(ds);
    d.offset = f.raw_offset(ds);
    for (const auto& a : f.attr_names(ds)) {
      if (f.attr_class(ds, a) == "string") d.attrs[a] = f.read_attr_str(ds, a);
    }
    ix.datasets_.push_back(std::move(d));
  }
  ix.build_lookup();
  return ix;
}

void FileIndex::build_lookup() {
  by_path_.clear();
  for (std::size_t k = 0; k < datasets_.size(); ++k) by_path_[datasets_[k].path] = k;
}

const DatasetInfo* FileIndex::find(const std::string& dataset) const {
  const auto it = by_path_.find(dataset);
  return it == by_path_.end() ? nullptr : &datasets_[it->second];
}

const DatasetInfo& FileIndex::at(const std::string& dataset) const {
  const DatasetInfo* d = find(dataset);
  if (!d) throw InputError("'" + path_ + "' has no dataset '" + dataset + "'");
  return *d;
}

std::vector<std::string> FileIndex::list(const std::string& group) const {
  const std::string prefix = group + "/";
  std::vector<std::string> out;
  for (const auto& d : datasets_) {
    if (d.path.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string rest = d.path.substr(prefix.size());
    const std::string child = rest.substr(0, rest.find('/'));
    if (out.empty() || out.back() != child) out.push_back(child);
  }
  return out;
}

bool FileIndex::has_root(const std::string& name) const {
  return root_.str.count(name) || root_.i64.count(name) || root_.f64.count(name);
}

const std::string& FileIndex::root_str(const std::string& name) const {
  const auto it = root_.str.find(name);
  if (it == root_.str.end()) {
    throw InputError("'" + path_ + "' has no string attribute '" + name + "'");
  }
  return it->second;
}

int64_t FileIndex::root_i64(const std::string& name) const {
  const auto it = root_.i64.find(name);
  if (it == root_.i64.end()) {
    throw InputError("'" + path_ + "' has no integer attribute '" + name + "'");
  }
  return it->second;
}

double FileIndex::root_f64(const std::string& name) const {
  const auto it = root_.f64.find(name);
  if (it != root_.f64.end()) return it->second;
  const auto i = root_.i64.find(name);  // an integer where a number is expected is fine
  if (i != root_.i64.end()) return static_cast<double>(i->second);
  throw InputError("'" + path_ + "' has no numeric attribute '" + name + "'");
}

std::string FileIndex::serialize() const {
  std::string out;
  put_str(out, path_);
  put_attrs(out, root_.str);
  put_u64(out, root_.i64.size());
  for (const auto& [k, v] : root_.i64) {
    put_str(out, k);
    put_u64(out, static_cast<uint64_t>(v));
  }
  put_u64(out, root_.f64.size());
  for (const auto& [k, v] : root_.f64) {
    put_str(out, k);
    uint64_t bits;
    std::memcpy(&bits, &v, 8);
    put_u64(out, bits);
  }
  put_u64(out, datasets_.size());
  for (const auto& d : datasets_) {
    put_str(out, d.path);
    put_str(out, d.kind);
    put_u64(out, d.shape.size());
    for (auto s : d.shape) put_u64(out, static_cast<uint64_t>(s));
    put_u64(out, static_cast<uint64_t>(d.offset));
    put_attrs(out, d.attrs);
  }
  return out;
}

FileIndex FileIndex::deserialize(const std::string& bytes) {
  Cursor c{bytes};
  FileIndex ix;
  ix.path_ = c.str();
  ix.root_.str = get_attrs(c);
  for (uint64_t n = c.u64(); n > 0; --n) {
    std::string k = c.str();
    ix.root_.i64[k] = static_cast<int64_t>(c.u64());
  }
  for (uint64_t n = c.u64(); n > 0; --n) {
    std::string k = c.str();
    const uint64_t bits = c.u64();
    double v;
    std::memcpy(&v, &bits, 8);
    ix.root_.f64[k] = v;
  }
  for (uint64_t n = c.u64(); n > 0; --n) {
    DatasetInfo d;
    d.path = c.str();
    d.kind = c.str();
    for (uint64_t r = c.u64(); r > 0; --r) d.shape.push_back(static_cast<int64_t>(c.u64()));
    d.offset = static_cast<int64_t>(c.u64());
    d.attrs = get_attrs(c);
    ix.datasets_.push_back(std::move(d));
  }
  ix.build_lookup();
  return ix;
}

// ---- RowReader ------------------------------------------------------------------------------

RowReader::RowReader(const std::string& path, Communicator& comm) : comm_(comm) {
  std::string bytes;
  collectively(comm, [&] {
    if (comm.rank() == 0) bytes = FileIndex::read(path).serialize();
  });
  comm.broadcast_host(bytes, 0);
  index_ = FileIndex::deserialize(bytes);
  collectively(comm, [&] {
    if (auto why = open_regular_file(&fd_, path)) {
      throw InputError("cannot open '" + path + "': " + *why);
    }
  });
}

RowReader::~RowReader() = default;

namespace {

int64_t row_len_of(const DatasetInfo& d) {
  const int64_t rows = d.shape.empty() ? 1 : d.shape[0];
  return rows > 0 ? d.numel() / rows : 0;
}

}  // namespace

std::vector<char> RowReader::read_rows_local(const DatasetInfo& d, int64_t row_begin,
                                             int64_t rows) {
  const h5::Elem e = d.elem(path());
  const int64_t total_rows = d.shape.empty() ? 1 : d.shape[0];
  if (row_begin < 0 || rows < 0 || row_begin + rows > total_rows) {
    throw InternalError("rows [" + std::to_string(row_begin) + ", " +
                        std::to_string(row_begin + rows) + ") of '" + d.path + "' with " +
                        std::to_string(total_rows) + " rows");
  }
  const int64_t row_len = row_len_of(d);
  const int64_t esize = static_cast<int64_t>(h5::elem_size(e));
  std::vector<char> out(static_cast<std::size_t>(rows * row_len * esize));
  if (out.empty()) return out;
  if (d.offset < 0) {  // not contiguous: through HDF5
    if (!h5_) h5_.emplace(h5::File::open_read(path()));
    h5_->read_rows(d.path, e, row_begin, rows, row_len, out.data());
    return out;
  }
  const int64_t at = d.offset + row_begin * row_len * esize;
  std::size_t done = 0;
  while (done < out.size()) {
    const ssize_t r =
        ::pread(fd_.get(), out.data() + done, out.size() - done, static_cast<off_t>(at + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      throw InputError("'" + path() + "': cannot read dataset '" + d.path +
                       "': " + sys_reason(errno));
    }
    if (r == 0) {
      throw InputError("'" + path() + "': dataset '" + d.path +
                       "' ends past the end of the file: the file is truncated");
    }
    done += static_cast<std::size_t>(r);
  }
  return out;
}

std::vector<char> RowReader::read_rows(const std::string& dataset, int64_t row_begin,
                                       int64_t rows) {
  std::vector<char> out;
  const DatasetInfo* d = nullptr;
  h5::Elem e = h5::Elem::f32;
  collectively(comm_, [&] {
    d = &index_.at(dataset);
    e = d->elem(path());
    out = read_rows_local(*d, row_begin, rows);
  });
  if (d->attrs.count("checksum")) {
    ChecksumCheck check(path(), *d);
    check.add(out.data(), e, row_begin, rows);
    check.verify(comm_.allreduce_sum_u64(check.partial()));  // the same on every rank
  }
  return out;
}

void ChecksumCheck::add(const void* data, h5::Elem e, int64_t row_begin, int64_t rows) {
  const int64_t row_len = row_len_of(d_);
  sum_ += shard_checksum(data, e, rows * row_len, row_begin * row_len);
}

void ChecksumCheck::verify(uint64_t sum) const {
  const auto it = d_.attrs.find("checksum");
  if (it == d_.attrs.end()) return;
  if (checksum_hex(sum) != it->second) {
    throw InputError("'" + file_ + "': dataset '" + d_.path + "' fails its checksum (stored " +
                     it->second + ", read " + checksum_hex(sum) + "): the file is corrupted");
  }
}

// ---- RowWriter ------------------------------------------------------------------------------

namespace {

constexpr const char* kChecksumPlaceholder = "0000000000000000";  // same length as the real one

void check_free_space(const std::string& file, int64_t bytes) {
  const std::filesystem::path dir = std::filesystem::path(file).parent_path();
  struct statvfs st {};
  if (::statvfs(dir.empty() ? "." : dir.c_str(), &st) != 0) return;  // cannot tell: try
  const int64_t free_bytes = static_cast<int64_t>(st.f_bavail) * static_cast<int64_t>(st.f_frsize);
  // HDF5's headers and attributes: a few KiB per dataset at most; 1 MiB of margin besides.
  const int64_t need = bytes + bytes / 64 + (int64_t(1) << 20);
  if (need > free_bytes) {
    throw RuntimeFailure("cannot write '" + file + "': " + sys_reason(ENOSPC) + " (needs about " +
                         std::to_string(need) + " bytes, " + std::to_string(free_bytes) + " free)");
  }
}

// Rank 0: the file with every dataset (contiguous, allocated, not filled) and attribute; returns
// each dataset's data offset.
std::vector<int64_t> create_file(const std::string& path, const std::vector<DatasetSpec>& specs,
                                 const FileAttrs& root) {
  h5::File f = h5::File::create(path);
  std::vector<int64_t> offsets;
  for (const auto& s : specs) {
    f.create_dataset(s.path, s.elem, s.shape);
    f.attr_str(s.path, "dtype", h5::elem_name(s.elem));
    f.attr_str(s.path, "checksum", kChecksumPlaceholder);
    for (const auto& [key, value] : s.attrs) f.attr_str(s.path, key, value);
    offsets.push_back(f.raw_offset(s.path));
  }
  for (const auto& [key, value] : root.str) f.attr_str("/", key, value);
  for (const auto& [key, value] : root.i64) f.attr_i64("/", key, value);
  for (const auto& [key, value] : root.f64) f.attr_f64("/", key, value);
  f.close();
  return offsets;
}

}  // namespace

RowWriter::RowWriter(const std::string& path, std::vector<DatasetSpec> datasets,
                     const FileAttrs& root, Communicator& comm)
    : path_(path), comm_(comm), specs_(std::move(datasets)) {
  int64_t bytes = 0;
  for (const auto& s : specs_) {
    int64_t n = 1;
    for (auto d : s.shape) n *= d;
    const int64_t rows = s.shape.empty() ? 1 : s.shape[0];
    const int64_t esize = static_cast<int64_t>(h5::elem_size(s.elem));
    row_bytes_.push_back(rows > 0 ? n / rows * esize : 0);
    bytes += n * esize;
  }
  checksums_.assign(specs_.size(), 0);
  std::string offsets;
  collectively(comm, [&] {
    if (comm.rank() != 0) return;
    check_free_space(path, bytes);
    const std::vector<int64_t> o = create_file(path, specs_, root);
    offsets.assign(reinterpret_cast<const char*>(o.data()), o.size() * sizeof(int64_t));
  });
  comm.broadcast_host(offsets, 0);
  offsets_.resize(specs_.size());
  std::memcpy(offsets_.data(), offsets.data(), offsets.size());
  collectively(comm, [&] {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd_ < 0) throw RuntimeFailure("cannot open '" + path + "': " + sys_reason(errno));
  });
}

RowWriter::~RowWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void RowWriter::write_rows(std::size_t k, int64_t row_begin, int64_t rows, const void* data) {
  const DatasetSpec& s = specs_.at(k);
  const std::size_t bytes = static_cast<std::size_t>(rows * row_bytes_[k]);
  if (bytes == 0) return;
  const int64_t esize = static_cast<int64_t>(h5::elem_size(s.elem));
  checksums_[k] += shard_checksum(data, s.elem, static_cast<int64_t>(bytes) / esize,
                                  row_begin * (row_bytes_[k] / esize));
  const int64_t at = offsets_[k] + row_begin * row_bytes_[k];
  const char* p = static_cast<const char*>(data);
  std::size_t done = 0;
  while (done < bytes) {
    const ssize_t w = ::pwrite(fd_, p + done, bytes - done, static_cast<off_t>(at + done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      throw RuntimeFailure("cannot write '" + path_ + "' (dataset '" + s.path +
                           "'): " + sys_reason(w < 0 ? errno : EIO));
    }
    done += static_cast<std::size_t>(w);
  }
  bytes_written_ += static_cast<int64_t>(bytes);
}

void RowWriter::finish() {
  collectively(comm_, [&] {
    const int fd = fd_;
    fd_ = -1;
    const bool synced = ::fsync(fd) == 0;
    const int err = errno;
    const bool closed = ::close(fd) == 0;
    if (!synced || !closed) {
      throw RuntimeFailure("cannot write '" + path_ + "': " + sys_reason(synced ? errno : err));
    }
  });
  comm_.allreduce_sum_u64(checksums_);
  collectively(comm_, [&] {
    if (comm_.rank() != 0) return;
    // The checksum attributes exist already with a value of the same length: overwritten in
    // place, so this needs no new space in the file.
    h5::File f = h5::File::open_write(path_);
    for (std::size_t k = 0; k < specs_.size(); ++k) {
      f.attr_str(specs_[k].path, "checksum", checksum_hex(checksums_[k]));
    }
    f.close();
  });
}

}  // namespace kktrain
