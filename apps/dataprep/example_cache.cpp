// The example cache of a run (apps/dataprep/example_cache.hpp).
#include "apps/dataprep/example_cache.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <new>
#include <nlohmann/json.hpp>

#include "apps/dataprep/cache_manifest.hpp"
#include "apps/dataprep/cache_protocol.hpp"
#include "apps/dataprep/example_renderer.hpp"
#include "apps/dataprep/text_model.hpp"
#include "apps/dataprep/tokenize_inputs.hpp"
#include "core/errors.hpp"
#include "core/fan_out.hpp"
#include "core/files.hpp"
#include "core/log.hpp"
#include "core/random.hpp"
#include "io/data.hpp"
#include "io/example_data.hpp"
#include "parallel/communicator.hpp"
#include "parallel/threads.hpp"

namespace kktrain {

namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

constexpr uint64_t kHoldOutStream = 0x56414c53ull;  // "VALS"
constexpr std::size_t kBlockLines = 2048;
// A block's lines are rendered at once (on every thread), each taking tens of times its size.
constexpr std::size_t kBlockBytes = std::size_t(32) << 20;

// What the cache is made from. The examples' files (data.path's, then data.val_path) are
// entered without their content hashes, which making the cache appends as it reads them
// (with_input_hashes); the small files (template, tokenizer) with theirs.
Json make_manifest(const Config& cfg, const ModelText& t) {
  const DataConfig& d = cfg.data;
  Json inputs = Json::array();
  for (const auto& f : data_files(d)) inputs.push_back(manifest_file_stat(f, "data.path"));
  Json m = {{"inputs", inputs},
            {"format", data_format_name(d.format)},
            {"loss_on", loss_on_name(d.loss_on)},
            {"truncation", truncation_name(d.truncation)},
            {"seq_len", d.seq_len},
            {"share_prompt", shares_prompt(cfg)},
            {"seed", d.seed},
            {"val_fraction", d.val_fraction}};
  if (d.val_path) m["val_path"] = manifest_file_stat(*d.val_path, "data.val_path");
  if (d.chat_template)
    m["chat_template"] = manifest_file_entry(*d.chat_template, "data.chat_template");
  if (t.tokenizer) {
    m["tokenizer"] = manifest_file_entry(t.tokenizer->json, "the tokenizer");
    if (!t.tokenizer->config.empty())
      m["tokenizer_config.json"] =
          manifest_file_entry(t.tokenizer->config, "tokenizer_config.json");
    if (!t.tokenizer->chat_template.empty())
      m["chat_template.jinja"] =
          manifest_file_entry(t.tokenizer->chat_template, "chat_template.jinja");
  }
  return m;
}

// `m` (make_manifest's) with the examples' files' content hashes appended to their entries, in
// their order (data.path's files, then data.val_path).
Json with_input_hashes(Json m, const std::vector<std::string>& hashes) {
  std::size_t k = 0;
  auto add = [&](Json& entry) {
    if (k < hashes.size()) entry.push_back(hashes[k++]);
  };
  for (Json& e : m["inputs"]) add(e);
  if (m.contains("val_path")) add(m["val_path"]);
  return m;
}

// The examples' files' content hashes as they are now (read for the purpose: a cache whose every
// other entry matches is about to be reused).
std::vector<std::string> current_input_hashes(const Json& m) {
  std::vector<std::string> hashes;
  for (const Json& e : m["inputs"]) {
    hashes.push_back(file_content_hash(e[0].get<std::string>(), "data.path"));
  }
  if (m.contains("val_path")) {
    hashes.push_back(file_content_hash(m["val_path"][0].get<std::string>(), "data.val_path"));
  }
  return hashes;
}

// Whether the cache described by `have` (read back) was made from what `want` describes: every
// entry but the input hashes compared first (no input read when they differ), then the hashes.
bool cache_matches(const Json& have, const Json& want) {
  if (!have.is_object() || !have.contains("inputs") || !have["inputs"].is_array()) return false;
  Json stripped = have;
  auto strip = [](Json& entry) {
    if (entry.is_array() && entry.size() == 4) entry.erase(3);
  };
  for (Json& e : stripped["inputs"]) strip(e);
  if (stripped.contains("val_path")) strip(stripped["val_path"]);
  if (!manifest_matches(stripped, want, {"summary"})) return false;
  return manifest_matches(have, with_input_hashes(want, current_input_hashes(want)), {"summary"});
}

// The lines of one JSONL file in blocks of at most kBlockLines lines and about kBlockBytes bytes
// (line numbers 1-based; whitespace-only lines skipped). A line longer than
// kMaxExampleLineBytes is one error naming FILE:LINE and the limit, found before it is held in
// memory.
class LineBlocks {
 public:
  // What was read so far (the whole file once next() returned false).
  const ContentHash& hash() const { return hash_; }
  explicit LineBlocks(const std::string& path) : path_(path) {
    if (auto why = open_regular_file(&fd_, path)) {
      throw InputError("data.path '" + path + "' cannot be read: " + *why);
    }
    buf_.resize(std::size_t(1) << 20);
  }
  bool next(std::vector<std::pair<int64_t, std::string>>* block) {
    block->clear();
    std::size_t bytes = 0;
    std::string line;
    while (block->size() < kBlockLines && bytes < kBlockBytes && next_line(&line)) {
      ++line_no_;
      if (blank_line(line)) continue;
      bytes += line.size();
      block->emplace_back(line_no_, std::move(line));
    }
    return !block->empty();
  }

