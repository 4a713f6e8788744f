#include "io/data.hpp"

#include <glob.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "core/errors.hpp"
#include "core/files.hpp"
#include "core/random.hpp"
#include "core/strings.hpp"
#include "io/token_file.hpp"

namespace kktrain {

std::vector<int32_t> byte_tokenize(const std::string& text) {
  std::vector<int32_t> ids(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::string byte_detokenize(const std::vector<int32_t>& ids) {
  std::string s(ids.size(), '\0');
  for (std::size_t i = 0; i < ids.size(); ++i) s[i] = static_cast<char>(ids[i] & 0xff);
  return s;
}

std::vector<std::string> data_files(const DataConfig& cfg) {
  std::vector<std::string> files;
  for (const auto& p : cfg.paths) {
    std::error_code ec;
    if (p.find_first_of("*?[") == std::string::npos || std::filesystem::exists(p, ec)) {
      files.push_back(p);
      continue;
    }
    glob_t g{};
    const int r = ::glob(p.c_str(), 0, nullptr, &g);
    if (r == 0) {
      for (std::size_t k = 0; k < g.gl_pathc; ++k) files.emplace_back(g.gl_pathv[k]);  // sorted
    }
    ::globfree(&g);
    if (r == GLOB_NOMATCH) throw InputError("data.path: '" + p + "' matches no file");
    if (r != 0) throw InputError("data.path: cannot expand '" + p + "'");
  }
  return files;
}

int64_t data_resident_bytes(const DataConfig& cfg, int world) {
  const int64_t windows = cfg.global_batch_size / std::max(world, 1);
  int64_t bytes = 2 * windows * cfg.seq_len * 4;             // ids and targets of a step, int32
  if (is_examples(cfg)) bytes += windows * cfg.seq_len * 4;  // and the rows' example starts
  // preference pairs: a micro-batch's shared prompts' gaps and rotary starts (on the device) and
  // its token weights (fp32), at most a step's rows
  if (is_preference(cfg)) bytes += windows * cfg.seq_len * (8 + 4 + 4);
  bytes += int64_t(1) << 20;      // the check at load: pieces of 2^18 ids
  bytes += kTokenReadChunkBytes;  // the bytes of one pread (io/token_file.hpp)
  if (cfg.paths.empty()) bytes += kEmbeddedCorpusBytes;
  return bytes;
}

namespace {

std::string describe(const TokenFile& f) {
  return f.path() + " (" + f.format() + ")";
}

}  // namespace

void TokenDataset::add_part(std::shared_ptr<const TokenFile> f, const DataConfig& cfg) {
  const int64_t n = f->size();
  const int64_t need = cfg.seq_len + 1;
  int64_t n_val = static_cast<int64_t>(static_cast<double>(n) * cfg.val_fraction);
  if (n_val > 0 && n_val < need) n_val = 0;  // too little for even one validation window
  Part p{std::move(f), n - n_val, n_val};
  if (p.n_train < need) {
    throw InputError("data: " + describe(*p.file) + " has " + std::to_string(p.n_train) +
                     " training tokens, fewer than data.seq_len + 1 = " + std::to_string(need));
  }
  parts_.push_back(std::move(p));
}

TokenDataset TokenDataset::load(const DataConfig& cfg, int64_t vocab_size,
                                const TokenLoadOptions& options) {
  TokenDataset d;
  d.seed_ = cfg.seed;
  d.vocab_ = vocab_size;
  if (cfg.paths.empty()) {
    auto f = std::make_shared<TokenFile>(byte_tokenize(default_corpus(1 << 20)),
                                         "embedded default corpus");
    d.source_ = "embedded default corpus (1 MiB of generated text)";
    d.text_ = true;
    if (const int64_t bad = f->first_at_least(0, f->size(), vocab_size); bad >= 0) {
      d.read_checked(Part{f, f->size(), 0}, bad, 1, nullptr);
    }
    d.add_part(std::move(f), cfg);
    return d;
  }
  const std::vector<std::string> files = data_files(cfg);
  // Each token file stays open while the run reads it (io/token_file.hpp).
  if (const auto hard = make_room_for_open_files(files.size())) {
    throw InputError("data.path: " + std::to_string(files.size()) +
                     " token files, and this process may hold at most " + std::to_string(*hard) +
                     " open files (the hard limit of ulimit -n): each file stays open while the "
                     "run reads it; raise the limit or combine the shards into fewer files");
  }
  std::string formats;
  for (const auto& path : files) {
    auto f = std::make_shared<TokenFile>(path, data_format_name(cfg.format));
    d.text_ = f->format() == "text";
    if (formats.find(f->format()) == std::string::npos) {
      formats += (formats.empty() ? "" : ", ") + f->format();
    }
    if (f->size() <= options.validate_at_load_tokens && f->max_id() >= vocab_size) {
      if (const int64_t bad = f->first_at_least(0, f->size(), vocab_size); bad >= 0) {
        d.read_checked(Part{f, f->size(), 0}, bad, 1, nullptr);
      }
    }
    d.add_part(std::move(f), cfg);
  }
  d.source_ = files.size() == 1 ? describe(*d.parts_[0].file)
                                : std::to_string(files.size()) + " files " + files.front() +
                                      " ... " + files.back() + " (" + formats + ")";
  return d;
}

int64_t TokenDataset::train_tokens() const {
  int64_t n = 0;
  for (const auto& p : parts_) n += p.n_train;
  return n;
}

int64_t TokenDataset::val_tokens() const {
  int64_t n = 0;
  for (const auto& p : parts_) n += p.n_val;
  return n;
}

int64_t TokenDataset::starts(Split split, int64_t T) const {
  const bool val = split == Split::val;
  int64_t n = 0;
  for (const auto& p : parts_) n += std::max<int64_t>(0, (val ? p.n_val : p.n_train) - T);
  return n;
}

void TokenDataset::read_checked(const Part& p, int64_t begin, int64_t n, int32_t* out) const {
  std::vector<int32_t> local;
  if (out == nullptr) {
    local.resize(static_cast<std::size_t>(n));
    out = local.data();
  }
  p.file->read(begin, n, out);
  for (int64_t i = 0; i < n; ++i) {
    if (out[i] >= 0 && out[i] < vocab_) continue;
    throw InputError("data: token id " + std::to_string(p.file->id_at(begin + i)) +
                     " at position " + std::to_string(begin + i) + " of " + describe(*p.file) +
                     " is >= model.vocab_size " + std::to_string(vocab_) +
                     (text_ ? " (byte-level text needs vocab_size >= 256)" : ""));
  }
}

Batch TokenDataset::window_batch(Split split, uint64_t stream, uint64_t key, int64_t first,
                                 int64_t count, int64_t B, int64_t T) const {
  const bool val = split == Split::val;
  Batch b;
  b.B = B;
  b.T = T;
  b.ids.resize(B * T);
  b.targets.resize(B * T);
  // Window starts of the files in order: part k's starts are [prefix[k], prefix[k + 1]).
  std::vector<int64_t> prefix(1, 0);
  for (const auto& p : parts_) {
    prefix.push_back(prefix.back() + std::max<int64_t>(0, (val ? p.n_val : p.n_train) - T));
  }
  const uint64_t total = static_cast<uint64_t>(prefix.back());
  std::vector<int32_t> window(T + 1);
  for (int64_t r = 0; r < B; ++r) {
    const uint64_t k = static_cast<uint64_t>(first + (r < count ? r : 0));
    const int64_t u = static_cast<int64_t>(hash3(seed_, stream ^ key, k) % total);
    const std::size_t part = static_cast<std::size_t>(
        std::upper_bound(prefix.begin(), prefix.end(), u) - prefix.begin() - 1);
    const Part& p = parts_[part];
    read_checked(p, (val ? p.n_train : 0) + (u - prefix[part]), T + 1, window.data());
    for (int64_t t = 0; t < T; ++t) {
      b.ids[r * T + t] = window[t];
      b.targets[r * T + t] = r < count ? window[t + 1] : -1;
    }
  }
  return b;
}

Batch TokenDataset::train_batch(int64_t step, int64_t first, int64_t B, int64_t T) const {
  if (starts(Split::train, T) == 0) {
    throw InputError("data: " + source_ + " has no training window of seq_len " +
                     std::to_string(T) + " + 1 tokens");
  }
  return window_batch(Split::train, name_stream("train"), mix64(static_cast<uint64_t>(step)), first,
                      B, B, T);
}

Batch TokenDataset::val_windows(int64_t first, int64_t count, int64_t B, int64_t T) const {
  if (starts(Split::val, T) == 0) {
    throw InputError("data: " + source_ + " has no validation split long enough for seq_len " +
                     std::to_string(T) + " (raise data.val_fraction)");
  }
  return window_batch(Split::val, name_stream("val"), 0, first, count, B, T);
}

}  // namespace kktrain
