// Checkpoint files (collective sharded HDF5 with checksums) and the atomic directory protocol;
// see io/checkpoint.hpp.
#include "io/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/errors.hpp"
#include "core/kokkos_compat.hpp"
#include "core/random.hpp"
#include "parallel/agree.hpp"

namespace kktrain {

namespace fs = std::filesystem;

MPI_Comm hdf5_comm(const Communicator& comm) {
  return comm.size() > 1 ? MPI_COMM_WORLD : MPI_COMM_NULL;
}

namespace {

template <class U>
uint64_t sum_of_hashes(const U* bits, int64_t n, int64_t first) {
  // One SplitMix64 finalizer per element over its bits and (bijectively mixed) index; adds
  // wrap mod 2^64. Vectorizes (64-bit multiplies) where the CPU has them.
  uint64_t sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t index = static_cast<uint64_t>(first + i) * 0x9e3779b97f4a7c15ull;
    sum += mix64(static_cast<uint64_t>(bits[i]) ^ index);
  }
  return sum;
}

}  // namespace

uint64_t shard_checksum(const void* data, h5::Elem elem, int64_t n, int64_t first) {
  if (h5::elem_size(elem) == 4) return sum_of_hashes(static_cast<const uint32_t*>(data), n, first);
  return sum_of_hashes(static_cast<const uint16_t*>(data), n, first);
}

std::string checksum_hex(uint64_t c) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64, c);
  return buf;
}

namespace {

std::vector<char> to_host(const ShardRef& s) {
  const std::size_t n = static_cast<std::size_t>(s.rows * s.row_len) * h5::elem_size(s.elem);
  if (s.data.extent(0) != n) {
    throw InternalError("shard " + s.dataset + ": " + std::to_string(s.data.extent(0)) +
                        " bytes in device memory for " + std::to_string(n));
  }
  std::vector<char> out(n);
  if (n > 0) Kokkos::deep_copy(HostBytesU(out.data(), n), s.data);
  return out;
}

void fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) throw RuntimeFailure("checkpoint: cannot open '" + path + "' to sync it");
  const int r = ::fsync(fd);
  ::close(fd);
  if (r != 0) throw RuntimeFailure("checkpoint: cannot sync '" + path + "' to disk");
}

void write_text_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    out.flush();
    if (!out) throw RuntimeFailure("checkpoint: cannot write '" + tmp + "'");
  }
  fsync_path(tmp, false);
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw RuntimeFailure("checkpoint: cannot rename '" + tmp + "': " + ec.message());
}

// Swaps two directories atomically (Linux renameat2 RENAME_EXCHANGE); false where the system or
// file system cannot.
bool exchange_dirs(const fs::path& a, const fs::path& b) {
#if defined(__linux__) && defined(RENAME_EXCHANGE)
  return ::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) == 0;
#else
  (void)a;
  (void)b;
  return false;
#endif
}

// Steps of the complete step directories under root, ascending.
std::vector<int64_t> saved_steps(const std::string& root) {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("step_", 0) != 0 || n.size() != 13) continue;
    if (n.find_first_not_of("0123456789", 5) != std::string::npos) continue;
    steps.push_back(std::stoll(n.substr(5)));
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

// Removes the oldest complete step directories beyond keep_last, never step `keep`.
void prune_steps(const std::string& root, int64_t keep_last, int64_t keep) {
  std::error_code ec;
  const std::vector<int64_t> steps = saved_steps(root);
  int64_t excess = static_cast<int64_t>(steps.size()) - keep_last;
  for (std::size_t k = 0; k < steps.size() && excess > 0; ++k) {
    if (steps[k] == keep) continue;
    fs::remove_all(fs::path(root) / step_dir_name(steps[k]), ec);
    --excess;
  }
}

