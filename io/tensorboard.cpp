// TensorBoard event files (io/tensorboard.hpp).
#include "io/tensorboard.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/errors.hpp"

namespace kktrain {

namespace {

std::array<uint32_t, 256> crc_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    t[i] = c;
  }
  return t;
}

void varint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void key(std::string* out, int field, int wire) {
  varint(out, static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire));
}

void bytes_field(std::string* out, int field, const std::string& b) {
  key(out, field, 2);
  varint(out, b.size());
  out->append(b);
}

template <class T>
void fixed(std::string* out, T v) {  // little-endian, as protobuf's fixed32 / fixed64
  unsigned char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out->append(reinterpret_cast<const char*>(b), sizeof(T));
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

uint32_t crc32c(const void* data, std::size_t n) {
  static const std::array<uint32_t, 256> t = crc_table();
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = 0xffffffffu;
  for (std::size_t i = 0; i < n; ++i) c = t[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

uint32_t masked_crc32c(const void* data, std::size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string event_bytes(double wall_time, int64_t step, const std::string& file_version,
                        const std::vector<std::pair<std::string, float>>& values) {
  std::string e;
  key(&e, 1, 1);  // wall_time: double
  fixed(&e, wall_time);
  key(&e, 2, 0);  // step: int64 varint (two's complement for a negative one)
  varint(&e, static_cast<uint64_t>(step));
  if (!file_version.empty()) {
    bytes_field(&e, 3, file_version);
    return e;
  }
  std::string summary;
  for (const auto& [tag, v] : values) {
    std::string value;
    bytes_field(&value, 1, tag);
    key(&value, 2, 5);  // simple_value: float
    fixed(&value, v);
    bytes_field(&summary, 1, value);
  }
  bytes_field(&e, 5, summary);
  return e;
}

std::string event_record(const std::string& data) {
  std::string r;
  const uint64_t n = data.size();
  fixed(&r, n);
  fixed(&r, masked_crc32c(r.data(), 8));
  r.append(data);
  fixed(&r, masked_crc32c(data.data(), data.size()));
  return r;
}

EventFileWriter::EventFileWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    throw RuntimeFailure("cannot create the TensorBoard directory '" + dir + "': " + ec.message());
  }
  char host[256] = "localhost";
  if (::gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "localhost");
  const std::string base = dir + "/events.out.tfevents." +
                           std::to_string(static_cast<int64_t>(now_seconds())) + "." + host;
  for (int k = 0; k < 1000 && f_ == nullptr; ++k) {
    path_ = k == 0 ? base : base + "." + std::to_string(k);
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EEXIST) continue;
    if (fd < 0) {
      throw RuntimeFailure("cannot create the TensorBoard file '" + path_ +
                           "': " + std::strerror(errno));
    }
    f_ = ::fdopen(fd, "wb");
    if (f_ == nullptr) {
      ::close(fd);
      throw RuntimeFailure("cannot open the TensorBoard file '" + path_ +
                           "': " + std::strerror(errno));
    }
  }
  if (f_ == nullptr) throw RuntimeFailure("no free TensorBoard file name beside '" + base + "'");
  put(event_record(event_bytes(now_seconds(), 0, "brain.Event:2", {})));
}

EventFileWriter::~EventFileWriter() {
  if (f_ != nullptr) std::fclose(f_);
}

void EventFileWriter::scalars(int64_t step,
                              const std::vector<std::pair<std::string, float>>& values) {
  put(event_record(event_bytes(now_seconds(), step, "", values)));
}

void EventFileWriter::put(const std::string& record) {
  if (std::fwrite(record.data(), 1, record.size(), f_) != record.size() || std::fflush(f_) != 0) {
    throw RuntimeFailure("cannot write the TensorBoard file '" + path_ +
                         "': " + std::strerror(errno));
  }
}

}  // namespace kktrain
