// The tokenizer's pipeline components one by one (text/normalizers.hpp, pre_tokenizers.hpp,
// decoders.hpp, post_processors.hpp), each read by its from_json and run alone: what it makes of
// a text, the alignments it carries (each byte's range of the original text, from which
// encode_with_offsets maps tokens back), and its load errors. Expected values follow the
// Rust `tokenizers` library's normalizers/*.rs, pre_tokenizers/*.rs, decoders/*.rs and
// processors/*.rs (and its NormalizedString alignments), checked by hand.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/errors.hpp"
#include "text/tokenizer_impl.hpp"

namespace kktrain::text {
namespace {

using Spans = std::vector<std::pair<size_t, size_t>>;
const std::string kFile = "tok.json";

// The components' regexes and one matcher each.
struct Regs {
  Regexes regexes;
  std::vector<RegexMatcher> matchers;
  std::vector<RegexMatcher>& get() {
    while (matchers.size() < regexes.size()) matchers.emplace_back(*regexes[matchers.size()]);
    return matchers;
  }
};

Spans spans(const std::vector<ByteRange>& a) {
  Spans s;
  for (const ByteRange& r : a) s.emplace_back(r.begin, r.end);
  return s;
}

// n copies of range r.
Spans times(size_t n, std::pair<size_t, size_t> r) {
  return Spans(n, r);
}
Spans cat(std::initializer_list<Spans> parts) {
  Spans s;
  for (const Spans& p : parts) s.insert(s.end(), p.begin(), p.end());
  return s;
}

// ---- Normalizers -----------------------------------------------------------------------------

struct NormalizerCase {
  Json step;
  std::string in, out;
  Spans align;  // of out's bytes
};

TEST(TokenizerComponents, Normalizers) {
  const std::string m = "\u2581";
  const std::vector<NormalizerCase> cases = {
      {{{"type", "NFC"}}, "e\u0301x", "\u00e9x", cat({times(2, {0, 3}), {{3, 4}}})},
      {{{"type", "NFC"}}, "\u00e9x", "\u00e9x", {{0, 1}, {1, 2}, {2, 3}}},  // unchanged: bytes
      {{{"type", "NFD"}}, "\u00e9", "e\u0301", times(3, {0, 2})},
      {{{"type", "NFKC"}}, "a\ufb01", "afi", {{0, 1}, {1, 4}, {1, 4}}},
      {{{"type", "NFKD"}}, "\u2460", "1", {{0, 3}}},
      // Hangul jamo are starters that compose with each other: one run.
      {{{"type", "NFC"}}, "\u1100\u1161z", "\uac00z", cat({times(3, {0, 6}), {{6, 7}}})},
      {{{"type", "Prepend"}, {"prepend", m}},
       "ab",
       m + "ab",
       cat({times(3, {0, 0}), {{0, 1}, {1, 2}}})},
      {{{"type", "Prepend"}, {"prepend", m}}, "", "", {}},
      {{{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", m}},
       "a b",
       "a" + m + "b",
       cat({{{0, 1}}, times(3, {1, 2}), {{2, 3}}})},
      // The content has the range of the match's last character.
      {{{"type", "Replace"}, {"pattern", {{"Regex", "\\s+"}}}, {"content", " "}},
       "a \n b",
       "a b",
       {{0, 1}, {3, 4}, {4, 5}}},
      {{{"type", "Replace"}, {"pattern", {{"String", "\u00e9"}}}, {"content", ""}},
       "x\u00e9y",
       "xy",
       {{0, 1}, {3, 4}}},
      {{{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}},
       " \u3000a b\n",
       "a b",
       {{4, 5}, {5, 6}, {6, 7}}},
      {{{"type", "Strip"}, {"strip_left", false}, {"strip_right", true}},
       " a ",
       " a",
       {{0, 1}, {1, 2}}},
  };
  for (const NormalizerCase& c : cases) {
    Regs r;
    const auto n =
        Normalizer::from_json(c.step["type"], c.step, Where{kFile, "normalizer"}, &r.regexes);
    ASSERT_TRUE(n) << c.step;
    NormalizedString tracked(c.in, 0, Alignment::tracked), plain(c.in, 0, Alignment::untracked);
    n->run(&tracked, r.get());
    n->run(&plain, r.get());
    EXPECT_EQ(tracked.text, c.out) << c.step;
    EXPECT_EQ(plain.text, c.out) << c.step;
    EXPECT_EQ(spans(tracked.align), c.align) << c.step;
    EXPECT_TRUE(plain.align.empty()) << c.step;
  }
  // A text that starts at byte 10 of the original keeps its place.
  Regs r;
  const Json nfc = {{"type", "NFC"}};
  NormalizedString s("e\u0301", 10, Alignment::tracked);
  Normalizer::from_json("NFC", nfc, Where{kFile, "normalizer"}, &r.regexes)->run(&s, r.get());
  EXPECT_EQ(spans(s.align), times(2, {10, 13}));
}

TEST(TokenizerComponents, NormalizerGrowthAndErrors) {
  Regs r;
  const Where w{kFile, "normalizer"};
  EXPECT_EQ(Normalizer::from_json("NFKC", Json::object(), w, &r.regexes)->growth(), 18.0);
  EXPECT_EQ(Normalizer::from_json("NFD", Json::object(), w, &r.regexes)->growth(), 4.0);
  const Json prepend = {{"type", "Prepend"}, {"prepend", "ab"}};
  EXPECT_EQ(Normalizer::from_json("Prepend", prepend, w, &r.regexes)->growth(), 3.0);
  const Json replace = {{"type", "Replace"}, {"pattern", {{"String", "ab"}}}, {"content", "xyz"}};
  EXPECT_EQ(Normalizer::from_json("Replace", replace, w, &r.regexes)->growth(), 1.5);
  EXPECT_EQ(Normalizer::from_json("Lowercase", Json::object(), w, &r.regexes), nullptr);
  const auto error = [&](const char* type, const Json& j) -> std::string {
    try {
      Normalizer::from_json(type, j, w, &r.regexes);
    } catch (const InputError& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_EQ(error("Prepend", Json{{"type", "Prepend"}}),
            "tokenizer file 'tok.json': key 'normalizer.prepend': missing");
  EXPECT_EQ(error("Replace", Json{{"type", "Replace"}, {"pattern", "x"}, {"content", ""}}),
            "tokenizer file 'tok.json': key 'normalizer.pattern': expected {\"String\": ...} or "
            "{\"Regex\": ...}");
  EXPECT_EQ(error("Strip", Json{{"type", "Strip"}, {"strip_left", 1}}),
            "tokenizer file 'tok.json': key 'normalizer.strip_left': expected true or false, "
            "found number");
}

// ---- Pre-tokenizers --------------------------------------------------------------------------

struct PreTokenizerCase {
  Json step;
  bool last;  // set_last
  std::string in;
  std::vector<std::string> pieces;
  Spans covers;  // each piece's original bytes (covering its alignment)
};

TEST(TokenizerComponents, PreTokenizers) {
  const std::string m = "\u2581", g = "\u0120";  // Metaspace's U+2581, byte-level space
  const Json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  const std::vector<PreTokenizerCase> cases = {
      // The prefix space covers no byte; as the last step the bytes stay raw (BPE maps them).
      {byte_level, true, "hi you", {" hi", " you"}, {{0, 2}, {2, 6}}},
      {byte_level, false, "hi \u00e9", {g + "hi", g + "\u00c3\u00a9"}, {{0, 2}, {2, 5}}},
      {{{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", "Removed"}},
       true,
       "a--b",
       {"a", "b"},
       {{0, 1}, {3, 4}}},
      {{{"type", "Split"},
        {"pattern", {{"Regex", "\\w+"}}},
        {"behavior", "Removed"},
        {"invert", true}},
       true,
       "ab, c",
       {"ab", "c"},
       {{0, 2}, {4, 5}}},
      {{{"type", "Metaspace"}, {"replacement", m}, {"prepend_scheme", "always"}},
       true,
       "a b",
       {m + "a", m + "b"},
       {{0, 1}, {1, 3}}},
      {{{"type", "Metaspace"}, {"replacement", m}, {"prepend_scheme", "always"}, {"split", false}},
       true,
       "a  b",
       {m + "a" + m + m + "b"},
       {{0, 4}}},
      {{{"type", "Digits"}, {"individual_digits", false}},
       true,
       "ab12c",
       {"ab", "12", "c"},
       {{0, 2}, {2, 4}, {4, 5}}},
      {{{"type", "Digits"}, {"individual_digits", true}},
       true,
       "a12",
       {"a", "1", "2"},
       {{0, 1}, {1, 2}, {2, 3}}},
  };
  for (const PreTokenizerCase& c : cases) {
    Regs r;
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    steps.push_back(
        PreTokenizer::from_json(c.step["type"], c.step, Where{kFile, "pre_tokenizer"}, &r.regexes));
    ASSERT_TRUE(steps[0]) << c.step;
    steps[0]->set_last(c.last);
    EXPECT_EQ(steps[0]->leaves_raw_bytes(), c.last && c.step["type"] == "ByteLevel");
    NormalizedString from(c.in, 0, Alignment::tracked);
    PreTokenizedString s;
    s.tracked = true;
    s.reset(c.in, from.align.data(), true);
    pre_tokenize(steps, &s, r.get());
    std::vector<std::string> got;
    Spans covers;
    for (const Piece& p : s.pieces) {
      got.emplace_back(s.view(p));
      covers.push_back({covering(s.align.data() + p.begin, p.end - p.begin).begin,
                        covering(s.align.data() + p.begin, p.end - p.begin).end});
    }
    EXPECT_EQ(got, c.pieces) << c.step;
    EXPECT_EQ(covers, c.covers) << c.step;
    EXPECT_EQ(s.align.size(), s.arena.size()) << c.step;
  }
}

TEST(TokenizerComponents, MetaspaceFirstAndErrors) {
  Regs r;
  const Where w{kFile, "pre_tokenizer"};
  const Json first = {
      {"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}};
  std::vector<std::unique_ptr<PreTokenizer>> steps;
  steps.push_back(PreTokenizer::from_json("Metaspace", first, w, &r.regexes));
  PreTokenizedString s;
  s.reset("a", nullptr, false);  // not at the start of the text: nothing put in front
  pre_tokenize(steps, &s, r.get());
  ASSERT_EQ(s.pieces.size(), 1u);
  EXPECT_EQ(s.view(s.pieces[0]), "a");
  try {
    PreTokenizer::from_json("Split", Json{{"pattern", {{"String", "-"}}}, {"behavior", "Sideways"}},
                            w, &r.regexes);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(),
                 "tokenizer file 'tok.json': key 'pre_tokenizer.behavior': 'Sideways' is not "
                 "supported (kktrain reads Removed, Isolated, MergedWithPrevious, MergedWithNext, "
                 "Contiguous)");
  }
  try {
    PreTokenizer::from_json("Metaspace", Json{{"replacement", "ab"}}, w, &r.regexes);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(),
                 "tokenizer file 'tok.json': key 'pre_tokenizer.replacement': expected one "
                 "character, found 'ab'");
  }
  EXPECT_EQ(PreTokenizer::from_json("Whitespace", Json::object(), w, &r.regexes), nullptr);
}

// ---- Decoders --------------------------------------------------------------------------------

struct DecoderCase {
  Json step;
  std::vector<std::string> in, out;
};

TEST(TokenizerComponents, Decoders) {
  const std::string m = "\u2581";
  const std::vector<DecoderCase> cases = {
      {{{"type", "ByteLevel"}}, {"\u0120hi", "\u00c3\u00a9"}, {" hi\u00e9"}},
      {{{"type", "ByteLevel"}}, {"\u00c3"}, {"\ufffd"}},
      {{{"type", "Metaspace"}, {"replacement", m}, {"prepend_scheme", "always"}},
       {m + "a", m + "b"},
       {"a", " b"}},
      {{{"type", "Metaspace"}, {"replacement", m}, {"prepend_scheme", "never"}}, {m + "a"}, {" a"}},
      {{{"type", "ByteFallback"}},
       {"<0xE2>", "<0x82>", "<0xAC>", "x", "<0x82>"},
       {"\u20ac", "x", "\ufffd"}},
      {{{"type", "Fuse"}}, {"a", "b", "c"}, {"abc"}},
      {{{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}},
       {"  a", " b "},
       {" a", "b "}},
      {{{"type", "Strip"}, {"content", "x"}, {"start", 0}, {"stop", 2}}, {"axxx"}, {"ax"}},
      {{{"type", "Replace"}, {"pattern", {{"String", m}}}, {"content", " "}},
       {m + "a" + m, "b"},
       {" a ", "b"}},
      {{{"type", "Replace"}, {"pattern", {{"Regex", "[0-9]+"}}}, {"content", "#"}},
       {"a12b3"},
       {"a#b#"}},
  };
  for (const DecoderCase& c : cases) {
    Regs r;
    std::vector<std::unique_ptr<Decoder>> steps;
    steps.push_back(
        Decoder::from_json(c.step["type"], c.step, Where{kFile, "decoder"}, &r.regexes));
    ASSERT_TRUE(steps[0]) << c.step;
    std::vector<std::string> tokens = c.in;
    decode_tokens(steps, r.regexes, &tokens);
    EXPECT_EQ(tokens, c.out) << c.step;
  }
  Regs r;
  const Where w{kFile, "decoder"};
  try {
    Decoder::from_json("Strip", Json{{"content", " "}, {"start", -1}, {"stop", 0}}, w, &r.regexes);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "tokenizer file 'tok.json': key 'decoder': start and stop must be >= 0");
  }
  const Json replace = {{"pattern", {{"String", "a"}}}, {"content", "bbbb"}};
  EXPECT_EQ(Decoder::from_json("Replace", replace, w, &r.regexes)->growth(), 4.0);
  EXPECT_EQ(Decoder::from_json("CTC", Json::object(), w, &r.regexes), nullptr);
}

// ---- Post-processors -------------------------------------------------------------------------

TEST(TokenizerComponents, PostProcessors) {
  const Where w{kFile, "post_processor"};
  const Json tp = {
      {"type", "TemplateProcessing"},
      {"single",
       {{{"SpecialToken", {{"id", "<s>"}}}},
        {{"Sequence", {{"id", "A"}}}},
        {{"SpecialToken", {{"id", "</s>"}}}}}},
      {"special_tokens",
       {{"<s>", {{"id", "<s>"}, {"ids", {1}}}}, {"</s>", {{"id", "</s>"}, {"ids", {2, 3}}}}}}};
  std::vector<EmittedId> emitted;
  const auto p = PostProcessor::from_json("TemplateProcessing", tp, w, &emitted);
  std::vector<int32_t> prefix, suffix;
  p->special_ids(&prefix, &suffix);
  EXPECT_EQ(prefix, std::vector<int32_t>{1});
  EXPECT_EQ(suffix, (std::vector<int32_t>{2, 3}));
  ASSERT_EQ(emitted.size(), 3u);
  EXPECT_EQ(emitted[1].where.key, "post_processor.special_tokens.</s>.ids[0]");
  const auto b = PostProcessor::from_json("ByteLevel", Json::object(), w, &emitted);
  b->special_ids(&prefix, &suffix);
  EXPECT_EQ(prefix.size() + suffix.size(), 3u);  // ids unchanged
  Json no_a = tp;
  no_a["single"] = Json::array({tp["single"][0]});
  try {
    PostProcessor::from_json("TemplateProcessing", no_a, w, &emitted);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(),
                 "tokenizer file 'tok.json': key 'post_processor.single': the single template "
                 "must hold sequence A");
  }
  EXPECT_EQ(PostProcessor::from_json("RobertaProcessing", Json::object(), w, &emitted), nullptr);
}

}  // namespace
}  // namespace kktrain::text
