// A hostile tokenizer.json / tokenizer_config.json (issue 47): loading takes bounded work and
// memory and every problem is one InputError naming the file and the key (or line) and the
// limit. JSON nested past kMaxJsonDepth (core/json_text.hpp), vocabulary and added-token ids
// past what the file's entries can number, post-processor ids that are no token, pipelines of
// too many steps, a directory or FIFO where a file should be, a regex that fails while matching.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>

#include "core/json_text.hpp"
#include "tests/unit/tokenizer_test_util.hpp"

namespace kktrain::text {
namespace {

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::string nested_arrays(size_t depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

TEST(JsonNesting, DepthIsBoundedAndPlaced) {
  EXPECT_EQ(json_nesting_error(nested_arrays(kMaxJsonDepth)), std::nullopt);
  EXPECT_EQ(json_nesting_error(nested_arrays(kMaxJsonDepth + 1)),
            "JSON nested deeper than 128 levels (arrays and objects) at column 129");
  EXPECT_EQ(json_nesting_error("{\"a\":\n [{\"b\": [[1]]}]}", 3),
            "JSON nested deeper than 3 levels (arrays and objects) at line 2, column 9");
  // Brackets inside strings, escaped quotes and backslashes included, are not nesting.
  const std::string in_string = "[\"" + std::string(1000, '[') + "\\\"\\\\" + "\"]";
  EXPECT_EQ(json_nesting_error(in_string), std::nullopt);
  EXPECT_NE(json_nesting_error("[\"\\\\\"" + std::string(200, '[')), std::nullopt);
  // 10^5 nested arrays (200 KB): refused before parsing, one line naming what and the limit.
  try {
    parse_json_bounded<Json>(nested_arrays(100000), "data.jsonl:3");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "data.jsonl:3: JSON nested deeper than 128 levels (arrays and objects) at column "
              "129");
  }
  EXPECT_THROW(parse_json_bounded<nlohmann::ordered_json>("{\"a\": [1,}", "x"), InputError);
  EXPECT_EQ(parse_json_bounded<nlohmann::ordered_json>("{\"b\": 1, \"a\": [[2]]}", "x").dump(),
            "{\"b\":1,\"a\":[[2]]}");
}

// tokenizer.json nested deeply: an extra key, and a normalizer Sequence 1000 deep (10^4 took
// 16.6 s to load, each level copying the key path).
TEST_F(TokenizerTest, DeepJsonIsRefusedNamingTheLine) {
  const std::string d = new_dir();
  std::string text = bpe({"a"}, {}).dump();
  text.insert(1, "\n\"extra\": " + nested_arrays(100000) + ",\n");
  std::ofstream(d + "/tokenizer.json") << text;
  std::string e = "no error";
  try {
    Tokenizer::load(d);
  } catch (const InputError& err) {
    e = err.what();
  }
  EXPECT_TRUE(has(e, "tokenizer.json")) << e;
  EXPECT_TRUE(has(e, "nested deeper than 128 levels (arrays and objects) at line 2")) << e;
  Json n = {{"type", "NFC"}};
  for (int k = 0; k < 1000; ++k) n = {{"type", "Sequence"}, {"normalizers", Json::array({n})}};
  Json j = bpe({"a"}, {});
  j["normalizer"] = n;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(has(error_of(j), "nested deeper than 128 levels")) << error_of(j);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  // tokenizer_config.json likewise.
  Json config = {{"eos_token", "a"}, {"extra", Json::array()}};
  for (int k = 0; k < 200; ++k) config["extra"] = Json::array({config["extra"]});
  EXPECT_TRUE(has(error_of(bpe({"a"}, {}), config), "tokenizer_config.json"))
      << error_of(bpe({"a"}, {}), config);
  EXPECT_TRUE(has(error_of(bpe({"a"}, {}), config), "nested deeper than 128"))
      << error_of(bpe({"a"}, {}), config);
}

// A pipeline of many steps (each encode runs every one): at most kMaxPipelineSteps a part.
TEST_F(TokenizerTest, PipelinesAreBounded) {
  Json j = bpe({"a"}, {});
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", Json::array()}};
  for (int k = 0; k < 5000; ++k) j["normalizer"]["normalizers"].push_back({{"type", "Strip"}});
  EXPECT_TRUE(has(error_of(j), "key 'normalizer.normalizers[256]': more than 256 steps"))
      << error_of(j);
  j = bpe({"a"}, {});
  Json p = {{"type", "Digits"}, {"individual_digits", false}};
  j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", Json::array()}};
  for (int k = 0; k < 300; ++k) j["pre_tokenizer"]["pretokenizers"].push_back(p);
  EXPECT_TRUE(has(error_of(j), "key 'pre_tokenizer.pretokenizers[256]': more than 256 steps"))
      << error_of(j);
  Json& list = j["pre_tokenizer"]["pretokenizers"];
  list.erase(list.begin() + 256, list.end());
  EXPECT_EQ(error_of(j), "no error");
}

// Replace steps that double a text, chained: every encode (or decode) would grow it 2^n times.
// What a text may grow to is bounded at load (1024x); real chains stay far below.
Json replace_step(const std::string& from, const std::string& to) {
  return {{"type", "Replace"}, {"pattern", {{"String", from}}}, {"content", to}};
}

TEST_F(TokenizerTest, GrowthIsBounded) {
  Json j = bpe({"a"}, {});
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", Json::array()}};
  j["decoder"] = {{"type", "Sequence"}, {"decoders", Json::array()}};
  for (int k = 0; k < 11; ++k) {
    j["normalizer"]["normalizers"].push_back(replace_step("a", "aa"));
    j["decoder"]["decoders"].push_back(replace_step("a", "aa"));
  }
  EXPECT_TRUE(has(error_of(j),
                  "key 'normalizer.normalizers[10]': the steps up to this one can "
                  "make a text more than 1024 times longer"))
      << error_of(j);
  j["normalizer"] = nullptr;
  EXPECT_TRUE(has(error_of(j), "key 'decoder.decoders[10]': the steps up to this one"))
      << error_of(j);
  j["decoder"]["decoders"] = Json::array(
      {{{"type", "Replace"}, {"pattern", {{"Regex", "a"}}}, {"content", std::string(1025, 'a')}}});
  EXPECT_TRUE(has(error_of(j), "key 'decoder.decoders[0]'")) << error_of(j);
  // Llama 2's normalizer after NFKC: 18 x 4 x 3.
  j = bpe({"\u2581", "a"}, {});
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers",
                      {{{"type", "NFKC"}},
                       {{"type", "Prepend"}, {"prepend", "\u2581"}},
                       replace_step(" ", "\u2581")}}};
  EXPECT_EQ(error_of(j), "no error");
}