 private:
  // The next line (without its \n) into *line; false at the end of the file.
  bool next_line(std::string* line) {
    line->clear();
    for (;;) {
      if (pos_ == end_) {
        if (eof_) return !line->empty();
        fill();
        continue;
      }
      const char* b = buf_.data() + pos_;
      const void* nl = std::memchr(b, '\n', end_ - pos_);
      const std::size_t n = nl ? static_cast<const char*>(nl) - b : end_ - pos_;
      if (line->size() + n > static_cast<std::size_t>(kMaxExampleLineBytes)) {
        throw InputError(path_ + ":" + std::to_string(line_no_ + 1) + ": the line is longer than " +
                         std::to_string(kMaxExampleLineBytes >> 20) +
                         " MiB, the limit of an example line (rendering takes tens of times a "
                         "line's size in memory); split the example or shorten it");
      }
      line->append(b, n);
      pos_ += n;
      if (nl) {
        ++pos_;
        return true;
      }
    }
  }
  void fill() {
    for (;;) {
      const ssize_t r = ::read(fd_.get(), buf_.data(), buf_.size());
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) throw RuntimeFailure("cannot read '" + path_ + "': " + std::strerror(errno));
      pos_ = 0;
      end_ = static_cast<std::size_t>(r);
      hash_.update(buf_.data(), end_);
      eof_ = r == 0;
      return;
    }
  }

  std::string path_;
  FileDescriptor fd_;
  ContentHash hash_;
  std::vector<char> buf_;
  std::size_t pos_ = 0, end_ = 0;
  bool eof_ = false;
  int64_t line_no_ = 0;
};

// Whether example `e` (after truncation) keeps a loss token.
bool has_loss_token(const RenderedExample& e) {
  return std::find(e.loss_mask.begin() + (e.loss_mask.empty() ? 0 : 1), e.loss_mask.end(), 1) !=
         e.loss_mask.end();
}

