// tokenizer.json and tokenizer_config.json -> Tokenizer::Impl. Every problem is one InputError
// naming the file and the key path ("model.merges[12]") and what is wrong or unsupported.
// The files are untrusted downloads, so loading is bounded by their size: read only when regular
// files of at most kMaxTokenizerFileBytes, JSON nested at most kMaxJsonDepth deep, at most
// kMaxPipelineSteps steps in each part of the pipeline, ids below twice the number of tokens the
// file holds (plus 1024), and every id encode can emit a token of the vocabulary.
#include <sys/stat.h>

#include <algorithm>

#include "core/errors.hpp"
#include "core/files.hpp"
#include "core/json_text.hpp"
#include "text/tokenizer_impl.hpp"
#include "text/tokenizer_json.hpp"

namespace kktrain::text {
namespace {

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

// One part of the pipeline at w: a Sequence's steps (under `list_key`) in order, flattened, or
// one step, counted against the part's budget and read by read_one(type, j, w).
template <class ReadOne>
void read_steps(const Json& j, const Where& w, const char* list_key, Budget* budget,
                const ReadOne& read_one) {
  const std::string type = type_of(j, w);
  if (type == "Sequence") {
    const Json& list = member(j, list_key, w);
    if (!list.is_array()) w.at(list_key).fail("expected a list");
    for (size_t i = 0; i < list.size(); ++i)
      read_steps(list[i], w.at(list_key).at(i), list_key, budget, read_one);
    return;
  }
  count_step(budget, w);
  read_one(type, j, w);
}

// The components of the pipeline's four parts, each part's steps bounded (count and growth).
void read_pipeline(Tokenizer::Impl* t, const Json& j, const Where& w,
                   std::vector<EmittedId>* emitted) {
  Budget normalizer, pre_tokenizer, decoder, post_processor;
  if (const Json* n = optional_member(j, "normalizer")) {
    read_steps(*n, w.at("normalizer"), "normalizers", &normalizer,
               [&](const std::string& type, const Json& s, const Where& ws) {
                 auto step = Normalizer::from_json(type, s, ws, &t->regexes);
                 if (!step) unsupported(ws.at("type"), type, Normalizer::kSupported);
                 grow(&normalizer, step->growth(), ws);
                 t->normalizers.push_back(std::move(step));
               });
  }
  if (const Json* p = optional_member(j, "pre_tokenizer")) {
    read_steps(*p, w.at("pre_tokenizer"), "pretokenizers", &pre_tokenizer,
               [&](const std::string& type, const Json& s, const Where& ws) {
                 auto step = PreTokenizer::from_json(type, s, ws, &t->regexes);
                 if (!step) unsupported(ws.at("type"), type, PreTokenizer::kSupported);
                 t->pre_tokenizers.push_back(std::move(step));
               });
  }
  for (size_t k = 0; k < t->pre_tokenizers.size(); ++k)
    t->pre_tokenizers[k]->set_last(k + 1 == t->pre_tokenizers.size());
  t->lazy_byte_level = !t->pre_tokenizers.empty() && t->pre_tokenizers.back()->leaves_raw_bytes();
  if (const Json* d = optional_member(j, "decoder")) {
    t->has_decoder = true;
    read_steps(*d, w.at("decoder"), "decoders", &decoder,
               [&](const std::string& type, const Json& s, const Where& ws) {
                 auto step = Decoder::from_json(type, s, ws, &t->regexes);
                 if (!step) unsupported(ws.at("type"), type, Decoder::kSupported);
                 grow(&decoder, step->growth(), ws);
                 t->decoders.push_back(std::move(step));
               });
  }
  if (const Json* p = optional_member(j, "post_processor")) {
    read_steps(*p, w.at("post_processor"), "processors", &post_processor,
               [&](const std::string& type, const Json& s, const Where& ws) {
                 auto step = PostProcessor::from_json(type, s, ws, emitted);
                 if (!step) unsupported(ws.at("type"), type, PostProcessor::kSupported);
                 step->special_ids(&t->prefix_ids, &t->suffix_ids);
                 t->post_processors.push_back(std::move(step));
               });
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
  if (!trie->first[uint8_t(s[0])]) {
    trie->first[uint8_t(s[0])] = true;
    ++trie->first_bytes;
    trie->one_first = s[0];
  }
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

// After the model, the added tokens and the pipeline are read: the added tokens by id, their
// matches (normalized ones through the normalizer) in the tries, every id the post-processor
// emits checked to be a token, the special flags and the vocabulary size.
void index_tokens(Tokenizer::Impl* t, const Where& w, const std::vector<EmittedId>& emitted) {
  std::sort(t->added.begin(), t->added.end(),
            [](const AddedToken& a, const AddedToken& b) { return a.id < b.id; });
  std::vector<RegexMatcher> matchers;
  for (const Regex* r : t->regexes) matchers.emplace_back(*r);
  size_t added_text = 0;  // what the tries will hold, checked before any is built
  for (AddedToken& a : t->added) {
    if (a.id >= int32_t(t->id_to_token.size())) t->id_to_token.resize(size_t(a.id) + 1);
    t->id_to_token[size_t(a.id)] = keep(t, a.content);
    a.match = a.content;
    if (a.normalized && !t->normalizers.empty()) {
      NormalizedString n(a.content, 0, Alignment::untracked);
      normalize_text(*t, &n, matchers);
      a.match = std::move(n.text);
    }
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
  t->spells.assign(t->id_to_token.size(), 1);
  if (t->unk_id) t->spells[size_t(*t->unk_id)] = 0;
  for (const int32_t id : t->byte_ids)
    if (id >= 0) t->spells[size_t(id)] = 0;
}

}  // namespace

void load_tokenizer(Tokenizer::Impl* t, const TokenizerFiles& files) {
  struct stat st {};
  const std::string& path = files.given;
  const std::string& file = files.json;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    const bool named_file = path.size() >= 14 && path.rfind("tokenizer.json") == path.size() - 14;
    if (::stat(file.c_str(), &st) != 0 && named_file)  // a directory where the file should be
      throw InputError("tokenizer file '" + path + "' is a directory, not a file");
    if (::stat(file.c_str(), &st) != 0)
      throw InputError("tokenizer directory '" + path + "' has no tokenizer.json");
  } else if (::stat(path.c_str(), &st) != 0) {
    throw InputError("tokenizer '" + path + "' does not exist");
  }
  t->files = files;
  t->path = file;
  const Json j = read_json(file);
  const Where w{file, ""};
  if (!j.is_object()) w.fail("expected a JSON object");
  const Json* added = optional_member(j, "added_tokens");
  IdLimit limit;
  limit.added = added && added->is_array() ? added->size() : 0;
  read_model(t, member(j, "model", w), w.at("model"), &limit);
  if (added) read_added_tokens(t, *added, w.at("added_tokens"), limit);
  std::vector<EmittedId> emitted;
  read_pipeline(t, j, w, &emitted);
  for (const char* k : {"truncation", "padding"}) {
    if (optional_member(j, k)) w.at(k).fail("must be null (kktrain neither truncates nor pads)");
  }

  index_tokens(t, w, emitted);
  build_boundaries(t);

  // tokenizer_config.json beside it.
  const std::string& cfg_file = files.config;
  if (!cfg_file.empty()) {
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