// Added tokens are matched through a byte trie (about 50 bytes a byte): one of 60 MB took 34.6 s
// and 3.3 GB to load. At most 4096 bytes a token, 4 MiB in all as matched (normalized).
TEST_F(TokenizerTest, AddedTokensAreBounded) {
  Json j = bpe({"a", "b", "c"}, {});
  j["added_tokens"] = Json::array({{{"id", 3}, {"content", std::string(5000, 'x')}}});
  EXPECT_TRUE(has(error_of(j),
                  "key 'added_tokens[0].content': an added token of 5000 bytes "
                  "(kktrain reads added tokens of at most 4096 bytes)"))
      << error_of(j);
  j["normalizer"] = replace_step("a", std::string(512, 'a'));
  j["added_tokens"] = Json::array();
  for (const char* first : {"a", "b", "c"}) {
    j["added_tokens"].push_back({{"id", 3 + j["added_tokens"].size()},
                                 {"content", first + std::string(4000, 'a')},
                                 {"normalized", true}});
  }
  EXPECT_TRUE(has(error_of(j), "key 'added_tokens': the added tokens come to more than 4 MiB"))
      << error_of(j);
  Json& tokens = j["added_tokens"];
  tokens.erase(tokens.begin() + 1, tokens.end());
  tokens[0]["content"] = "a";
  EXPECT_EQ(error_of(j), "no error");
}

