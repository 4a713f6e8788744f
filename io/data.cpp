#include "io/data.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/errors.hpp"
#include "core/files.hpp"
#include "core/random.hpp"
#include "core/strings.hpp"

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

namespace {

std::string resolve_format(const DataConfig& cfg) {
  if (cfg.format != "auto") return cfg.format;
  const std::string& p = *cfg.path;
  if (ends_with(p, ".u32") || ends_with(p, ".uint32")) return "uint32";
  if (ends_with(p, ".u16") || ends_with(p, ".uint16") || ends_with(p, ".bin")) return "uint16";
  return "text";
}

std::vector<int32_t> read_tokens(const std::string& path, const std::string& format) {
  // An ifstream opens a directory without complaint and then reads nothing, and blocks on a FIFO:
  // only regular files are read.
  if (auto why = unreadable_regular_file(path)) {
    throw InputError(why->rfind("is ", 0) == 0 ? "data.path: '" + path + "' " + *why
                                               : "data.path: cannot open '" + path + "': " + *why);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("data.path: cannot open '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string bytes = ss.str();
  if (bytes.empty()) throw InputError("data.path: '" + path + "' is empty");
  if (format == "text") return byte_tokenize(bytes);
  const std::size_t width = format == "uint16" ? 2 : 4;
  if (bytes.size() % width != 0) {
    throw InputError("data.path: '" + path + "' has " + std::to_string(bytes.size()) +
                     " bytes, not a whole number of " + format + " tokens (data.format: " + format +
                     ")");
  }
  std::vector<int32_t> ids(bytes.size() / width);
  const auto* u = reinterpret_cast<const unsigned char*>(bytes.data());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    uint32_t v = 0;
    for (std::size_t b = 0; b < width; ++b) v |= static_cast<uint32_t>(u[i * width + b]) << (8 * b);
    if (v > 0x7fffffffu) {
      throw InputError("data.path: '" + path + "' token " + std::to_string(i) + " = " +
                       std::to_string(v) + " does not fit a token id");
    }
    ids[i] = static_cast<int32_t>(v);  // little-endian on disk
  }
  return ids;
}

}  // namespace

TokenDataset TokenDataset::load(const DataConfig& cfg, int64_t vocab_size) {
  std::vector<int32_t> tokens;
  std::string source;
  if (!cfg.path) {
    tokens = byte_tokenize(default_corpus(1 << 20));
    source = "embedded default corpus (1 MiB of generated text)";
  } else {
    const std::string format = resolve_format(cfg);
    tokens = read_tokens(*cfg.path, format);
    source = *cfg.path + " (" + format + ")";
  }
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= vocab_size) {
      throw InputError(
          "data: token id " + std::to_string(tokens[i]) + " at position " + std::to_string(i) +
          " of " + source + " is >= model.vocab_size " + std::to_string(vocab_size) +
          (cfg.path && resolve_format(cfg) == "text" ? " (byte-level text needs vocab_size >= 256)"
                                                     : ""));
    }
  }
  return from_tokens(std::move(tokens), cfg, source);
}

TokenDataset TokenDataset::from_tokens(std::vector<int32_t> tokens, const DataConfig& cfg,
                                       const std::string& source) {
  TokenDataset d;
  d.seed_ = cfg.seed;
  d.source_ = source;
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t need = cfg.seq_len + 1;
  int64_t n_val = static_cast<int64_t>(static_cast<double>(n) * cfg.val_fraction);
  if (n_val > 0 && n_val < need) n_val = 0;  // too little for even one validation window
  d.n_train_ = n - n_val;
  if (d.n_train_ < need) {
    throw InputError("data: " + source + " has " + std::to_string(d.n_train_) +
                     " training tokens, fewer than data.seq_len + 1 = " + std::to_string(need));
  }
  d.tokens_ = std::move(tokens);
  return d;
}

Batch TokenDataset::window_batch(int64_t begin, int64_t len, uint64_t stream, uint64_t key,
                                 int64_t first, int64_t count, int64_t B, int64_t T) const {
  Batch b;
  b.B = B;
  b.T = T;
  b.ids.resize(B * T);
  b.targets.resize(B * T);
  const uint64_t starts = static_cast<uint64_t>(len - T);  // windows of T + 1 tokens fit
  for (int64_t r = 0; r < B; ++r) {
    const uint64_t k = static_cast<uint64_t>(first + (r < count ? r : 0));
    const int64_t off = begin + static_cast<int64_t>(hash3(seed_, stream ^ key, k) % starts);
    for (int64_t t = 0; t < T; ++t) {
      b.ids[r * T + t] = tokens_[off + t];
      b.targets[r * T + t] = r < count ? tokens_[off + t + 1] : -1;
    }
  }
  return b;
}

Batch TokenDataset::train_batch(int64_t step, int64_t first, int64_t B, int64_t T) const {
  return window_batch(0, n_train_, name_stream("train"), mix64(static_cast<uint64_t>(step)), first,
                      B, B, T);
}

Batch TokenDataset::val_windows(int64_t first, int64_t count, int64_t B, int64_t T) const {
  if (!has_validation() || val_tokens() < T + 1) {
    throw InputError("data: " + source_ + " has no validation split long enough for seq_len " +
                     std::to_string(T) + " (raise data.val_fraction)");
  }
  return window_batch(n_train_, val_tokens(), name_stream("val"), 0, first, count, B, T);
}

}  // namespace kktrain