// The step `latest` names under root, or -1.
int64_t latest_step(const std::string& root) {
  std::ifstream in(fs::path(root) / "latest");
  std::string name;
  std::getline(in, name);
  if (name.size() != 13 || name.rfind("step_", 0) != 0 ||
      name.find_first_not_of("0123456789", 5) != std::string::npos) {
    return -1;
  }
  return std::stoll(name.substr(5));
}

}  // namespace

void write_host_dataset(h5::File& f, const std::string& dataset, h5::Elem elem,
                        const std::vector<int64_t>& shape, const void* data) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  const int64_t rows = shape.empty() ? 1 : shape[0];
  f.create_dataset(dataset, elem, shape);
  f.write_rows(dataset, elem, 0, rows, rows > 0 ? n / rows : 0, data);
  f.attr_str(dataset, "dtype", h5::elem_name(elem));
  f.attr_str(dataset, "checksum", checksum_hex(shard_checksum(data, elem, n, 0)));
}

void write_shards(const std::string& path, const std::vector<ShardRef>& shards,
                  const FileAttrs& attrs, Communicator& comm) {
  h5::File f = h5::File::create(path, hdf5_comm(comm));
  std::vector<uint64_t> partial;
  for (const auto& s : shards) {
    f.create_dataset(s.dataset, s.elem, s.shape);
    const std::vector<char> host = to_host(s);
    partial.push_back(
        shard_checksum(host.data(), s.elem, s.rows * s.row_len, s.row_begin * s.row_len));
    f.write_rows(s.dataset, s.elem, s.row_begin, s.rows, s.row_len, host.data());
  }
  // Attributes are collective metadata: every rank writes the same values.
  for (std::size_t k = 0; k < shards.size(); ++k) {
    const ShardRef& s = shards[k];
    f.attr_str(s.dataset, "dtype", h5::elem_name(s.elem));
    f.attr_str(s.dataset, "checksum", checksum_hex(comm.allreduce_sum_u64(partial[k])));
    for (const auto& [key, value] : s.attrs) f.attr_str(s.dataset, key, value);
  }
  for (const auto& [key, value] : attrs.str) f.attr_str("/", key, value);
  for (const auto& [key, value] : attrs.i64) f.attr_i64("/", key, value);
  for (const auto& [key, value] : attrs.f64) f.attr_f64("/", key, value);
  f.close();
}

ShardReader::ShardReader(const std::string& path, Communicator& comm)
    : path_(path), comm_(comm), file_(h5::File::open_read(path, hdf5_comm(comm))) {}

std::vector<char> ShardReader::read_rows(const std::string& dataset, int64_t row_begin,
                                         int64_t rows, int64_t row_len) {
  if (!file_.exists(dataset)) {
    throw InputError("checkpoint '" + path_ + "' has no dataset '" + dataset + "'");
  }
  const h5::Elem e = file_.elem_of(dataset);
  std::vector<char> out(static_cast<std::size_t>(rows * row_len) * h5::elem_size(e));
  file_.read_rows(dataset, e, row_begin, rows, row_len, out.data());
  const uint64_t sum =
      comm_.allreduce_sum_u64(shard_checksum(out.data(), e, rows * row_len, row_begin * row_len));
  if (!file_.has_attr(dataset, "checksum")) {
    throw InputError("checkpoint '" + path_ + "': dataset '" + dataset + "' has no checksum");
  }
  const std::string want = file_.read_attr_str(dataset, "checksum");
  if (checksum_hex(sum) != want) {
    throw InputError("checkpoint '" + path_ + "': dataset '" + dataset +
                     "' fails its checksum (stored " + want + ", read " + checksum_hex(sum) +
                     "): the file is corrupted");
  }
  return out;
}

std::string step_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step_%08lld", static_cast<long long>(step));
  return buf;
}

