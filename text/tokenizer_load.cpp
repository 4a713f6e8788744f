// tokenizer.json and tokenizer_config.json -> Tokenizer::Impl. Every problem is one InputError
// naming the file and the key path ("model.merges[12]") and what is wrong or unsupported.
// The files are untrusted downloads, so loading is bounded by their size: read only when regular
// files of at most kMaxTokenizerFileBytes, JSON nested at most kMaxJsonDepth deep, at most
// kMaxPipelineSteps steps in each part of the pipeline, ids below twice the number of tokens the
// file holds (plus 1024), and every id encode can emit a token of the vocabulary.
#include <sys/stat.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/errors.hpp"
#include "core/files.hpp"
#include "core/json_reader.hpp"
#include "core/json_text.hpp"
#include "text/tokenizer_impl.hpp"

namespace kktrain::text {
namespace {

using Json = nlohmann::json;

// The file being read and a key path, for messages (core/json_reader.hpp).
constexpr char kTokenizerFile[] = "tokenizer file ";
using Where = json_reader::JsonWhere<kTokenizerFile>;
using json_reader::as_bool;
using json_reader::as_int;
using json_reader::as_string;
using json_reader::bool_or;
using json_reader::member;
using json_reader::optional_member;
using json_reader::type_name;
using json_reader::type_of;
using json_reader::unsupported;

// The most a tokenizer.json or tokenizer_config.json may hold: about twice the largest known
// (Gemma 3's tokenizer.json, 33 MB: loaded in 2.6 s, 210 MB peak RSS). A hostile file of tiny
// JSON values costs about 27 bytes of memory a byte of file (250 MB of "[]," took 57 s and
// 6.7 GB), so this bounds one to about 1.7 GB; read only when it is a regular file
// (core/files.hpp).
constexpr std::size_t kMaxTokenizerFileBytes = std::size_t(64) << 20;

Json read_json(const std::string& file) {
  std::string text;
  if (auto why = read_regular_file(&text, file, kMaxTokenizerFileBytes)) {
    throw InputError("tokenizer file '" + file + "' " +
                     (why->rfind("is ", 0) == 0 ? *why : "cannot be read: " + *why));
  }
  return parse_json_bounded<Json>(text, "tokenizer file '" + file + "'");
}

// The most steps a normalizer, pre-tokenizer, decoder or post-processor may have (Sequences
// flattened): every encode runs each one. Real tokenizers have at most a handful.
constexpr size_t kMaxPipelineSteps = 256;
// The most the normalizer (or the decoder) may make a text grow, as the product of what each step
// can multiply its length by: Prepend 1 + its bytes, Replace its content's bytes over the
// pattern's (a regex match has at least one byte), NFC / NFD 4, NFKC / NFKD 18 (U+FDFA
// decomposes into 18 code points). Llama 2's normalizer can grow a text 12x (Prepend and Replace
// of "\u2581"), NFKC before those 216x; a chain of doubling Replaces would grow it without end.
constexpr double kMaxGrowth = 1024;

// The steps of one pipeline part so far and how much they can make a text grow.
struct Budget {
  size_t steps = 0;
  double growth = 1;
};

// Counts one more step of a pipeline part; InputError at the step past the limit.
void count_step(Budget* b, const Where& w) {
  if (++b->steps > kMaxPipelineSteps)
    w.fail("more than " + std::to_string(kMaxPipelineSteps) + " steps (kktrain reads at most " +
           std::to_string(kMaxPipelineSteps) + ")");
}

// The step at w multiplies how much a text can grow by `factor`; InputError past kMaxGrowth.
void grow(Budget* b, double factor, const Where& w) {
  b->growth *= std::max(1.0, factor);
  if (b->growth > kMaxGrowth)
    w.fail("the steps up to this one can make a text more than " + std::to_string(int(kMaxGrowth)) +
           " times longer (kktrain reads at most that: each Prepend, Replace and Unicode form "
           "multiplies it)");
}

// How much a Replace of `p` by `content` can multiply a text's length.
double replace_growth(const Pattern& p, const std::string& content) {
  return double(content.size()) / double(p.regex ? 1 : std::max<size_t>(1, p.literal.size()));
}

// The ids a file may use: below 2 x (vocabulary entries + added tokens) + 1024. A vocabulary's
// ids are dense but for a few gaps (tiktoken-derived files leave some before their specials), so
// the tables indexed by id stay within a small multiple of what the file itself holds.
struct IdLimit {
  size_t vocab_entries = 0, added = 0;
  int64_t end() const { return 2 * int64_t(vocab_entries + added) + 1024; }
  void check(int64_t id, const Where& w) const {
    if (id < end()) return;
    w.fail("id " + std::to_string(id) + " is out of range for a file of " +
           std::to_string(vocab_entries) + " vocabulary entries and " + std::to_string(added) +
           " added tokens (ids below 2 x " + std::to_string(vocab_entries + added) +
           " + 1024 = " + std::to_string(end()) + ")");
  }
};

// An id the post-processor adds, as the file writes it and where: checked to be a token once
// every token is known.
struct EmittedId {
  int64_t id;  // -1 for any value outside int64
  std::string text;
  Where where;
};

// One character of a string key (Metaspace's replacement, Strip's content).
std::string one_char(const Json& v, const Where& w) {
  std::string s = as_string(v, w);
  if (s.empty() || first_invalid_utf8(s) >= 0 || size_t(utf8_len(uint8_t(s[0]))) != s.size()) {
    w.fail("expected one character, found '" + s + "'");
  }
  return s;
}

void read_pattern(Pattern* p, const Json& v, const Where& w, Tokenizer::Impl* t) {
  if (const Json* s = v.is_object() ? optional_member(v, "String") : nullptr) {
    p->literal = as_string(*s, w.at("String"));
  } else if (const Json* r = v.is_object() ? optional_member(v, "Regex") : nullptr) {
    p->regex = std::make_unique<Regex>(
        as_string(*r, w.at("Regex")), "tokenizer file '" + w.file + "': key '" + w.key + ".Regex'");
    p->matcher = int(t->regexes.size());
    t->regexes.push_back(p->regex.get());
  } else {
    w.fail("expected {\"String\": ...} or {\"Regex\": ...}");
  }
}

PrependScheme read_prepend(const Json& obj, const Where& w) {
  if (const Json* v = optional_member(obj, "prepend_scheme")) {
    const std::string s = as_string(*v, w.at("prepend_scheme"));
    if (s == "always") return PrependScheme::always;
    if (s == "first") return PrependScheme::first;
    if (s == "never") return PrependScheme::never;
    w.at("prepend_scheme").fail("expected always, first or never, found '" + s + "'");
  }
  return bool_or(obj, "add_prefix_space", true, w) ? PrependScheme::always : PrependScheme::never;
}

void read_normalizer(Tokenizer::Impl* t, const Json& n, const Where& w, Budget* budget) {
  const std::string type = type_of(n, w);
  NormalizerStep s{};
  if (type == "Sequence") {
    const Json& list = member(n, "normalizers", w);
    if (!list.is_array()) w.at("normalizers").fail("expected a list");
    for (size_t i = 0; i < list.size(); ++i)
      read_normalizer(t, list[i], w.at("normalizers").at(i), budget);
    return;
  }
  count_step(budget, w);
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    s.kind = NormalizerStep::Kind::unicode;
    s.form = type == "NFC"    ? NormalForm::nfc
             : type == "NFD"  ? NormalForm::nfd
             : type == "NFKC" ? NormalForm::nfkc
                              : NormalForm::nfkd;
  } else if (type == "Prepend") {
    s.kind = NormalizerStep::Kind::prepend;
    s.text = as_string(member(n, "prepend", w), w.at("prepend"));
  } else if (type == "Replace") {
    s.kind = NormalizerStep::Kind::replace;
    read_pattern(&s.pattern, member(n, "pattern", w), w.at("pattern"), t);
    s.text = as_string(member(n, "content", w), w.at("content"));
  } else if (type == "Strip") {
    s.kind = NormalizerStep::Kind::strip;
    s.left = bool_or(n, "strip_left", true, w);
    s.right = bool_or(n, "strip_right", true, w);
  } else {
    unsupported(w.at("type"), type, "NFC, NFD, NFKC, NFKD, Prepend, Replace, Strip, Sequence");
  }
  grow(budget,
       s.kind == NormalizerStep::Kind::unicode
           ? (s.form == NormalForm::nfc || s.form == NormalForm::nfd ? 4.0 : 18.0)
       : s.kind == NormalizerStep::Kind::prepend ? 1.0 + double(s.text.size())
       : s.kind == NormalizerStep::Kind::replace ? replace_growth(s.pattern, s.text)
                                                 : 1.0,
       w);
  t->normalizers.push_back(std::move(s));
}

SplitBehavior read_behavior(const Json& v, const Where& w) {
  const std::string b = as_string(v, w);
  if (b == "Removed") return SplitBehavior::removed;
  if (b == "Isolated") return SplitBehavior::isolated;
  if (b == "MergedWithPrevious") return SplitBehavior::merged_with_previous;
  if (b == "MergedWithNext") return SplitBehavior::merged_with_next;
  if (b == "Contiguous") return SplitBehavior::contiguous;
  unsupported(w, b, "Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
}

// GPT-2's pre-tokenizer regex (the ByteLevel pre-tokenizer's own when use_regex is true).
const char* kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

void read_pre_tokenizer(Tokenizer::Impl* t, const Json& p, const Where& w, Budget* budget) {
  const std::string type = type_of(p, w);
  PreTokenizerStep s{};
  if (type == "Sequence") {
    const Json& list = member(p, "pretokenizers", w);
    if (!list.is_array()) w.at("pretokenizers").fail("expected a list");
    for (size_t i = 0; i < list.size(); ++i)
      read_pre_tokenizer(t, list[i], w.at("pretokenizers").at(i), budget);
    return;
  }
  count_step(budget, w);
  if (type == "ByteLevel") {
    s.kind = PreTokenizerStep::Kind::byte_level;
    s.add_prefix_space = bool_or(p, "add_prefix_space", true, w);
    s.use_regex = bool_or(p, "use_regex", true, w);
    if (s.use_regex) {
      s.pattern.regex = std::make_unique<Regex>(
          kGpt2Regex, "tokenizer file '" + w.file + "': key '" + w.key + "' (ByteLevel's regex)");
      s.pattern.matcher = int(t->regexes.size());
      t->regexes.push_back(s.pattern.regex.get());
    }
  } else if (type == "Split") {
    s.kind = PreTokenizerStep::Kind::split;
    read_pattern(&s.pattern, member(p, "pattern", w), w.at("pattern"), t);
    s.behavior = read_behavior(member(p, "behavior", w), w.at("behavior"));
    s.invert = bool_or(p, "invert", false, w);
  } else if (type == "Metaspace") {
    s.kind = PreTokenizerStep::Kind::metaspace;
    s.replacement = one_char(member(p, "replacement", w), w.at("replacement"));
    s.prepend = read_prepend(p, w);
    s.split = bool_or(p, "split", true, w);
  } else if (type == "Digits") {
    s.kind = PreTokenizerStep::Kind::digits;
    s.individual_digits = bool_or(p, "individual_digits", false, w);
  } else {
    unsupported(w.at("type"), type, "ByteLevel, Split, Metaspace, Digits, Sequence");
  }
  t->pre_tokenizers.push_back(std::move(s));
}

void read_decoder(Tokenizer::Impl* t, const Json& d, const Where& w, Budget* budget) {
  const std::string type = type_of(d, w);
  DecoderStep s{};
  if (type == "Sequence") {
    const Json& list = member(d, "decoders", w);
    if (!list.is_array()) w.at("decoders").fail("expected a list");
    for (size_t i = 0; i < list.size(); ++i)
      read_decoder(t, list[i], w.at("decoders").at(i), budget);
    return;
  }
  count_step(budget, w);
  if (type == "ByteLevel") {
    s.kind = DecoderStep::Kind::byte_level;
  } else if (type == "Metaspace") {
    s.kind = DecoderStep::Kind::metaspace;
    s.replacement = one_char(member(d, "replacement", w), w.at("replacement"));
    s.prepend = read_prepend(d, w);
  } else if (type == "ByteFallback") {
    s.kind = DecoderStep::Kind::byte_fallback;
  } else if (type == "Fuse") {
    s.kind = DecoderStep::Kind::fuse;
  } else if (type == "Strip") {
    s.kind = DecoderStep::Kind::strip;
    const std::string c = one_char(member(d, "content", w), w.at("content"));
    s.strip_char = decode_at(c, 0).cp;
    s.strip_start = int(as_int(member(d, "start", w), w.at("start")));
    s.strip_stop = int(as_int(member(d, "stop", w), w.at("stop")));
    if (s.strip_start < 0 || s.strip_stop < 0) w.fail("start and stop must be >= 0");
  } else if (type == "Replace") {
    s.kind = DecoderStep::Kind::replace;
    read_pattern(&s.pattern, member(d, "pattern", w), w.at("pattern"), t);
    s.content = as_string(member(d, "content", w), w.at("content"));
  } else {
    unsupported(w.at("type"), type,
                "ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, Sequence");
  }
  if (s.kind == DecoderStep::Kind::replace) grow(budget, replace_growth(s.pattern, s.content), w);
  t->decoders.push_back(std::move(s));
}

void read_post_processor(Tokenizer::Impl* t, const Json& p, const Where& w, Budget* budget,
                         std::vector<EmittedId>* emitted) {
  const std::string type = type_of(p, w);
  if (type == "Sequence") {
    const Json& list = member(p, "processors", w);
    if (!list.is_array()) w.at("processors").fail("expected a list");
    for (size_t i = 0; i < list.size(); ++i)
      read_post_processor(t, list[i], w.at("processors").at(i), budget, emitted);
    return;
  }
  count_step(budget, w);
  if (type == "ByteLevel") {
    // Adjusts offsets only: the ids are unchanged.
  } else if (type == "TemplateProcessing") {
    const Where ws = w.at("single");
    const Json& single = member(p, "single", w);
    if (!single.is_array()) ws.fail("expected a list");
    const Json& specials = member(p, "special_tokens", w);
    bool seen_sequence = false;
    for (size_t i = 0; i < single.size(); ++i) {
      const Where wi = ws.at(i);
      if (const Json* st =
              single[i].is_object() ? optional_member(single[i], "SpecialToken") : nullptr) {
        const std::string name = as_string(member(*st, "id", wi.at("SpecialToken")), wi);
        const Json& entry = member(specials, name.c_str(), w.at("special_tokens"));
        const Json& ids = member(entry, "ids", w.at("special_tokens").at(name));
        if (!ids.is_array()) w.at("special_tokens").at(name).at("ids").fail("expected a list");
        for (size_t k = 0; k < ids.size(); ++k) {
          const Where wk = w.at("special_tokens").at(name).at("ids").at(k);
          const bool huge = ids[k].is_number_unsigned() && ids[k].get<uint64_t>() > INT64_MAX;
          const int64_t id = huge ? -1 : as_int(ids[k], wk);
          emitted->push_back({id, ids[k].dump(), wk});
          (seen_sequence ? t->suffix_ids : t->prefix_ids).push_back(int32_t(id));
        }
      } else if (const Json* sq =
                     single[i].is_object() ? optional_member(single[i], "Sequence") : nullptr) {
        if (as_string(member(*sq, "id", wi.at("Sequence")), wi) != "A" || seen_sequence)
          wi.fail("the single template must hold sequence A once");
        seen_sequence = true;
      } else {
        wi.fail("expected {\"SpecialToken\": ...} or {\"Sequence\": ...}");
      }
    }
    if (!seen_sequence) ws.fail("the single template must hold sequence A");
  } else {
    unsupported(w.at("type"), type, "TemplateProcessing, ByteLevel, Sequence");
  }
}

std::string_view keep(Tokenizer::Impl* t, std::string s) {
  t->arena.push_back(std::move(s));
  return t->arena.back();
}

void read_model(Tokenizer::Impl* t, const Json& m, const Where& w, IdLimit* limit) {
  const std::string type = type_of(m, w);
  if (type != "BPE") unsupported(w.at("type"), type, "BPE models");
  if (const Json* d = optional_member(m, "dropout")) {
    if (!d->is_number() || d->get<double>() != 0.0)
      w.at("dropout").fail("BPE dropout is not supported (kktrain encodes deterministically)");
  }
  const Json& vocab = member(m, "vocab", w);
  if (!vocab.is_object()) w.at("vocab").fail("expected an object of token: id");
  t->vocab.reserve(vocab.size());
  limit->vocab_entries = vocab.size();
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const Json& v = it.value();
    const int64_t id = v.is_number_integer() ? v.get<int64_t>() : -1;
    if (id < 0 || id > INT32_MAX) w.at("vocab").at(it.key()).fail("expected an id in [0, 2^31)");
    limit->check(id, w.at("vocab").at(it.key()));
    t->vocab.emplace(keep(t, it.key()), int32_t(id));
    if (id >= int64_t(t->id_to_token.size())) t->id_to_token.resize(size_t(id) + 1);
    t->id_to_token[size_t(id)] = t->arena.back();
  }
  const Json& merges = member(m, "merges", w);
  if (!merges.is_array()) w.at("merges").fail("expected a list");
  t->merges.reserve(merges.size());
  std::string a, b;
  for (size_t i = 0; i < merges.size(); ++i) {
    const auto wi = [&] { return w.at("merges").at(i); };  // built for messages only
    const Json& mi = merges[i];
    if (mi.is_string()) {
      const std::string& s = mi.get_ref<const std::string&>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        wi().fail("a merge must be two tokens separated by one space, found '" + s + "'");
      a.assign(s, 0, sp);
      b.assign(s, sp + 1);
    } else if (mi.is_array() && mi.size() == 2 && mi[0].is_string() && mi[1].is_string()) {
      a = mi[0].get_ref<const std::string&>();
      b = mi[1].get_ref<const std::string&>();
    } else {
      wi().fail("expected \"a b\" or [\"a\", \"b\"]");
    }
    const auto ia = t->vocab.find(a), ib = t->vocab.find(b), im = t->vocab.find(a + b);
    if (ia == t->vocab.end() || ib == t->vocab.end() || im == t->vocab.end()) {
      wi().fail("merge '" + a + "' + '" + b + "' uses a token that is not in the vocabulary");
    }
    const uint64_t key = (uint64_t(uint32_t(ia->second)) << 32) | uint32_t(ib->second);
    t->merges.emplace(key, (uint64_t(i) << 32) | uint32_t(im->second));  // first rank wins
  }
  t->ignore_merges = bool_or(m, "ignore_merges", false, w);
  t->byte_fallback = bool_or(m, "byte_fallback", false, w);
  t->fuse_unk = bool_or(m, "fuse_unk", false, w);
  if (const Json* u = optional_member(m, "unk_token")) {
    const std::string unk = as_string(*u, w.at("unk_token"));
    const auto it = t->vocab.find(unk);
    if (it == t->vocab.end()) w.at("unk_token").fail("'" + unk + "' is not in the vocabulary");
    t->unk_id = it->second;
  }
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (const Json* v = optional_member(m, k);
        v && !(v->is_string() && v->get<std::string>().empty()))
      w.at(k).fail("must be null (kktrain reads BPE models without subword affixes)");
  }
  t->byte_ids.fill(-1);
  if (t->byte_fallback) {
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      const auto it = t->vocab.find(name);
      if (it != t->vocab.end()) t->byte_ids[size_t(b)] = it->second;
    }
  }
}

