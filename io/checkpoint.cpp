// Checkpoint files (collective sharded HDF5 with checksums) and the atomic directory protocol;
// see io/checkpoint.hpp.
#include "io/checkpoint.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>

#include "core/errors.hpp"
#include "core/files.hpp"
#include "core/kokkos_compat.hpp"
#include "core/log.hpp"
#include "core/random.hpp"
#include "io/durable.hpp"
#include "parallel/agree.hpp"

namespace kktrain {

namespace fs = std::filesystem;

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

// The shard's bytes where the host can read them: in place on host builds (the shard's memory
// is host memory), else copied into `staging` (reused from shard to shard).
const char* host_bytes(const ShardRef& s, std::vector<char>& staging) {
  const std::size_t n = static_cast<std::size_t>(s.rows * s.row_len) * h5::elem_size(s.elem);
  if (s.data.extent(0) != n) {
    throw InternalError("shard " + s.dataset + ": " + std::to_string(s.data.extent(0)) +
                        " bytes in device memory for " + std::to_string(n));
  }
  if (Kokkos::SpaceAccessibility<HostSpace, MemSpace>::accessible || n == 0) return s.data.data();
  if (staging.size() < n) staging.resize(n);
  Kokkos::deep_copy(HostBytesU(staging.data(), n), s.data);
  return staging.data();
}

}  // namespace

int64_t step_of(const std::string& name) {
  if (name.size() != 13 || name.rfind("step_", 0) != 0 ||
      name.find_first_not_of("0123456789", 5) != std::string::npos) {
    return -1;
  }
  return std::stoll(name.substr(5));
}

std::string step_dir_damage(const std::string& dir) {
  std::error_code ec;
  const fs::path file = fs::path(dir) / kCheckpointFile;
  if (!fs::exists(fs::symlink_status(file, ec)))
    return std::string(kCheckpointFile) + " is missing";
  if (fs::is_symlink(fs::symlink_status(file, ec)) && !fs::exists(file, ec)) {
    return std::string(kCheckpointFile) + " is a dangling symbolic link";
  }
  struct stat st {};
  if (::stat(file.c_str(), &st) == 0 && S_ISREG(st.st_mode)) return "";
  const auto why = unreadable_regular_file(file.string());
  return std::string(kCheckpointFile) + " " + (why ? *why : std::string("is not a regular file"));
}