// Renders block[i] into out[i] on `threads` threads (examples handed out in turn); the first
// error (in line order) is rethrown (core/fan_out.hpp).
void render_block(const ExampleRenderer& r, const std::string& file,
                  const std::vector<std::pair<int64_t, std::string>>& block,
                  std::vector<RenderedExample>* out, int threads) {
  out->assign(block.size(), RenderedExample{});
  fan_out(block.size(), threads, [&](int, std::size_t i) {
    try {
      (*out)[i] = r.render(block[i].second, file, block[i].first);
    } catch (const std::bad_alloc&) {  // named as the line, not a generic bad_alloc
      throw RuntimeFailure(file + ":" + std::to_string(block[i].first) +
                           ": out of memory rendering this " +
                           std::to_string(block[i].second.size()) +
                           "-byte example (rendering takes tens of times a line's size; " +
                           std::to_string(threads) + " threads render at once)");
    }
  });
}

}  // namespace

ExampleCacheSummary make_example_cache(const Config& cfg, const ModelText& text,
                                       const std::string& dir) {
  const DataConfig& d = cfg.data;
  const ExampleRenderer renderer = ExampleRenderer::open(cfg, text);
  const int threads = std::max(1, plan_threads(read_thread_inputs()).allowed_cpus);
  ExampleCacheSummary sum;
  ExampleWriter train(dir + "/train");
  std::unique_ptr<ExampleWriter> val;
  if (d.val_path || d.val_fraction > 0.0) val = std::make_unique<ExampleWriter>(dir + "/val");
  std::vector<std::pair<int64_t, std::string>> block;
  std::vector<RenderedExample> rendered;
  int64_t ordinal = 0;
  int64_t cut_off = 0;  // training examples whose every loss token truncation cut off
  // Which data a file holds: training examples (of which data.val_fraction may be held out), or
  // validation examples only (data.val_path).
  enum class Holds { training, validation };
  auto read_file = [&](const std::string& file, Holds holds) {
    const bool is_val = holds == Holds::validation;
    LineBlocks lines(file);
    while (lines.next(&block)) {
      render_block(renderer, file, block, &rendered, threads);
      for (const RenderedExample& e : rendered) {
        const bool held_out =
            is_val || (!d.val_path && uniform01(d.seed, kHoldOutStream,
                                                static_cast<uint64_t>(ordinal)) < d.val_fraction);
        ++ordinal;
        if (e.fate == ExampleFate::dropped || e.fate == ExampleFate::empty) {
          ++(e.fate == ExampleFate::empty ? sum.empty : sum.dropped);
          continue;
        }
        if (e.fate == ExampleFate::truncated) {
          ++sum.truncated;
          if (e.full_loss_tokens > 0 && !held_out && !has_loss_token(e)) ++cut_off;
        }
        (held_out ? *val : train).add(e.ids, e.loss_mask);
      }
    }
    sum.input_hashes.push_back(lines.hash().hex());
  };
  const std::vector<std::string> files = data_files(d);
  // Each a readable regular file: one line naming the key and the first that is not.
  auto check = [](const std::vector<std::string>& f, const std::string& key) {
    try {
      check_inputs(f);
    } catch (const InputError& e) {
      throw InputError(key + ": " + e.what());
    }
  };
  check(files, "data.path");
  if (d.val_path) check({*d.val_path}, "data.val_path");
  for (const auto& f : files) read_file(f, Holds::training);
  if (d.val_path) read_file(*d.val_path, Holds::validation);
  if (train.examples() == 0 || train.loss_tokens() == 0) {
    const std::string what =
        "data.path '" + files.at(0) + "'" +
        (files.size() > 1 ? " (and " + std::to_string(files.size() - 1) + " more)" : std::string());
    if (train.examples() == 0) {
      throw InputError(what + " gives no training examples: " + std::to_string(ordinal) +
                       " read, " + std::to_string(sum.dropped) +
                       " dropped (data.truncation: " + truncation_name(d.truncation) +
                       ", data.seq_len " + std::to_string(d.seq_len) + "), " +
                       std::to_string(sum.empty) + " of no tokens, " +
                       std::to_string(val ? val->examples() : 0) + " held out for validation");
    }
    if (cut_off > 0) {
      throw InputError(what + ": none of its " + std::to_string(train.examples()) +
                       " training examples has a loss token within data.seq_len " +
                       std::to_string(d.seq_len) + ": truncation (data.truncation: " +
                       truncation_name(d.truncation) + ") cut off every loss token of " +
                       std::to_string(cut_off) + " of them; raise data.seq_len");
    }
    throw InputError(
        what + ": none of its " + std::to_string(train.examples()) +
        " training examples has a loss token (data.loss_on: " + loss_on_name(d.loss_on) +
        (d.loss_on == LossOn::assistant ? ": no assistant message" : "") +
        "); nothing would be learned");
  }
  train.finish();
  if (val) val->finish();
  sum.examples = train.examples();
  sum.val_examples = val ? val->examples() : 0;
  sum.tokens = train.tokens();
  sum.loss_tokens = train.loss_tokens();
  return sum;
}

