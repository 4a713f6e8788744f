// Behaviours of the tokenizer that users depend on, pinned without the npm reference tests
// (which skip when the registry cannot be reached). The expected pieces and texts are what
// Hugging Face's `tokenizers` 0.23 (Rust, through its Node binding) gives on the same
// tokenizer.json, checked when these tests were written:
// - Metaspace with prepend_scheme "first" after a Split or Digits in a Sequence: only the piece
//   that starts the text gets U+2581;
// - regexes in Unicode mode as Oniguruma matches them: \w and \d over non-ASCII letters and
//   digits, \s and \S as White_Space (not U+180E), \h as a hexadecimal digit;
// - the stream decoder with byte fallback: a character split over <0xXX> tokens comes out once,
//   whole, never as U+FFFD;
// - the ByteLevel decoder on added tokens: a token wholly in the byte alphabet is mapped to its
//   bytes, any other (a space, a character outside the alphabet) stays as it is;
// - BPE of a long piece cut where no merge can join (the encoder's cut) equals BPE of the whole
//   piece, on random strings (the cut once lost its merge condition: 4-5x the ids);
// - the piece cache keeps only pieces whose ids fit an entry.
#include <gtest/gtest.h>

#include <random>

#include "tests/unit/tokenizer_test_util.hpp"
#include "text/piece_cache.hpp"
#include "text/tokenizer_impl.hpp"

namespace kktrain::text {
namespace {

const std::string kMeta = "\u2581";

Json metaspace_first() {
  return {
      {"type", "Metaspace"}, {"replacement", kMeta}, {"prepend_scheme", "first"}, {"split", true}};
}

TEST_F(TokenizerTest, MetaspaceFirstInsideASequence) {
  std::string text = "Hey you 12 ab";
  Json j = bpe(letters(text + kMeta), {kMeta + "Hey", kMeta + "you", "12", kMeta + "ab", "Hey"});
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", false}}, metaspace_first()}}};
  EXPECT_EQ(pieces(load(j), text), (V{kMeta + "Hey", kMeta + "you", kMeta, "12", kMeta + "ab"}));
  text = "ab-cd ef";
  j = bpe(letters(text + kMeta), {kMeta + "ab", "cd", kMeta + "ef", "ab", "-", kMeta + "cd"});
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "Split"},
                           {"pattern", {{"String", "-"}}},
                           {"behavior", "Isolated"},
                           {"invert", false}},
                          metaspace_first()}}};
  const auto t = load(j);
  EXPECT_EQ(pieces(t, text), (V{kMeta + "ab", "-", "cd", kMeta + "ef"}));
  // The first piece is the delimiter: it gets U+2581, the word after it does not.
  EXPECT_EQ(pieces(t, "-ab"), (V{kMeta, "-", "ab"}));
}

// A Split on `pattern` (Isolated) with every expected piece in the vocabulary.
Json split_on(const std::string& pattern, const std::string& text, const V& words,
              const char* behavior = "Isolated") {
  Json j = bpe(letters(text), words);
  j["pre_tokenizer"] = {{"type", "Split"},
                        {"pattern", {{"Regex", pattern}}},
                        {"behavior", behavior},
                        {"invert", false}};
  return j;
}

TEST_F(TokenizerTest, RegexesMatchUnicodeAsOniguruma) {
  std::string text = "h\u00e9llo w\u00f6rld \u0663\u0664\u0665 x_1 \u03a9\u03bc\u03ad\u03b3\u03b1";
  V words = {"h\u00e9llo", "w\u00f6rld", "\u0663\u0664\u0665", "x_1",
             "\u03a9\u03bc\u03ad\u03b3\u03b1"};
  EXPECT_EQ(pieces(load(split_on("\\w+", text, words)), text),
            (V{words[0], " ", words[1], " ", words[2], " ", words[3], " ", words[4]}));
  // \d: Arabic-Indic (U+0663) and Extended Arabic-Indic (U+06F5) digits are digits.
  text = "a\u06634b\u0664\u06f5x";
  EXPECT_EQ(pieces(load(split_on("\\d", text, {})), text),
            (V{"a", "\u0663", "4", "b", "\u0664", "\u06f5", "x"}));
  // \s is White_Space: no-break space, ideographic space, line separator, NEL and tab are, the
  // Mongolian vowel separator U+180E is not (PCRE2's own \s takes it).
  text = "a\u180eb\u00a0c\u3000d\u2028e\u0085f\tg";
  EXPECT_EQ(pieces(load(split_on("\\s+", text, {"a\u180eb"}, "Removed")), text),
            (V{"a\u180eb", "c", "d", "e", "f", "g"}));
  EXPECT_EQ(pieces(load(split_on("\\S+", text, {}, "Removed")), text),
            (V{"\u00a0", "\u3000", "\u2028", "\u0085", "\t"}));
  // \h is a hexadecimal digit (Oniguruma's Ruby syntax), not horizontal space.
  text = "xy12afZ9 ";
  EXPECT_EQ(pieces(load(split_on("\\h+", text, {"12af", "xy", "Z9 "}, "Isolated")), text),
            (V{"xy", "12af", "Z", "9", " "}));
}

