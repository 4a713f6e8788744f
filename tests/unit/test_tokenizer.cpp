// The tokenizer's parts on hand-written tokenizer.json files, against the behaviour the
// Hugging Face tokenizers library documents (the examples of its SplitDelimiterBehavior, Metaspace
// prepend schemes, Digits, added-token options, byte fallback) and Unicode's rules for UTF-8. The
// three real tokenizers are compared with their reference implementation in
// tests/cli/test_tokenizer_reference.py.
#include <gtest/gtest.h>

#include "tests/unit/tokenizer_test_util.hpp"

namespace kktrain::text {
namespace {

// The example of SplitDelimiterBehavior's documentation: "the-final--countdown" split on '-'.
TEST_F(TokenizerTest, SplitBehaviors) {
  const std::string text = "the-final--countdown";
  const V words = {"the",  "final",  "countdown", "-",         "--",
                   "the-", "final-", "-final",    "-countdown"};
  const std::vector<std::pair<std::string, V>> cases = {
      {"Removed", {"the", "final", "countdown"}},
      {"Isolated", {"the", "-", "final", "-", "-", "countdown"}},
      {"MergedWithPrevious", {"the-", "final-", "-", "countdown"}},
      {"MergedWithNext", {"the", "-final", "-", "-countdown"}},
      {"Contiguous", {"the", "-", "final", "--", "countdown"}}};
  for (const auto& [behavior, want] : cases) {
    for (const char* kind : {"String", "Regex"}) {
      Json j = bpe(letters(text), words);
      j["pre_tokenizer"] = {
          {"type", "Split"}, {"pattern", {{kind, "-"}}}, {"behavior", behavior}, {"invert", false}};
      EXPECT_EQ(pieces(load(j), text), want) << behavior << " " << kind;
    }
  }
  // invert: the pattern's matches are what is kept apart, the rest is the delimiter.
  Json j = bpe(letters("Hello, world"), {"Hello", "world", ", "});
  j["pre_tokenizer"] = {{"type", "Split"},
                        {"pattern", {{"Regex", "\\w+"}}},
                        {"behavior", "Removed"},
                        {"invert", true}};
  EXPECT_EQ(pieces(load(j), "Hello, world"), (V{"Hello", "world"}));
}

// Metaspace: spaces become U+2581 and each word keeps it in front; the prepend schemes differ
// on a segment that does not start the text (after an added token).
TEST_F(TokenizerTest, MetaspacePrependSchemes) {
  const std::string m = "\u2581";
  const V words = {m + "Hey", m + "you", "you", m};
  for (const auto& [scheme, after_token] : std::vector<std::pair<std::string, V>>{
           {"always", {m + "you"}}, {"first", {"you"}}, {"never", {"you"}}}) {
    Json j = bpe(letters("Hey you<x>" + m), words);
    j["added_tokens"] = Json::array({{{"id", 100},
                                      {"content", "<x>"},
                                      {"special", true},
                                      {"lstrip", false},
                                      {"rstrip", false},
                                      {"single_word", false},
                                      {"normalized", false}}});
    j["pre_tokenizer"] = {
        {"type", "Metaspace"}, {"replacement", m}, {"prepend_scheme", scheme}, {"split", true}};
    V want = scheme == "never" ? V{"Hey", m + "you"} : V{m + "Hey", m + "you"};
    if (scheme == "never") want = {"H", "e", "y", m + "you"};
    want.push_back("<x>");
    for (const auto& p : after_token) want.push_back(p);
    const auto t = load(j);
    EXPECT_EQ(pieces(t, "Hey you<x>you"), want) << scheme;
    // The Metaspace decoder: U+2581 back to spaces, the first token's dropped unless "never".
    Json d = j;
    d["decoder"] = {{"type", "Metaspace"}, {"replacement", m}, {"prepend_scheme", scheme}};
    const auto td = load(d);
    Encoder e(td);
    EXPECT_EQ(td->decode(e.encode("Hey you", SpecialTokens::add)), "Hey you") << scheme;
    const std::vector<int32_t> ids = {*td->token_to_id(m + "you"), *td->token_to_id(m + "Hey")};
    EXPECT_EQ(td->decode(ids), scheme == "never" ? " you Hey" : "you Hey") << scheme;
  }
}

TEST_F(TokenizerTest, DigitsAndSequence) {
  Json j = bpe(letters("abc12345x "), {"abc", "12345", "x", " abc"});
  j["pre_tokenizer"] = {{"type", "Digits"}, {"individual_digits", false}};
  EXPECT_EQ(pieces(load(j), "abc12345x"), (V{"abc", "12345", "x"}));
  j["pre_tokenizer"]["individual_digits"] = true;
  EXPECT_EQ(pieces(load(j), "abc12345x"), (V{"abc", "1", "2", "3", "4", "5", "x"}));
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "Split"},
                           {"pattern", {{"String", " "}}},
                           {"behavior", "MergedWithNext"},
                           {"invert", false}},
                          {{"type", "Digits"}, {"individual_digits", false}}}}};
  EXPECT_EQ(pieces(load(j), "x abc12345"), (V{"x", " abc", "12345"}));
}