void add_to_trie(Tokenizer::Impl::Trie* trie, std::string_view s, int token) {
  int32_t node = 0;
  for (const char c : s) {
    const uint64_t key = (uint64_t(uint32_t(node)) << 8) | uint8_t(c);
    auto it = trie->edges.find(key);
    if (it == trie->edges.end()) {
      it = trie->edges.emplace(key, int32_t(trie->token.size())).first;
      trie->token.push_back(-1);
    }
    node = it->second;
  }
  trie->token[size_t(node)] = token;
  trie->first[uint8_t(s[0])] = true;
}

// The most bytes one added token may hold, and all of them together as matched (after the
// normalizer, for `normalized` ones): they are found through a byte trie of about 50 bytes a byte.
// Gemma 3's 6415 added tokens hold 76.8 KB, the longest 93 bytes.
constexpr size_t kMaxAddedTokenBytes = 4096;
constexpr size_t kMaxAddedTextBytes = size_t(4) << 20;

void read_added_tokens(Tokenizer::Impl* t, const Json& list, const Where& w, const IdLimit& limit) {
  if (!list.is_array()) w.fail("expected a list");
  for (size_t i = 0; i < list.size(); ++i) {
    const Where wi = w.at(i);
    AddedToken a;
    a.content = as_string(member(list[i], "content", wi), wi.at("content"));
    if (a.content.empty()) wi.at("content").fail("an added token cannot be empty");
    if (a.content.size() > kMaxAddedTokenBytes)
      wi.at("content").fail("an added token of " + std::to_string(a.content.size()) +
                            " bytes (kktrain reads added tokens of at most " +
                            std::to_string(kMaxAddedTokenBytes) + " bytes)");
    const int64_t id = as_int(member(list[i], "id", wi), wi.at("id"));
    if (id < 0 || id > INT32_MAX) wi.at("id").fail("id out of range");
    limit.check(id, wi.at("id"));
    a.id = int32_t(id);
    a.special = bool_or(list[i], "special", false, wi);
    a.lstrip = bool_or(list[i], "lstrip", false, wi);
    a.rstrip = bool_or(list[i], "rstrip", false, wi);
    a.single_word = bool_or(list[i], "single_word", false, wi);
    a.normalized = bool_or(list[i], "normalized", !a.special, wi);
    t->added.push_back(std::move(a));
  }
}

}  // namespace