// Ids far past the number of tokens the file holds (a vocabulary's ids are dense but for a few
// gaps: below 2 x (vocabulary entries + added tokens) + 1024): 2^28 in a 6 KB file took 26 s
// and 4.5 GB, 2^31-1 gave a generic out-of-memory line.
TEST_F(TokenizerTest, IdsAreBoundedByTheFile) {
  auto load_error = [this](const Json& j) {
    try {
      return error_of(j);
    } catch (const std::exception& other) {
      return std::string("not an InputError: ") + other.what();
    }
  };
  for (const int64_t id : {int64_t(1) << 24, int64_t(INT32_MAX), int64_t(1030)}) {
    Json j = bpe({"a", "b", "c"}, {});
    j["model"]["vocab"]["c"] = id;
    const std::string e = load_error(j);
    EXPECT_TRUE(has(e, "key 'model.vocab.c': id " + std::to_string(id) +
                           " is out of range for a file of 3 vocabulary entries and 0 added "
                           "tokens (ids below 2 x 3 + 1024 = 1030)"))
        << e;
  }
  Json j = bpe({"a", "b", "c"}, {});
  j["model"]["vocab"]["c"] = 1029;  // gaps, as tiktoken-derived files have before specials
  EXPECT_EQ(error_of(j), "no error");
  j = bpe({"a", "b", "c"}, {});
  j["added_tokens"] = Json::array({{{"id", 2147483647}, {"content", "<x>"}, {"special", true}}});
  const std::string e = load_error(j);
  EXPECT_TRUE(has(e,
                  "key 'added_tokens[0].id': id 2147483647 is out of range for a file of 3 "
                  "vocabulary entries and 1 added tokens (ids below 2 x 4 + 1024 = 1032)"))
      << e;
  // The ids a real file has: added tokens after the vocabulary, or among it (Llama 2's <s>).
  j["added_tokens"][0]["id"] = 3;
  EXPECT_EQ(error_of(j), "no error");
  j["added_tokens"][0]["id"] = 1;
  j["added_tokens"][0]["content"] = "b";
  EXPECT_EQ(error_of(j), "no error");
}

// A TemplateProcessing that adds id `id` as its BOS.
Json with_bos(Json j, const Json& id) {
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single",
       {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {id}}, {"tokens", {"<s>"}}}}}}};
  return j;
}

// Every id encode can emit is a token: the post-processor's were never checked (70000 and -5
// ended in "internal error: token id 70000 does not fit a uint16 shard", 60000 was written to
// shards, 2^40 became 0).
TEST_F(TokenizerTest, PostProcessorIdsAreTokens) {
  V chars;
  for (int c = 0; c < 306; ++c) chars.push_back(std::string(1, 'a') + std::to_string(c));
  const Json base = bpe(chars, {});
  for (const Json& id : {Json(70000), Json(-5), Json(60000), Json(int64_t(1) << 40),
                         Json(uint64_t(-1)), Json(306)}) {
    const std::string e = error_of(with_bos(base, id));
    EXPECT_TRUE(has(e, "key 'post_processor.special_tokens.<s>.ids[0]': id " + id.dump() +
                           " is not a token of the vocabulary (ids 0..305)"))
        << e;
  }
  EXPECT_EQ(error_of(with_bos(base, 305)), "no error");
  // An id inside the range that no token has (a gap the added tokens left).
  Json gap = bpe({"a", "b"}, {});
  gap["model"]["vocab"]["b"] = 2;
  gap["added_tokens"] = Json::array({{{"id", 0}, {"content", "a"}, {"special", false}}});
  EXPECT_EQ(error_of(gap), "no error");
  EXPECT_TRUE(has(error_of(with_bos(gap, 1)), "id 1 is not a token of the vocabulary"))
      << error_of(with_bos(gap, 1));
  // Inside a Sequence of post-processors, with the key path.
  Json seq = with_bos(base, 4000);
  seq["post_processor"] = {{"type", "Sequence"},
                           {"processors", {{{"type", "ByteLevel"}}, seq["post_processor"]}}};
  EXPECT_TRUE(has(error_of(seq), "key 'post_processor.processors[1].special_tokens.<s>.ids[0]'"))
      << error_of(seq);
}