// A byte-fallback tokenizer (Llama 2's decoder: ByteFallback, Fuse) over "hi".
Json byte_fallback_tokenizer() {
  Json j = bpe({"h", "i"}, {});
  add_byte_fallback(&j, 10);
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders", {{{"type", "ByteFallback"}}, {{"type", "Fuse"}}}}};
  return j;
}

TEST_F(TokenizerTest, StreamDecoderJoinsFallbackBytes) {
  const auto t = load(byte_fallback_tokenizer());
  Encoder e(t);
  // h, a 3-byte and a 4-byte character back to back, i, another 3-byte character.
  const std::string text = "h\u20ac\U0001F600i\u6f22";
  const std::vector<int32_t> ids = e.encode(text, SpecialTokens::none);
  ASSERT_EQ(ids.size(), 12u);
  StreamDecoder s(*t);
  std::vector<std::string> got;
  for (const int32_t id : ids) got.push_back(s.push(id));
  got.push_back(s.finish());
  EXPECT_EQ(got, (V{"h", "", "", "\u20ac", "", "", "", "\U0001F600", "i", "", "", "\u6f22", ""}));
  // A character cut short by the end: held while it may complete, then one U+FFFD per byte (the
  // ByteFallback decoder's rule).
  StreamDecoder cut(*t);
  EXPECT_EQ(cut.push(ids[0]), "h");
  EXPECT_EQ(cut.push(ids[4]), "");
  EXPECT_EQ(cut.push(ids[5]), "");
  EXPECT_EQ(cut.finish(), "\ufffd\ufffd");
}

TEST_F(TokenizerTest, ByteLevelDecodesAddedTokensOutsideTheAlphabet) {
  V chars;
  for (int b = 0; b < 256; ++b) chars.push_back(byte_to_unicode(uint8_t(b)));
  Json j = bpe(chars, {}, {}, false);
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  j["decoder"] = {{"type", "ByteLevel"}};
  const V added = {"<|im end|>", "h\u00e9llo w\u00f6rld", "\u20ac",      " x", "\u00c3\u0124",
                   "\u0120hi",   "\u00e9\u20ac",          "\u00c3\u00a9"};
  j["added_tokens"] = Json::array();
  for (size_t k = 0; k < added.size(); ++k)
    j["added_tokens"].push_back({{"id", 256 + k}, {"content", added[k]}, {"special", false}});
  const auto t = load(j);
  // Wholly in the alphabet: the bytes it stands for ("ÃĤ" = C3 82, "Ġhi" = " hi", "Ã©" = C3 A9).
  // Otherwise the token's own text.
  const V want = {"<|im end|>", "h\u00e9llo w\u00f6rld", "\u20ac", " x", "\u00c2",
                  " hi",        "\u00e9\u20ac",          "\u00e9"};
  for (size_t k = 0; k < added.size(); ++k)
    EXPECT_EQ(t->decode({'h', int32_t(256 + k), 'i'}), "h" + want[k] + "i") << added[k];
  // Bytes join across tokens before UTF-8 is checked: C3, " x", A9 is two broken characters.
  EXPECT_EQ(t->decode({256, 257, 258, 0xC3, 259, 0xA9}),
            "<|im end|>h\u00e9llo w\u00f6rld\u20ac\ufffd x\ufffd");
}