std::string apply_normalizers(const Tokenizer::Impl& t, std::string s,
                              std::vector<RegexMatcher>& matchers);

void load_tokenizer(Tokenizer::Impl* t, const std::string& path) {
  struct stat st {};
  std::string file = path, dir;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    dir = path;
    file = path + "/tokenizer.json";
    const bool named_file = path.size() >= 14 && path.rfind("tokenizer.json") == path.size() - 14;
    if (::stat(file.c_str(), &st) != 0 && named_file)  // a directory where the file should be
      throw InputError("tokenizer file '" + path + "' is a directory, not a file");
    if (::stat(file.c_str(), &st) != 0)
      throw InputError("tokenizer directory '" + path + "' has no tokenizer.json");
  } else if (::stat(path.c_str(), &st) != 0) {
    throw InputError("tokenizer '" + path + "' does not exist");
  } else {
    const size_t slash = path.rfind('/');
    dir = slash == std::string::npos ? "." : path.substr(0, slash);
  }
  t->path = file;
  const Json j = read_json(file);
  const Where w{file, ""};
  if (!j.is_object()) w.fail("expected a JSON object");
  const Json* added = optional_member(j, "added_tokens");
  IdLimit limit;
  limit.added = added && added->is_array() ? added->size() : 0;
  read_model(t, member(j, "model", w), w.at("model"), &limit);
  if (added) read_added_tokens(t, *added, w.at("added_tokens"), limit);
  Budget normalizer, pre_tokenizer, decoder, post_processor;
  if (const Json* n = optional_member(j, "normalizer"))
    read_normalizer(t, *n, w.at("normalizer"), &normalizer);
  if (const Json* p = optional_member(j, "pre_tokenizer"))
    read_pre_tokenizer(t, *p, w.at("pre_tokenizer"), &pre_tokenizer);
  if (const Json* d = optional_member(j, "decoder")) {
    t->has_decoder = true;
    read_decoder(t, *d, w.at("decoder"), &decoder);
  }
  std::vector<EmittedId> emitted;
  if (const Json* p = optional_member(j, "post_processor"))
    read_post_processor(t, *p, w.at("post_processor"), &post_processor, &emitted);
  for (const char* k : {"truncation", "padding"}) {
    if (optional_member(j, k)) w.at(k).fail("must be null (kktrain neither truncates nor pads)");
  }

  // Added tokens: ids, specials, and the tries they are matched with.
  std::sort(t->added.begin(), t->added.end(),
            [](const AddedToken& a, const AddedToken& b) { return a.id < b.id; });
  std::vector<RegexMatcher> matchers;
  for (const Regex* r : t->regexes) matchers.emplace_back(*r);
  size_t added_text = 0;  // what the tries will hold, checked before any is built
  for (AddedToken& a : t->added) {
    if (a.id >= int32_t(t->id_to_token.size())) t->id_to_token.resize(size_t(a.id) + 1);
    t->id_to_token[size_t(a.id)] = keep(t, a.content);
    a.match = a.normalized && !t->normalizers.empty() ? apply_normalizers(*t, a.content, matchers)
                                                      : a.content;
    added_text += a.match.size();
    if (added_text > kMaxAddedTextBytes)
      w.at("added_tokens")
          .fail("the added tokens come to more than " + std::to_string(kMaxAddedTextBytes >> 20) +
                " MiB of text to match (kktrain reads at most that)");
  }
  for (size_t i = 0; i < t->added.size(); ++i) {
    const AddedToken& a = t->added[i];
    if (!a.match.empty())
      add_to_trie(a.normalized ? &t->normalized_trie : &t->raw_trie, a.match, int(i));
  }
  // Every id encode can emit is a token: the model's come from the vocabulary, the added tokens'
  // are tokens; the post-processor's are checked here.
  for (const EmittedId& e : emitted) {
    if (e.id < 0 || e.id >= int64_t(t->id_to_token.size()) ||
        t->id_to_token[size_t(e.id)].data() == nullptr) {
      e.where.fail("id " + e.text + " is not a token of the vocabulary (ids 0.." +
                   std::to_string(int64_t(t->id_to_token.size()) - 1) + ")");
    }
  }
  t->special.assign(t->id_to_token.size(), 0);
  for (const AddedToken& a : t->added)
    if (a.special) t->special[size_t(a.id)] = 1;
  t->vocab_size = int64_t(t->id_to_token.size());
  build_boundaries(t);

  // tokenizer_config.json beside it.
  const std::string cfg_file = dir + "/tokenizer_config.json";
  if (::stat(cfg_file.c_str(), &st) == 0) {
    const Json c = read_json(cfg_file);
    const Where wc{cfg_file, ""};
    if (!c.is_object()) wc.fail("expected a JSON object");
    t->config.path = cfg_file;
    for (auto it = c.begin(); it != c.end(); ++it) {
      const std::string& k = it.key();
      const Json& v = it.value();
      const bool token_key = k.size() > 6 && k.compare(k.size() - 6, 6, "_token") == 0;
      if (token_key && v.is_string()) {
        t->config.special_tokens[k] = v.get<std::string>();
      } else if (token_key && v.is_object() && v.contains("content") && v["content"].is_string()) {
        t->config.special_tokens[k] = v["content"].get<std::string>();
      }
    }
    if (const Json* v = optional_member(c, "add_bos_token"))
      t->config.add_bos_token = as_bool(*v, wc.at("add_bos_token"));
    if (const Json* v = optional_member(c, "add_eos_token"))
      t->config.add_eos_token = as_bool(*v, wc.at("add_eos_token"));
    if (const Json* v = optional_member(c, "chat_template")) {
      if (v->is_string()) {
        t->config.chat_template = v->get<std::string>();
      } else if (v->is_array()) {  // [{"name": ..., "template": ...}]: the one named default
        for (size_t i = 0; i < v->size(); ++i) {
          const Json& e = (*v)[i];
          if (e.is_object() && e.value("name", "") == "default" && e.contains("template"))
            t->config.chat_template = as_string(e["template"], wc.at("chat_template").at(i));
        }
      } else {
        wc.at("chat_template").fail("expected a string or a list of named templates");
      }
    }
  }
  // Name the special tokens the config refers to that the vocabulary lacks? They are checked
  // where they are used (eos for `tokenize`), since configs often name unused ones.
}

}  // namespace kktrain::text