TEST_F(TokenizerTest, NormalForms) {
  const std::string composed = "\u00e9", decomposed = "e\u0301";
  Json j = bpe({composed, "e", "\u0301", "f", "i", "\ufb01"}, {});
  j["normalizer"] = {{"type", "NFC"}};
  EXPECT_EQ(pieces(load(j), decomposed), (V{composed}));
  j["normalizer"] = {{"type", "NFD"}};
  EXPECT_EQ(pieces(load(j), composed), (V{"e", "\u0301"}));
  j["normalizer"] = {{"type", "NFKC"}};
  EXPECT_EQ(pieces(load(j), "\ufb01"), (V{"f", "i"}));
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers",
                      {{{"type", "Replace"}, {"pattern", {{"String", "f"}}}, {"content", "e"}},
                       {{"type", "Prepend"}, {"prepend", "i"}}}}};
  EXPECT_EQ(pieces(load(j), "f"), (V{"i", "e"}));
}

Json added(int id, const std::string& content, bool lstrip, bool rstrip, bool single_word) {
  return {{"id", id},           {"content", content}, {"special", false},
          {"lstrip", lstrip},   {"rstrip", rstrip},   {"single_word", single_word},
          {"normalized", false}};
}

TEST_F(TokenizerTest, AddedTokenOptions) {
  Json j = bpe(letters("a b<m>c"), {});
  j["added_tokens"] = Json::array({added(50, "<m>", true, false, false)});
  EXPECT_EQ(pieces(load(j), "a  <m> b"), (V{"a", "<m>", " ", "b"}));  // lstrip takes "  "
  j["added_tokens"] = Json::array({added(50, "<m>", false, true, false)});
  EXPECT_EQ(pieces(load(j), "a  <m> b"), (V{"a", " ", " ", "<m>", "b"}));  // rstrip takes " "
  j["added_tokens"] = Json::array({added(50, "ab", false, false, true)});
  // single_word: only where no word character touches it.
  EXPECT_EQ(pieces(load(j), "ab cab abc ab"),
            (V{"ab", " ", "c", "a", "b", " ", "a", "b", "c", " ", "ab"}));
  // The longest added token wins where several start at one place.
  j["added_tokens"] = Json::array(
      {added(50, "<m>", false, false, false), added(51, "<m><m>", false, false, false)});
  EXPECT_EQ(pieces(load(j), "<m><m><m>"), (V{"<m><m>", "<m>"}));
}

// An added token marked `normalized` is looked for in the normalized text (here after a
// Replace), one that is not in the raw text.
TEST_F(TokenizerTest, NormalizedAddedTokens) {
  Json j = bpe(letters("ab-c_"), {});
  j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", "-"}}}, {"content", "_"}};
  Json a = added(50, "b_c", false, false, false);
  a["normalized"] = true;
  j["added_tokens"] = Json::array({a, added(51, "a-", false, false, false)});
  EXPECT_EQ(pieces(load(j), "ab-ca-b"), (V{"a", "b_c", "a-", "b"}));
}

