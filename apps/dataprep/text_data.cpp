#include "apps/dataprep/text_data.hpp"

#include <filesystem>
#include <new>
#include <nlohmann/json.hpp>
#include <sstream>

#include "apps/dataprep/cache_manifest.hpp"
#include "apps/dataprep/cache_protocol.hpp"
#include "apps/dataprep/tokenize_shards.hpp"
#include "core/errors.hpp"
#include "core/log.hpp"
#include "parallel/communicator.hpp"

namespace kktrain {

namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

// What the shards are made from: the inputs, the tokenizer.json and the tokenizer_config.json
// beside it (its eos_token ends every document), each by content
// (apps/dataprep/cache_manifest.hpp).
Json make_manifest(const TextTokens& t) {
  Json inputs = Json::array();
  for (const auto& f : t.files) inputs.push_back(manifest_file_entry(f, "data.path"));
  Json m = {{"tokenizer", manifest_file_entry(t.tokenizer.json, "the tokenizer")},
            {"inputs", inputs},
            {"jsonl_key", t.jsonl_key}};
  if (!t.tokenizer.config.empty()) {
    m["tokenizer_config.json"] = manifest_file_entry(t.tokenizer.config, "tokenizer_config.json");
  }
  return m;
}

bool shards_present(const Json& m) {
  if (!m.is_object() || !m.contains("shards") || !m["shards"].is_array()) return false;
  for (const auto& s : m["shards"]) {
    std::error_code ec;
    if (!s.is_string() || !fs::is_regular_file(s.get<std::string>(), ec)) return false;
  }
  return !m["shards"].empty();
}

// The inputs for a message: 'F', or 'F' (and N more).
std::string inputs_text(const std::vector<std::string>& files) {
  std::string s = "'" + files.at(0) + "'";
  if (files.size() > 1) s += " (and " + std::to_string(files.size() - 1) + " more)";
  return s;
}

// "the largest, 'F', N bytes" of the inputs.
std::string largest_input(const std::vector<std::string>& files) {
  std::string name;
  std::uintmax_t most = 0;
  for (const auto& f : files) {
    std::error_code ec;
    const std::uintmax_t n = fs::file_size(f, ec);
    if (!ec && (name.empty() || n > most)) {
      most = n;
      name = f;
    }
  }
  return "the largest, '" + name + "', " + std::to_string(most) + " bytes";
}

// data.path's documents tokenized into shards `dir`/data_*.bin.
TokenizeSummary tokenize(const TextTokens& t, const std::string& dir) {
  TokenizeOptions o;
  o.inputs = t.files;
  o.out = dir + "/data";
  o.jsonl_key = t.jsonl_key;
  try {
    return tokenize_to_shards(o, t.tokenizer);
  } catch (const std::bad_alloc&) {  // named as the input, not a generic bad_alloc
    throw RuntimeFailure("data.path " + inputs_text(t.files) + " (" + largest_input(t.files) +
                         "): out of memory tokenizing it (a document, a whole text file or a "
                         ".jsonl line, takes about 27 times its size while it is encoded: 888 MiB "
                         "for 32 MiB); split it into smaller documents");
  }
}

// The shards of `t` in `dir` (apps/dataprep/cache_protocol.hpp); InputError naming data.path when
// its documents give fewer than `min_tokens` tokens.
CacheSteps shard_steps(const TextTokens& t, const std::string& dir, int64_t min_tokens) {
  CacheSteps c;
  c.dir = dir;
  c.describe = [&t] { return make_manifest(t); };
  c.present = shards_present;
  c.matches = [](const Json& have, const Json& want) {
    return manifest_matches(have, want, {"shards", "tokens"});
  };
  c.reused = [&t, dir](const Json& have) {
    return "data: " + std::to_string(have["shards"].size()) + " token shard(s) in " + dir +
           " made from data.path by " + t.tokenizer.json + " at an earlier start; reused";
  };
  c.remade = "data: the token shards in " + dir +
             " were made from other inputs or another tokenizer or tokenizer_config.json "
             "(tokens/manifest.json); "
             "tokenizing data.path again";
  c.remove_files = [dir] {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("data_", 0) == 0 && e.path().extension() == ".bin") fs::remove(e.path(), ec);
    }
  };
  c.build = [&t, dir, min_tokens](Json want) {
    const TokenizeSummary s = tokenize(t, dir);
    if (s.tokens < min_tokens) {  // named as data.path, not as the shards made from it (removed)
      std::error_code ec;
      for (const auto& f : s.shards) fs::remove(f, ec);
      throw InputError("data.path " + inputs_text(t.files) + ": " + std::to_string(s.tokens) +
                       " tokens through the tokenizer (each document ended by its eos_token), "
                       "fewer than data.seq_len + 1 = " +
                       std::to_string(min_tokens) + " that one training window needs");
    }
    want["shards"] = s.shards;
    want["tokens"] = s.tokens;
    return want;
  };
  c.missing = "data: the token shards in '" + dir +
              "' are missing after tokenizing (is train.output_dir on a file "
              "system every rank sees?)";
  return c;
}

}  // namespace

DataConfig tokenized_data(const Config& cfg, const TextTokens& t, Communicator& comm) {
  if (t.files.empty()) return cfg.data;
  const std::string dir = (fs::path(cfg.train.output_dir) / "tokens").string();
  const Json m = derive_cache(shard_steps(t, dir, cfg.data.seq_len + 1), comm);
  DataConfig d = cfg.data;
  d.paths = m["shards"].get<std::vector<std::string>>();
  d.format = DataFormat::llmc;
  return d;
}

}  // namespace kktrain