namespace {

// The manifest of the cache made: `want` with the inputs' hashes of the bytes rendered, and what
// making it found.
Json made_manifest(Json want, const ExampleCacheSummary& s) {
  want = with_input_hashes(want, s.input_hashes);
  want["summary"] = {{"examples", s.examples},   {"val_examples", s.val_examples},
                     {"truncated", s.truncated}, {"dropped", s.dropped},
                     {"tokens", s.tokens},       {"loss_tokens", s.loss_tokens},
                     {"empty", s.empty}};
  return want;
}

// The line saying what making the cache in `dir` found.
std::string made_line(const Config& cfg, const ExampleCacheSummary& s, const std::string& dir) {
  return "data: " + std::to_string(s.examples) + " training examples (" + std::to_string(s.tokens) +
         " tokens, " + std::to_string(s.loss_tokens) + " loss tokens) and " +
         std::to_string(s.val_examples) + " validation examples; " + std::to_string(s.truncated) +
         " truncated and " + std::to_string(s.dropped) +
         " dropped (data.truncation: " + truncation_name(cfg.data.truncation) + ", data.seq_len " +
         std::to_string(cfg.data.seq_len) + "), " + std::to_string(s.empty) +
         " empty (of no tokens: skipped); cached in " + dir;
}

// The example cache of cfg in `dir` (apps/dataprep/cache_protocol.hpp).
CacheSteps example_steps(const Config& cfg, const ModelText& text, const std::string& dir) {
  CacheSteps c;
  c.dir = dir;
  c.describe = [&cfg, &text] { return make_manifest(cfg, text); };
  c.present = [](const Json& have) { return have.is_object() && have.contains("summary"); };
  c.matches = cache_matches;
  c.reused = [dir](const Json&) {
    return "data: the examples cached in " + dir + " at an earlier start are reused";
  };
  c.remade = "data: the example cache in " + dir +
             " was made from other inputs, tokenizer, template or settings "
             "(examples/manifest.json); rendering data.path again";
  c.remove_files = [dir] {
    std::error_code ec;
    for (const char* f : {"train.tokens", "train.index", "val.tokens", "val.index"}) {
      fs::remove(dir + "/" + f, ec);
    }
  };
  c.build = [&cfg, &text, dir](Json want) {
    const ExampleCacheSummary s = make_example_cache(cfg, text, dir);
    log::info(made_line(cfg, s, dir));
    return made_manifest(std::move(want), s);
  };
  c.ready = [](const Json& m) { return m.is_object(); };
  c.missing = "data: the example cache in '" + dir +
              "' is missing after rendering (is train.output_dir on a file system "
              "every rank sees?)";
  return c;
}

}  // namespace

std::string example_cache(const Config& cfg, const ModelText& text, Communicator& comm) {
  const std::string dir = (fs::path(cfg.train.output_dir) / "examples").string();
  derive_cache(example_steps(cfg, text, dir), comm);
  return dir;
}

}  // namespace kktrain