TEST_F(TokenizerTest, MergeOrder) {
  // Lowest rank first; equal ranks leftmost first.
  Json j = bpe({"a", "b", "c"}, {"bc", "ab", "aa"}, {"b c", "a b", "a a"}, false);
  EXPECT_EQ(pieces(load(j), "abc"), (V{"a", "bc"}));
  EXPECT_EQ(pieces(load(j), "aaa"), (V{"aa", "a"}));
  // Merges given as pairs (tokenizers >= 0.20), which may hold spaces.
  j["model"]["merges"] = Json::array({{"b", "c"}, {"a", "b"}, {"a", "a"}});
  EXPECT_EQ(pieces(load(j), "abc"), (V{"a", "bc"}));
}

// Characters outside the vocabulary without byte fallback: unk_token, a run of them one unk with
// fuse_unk.
TEST_F(TokenizerTest, UnknownCharacters) {
  Json j = bpe({"a", "<unk>"}, {});
  j["model"]["unk_token"] = "<unk>";
  EXPECT_EQ(pieces(load(j), "abba"), (V{"a", "<unk>", "<unk>", "a"}));
  j["model"]["fuse_unk"] = true;
  EXPECT_EQ(pieces(load(j), "abba"), (V{"a", "<unk>", "a"}));
  j["model"]["continuing_subword_prefix"] = "##";
  EXPECT_NE(error_of(j).find("continuing_subword_prefix"), std::string::npos) << error_of(j);
}

TEST_F(TokenizerTest, ByteFallbackAndDecoders) {
  Json j = bpe({"\u2581", "h", "i"}, {"\u2581h", "\u2581hi"}, {"\u2581 h", "\u2581h i"}, false);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    j["model"]["vocab"][name] = 10 + b;
  }
  j["model"]["byte_fallback"] = true;
  j["normalizer"] = {
      {"type", "Sequence"},
      {"normalizers",
       {{{"type", "Prepend"}, {"prepend", "\u2581"}},
        {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}}}};
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders",
                   {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                    {{"type", "ByteFallback"}},
                    {{"type", "Fuse"}},
                    {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  const auto t = load(j);
  EXPECT_EQ(pieces(t, "hi \u20ac"), (V{"\u2581hi", "\u2581", "<0xE2>", "<0x82>", "<0xAC>"}));
  Encoder e(t);
  EXPECT_EQ(t->decode(e.encode("hi \u20ac", SpecialTokens::add)), "hi \u20ac");
  // A lone continuation byte decodes to U+FFFD, one per byte.
  const std::vector<int32_t> bad = {10 + 0x82, 10 + 0x82};
  EXPECT_EQ(t->decode(bad), "\ufffd\ufffd");
  // Each id's bytes of the text: the prepended U+2581 covers none, a byte token its byte.
  std::vector<int32_t> ids;
  std::vector<ByteRange> off;
  e.encode_with_offsets(&ids, &off, "hi \u20ac", SpecialTokens::none);
  EXPECT_EQ(ids, e.encode("hi \u20ac", SpecialTokens::none));
  std::vector<std::pair<size_t, size_t>> got;
  for (const auto& o : off) got.emplace_back(o.begin, o.end);
  EXPECT_EQ(got, (std::vector<std::pair<size_t, size_t>>{{0, 2}, {2, 3}, {3, 4}, {4, 5}, {5, 6}}));
}

// GPT-2's byte-level alphabet: the encoder maps bytes, the decoder maps them back; a character
// split over two tokens comes out of the stream decoder only when complete.
TEST_F(TokenizerTest, ByteLevelAndStreaming) {
  V chars;
  for (int b = 0; b < 256; ++b) chars.push_back(byte_to_unicode(uint8_t(b)));
  Json j = bpe(chars, {}, {}, false);
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  j["decoder"] = {{"type", "ByteLevel"}};
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single",
       {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {256}}, {"tokens", {"<s>"}}}}}}};
  j["added_tokens"] = Json::array({{{"id", 256},
                                    {"content", "<s>"},
                                    {"special", true},
                                    {"lstrip", false},
                                    {"rstrip", false},
                                    {"single_word", false},
                                    {"normalized", false}}});
  const auto t = load(j, Json{{"eos_token", "<s>"}, {"add_bos_token", false}});
  Encoder e(t);
  const std::vector<int32_t> ids = e.encode("h\u00e9", SpecialTokens::add);
  EXPECT_EQ(ids, (std::vector<int32_t>{256, 'h', 0xC3, 0xA9}));
  EXPECT_EQ(e.encode("h\u00e9", SpecialTokens::none), (std::vector<int32_t>{'h', 0xC3, 0xA9}));
  // Offsets: the post-processor's BOS covers no byte, an added token in the text its match.
  std::vector<int32_t> with;
  std::vector<ByteRange> off;
  e.encode_with_offsets(&with, &off, "h\u00e9<s>a", SpecialTokens::add);
  EXPECT_EQ(with, e.encode("h\u00e9<s>a", SpecialTokens::add));
  std::vector<std::pair<size_t, size_t>> got;
  for (const auto& o : off) got.emplace_back(o.begin, o.end);
  EXPECT_EQ(got, (std::vector<std::pair<size_t, size_t>>{
                     {0, 0}, {0, 1}, {1, 2}, {2, 3}, {3, 6}, {6, 7}}));
  EXPECT_EQ(t->decode(ids, SkipSpecial::yes), "h\u00e9");
  EXPECT_EQ(t->decode(ids), "<s>h\u00e9");
  EXPECT_EQ(t->eos_id(), 256);
  EXPECT_EQ(t->config().add_bos_token, false);
  StreamDecoder s(*t);
  EXPECT_EQ(s.push('h'), "h");
  EXPECT_EQ(s.push(0xC3), "");
  EXPECT_EQ(s.push(0xA9), "\u00e9");
  EXPECT_EQ(s.push(0xE2), "");
  EXPECT_EQ(s.finish(), "\ufffd");
}