std::vector<int64_t> complete_steps(const std::string& root) {
  // A step directory gets its name only once its file is complete and synced (the save writes
  // .tmp_step_N/ and renames it), so a step_N/ with its checkpoint file is a complete checkpoint.
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const int64_t step = step_of(e.path().filename().string());
    if (step >= 0 && fs::is_regular_file(e.path() / kCheckpointFile, ec)) steps.push_back(step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

namespace {

// The entries of `dir` (names), sorted.
std::vector<std::string> entries_of(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// Says once per process that step directory `dir` stays because it holds files kktrain did not
// write (`what` is the rest of the sentence).
void warn_foreign(const fs::path& dir, const std::string& what) {
  static std::set<std::string> warned;
  if (!warned.insert(dir.string()).second) return;
  std::string names;
  for (const auto& n : entries_of(dir)) names += (names.empty() ? "" : ", ") + n;
  log::warn("checkpoint: " + what + "; '" + dir.string() + "' stays, holding " + names +
            ", which kktrain did not write (remove it when you no longer need it)");
}

// Removes step directory `dir` as far as kktrain wrote it: its checkpoint file (a regular file
// only), then the directory if nothing else is in it; a directory that holds anything else stays,
// with a warning (`what`: what the pruning was doing).
void remove_step_dir(const fs::path& dir, const std::string& what) {
  std::error_code ec;
  const fs::path file = dir / kCheckpointFile;
  if (fs::is_regular_file(fs::symlink_status(file, ec))) fs::remove(file, ec);
  if (entries_of(dir).empty()) {
    fs::remove(dir, ec);
    return;
  }
  warn_foreign(dir, what);
}

// Removes the oldest complete step directories beyond keep_last, never step `keep`.
void prune_steps(const std::string& root, int64_t keep_last, int64_t keep) {
  std::error_code ec;
  // A step directory without its file is one whose removal a kill interrupted (then it is empty:
  // finish it), or one damaged or filled by someone else: left as it is.
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const int64_t step = step_of(e.path().filename().string());
    if (step >= 0 && fs::is_directory(fs::symlink_status(e.path(), ec)) &&
        !fs::is_regular_file(e.path() / kCheckpointFile, ec)) {
      remove_step_dir(e.path(), "a step directory without a complete checkpoint (" +
                                    step_dir_damage(e.path().string()) + ") is not pruned");
    }
  }
  const std::vector<int64_t> steps = complete_steps(root);
  int64_t excess = static_cast<int64_t>(steps.size()) - keep_last;
  for (std::size_t k = 0; k < steps.size() && excess > 0; ++k) {
    if (steps[k] == keep) continue;
    remove_step_dir(fs::path(root) / step_dir_name(steps[k]),
                    "pruned the checkpoint of step " + std::to_string(steps[k]) +
                        " (checkpoint.keep_last " + std::to_string(keep_last) + ")");
    --excess;
  }
}

// The step `latest` names under root, or -1 (missing, not a regular file, not a step name).
int64_t latest_step(const std::string& root) {
  const fs::path latest = fs::path(root) / "latest";
  // Opened without blocking: a FIFO (or a device) under that name must not block the run.
  std::string text;
  if (read_regular_file(&text, latest.string(), 4096)) return -1;
  return step_of(text.substr(0, text.find('\n')));
}

// Makes room for a new `latest` file where something else stands under that name (a directory):
// it is moved aside, never deleted.
void clear_latest_name(const std::string& root) {
  std::error_code ec;
  const fs::path latest = fs::path(root) / "latest";
  const auto st = fs::symlink_status(latest, ec);
  if (ec || !fs::exists(st) || fs::is_regular_file(st) || fs::is_symlink(st)) return;
  for (int n = 1;; ++n) {
    const fs::path aside = fs::path(root) / ("latest.moved_aside." + std::to_string(n));
    if (fs::exists(fs::symlink_status(aside, ec))) continue;
    fs::rename(latest, aside, ec);
    if (ec) {
      throw RuntimeFailure("checkpoint: cannot move '" + latest.string() +
                           "' (not a file) aside: " + ec.message());
    }
    log::warn("checkpoint: '" + latest.string() + "' was not a file; moved it to '" +
              aside.string() + "'");
    return;
  }
}

}  // namespace

void write_shards(const std::string& path, const std::vector<ShardRef>& shards,
                  const FileAttrs& attrs, Communicator& comm) {
  std::vector<DatasetSpec> specs;
  for (const auto& s : shards) specs.push_back(DatasetSpec{s.dataset, s.elem, s.shape, s.attrs});
  RowWriter w(path, std::move(specs), attrs, comm);
  collectively(comm, [&] {
    std::vector<char> staging;
    for (std::size_t k = 0; k < shards.size(); ++k) {
      const ShardRef& s = shards[k];
      w.write_rows(k, s.row_begin, s.rows, host_bytes(s, staging));
    }
  });
  w.finish();
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
      const std::string n = e.path().filename().string();
      if (n.rfind(".tmp_", 0) == 0 || n.rfind(".latest.tmp.", 0) == 0) fs::remove_all(e.path(), ec);
    }
    // Step directories are never replaced: every one in the root is a checkpoint this run (or the
    // run it resumed) wrote, and one of this step cannot exist (set_aside_checkpoints).
    if (fs::exists(final_dir, ec)) {
      throw InternalError("checkpoint: '" + final_dir.string() + "' exists already");
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
    fsync_path(tmp_file, FsyncTarget::file);
    fsync_path(tmp_dir.string(), FsyncTarget::directory);
    std::error_code ec;
    fs::rename(tmp_dir, final_dir, ec);
    if (ec) {
      throw RuntimeFailure("checkpoint: cannot rename '" + tmp_dir.string() + "' to '" +
                           final_dir.string() + "': " + ec.message());
    }
    fsync_path(root, FsyncTarget::directory);
    clear_latest_name(root);
    write_text_atomically((fs::path(root) / "latest").string(), name + "\n");
    prune_steps(root, keep_last, step);  // only now may older checkpoints go
  });
  return final_dir.string();
}

std::string damaged_latest(const std::string& root) {
  const int64_t named = latest_step(root);
  if (named < 0) return "";
  std::error_code ec;
  const fs::path dir = fs::path(root) / step_dir_name(named);
  if (!fs::is_directory(dir, ec)) return "";
  const std::string damage = step_dir_damage(dir.string());
  if (damage.empty()) return "";
  return "'" + (fs::path(root) / "latest").string() + "' names " + step_dir_name(named) +
         ", but its " + damage;
}

std::optional<std::string> latest_checkpoint(const std::string& root, std::string* note) {
  const std::vector<int64_t> steps = complete_steps(root);
  if (steps.empty()) return std::nullopt;
  // The newest complete step directory: `latest` names it, unless a kill came between the
  // directory's rename and the pointer's update, or the pointer was damaged or removed, or the
  // directory it names was.
  const int64_t newest = steps.back(), named = latest_step(root);
  if (note && named != newest) {
    std::error_code ec;
    const fs::path latest = fs::path(root) / "latest";
    const auto st = fs::symlink_status(latest, ec);
    const std::string damaged = damaged_latest(root);
    const std::string what =
        !damaged.empty()       ? damaged
        : !fs::exists(st)      ? "'" + latest.string() + "' is missing"
        : fs::is_directory(st) ? "'" + latest.string() + "' is a directory"
        : named < 0 ? "'" + latest.string() + "' is unreadable or names no step directory"
                    : "'" + latest.string() + "' names step " + std::to_string(named);
    *note = what + "; using the newest complete checkpoint, " + step_dir_name(newest) +
            (damaged.empty() ? "" : " (" + step_dir_name(named) + " is left as it is)");
  }
  return (fs::path(root) / step_dir_name(newest) / kCheckpointFile).string();
}

