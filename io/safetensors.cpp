// safetensors headers validated, tensors read and written by byte ranges (io/safetensors.hpp).
#include "io/safetensors.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "core/errors.hpp"
#include "core/files.hpp"
#include "core/json_text.hpp"
#include "io/elem_convert.hpp"
#include "io/model_weights.hpp"

namespace kktrain {

namespace {

using json = nlohmann::json;

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw InputError("'" + path + "': " + what);
}

[[noreturn]] void bad_tensor(const std::string& path, const std::string& name,
                             const std::string& what) {
  throw InputError("'" + path + "': tensor '" + printable_name(name) + "' " + what);
}

// The header's JSON, refusing a name given twice in any object (JSON parsers keep the last
// silently; the format forbids duplicates).
json parse_json_without_duplicates(const std::string& path, const std::string& text) {
  if (auto why = json_nesting_error(text)) bad(path, "the header's " + *why);
  std::vector<std::set<std::string>> keys;
  std::string duplicate;
  const json::parser_callback_t cb = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) keys.emplace_back();
    if (event == json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
    if (event == json::parse_event_t::key && !keys.empty() && duplicate.empty()) {
      const std::string k = parsed.get<std::string>();
      if (!keys.back().insert(k).second) duplicate = k;
    }
    return true;
  };
  json j;
  try {
    j = json::parse(text, cb);
  } catch (const json::exception& e) {
    bad(path, "the header is not valid JSON (" + std::string(e.what()) + ")");
  }
  if (!duplicate.empty()) bad(path, "the header names '" + duplicate + "' twice");
  return j;
}

int64_t checked_i64(const json& v, const std::string& path, const std::string& name,
                    const std::string& what) {
  if (!v.is_number_unsigned() ||
      v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    bad_tensor(path, name, "has " + what + " " + v.dump() + ", not a non-negative integer");
  }
  return static_cast<int64_t>(v.get<uint64_t>());
}

StTensor parse_entry(const std::string& path, const std::string& name, const json& e) {
  if (!e.is_object()) bad_tensor(path, name, "is not a JSON object");
  for (const auto& [k, v] : e.items()) {
    (void)v;
    if (k != "dtype" && k != "shape" && k != "data_offsets") {
      bad_tensor(path, name, "has an unknown field '" + k + "'");
    }
  }
  StTensor t;
  t.name = name;
  if (!e.contains("dtype") || !e["dtype"].is_string()) bad_tensor(path, name, "has no dtype");
  t.dtype = e["dtype"].get<std::string>();
  const int64_t esize = st_dtype_bytes(t.dtype);
  if (esize == 0) bad_tensor(path, name, "has an unknown dtype \"" + t.dtype + "\"");
  if (!e.contains("shape") || !e["shape"].is_array()) bad_tensor(path, name, "has no shape");
  // The byte size, checked for overflow: shape x element size must fit the file anyway.
  int64_t bytes = esize;
  bool overflow = false;
  for (const auto& d : e["shape"]) {
    const int64_t n = checked_i64(d, path, name, "a dimension");
    t.shape.push_back(n);
    if (n != 0 && bytes > std::numeric_limits<int64_t>::max() / n) overflow = true;
    bytes = overflow ? 0 : bytes * n;
  }
  const json& off = e.contains("data_offsets") ? e["data_offsets"] : json();
  if (!off.is_array() || off.size() != 2) {
    bad_tensor(path, name, "has no data_offsets [begin, end]");
  }
  t.begin = checked_i64(off[0], path, name, "a data offset");
  t.end = checked_i64(off[1], path, name, "a data offset");
  if (t.end < t.begin) {
    bad_tensor(path, name, "ends before it begins (data_offsets " + off.dump() + ")");
  }
  if (overflow || t.end - t.begin != bytes) {
    bad_tensor(path, name,
               "has " + std::to_string(t.end - t.begin) + " bytes (data_offsets " + off.dump() +
                   ") but its shape and dtype " + t.dtype + " need " +
                   (overflow ? std::string("more than 2^63") : std::to_string(bytes)));
  }
  return t;
}

// Opens `path` as a regular file without blocking (core/files.hpp); InputError naming it
// otherwise ("is a FIFO (named pipe), not a regular file", "cannot open: ...").
void open_or_refuse(FileDescriptor* out, const std::string& path, struct stat* st) {
  if (auto why = open_regular_file(out, path, st)) {
    bad(path, why->rfind("is ", 0) == 0 ? *why : "cannot open: " + *why);
  }
}

