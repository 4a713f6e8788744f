// The safetensors export sink (io/export_sink.hpp, io/model_export.hpp): a Hugging Face model
// directory built under a temporary name beside `out` and swapped into place whole (`out` a
// symbolic link to a directory: beside and in place of its target, the link kept).
#include <fcntl.h>
#include <stdio.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/errors.hpp"
#include "core/strings.hpp"
#include "io/durable.hpp"
#include "io/export_sink.hpp"
#include "io/hf_config.hpp"
#include "io/model_export.hpp"
#include "io/safetensors.hpp"

#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

namespace kktrain {

namespace fs = std::filesystem;

namespace {

// The tokenizer's files an export may write (ExportOptions::extra_files).
const char* const kTokenizerFiles[] = {"tokenizer.json", "tokenizer_config.json",
                                       "special_tokens_map.json", "chat_template.jinja",
                                       "tokenizer.model"};

// The files an export writes (what a directory may hold to be replaced by one).
bool export_file_name(const std::string& n) {
  for (const char* t : kTokenizerFiles) {
    if (n == t) return true;
  }
  return n == "config.json" || n == "model.safetensors.index.json" ||
         (starts_with(n, "model") && ends_with(n, ".safetensors"));
}

// renameat2(RENAME_EXCHANGE): both names stay valid at every moment. false when the file system
// or kernel cannot (EINVAL, ENOSYS); RuntimeFailure for other errors.
bool swap_names(const std::string& a, const std::string& b) {
  const long r =
      ::syscall(SYS_renameat2, AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE);
  if (r == 0) return true;
  if (errno == EINVAL || errno == ENOSYS) return false;
  throw RuntimeFailure("cannot swap '" + a + "' into place of '" + b +
                       "': " + std::strerror(errno));
}

void check_free_space(const std::string& dir, int64_t bytes, const std::string& out) {
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) return;  // cannot tell: try
  const int64_t free_bytes = static_cast<int64_t>(st.f_bavail) * static_cast<int64_t>(st.f_frsize);
  const int64_t need = bytes + (int64_t(1) << 20);  // headers, config.json, index
  if (need > free_bytes) {
    throw RuntimeFailure("cannot write '" + out + "': " + std::strerror(ENOSPC) + " (needs about " +
                         std::to_string(need) + " bytes, " + std::to_string(free_bytes) + " free)");
  }
}

class SafetensorsSink final : public ExportSink {
 public:
  SafetensorsSink(const std::string& out, const ModelConfig& m, DType dtype, int64_t max_shard,
                  std::vector<ExportFile> files)
      : out_(export_directory_target(out)),  // a symbolic link's target: never the link
        tmp_(temporary_name(out_)),
        model_(m),
        dtype_(dtype),
        max_shard_(max_shard),
        extra_(std::move(files)) {
    hf_config_json(model_, dtype_);  // a model Hugging Face cannot hold: refused before writing
    for (const auto& f : extra_) {
      if (!export_file_name(f.name) || starts_with(f.name, "model") || f.name == "config.json") {
        throw RuntimeFailure("export: internal error: extra file '" + f.name + "'");
      }
    }
  }

  void begin(const std::vector<ExportTensor>& tensors) override {
    // Shards in order: a new one when the next tensor would take the current past the limit.
    std::vector<std::vector<StTensor>> shards(1);
    int64_t in_shard = 0, total = 0;
    for (const auto& t : tensors) {
      StTensor s;
      s.name = t.name;
      s.dtype = dtype_to_st(t.dtype);
      s.shape = t.shape;
      const int64_t bytes = t.numel() * static_cast<int64_t>(dtype_size(t.dtype));
      if (!shards.back().empty() && in_shard + bytes > max_shard_) {
        shards.emplace_back();
        in_shard = 0;
      }
      shards.back().push_back(s);
      place_.emplace_back(shards.size() - 1, shards.back().size() - 1);
      in_shard += bytes;
      total += bytes;
    }
    total_bytes_ = total;
    const fs::path parent = fs::path(out_).has_parent_path() ? fs::path(out_).parent_path() : ".";
    check_free_space(parent.string(), total, out_);
    std::error_code ec;
    fs::remove_all(tmp_, ec);  // debris of an earlier export killed with this pid
    if (!fs::create_directory(tmp_, ec) || ec) {
      throw RuntimeFailure("cannot create '" + tmp_ + "': " + ec.message());
    }
    const std::size_t n = shards.size();
    for (std::size_t k = 0; k < n; ++k) {
      char name[64];
      std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", k + 1, n);
      files_.push_back(n == 1 ? "model.safetensors" : name);
      writers_.push_back(
          std::make_unique<StWriter>((fs::path(tmp_) / files_.back()).string(), shards[k],
                                     std::map<std::string, std::string>{{"format", "pt"}}));
    }
    row_bytes_.clear();
    for (const auto& t : tensors) {
      row_bytes_.push_back(t.row_len() * static_cast<int64_t>(dtype_size(t.dtype)));
    }
  }