// BPE over an alphabet with merges at several levels, one character by byte fallback only (ß,
// whose first byte token merges with a letter before it) and no pre-tokenizer: a segment is one
// piece, cut by the encoder where no merge can join.
Json merging_tokenizer() {
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"a", "b"}, {"ab", "c"},     {"c", "d"},      {"b", "b"},     {"bb", "a"},
      {" ", "a"}, {"\u00e9", "a"}, {"d", "\u00e9"}, {"ab", "cd"},   {"\u6f22", "\u6f22"},
      {"a", "a"}, {"aa", "a"},     {"abc", "d"},    {"a", "<0xC3>"}};
  V words;
  for (const auto& [a, b] : merges) words.push_back(a + b);
  Json j = bpe({"a", "b", "c", "d", " ", "\u00e9", "\u6f22"}, words, {}, false);
  j["model"]["merges"] = Json::array();
  for (const auto& [a, b] : merges) j["model"]["merges"].push_back({a, b});
  add_byte_fallback(&j, int(j["model"]["vocab"].size()));
  return j;
}

std::string random_text(std::mt19937* rng, size_t chars) {
  static const V alphabet = {"a", "b", "c", "d", " ", "\u00e9", "\u6f22", "\u00df"};
  // Skewed: runs of a and b merge most.
  std::discrete_distribution<int> pick({30, 25, 12, 10, 8, 6, 5, 4});
  std::string s;
  for (size_t k = 0; k < chars; ++k) s += alphabet[size_t(pick(*rng))];
  return s;
}

TEST_F(TokenizerTest, CutPiecesGiveTheIdsOfTheWholePiece) {
  const auto t = load(merging_tokenizer());
  std::mt19937 rng(47);
  Encoder e(t), threads(t);
  threads.set_piece_threads(3, 1);
  size_t cut_ids = 0, chars = 0;
  for (int k = 0; k < 60; ++k) {
    const std::string text = random_text(&rng, 100 + size_t(k) * 40);
    std::vector<int32_t> whole;
    bpe_piece(&whole, t->impl(), text);
    const auto ids = e.encode(text, SpecialTokens::none);
    ASSERT_EQ(ids, whole) << "text " << k << ": '" << text << "'";
    ASSERT_EQ(threads.encode(text, SpecialTokens::none), whole) << "text " << k;
    cut_ids += ids.size();
    chars += text.size();
  }
  EXPECT_LT(cut_ids * 4, chars * 3);  // the merges do happen (0.68 ids a byte; 0.87 without)
}

TEST(PieceCache, KeepsOnlyPiecesWhoseIdsFitAnEntry) {
  PieceCache cache(4);
  const std::vector<int32_t> ids = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  const std::string piece = "abcdefghij";
  const uint64_t h = PieceCache::hash(piece);
  std::vector<int32_t> out;
  cache.put(piece, h, ids.data(), PieceCache::kIds + 1);
  EXPECT_FALSE(cache.find(&out, piece, h));
  cache.put(piece, h, ids.data(), PieceCache::kIds);
  ASSERT_TRUE(cache.find(&out, piece, h));
  EXPECT_EQ(out, std::vector<int32_t>(ids.begin(), ids.begin() + PieceCache::kIds));
  const std::string long_piece(PieceCache::kKeyBytes + 1, 'a');
  cache.put(long_piece, PieceCache::hash(long_piece), ids.data(), 1);
  EXPECT_FALSE(cache.find(&out, long_piece, PieceCache::hash(long_piece)));
}

// Through the encoder: short pieces of more ids than an entry holds (no merges: one id a
// character), encoded twice, give their ids both times.
TEST_F(TokenizerTest, WarmPieceCacheGivesColdIds) {
  const std::string text = "abcdefghijklmnopq";
  Json j = bpe(letters(text), {}, {}, false);
  j["pre_tokenizer"] = {{"type", "Split"},
                        {"pattern", {{"String", " "}}},
                        {"behavior", "Isolated"},
                        {"invert", false}};
  j["model"]["vocab"][" "] = int(text.size());
  const auto t = load(j);
  std::mt19937 rng(7);
  std::string words;
  std::vector<int32_t> want;  // one id a character: its place in `text`
  for (int k = 0; k < 5000; ++k) {
    for (size_t n = 8 + rng() % 6; n-- > 0;) {
      const size_t c = rng() % text.size();
      words += text[c];
      want.push_back(int32_t(c));
    }
    words += ' ';
    want.push_back(int32_t(text.size()));
  }
  Encoder warm(t);
  EXPECT_EQ(warm.encode(words, SpecialTokens::none), want);
  EXPECT_EQ(warm.encode(words, SpecialTokens::none), want);
}

}  // namespace
}  // namespace kktrain::text