// A long text's pieces spread over threads give the ids of one thread: many pieces (a regex
// pre-tokenizer, the byte-level mapping done on cache misses) and one long piece cut where BPE
// cannot merge across (no pre-tokenizer, byte fallback).
TEST_F(TokenizerTest, PieceThreadsGiveTheSameIds) {
  std::string text;
  for (int k = 0; k < 3000; ++k) text += "hi h\u00e9 ih " + std::to_string(k * 7919 % 1000) + "\n";
  V chars;
  for (int b = 0; b < 256; ++b) chars.push_back(byte_to_unicode(uint8_t(b)));
  Json gpt2 = bpe(chars, {"hi", "\u0120h", "\u0120hi", "ih"},
                  {"h i", "\u0120 h", "\u0120h i", "i h"}, false);
  gpt2["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  Json spm = bpe({"\u2581", "h", "i"}, {"\u2581h", "\u2581hi", "hi"},
                 {"\u2581 h", "\u2581h i", "h i"}, false);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    spm["model"]["vocab"][name] = 10 + b;
  }
  spm["model"]["byte_fallback"] = true;
  spm["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}};
  for (const Json& j : {gpt2, spm}) {
    const auto t = load(j);
    Encoder one(t), three(t);
    three.set_piece_threads(3, 1);
    const auto want = one.encode(text, SpecialTokens::add);
    EXPECT_GT(want.size(), 10000u);
    EXPECT_EQ(three.encode(text, SpecialTokens::add), want);
  }
}