std::string save_checkpoint_dir(const std::string& root, int64_t step, int64_t keep_last,
                                Communicator& comm,
                                const std::function<void(const std::string&)>& write) {
  const bool rank0 = comm.rank() == 0;
  const std::string name = step_dir_name(step);
  const fs::path final_dir = fs::path(root) / name;
  const fs::path tmp_dir = fs::path(root) / (".tmp_" + name);
  collectively(comm, [&] {
    if (!rank0) return;
    std::error_code ec;
    fs::create_directories(root, ec);
    if (ec) throw InputError("checkpoint.dir: cannot create '" + root + "': " + ec.message());
    for (const auto& e : fs::directory_iterator(root, ec)) {  // debris of interrupted saves
      if (e.path().filename().string().rfind(".tmp_", 0) == 0) fs::remove_all(e.path(), ec);
    }
    // A save interrupted before its pruning left keep_last + 1 steps: prune them now, so that
    // this save's new directory never makes more than keep_last + 1.
    prune_steps(root, keep_last, latest_step(root));
    fs::create_directories(tmp_dir, ec);
    if (ec) throw RuntimeFailure("checkpoint: cannot create '" + tmp_dir.string() + "'");
  });
  const std::string tmp_file = (tmp_dir / kCheckpointFile).string();
  collectively(comm, [&] { write(tmp_file); });
  collectively(comm, [&] {
    if (!rank0) return;
    fsync_path(tmp_file, false);
    fsync_path(tmp_dir.string(), true);
    // A step saved again (a run resumed from an earlier step of this root) replaces a directory
    // that `latest` may name: the new one is swapped in atomically where the system can, else
    // the old one is moved aside first; it is removed only after `latest` is rewritten (killed
    // before, it is .tmp_ debris that the next save clears).
    std::error_code ec;
    fs::path old_dir;
    if (fs::exists(final_dir, ec)) {
      if (exchange_dirs(tmp_dir, final_dir)) {
        old_dir = tmp_dir;
      } else {
        old_dir = fs::path(root) / (".tmp_old_" + name);
        fs::remove_all(old_dir, ec);
        fs::rename(final_dir, old_dir, ec);
      }
    }
    if (!ec && old_dir != tmp_dir) fs::rename(tmp_dir, final_dir, ec);
    if (ec) {
      throw RuntimeFailure("checkpoint: cannot rename '" + tmp_dir.string() + "' to '" +
                           final_dir.string() + "': " + ec.message());
    }
    fsync_path(root, true);
    write_text_atomically((fs::path(root) / "latest").string(), name + "\n");
    fsync_path(root, true);
    if (!old_dir.empty()) fs::remove_all(old_dir, ec);
    prune_steps(root, keep_last, step);  // only now may older checkpoints go
  });
  return final_dir.string();
}

std::optional<std::string> latest_checkpoint(const std::string& root) {
  const fs::path latest = fs::path(root) / "latest";
  std::error_code ec;
  if (!fs::is_regular_file(latest, ec)) return std::nullopt;
  std::ifstream in(latest);
  std::string name;
  std::getline(in, name);
  const fs::path file = fs::path(root) / name / kCheckpointFile;
  if (name.empty() || !fs::is_regular_file(file, ec)) {
    throw InputError("checkpoint: '" + latest.string() + "' names '" + name + "', which holds no " +
                     kCheckpointFile);
  }
  return file.string();
}

std::string resolve_checkpoint(const std::string& path, const std::string& what) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return path;
  if (fs::is_directory(path, ec)) {
    const fs::path file = fs::path(path) / kCheckpointFile;
    if (fs::is_regular_file(file, ec)) return file.string();
    if (auto latest = latest_checkpoint(path)) return *latest;
    // A run directory (train.output_dir) holds its checkpoints under checkpoints/.
    const fs::path run = fs::path(path) / "checkpoints";
    if (fs::is_directory(run, ec)) {
      if (auto latest = latest_checkpoint(run.string())) return *latest;
    }
    throw InputError(what + ": '" + path + "' holds no " + kCheckpointFile +
                     ", no 'latest' pointer and no checkpoints/latest");
  }
  throw InputError(what + ": no checkpoint at '" + path + "'");
}

}  // namespace kktrain
