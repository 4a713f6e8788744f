// kktrain's tokenizer (text/tokenizer.hpp) on files, for tests/cli/test_tokenizer_reference.py
// and bench/tokenize_bench.py. Each file is one document.
//
//   tokenize_ids TOKENIZER FILE...
//       one JSON line per file, in order:
//       {"file": F, "ids": [...], "decoded": S, "decoded_skip": S}   (encode with the special
//       tokens, as Hugging Face's encode(text, add_special_tokens=True); decode keeping / skipping
//       special tokens), or {"file": F, "error": "..."} when loading, reading, encoding or
//       decoding fails (a load failure gives that line for every file). Exit 0 unless the
//       command line is wrong (2).
//   tokenize_ids --offsets TOKENIZER FILE...
//       as above, each line also holding "offsets": [[begin, end], ...], the bytes of the file
//       each id came from (Encoder::encode_with_offsets).
//   tokenize_ids --bench [--offsets] [--threads N] [--repeat R] [--cold] TOKENIZER FILE...
//       encodes (with --offsets: encode_with_offsets) every file R times (default 3) on N threads
//       (default 1; documents dealt round-robin, one Encoder per thread kept across repeats; with
//       --cold new Encoders before each repeat, untimed, so that no repeat finds the pieces an
//       earlier one cached) and prints one JSON line
//       {"threads", "bytes", "documents", "ids", "load_s", "seconds": [one per repeat]}: the
//       encoding alone is timed, from the threads' start to the last one's end.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "text/tokenizer.hpp"

namespace {

using kktrain::text::Encoder;
using kktrain::text::SkipSpecial;
using kktrain::text::SpecialTokens;
using kktrain::text::Tokenizer;
using Clock = std::chrono::steady_clock;

struct Options {
  bool bench = false;
  bool offsets = false;
  bool cold = false;
  int threads = 1;
  int repeat = 3;
  std::string tokenizer;
  std::vector<std::string> files;
};

// The whole file as bytes; throws std::runtime_error naming it when it cannot be read.
std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open '" + path + "'");
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) throw std::runtime_error("cannot read '" + path + "'");
  return s.str();
}

// One document's JSON line (ids and both decodes) or the error that stopped it.
nlohmann::json document_line(const std::string& path, Encoder* encoder, bool with_offsets) {
  nlohmann::json line = {{"file", path}};
  try {
    const std::string text = read_file(path);
    const int64_t bad = kktrain::text::first_invalid_utf8(text);
    if (bad >= 0) throw std::runtime_error("invalid UTF-8 at byte " + std::to_string(bad));
    std::vector<int32_t> ids;
    std::vector<kktrain::text::ByteRange> offsets;
    if (with_offsets) {
      encoder->encode_with_offsets(&ids, &offsets, text, SpecialTokens::add);
      nlohmann::json o = nlohmann::json::array();
      for (const auto& r : offsets) o.push_back({r.begin, r.end});
      line["offsets"] = o;
    } else {
      ids = encoder->encode(text, SpecialTokens::add);
    }
    const Tokenizer& t = encoder->tokenizer();
    line["ids"] = ids;
    line["decoded"] = t.decode(ids, SkipSpecial::no);
    line["decoded_skip"] = t.decode(ids, SkipSpecial::yes);
    line.dump();  // throws here, not later, when a decode is not valid UTF-8
  } catch (const std::exception& e) {
    line = {{"file", path}, {"error", e.what()}};
  }
  return line;
}

int reference(const Options& o) {
  std::shared_ptr<const Tokenizer> tokenizer;
  try {
    tokenizer = Tokenizer::load(o.tokenizer);
  } catch (const std::exception& e) {
    for (const auto& f : o.files)
      std::cout << nlohmann::json{{"file", f}, {"error", e.what()}}.dump() << "\n";
    return 0;
  }
  Encoder encoder(tokenizer);
  for (const auto& f : o.files) std::cout << document_line(f, &encoder, o.offsets).dump() << "\n";
  return 0;
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

int bench(const Options& o) {
  std::vector<std::string> texts;
  int64_t bytes = 0;
  for (const auto& f : o.files) {
    texts.push_back(read_file(f));
    bytes += int64_t(texts.back().size());
  }
  const auto t0 = Clock::now();
  auto tokenizer = Tokenizer::load(o.tokenizer);
  const double load_s = seconds_since(t0);
  std::vector<Encoder> encoders;
  for (int w = 0; w < o.threads; ++w) encoders.emplace_back(tokenizer);
  std::vector<int64_t> counts(size_t(o.threads), 0);
  nlohmann::json seconds = nlohmann::json::array();
  for (int r = 0; r < o.repeat; ++r) {
    if (o.cold && r > 0) {
      encoders.clear();
      for (int w = 0; w < o.threads; ++w) encoders.emplace_back(tokenizer);
    }
    const auto start = Clock::now();
    std::vector<std::thread> pool;
    for (int w = 0; w < o.threads; ++w) {
      pool.emplace_back([&, w] {
        std::vector<int32_t> ids;
        std::vector<kktrain::text::ByteRange> offsets;
        counts[size_t(w)] = 0;
        for (size_t i = size_t(w); i < texts.size(); i += size_t(o.threads)) {
          ids.clear();
          offsets.clear();
          if (o.offsets) {
            encoders[size_t(w)].encode_with_offsets(&ids, &offsets, texts[i], SpecialTokens::add);
          } else {
            encoders[size_t(w)].encode(&ids, texts[i], SpecialTokens::add);
          }
          counts[size_t(w)] += int64_t(ids.size());
        }
      });
    }
    for (auto& t : pool) t.join();
    seconds.push_back(seconds_since(start));
  }
  int64_t ids = 0;
  for (int64_t c : counts) ids += c;
  std::cout << nlohmann::json{{"threads", o.threads},      {"bytes", bytes},
                              {"documents", texts.size()}, {"ids", ids},
                              {"load_s", load_s},          {"seconds", seconds}}
                   .dump()
            << "\n";
  return 0;
}

bool parse(int argc, char** argv, Options* o) {
  std::vector<std::string> rest;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--bench") {
      o->bench = true;
    } else if (a == "--offsets") {
      o->offsets = true;
    } else if (a == "--cold") {
      o->cold = true;
    } else if ((a == "--threads" || a == "--repeat") && i + 1 < argc) {
      (a == "--threads" ? o->threads : o->repeat) = std::atoi(argv[++i]);
    } else if (a.rfind("--", 0) == 0) {
      return false;
    } else {
      rest.push_back(a);
    }
  }
  if (rest.empty() || o->threads < 1 || o->repeat < 1) return false;
  o->tokenizer = rest[0];
  o->files.assign(rest.begin() + 1, rest.end());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, &o)) {
    std::fprintf(stderr,
                 "usage: tokenize_ids [--offsets] [--bench [--threads N] [--repeat R] [--cold]] "
                 "TOKENIZER "
                 "FILE...\n");
    return 2;
  }
  try {
    return o.bench ? bench(o) : reference(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tokenize_ids: %s\n", e.what());
    return 1;
  }
}