TEST_F(TokenizerTest, OneErrorLineNamingKeyAndFile) {
  Json j = bpe({"a"}, {});
  j["model"]["type"] = "WordPiece";
  EXPECT_NE(error_of(j).find("key 'model.type': 'WordPiece' is not supported"), std::string::npos)
      << error_of(j);
  j = bpe({"a"}, {});
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers", {{{"type", "Digits"}}, {{"type", "Whitespace"}}}}};
  EXPECT_NE(error_of(j).find("key 'pre_tokenizer.pretokenizers[1].type': 'Whitespace'"),
            std::string::npos)
      << error_of(j);
  j = bpe({"a"}, {});
  j["pre_tokenizer"] = {{"type", "Split"},
                        {"pattern", {{"Regex", "(a"}}},
                        {"behavior", "Isolated"},
                        {"invert", false}};
  EXPECT_NE(error_of(j).find("does not compile"), std::string::npos) << error_of(j);
  j = bpe({"a", "b"}, {}, {"a b"});
  EXPECT_NE(error_of(j).find("key 'model.merges[0]'"), std::string::npos) << error_of(j);
  j = bpe({"a"}, {});
  j["model"]["dropout"] = 0.1;
  EXPECT_NE(error_of(j).find("dropout"), std::string::npos) << error_of(j);
  j = bpe({"a"}, {});
  j["normalizer"] = {{"type", "BertNormalizer"}};
  EXPECT_NE(error_of(j).find("tokenizer.json"), std::string::npos) << error_of(j);
  // Text outside the vocabulary, no byte fallback and no unk_token: an error, not a dropped
  // character.
  const auto t = load(bpe({"a"}, {}));
  Encoder e(t);
  EXPECT_THROW(e.encode("ab", SpecialTokens::add), InputError);
  EXPECT_THROW(e.encode("a\xff", SpecialTokens::add), InputError);
}

using Spans = std::vector<std::pair<size_t, size_t>>;

// The bytes of `text` each id of encode_with_offsets came from (no special tokens), checking
// that the ids are encode's.
Spans offsets_of(const std::shared_ptr<const Tokenizer>& t, const std::string& text) {
  Encoder e(t);
  std::vector<int32_t> ids;
  std::vector<ByteRange> off;
  e.encode_with_offsets(&ids, &off, text, SpecialTokens::none);
  EXPECT_EQ(ids, e.encode(text, SpecialTokens::none)) << text;
  Spans got;
  for (const auto& o : off) got.emplace_back(o.begin, o.end);
  return got;
}