std::string set_aside_checkpoints(const std::string& root, int64_t keep_through_step) {
  // Every step directory after keep_through_step: complete ones, and those without a complete
  // checkpoint that hold anything (a damaged one, a user's files: moved with them, never
  // deleted; an empty one is what an interrupted pruning left, and goes).
  std::vector<int64_t> moving;
  int incomplete = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const int64_t s = step_of(e.path().filename().string());
    if (s <= keep_through_step || !fs::is_directory(fs::symlink_status(e.path(), ec))) continue;
    if (!fs::is_regular_file(e.path() / kCheckpointFile, ec)) {
      if (entries_of(e.path()).empty()) {
        fs::remove(e.path(), ec);
        continue;
      }
      ++incomplete;
    }
    moving.push_back(s);
  }
  if (moving.empty()) return "";
  std::sort(moving.begin(), moving.end());
  fs::path aside;
  for (int n = 1;; ++n) {
    aside = fs::path(root) / ("earlier_" + std::to_string(n));
    if (!fs::exists(fs::symlink_status(aside, ec))) break;
  }
  fs::create_directory(aside, ec);
  if (ec)
    throw RuntimeFailure("checkpoint: cannot create '" + aside.string() + "': " + ec.message());
  const fs::path latest = fs::path(root) / "latest";
  // `latest` first: it must never name a directory that is no longer there. When earlier steps
  // stay (this run resumed one of them), it names the newest of those.
  if (keep_through_step >= 0 && latest_step(root) > keep_through_step) {
    clear_latest_name(root);
    write_text_atomically(latest.string(), step_dir_name(keep_through_step) + "\n");
  } else if (keep_through_step < 0 && fs::exists(fs::symlink_status(latest, ec))) {
    fs::rename(latest, aside / "latest", ec);
  }
  for (int64_t s : moving) {
    fs::rename(fs::path(root) / step_dir_name(s), aside / step_dir_name(s), ec);
    if (ec) {
      throw RuntimeFailure("checkpoint: cannot move '" + step_dir_name(s) + "' to '" +
                           aside.string() + "': " + ec.message());
    }
  }
  fsync_path(root, FsyncTarget::directory);
  const std::size_t n = moving.size();
  return std::to_string(n) + " step director" + (n == 1 ? "y" : "ies") + " (steps " +
         std::to_string(moving.front()) + " to " + std::to_string(moving.back()) +
         (incomplete > 0 ? "; " + std::to_string(incomplete) + " without a complete checkpoint"
                         : std::string()) +
         ") moved to " + aside.string();
}

std::string resolve_checkpoint(const std::string& path, const std::string& what) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return path;
  if (fs::is_directory(path, ec)) {
    const fs::path file = fs::path(path) / kCheckpointFile;
    if (fs::is_regular_file(file, ec)) return file.string();
    // The newest complete checkpoint; when `latest` names another (or a damaged one), say so.
    std::string note;
    const auto noted = [&](const std::string& file) {
      if (!note.empty()) log::warn(what + ": " + note);
      return file;
    };
    if (auto latest = latest_checkpoint(path, &note)) return noted(*latest);
    // A run directory (train.output_dir) holds its checkpoints under checkpoints/.
    const fs::path run = fs::path(path) / "checkpoints";
    if (fs::is_directory(run, ec)) {
      if (auto latest = latest_checkpoint(run.string(), &note)) return noted(*latest);
    }
    for (const fs::path& root : {fs::path(path), run}) {
      const std::string damaged = damaged_latest(root.string());
      if (!damaged.empty()) {
        throw InputError(what + ": " + damaged + ", and no complete checkpoint is left in '" +
                         root.string() + "'");
      }
    }
    if (fs::exists(fs::symlink_status(file, ec))) {
      throw InputError(what + ": '" + path + "': " + step_dir_damage(path));
    }
    throw InputError(what + ": '" + path + "' holds no " + kCheckpointFile +
                     ", no 'latest' pointer and no checkpoints/latest");
  }
  if (fs::exists(fs::symlink_status(path, ec)) && fs::exists(path, ec)) {
    const auto why = unreadable_regular_file(path);  // a FIFO, a device, ...: never opened
    throw InputError(what + ": '" + path + "' " + (why ? *why : "is not a checkpoint"));
  }
  throw InputError(what + ": no checkpoint at '" + path + "'");
}

}  // namespace kktrain