void read_exact(int fd, char* out, int64_t bytes, int64_t at, const std::string& path,
                const std::string& what) {
  int64_t done = 0;
  while (done < bytes) {
    const ssize_t r = ::pread(fd, out + done, static_cast<std::size_t>(bytes - done),
                              static_cast<off_t>(at + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) bad(path, "cannot read " + what + ": " + std::strerror(errno));
    if (r == 0) bad(path, what + " ends past the end of the file: the file is truncated");
    done += r;
  }
}

}  // namespace

int64_t StTensor::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

int64_t StTensor::row_bytes() const {
  const int64_t r = rows();
  return r > 0 ? (end - begin) / r : 0;
}

const StTensor* StFile::find(const std::string& name) const {
  for (const auto& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

int64_t st_dtype_bytes(const std::string& d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "BOOL" || d == "U8" || d == "I8" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;
}

DType st_dtype_to_dtype(const std::string& d, const std::string& where) {
  if (d == "F32") return DType::float32;
  if (d == "BF16") return DType::bfloat16;
  if (d == "F16") return DType::float16;
  throw InputError(where + " is " + d + "; kktrain reads F32, BF16 and F16 weights");
}

const char* dtype_to_st(DType d) {
  switch (d) {
    case DType::float32:
      return "F32";
    case DType::bfloat16:
      return "BF16";
    case DType::float16:
      return "F16";
  }
  return "?";
}

StFile parse_safetensors_header(const std::string& path, const std::string& header,
                                int64_t file_bytes) {
  const std::size_t first = header.find_first_not_of(" \t\r\n");
  if (first == std::string::npos || header[first] != '{') {
    bad(path, "the header is not a JSON object: not a safetensors file");
  }
  const json j = parse_json_without_duplicates(path, header);
  if (!j.is_object()) bad(path, "the header is not a JSON object: not a safetensors file");
  StFile f;
  f.path = path;
  f.data_offset = 8 + static_cast<int64_t>(header.size());
  f.file_bytes = file_bytes;
  for (const auto& [name, e] : j.items()) {
    if (name == "__metadata__") {
      if (!e.is_object()) bad(path, "__metadata__ is not a JSON object of strings");
      for (const auto& [k, v] : e.items()) {
        if (!v.is_string()) bad(path, "__metadata__ '" + k + "' is not a string");
        f.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    f.tensors.push_back(parse_entry(path, name, e));
  }
  // The data section: the tensors' ranges tile [0, data bytes) exactly.
  std::stable_sort(f.tensors.begin(), f.tensors.end(), [](const StTensor& a, const StTensor& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  int64_t at = 0;
  for (const auto& t : f.tensors) {
    if (t.begin != at) {
      bad_tensor(path, t.name,
                 "begins at byte " + std::to_string(t.begin) + " of the data, expected " +
                     std::to_string(at) +
                     (t.begin < at ? " (it overlaps the tensor before it)" : " (a gap before it)"));
    }
    at = t.end;
  }
  const int64_t data_bytes = file_bytes - f.data_offset;
  if (at != data_bytes) {
    bad(path, "the tensors end at byte " + std::to_string(at) + " of the data but the file holds " +
                  std::to_string(data_bytes) + " bytes of data" +
                  (at > data_bytes ? ": the file is truncated" : ": trailing bytes"));
  }
  return f;
}

StFile read_safetensors_header(const std::string& path) {
  int64_t size = 0;
  const std::string header = read_safetensors_header_bytes(path, &size);
  return parse_safetensors_header(path, header, size);
}

std::string read_safetensors_header_bytes(const std::string& path, int64_t* file_bytes) {
  FileDescriptor file;
  struct stat st {};
  open_or_refuse(&file, path, &st);
  const int fd = file.get();
  const int64_t size = static_cast<int64_t>(st.st_size);
  if (size < 8) bad(path, "has " + std::to_string(size) + " bytes: not a safetensors file");
  unsigned char len_bytes[8];
  read_exact(fd, reinterpret_cast<char*>(len_bytes), 8, 0, path, "the header length");
  uint64_t n = 0;
  for (int b = 7; b >= 0; --b) n = (n << 8) | len_bytes[b];
  if (n > static_cast<uint64_t>(kMaxSafetensorsHeaderBytes)) {
    bad(path, "header length " + std::to_string(n) + " exceeds the limit of " +
                  std::to_string(kMaxSafetensorsHeaderBytes) + " bytes: not a safetensors file");
  }
  if (static_cast<int64_t>(n) > size - 8) {
    bad(path, "header length " + std::to_string(n) + " runs past the end of the file (" +
                  std::to_string(size) + " bytes): truncated or not a safetensors file");
  }
  std::string header(n, '\0');
  read_exact(fd, header.data(), static_cast<int64_t>(n), 8, path, "the header");
  *file_bytes = size;
  return header;
}

// ---- reading ---------------------------------------------------------------------------------

StReader::StReader(StFile file) : file_(std::move(file)) {
  struct stat st {};
  open_or_refuse(&fd_, file_.path, &st);
  if (static_cast<int64_t>(st.st_size) != file_.file_bytes) {
    bad(file_.path, "has " + std::to_string(st.st_size) + " bytes, " +
                        std::to_string(file_.file_bytes) +
                        " when its header was read: it changed while being loaded");
  }
}

StReader::~StReader() = default;

std::vector<float> StReader::read_rows_f32(const StTensor& t, int64_t row_begin,
                                           int64_t rows) const {
  if (row_begin < 0 || rows < 0 || row_begin + rows > t.rows()) {
    throw InternalError("rows [" + std::to_string(row_begin) + ", " +
                        std::to_string(row_begin + rows) + ") of tensor '" + t.name + "' with " +
                        std::to_string(t.rows()) + " rows");
  }
  const DType d = st_dtype_to_dtype(t.dtype, "'" + file_.path + "': tensor '" + t.name + "'");
  const int64_t bytes = rows * t.row_bytes();
  std::vector<char> raw(static_cast<std::size_t>(bytes));
  read_exact(fd_.get(), raw.data(), bytes, file_.data_offset + t.begin + row_begin * t.row_bytes(),
             file_.path, "tensor '" + t.name + "'");
  return widen_dtype_to_f32(raw.data(), bytes / static_cast<int64_t>(dtype_size(d)), d);
}

// ---- writing ---------------------------------------------------------------------------------

std::string StWriter::header_bytes(std::vector<StTensor>& tensors,
                                   const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    h["__metadata__"] = m;
  }
  int64_t at = 0;
  for (auto& t : tensors) {
    t.begin = at;
    t.end = at + t.numel() * st_dtype_bytes(t.dtype);
    at = t.end;
    nlohmann::ordered_json e = nlohmann::ordered_json::object();
    e["dtype"] = t.dtype;
    e["shape"] = t.shape;
    e["data_offsets"] = {t.begin, t.end};
    h[t.name] = e;
  }
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned
  std::string out(8, '\0');
  uint64_t n = text.size();
  for (int b = 0; b < 8; ++b) out[b] = static_cast<char>((n >> (8 * b)) & 0xff);
  return out + text;
}

namespace {

void write_all(int fd, const char* data, int64_t bytes, int64_t at, const std::string& path) {
  int64_t done = 0;
  while (done < bytes) {
    const ssize_t w = ::pwrite(fd, data + done, static_cast<std::size_t>(bytes - done),
                               static_cast<off_t>(at + done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      throw RuntimeFailure("cannot write '" + path + "': " + std::strerror(w < 0 ? errno : EIO));
    }
    done += w;
  }
}

}  // namespace

StWriter::StWriter(const std::string& path, std::vector<StTensor> tensors,
                   const std::map<std::string, std::string>& metadata)
    : path_(path), tensors_(std::move(tensors)), written_(tensors_.size(), 0) {
  const std::string header = header_bytes(tensors_, metadata);
  data_offset_ = static_cast<int64_t>(header.size());
  fd_ = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
  if (fd_ < 0) throw RuntimeFailure("cannot create '" + path + "': " + std::strerror(errno));
  write_all(fd_, header.data(), data_offset_, 0, path_);
}

StWriter::~StWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void StWriter::write(std::size_t k, int64_t byte_begin, const void* data, int64_t bytes) {
  const StTensor& t = tensors_.at(k);
  if (byte_begin < 0 || bytes < 0 || t.begin + byte_begin + bytes > t.end) {
    throw InternalError("write of bytes [" + std::to_string(byte_begin) + ", " +
                        std::to_string(byte_begin + bytes) + ") of tensor '" + t.name + "'");
  }
  write_all(fd_, static_cast<const char*>(data), bytes, data_offset_ + t.begin + byte_begin, path_);
  written_[k] += bytes;
}

void StWriter::finish() {
  for (std::size_t k = 0; k < tensors_.size(); ++k) {
    if (written_[k] != tensors_[k].end - tensors_[k].begin) {
      throw InternalError("'" + path_ + "': tensor '" + tensors_[k].name + "' got " +
                          std::to_string(written_[k]) + " of its " +
                          std::to_string(tensors_[k].end - tensors_[k].begin) + " bytes");
    }
  }
  if (::fsync(fd_) != 0) {
    throw RuntimeFailure("cannot sync '" + path_ + "' to disk: " + std::strerror(errno));
  }
  const int r = ::close(fd_);
  fd_ = -1;
  if (r != 0) throw RuntimeFailure("cannot close '" + path_ + "': " + std::strerror(errno));
}

}  // namespace kktrain