// Offsets through normalizers that change the text, as the Rust library's alignments give them
// (in bytes; its encode(...).offsets, checked by hand with the tokenizers npm package): a
// replaced match's new text has the range of the match's last character, stripped and removed
// bytes belong to no token, a character NFKC turns into several gives each of them its range.
// Where kktrain is finer by design: the whole of a sequence NFC composes into one character (the
// Rust library gives it the first character's range), a byte-fallback token its one byte, and
// what Prepend and Metaspace put in front no byte. These used to be an InputError ("do not
// spell the text they came from").
TEST_F(TokenizerTest, OffsetsThroughNormalizers) {
  Json j = bpe(letters("caf\u00e9 ok"), {});
  j["normalizer"] = {{"type", "NFC"}};
  EXPECT_EQ(offsets_of(load(j), "cafe\u0301 ok"),
            (Spans{{0, 1}, {1, 2}, {2, 3}, {3, 6}, {6, 7}, {7, 8}, {8, 9}}));
  // Text NFC leaves alone keeps its bytes one by one.
  EXPECT_EQ(offsets_of(load(j), "caf\u00e9"), (Spans{{0, 1}, {1, 2}, {2, 3}, {3, 5}}));
  j = bpe({"f", "i", "x", "1"}, {});
  j["normalizer"] = {{"type", "NFKC"}};
  EXPECT_EQ(offsets_of(load(j), "\ufb01x\u2460"), (Spans{{0, 3}, {0, 3}, {3, 4}, {4, 7}}));
  j = bpe({"c", "X", "d"}, {});
  j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", "ab"}}}, {"content", "X"}};
  EXPECT_EQ(offsets_of(load(j), "cabd"), (Spans{{0, 1}, {2, 3}, {3, 4}}));
  j = bpe({"a", "_", "b", " "}, {});
  j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "__"}};
  EXPECT_EQ(offsets_of(load(j), "a b"), (Spans{{0, 1}, {1, 2}, {1, 2}, {2, 3}}));
  j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"Regex", "\\s+"}}}, {"content", " "}};
  EXPECT_EQ(offsets_of(load(j), "a  \n b"), (Spans{{0, 1}, {4, 5}, {5, 6}}));
  j["normalizer"] = {{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}};
  EXPECT_EQ(offsets_of(load(j), "  ab  "), (Spans{{2, 3}, {3, 4}}));
  // Llama 2's normalizer with NFKC before it: the prepended U+2581 covers no byte, each space's
  // U+2581 the space, a byte-fallback token its byte.
  j = bpe({"\u2581", "h", "i", "f"}, {"\u2581h", "\u2581hi", "\u2581f"},
          {"\u2581 h", "\u2581h i", "\u2581 f"}, false);
  add_byte_fallback(&j, 100);
  j["normalizer"] = {
      {"type", "Sequence"},
      {"normalizers",
       {{{"type", "NFKC"}},
        {{"type", "Prepend"}, {"prepend", "\u2581"}},
        {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}}}};
  EXPECT_EQ(offsets_of(load(j), "\ufb01 hi \u20ac"),
            (Spans{{0, 3}, {0, 3}, {3, 6}, {6, 7}, {7, 8}, {8, 9}, {9, 10}}));
  EXPECT_EQ(offsets_of(load(j), "\u20ac"), (Spans{{0, 0}, {0, 1}, {1, 2}, {2, 3}}));
  // Metaspace without a decoder to undo it.
  j = bpe(letters("a b"), {"\u2581a", "\u2581b"});
  j["pre_tokenizer"] = {{"type", "Metaspace"},
                        {"replacement", "\u2581"},
                        {"prepend_scheme", "always"},
                        {"split", true}};
  EXPECT_EQ(offsets_of(load(j), "a b"), (Spans{{0, 1}, {1, 3}}));
  // An added token found in the normalized text: the original bytes of its match.
  j = bpe(letters("ab-c_"), {});
  j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", "-"}}}, {"content", "_"}};
  Json a = added(50, "b_c", false, false, false);
  a["normalized"] = true;
  j["added_tokens"] = Json::array({a, added(51, "a-", false, false, false)});
  EXPECT_EQ(offsets_of(load(j), "ab-ca-b"), (Spans{{0, 1}, {1, 4}, {4, 6}, {6, 7}}));
  // Unknown characters: an unk covers its character, a fused run of them.
  j = bpe({"a", "<unk>"}, {});
  j["model"]["unk_token"] = "<unk>";
  EXPECT_EQ(offsets_of(load(j), "ab\u00e9a"), (Spans{{0, 1}, {1, 2}, {2, 4}, {4, 5}}));
  j["model"]["fuse_unk"] = true;
  EXPECT_EQ(offsets_of(load(j), "ab\u00e9a"), (Spans{{0, 1}, {1, 4}, {4, 5}}));
}

TEST(Utf8, WellFormednessAndLossyConversion) {
  EXPECT_EQ(first_invalid_utf8("plain ascii text, longer than eight bytes"), -1);
  EXPECT_EQ(first_invalid_utf8("\u00e9\u20ac\U0001F600"), -1);
  EXPECT_EQ(first_invalid_utf8("\xC0\xAF"), 0);                     // overlong
  EXPECT_EQ(first_invalid_utf8("ab\xED\xA0\x80"), 2);               // a surrogate
  EXPECT_EQ(first_invalid_utf8("abcdefghij\xF4\x90\x80\x80"), 10);  // past U+10FFFF
  EXPECT_EQ(first_invalid_utf8("a\xE2\x82"), 1);                    // truncated
  // One U+FFFD for each maximal ill-formed subpart (Unicode 15, section 3.9).
  EXPECT_EQ(utf8_lossy("a\xE2\x82"
                       "b"),
            "a\ufffd"
            "b");
  EXPECT_EQ(utf8_lossy("\xC0\xAF"), "\ufffd\ufffd");
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x98"), "\ufffd");
  EXPECT_EQ(complete_utf8_prefix("a\xF0\x9F\x98"), 1u);
  EXPECT_EQ(complete_utf8_prefix("a\xFF"), 2u);
}

}  // namespace
}  // namespace kktrain::text