  void write_rows(std::size_t k, int64_t row_begin, int64_t rows, const char* bytes) override {
    const auto [shard, index] = place_.at(k);
    writers_[shard]->write(index, row_begin * row_bytes_[k], bytes, rows * row_bytes_[k]);
  }

  int64_t commit() override {
    nlohmann::json map = nlohmann::json::object();
    for (std::size_t s = 0; s < writers_.size(); ++s) {
      writers_[s]->finish();
      for (const auto& t : writers_[s]->tensors()) map[t.name] = files_[s];
    }
    if (writers_.size() > 1) {
      nlohmann::ordered_json index;
      index["metadata"] = {{"total_size", total_bytes_}};
      index["weight_map"] = map;  // sorted by name
      write_new_file_synced((fs::path(tmp_) / "model.safetensors.index.json").string(),
                            index.dump(2) + "\n");
    }
    write_new_file_synced((fs::path(tmp_) / "config.json").string(),
                          hf_config_json(model_, dtype_));
    for (const auto& f : extra_)
      write_new_file_synced((fs::path(tmp_) / f.name).string(), f.content);
    fsync_path(tmp_, FsyncTarget::directory);
    put_in_place();
    return total_bytes_;
  }

  void discard() noexcept override {
    writers_.clear();
    std::error_code ec;
    fs::remove_all(tmp_, ec);
  }

 private:
  // The new directory takes out_'s name in one step; a previous export there is removed after.
  void put_in_place() {
    const fs::path parent = fs::path(out_).has_parent_path() ? fs::path(out_).parent_path() : ".";
    std::error_code ec;
    if (!fs::exists(out_, ec)) {
      fs::rename(tmp_, out_, ec);
      if (ec)
        throw RuntimeFailure("cannot rename '" + tmp_ + "' to '" + out_ + "': " + ec.message());
    } else {
      const std::string refusal = safetensors_out_refusal(out_);  // checked again, just before
      if (!refusal.empty()) throw RuntimeFailure("export: " + refusal);
      if (!swap_names(tmp_, out_)) {
        // No atomic swap here: the old directory steps aside first (a kill in between leaves
        // no export at out_, and the previous one under the temporary name).
        const std::string old = tmp_ + ".old";
        fs::rename(out_, old, ec);
        if (ec) throw RuntimeFailure("cannot move '" + out_ + "' aside: " + ec.message());
        fs::rename(tmp_, out_, ec);
        if (ec)
          throw RuntimeFailure("cannot rename '" + tmp_ + "' to '" + out_ + "': " + ec.message());
        fs::rename(old, tmp_, ec);
      }
      fsync_path(parent.string(), FsyncTarget::directory);
      fs::remove_all(tmp_, ec);  // the previous export
    }
    fsync_path(parent.string(), FsyncTarget::directory);
  }

  std::string out_, tmp_;
  ModelConfig model_;
  DType dtype_;
  int64_t max_shard_ = 0, total_bytes_ = 0;
  std::vector<std::pair<std::size_t, std::size_t>> place_;  // tensor -> (shard, index in it)
  std::vector<int64_t> row_bytes_;
  std::vector<std::string> files_;
  std::vector<std::unique_ptr<StWriter>> writers_;
  std::vector<ExportFile> extra_;  // the tokenizer's files
};

}  // namespace

std::string safetensors_out_refusal(const std::string& out) {
  std::error_code ec;
  if (!fs::exists(out, ec)) return "";
  if (!fs::is_directory(out, ec)) return "'" + out + "' exists and is not a directory";
  for (const auto& e : fs::directory_iterator(out, ec)) {
    const std::string n = e.path().filename().string();
    if (!export_file_name(n) || !e.is_regular_file(ec)) {
      return "'" + out + "' holds " + n +
             ", which a safetensors export does not write; refusing to replace the directory "
             "(choose a new or empty one)";
    }
  }
  return "";
}

std::unique_ptr<ExportSink> make_safetensors_sink(const std::string& out, const ModelConfig& m,
                                                  DType dtype, int64_t max_shard_bytes,
                                                  std::vector<ExportFile> files) {
  return std::make_unique<SafetensorsSink>(out, m, dtype, max_shard_bytes, std::move(files));
}

}  // namespace kktrain