// A directory or a FIFO where tokenizer.json or tokenizer_config.json should be: "internal
// error: basic_filebuf::underflow", or a hang.
TEST_F(TokenizerTest, FilesThatAreNotRegularFiles) {
  const std::string text = bpe({"a"}, {}).dump();
  std::string d = new_dir();
  std::filesystem::create_directory(d + "/tokenizer.json");
  auto error = [](const std::string& path) {
    try {
      Tokenizer::load(path);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_TRUE(has(error(d), "tokenizer.json' is a directory, not a file")) << error(d);
  d = new_dir();
  std::ofstream(d + "/tokenizer.json") << text;
  std::filesystem::create_directory(d + "/tokenizer_config.json");
  EXPECT_TRUE(has(error(d), "tokenizer_config.json' is a directory, not a file")) << error(d);
  d = new_dir();
  std::ofstream(d + "/tokenizer.json") << text;
  ASSERT_EQ(::mkfifo((d + "/tokenizer_config.json").c_str(), 0600), 0);
  EXPECT_TRUE(has(error(d), "tokenizer_config.json' is a FIFO (named pipe), not a regular file"))
      << error(d);
  d = new_dir();
  ASSERT_EQ(::mkfifo((d + "/tokenizer.json").c_str(), 0600), 0);
  EXPECT_TRUE(has(error(d), "tokenizer.json' is a FIFO (named pipe), not a regular file"))
      << error(d);
  EXPECT_TRUE(has(error(d + "/tokenizer.json"), "is a FIFO")) << error(d + "/tokenizer.json");
}

// A regular expression that fails while matching (PCRE2's match limit: catastrophic
// backtracking) names the tokenizer key and where in the text; one that does not compile names
// the key.
TEST_F(TokenizerTest, RegexFailuresNameTheKey) {
  Json j = bpe(letters("ab"), {"aa"});
  j["model"]["unk_token"] = "a";
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "Digits"}, {"individual_digits", false}},
                          {{"type", "Split"},
                           {"pattern", {{"Regex", "(a|aa)+$"}}},
                           {"behavior", "Isolated"},
                           {"invert", false}}}}};
  const auto t = load(j);
  Encoder e(t);
  try {
    e.encode("b" + std::string(200, 'a') + "c", SpecialTokens::none);
    FAIL() << "no error";
  } catch (const InputError& err) {
    const std::string what = err.what();
    EXPECT_TRUE(has(what, "key 'pre_tokenizer.pretokenizers[1].pattern.Regex'")) << what;
    EXPECT_TRUE(has(what, "tokenizer.json")) << what;
    EXPECT_TRUE(has(what, "failed on a text of 202 bytes starting \"baaaaaaaa")) << what;
    EXPECT_TRUE(has(what, "match limit")) << what;
  }
  j["pre_tokenizer"]["pretokenizers"][1]["pattern"]["Regex"] = "(a";
  EXPECT_TRUE(has(error_of(j),
                  "key 'pre_tokenizer.pretokenizers[1].pattern.Regex': regular "
                  "expression '(a' does not compile"))
      << error_of(j);
}

}  // namespace
}  // namespace kktrain::text
