// Multiple-choice requests and metrics (apps/eval/multiple_choice.hpp): the harness's
// context/continuation split (trailing whitespace moved, a token merged across the boundary
// left to the context, an empty context as the prefix token), acc / acc_norm / acc_bytes with
// their standard errors, and a task file's refusals naming FILE:LINE.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "apps/eval/multiple_choice.hpp"
#include "core/errors.hpp"
#include "tests/unit/scratch_dir.hpp"

namespace kktrain {
namespace {

// One token per byte, except "ab", which is one token (id 1000).
RequestEncoding toy_encoding() {
  RequestEncoding e;
  e.encode = [](const std::string& s) {
    std::vector<int32_t> ids;
    for (std::size_t i = 0; i < s.size(); ++i) {
      if (s.compare(i, 2, "ab") == 0) {
        ids.push_back(1000);
        ++i;
      } else {
        ids.push_back(static_cast<unsigned char>(s[i]));
      }
    }
    return ids;
  };
  e.prefix = 7;
  return e;
}

std::vector<int32_t> bytes(const std::string& s) {
  return std::vector<int32_t>(s.begin(), s.end());
}

TEST(MultipleChoice, TrailingWhitespaceMovesOntoTheContinuation) {
  const ChoiceRequest r = choice_request(toy_encoding(), "Q: x? \t ", " four");
  EXPECT_EQ(r.context, bytes("Q: x?"));
  EXPECT_EQ(r.continuation, bytes(" \t  four"));
}

TEST(MultipleChoice, ATokenAcrossTheBoundaryStaysWithTheContext) {
  // encode("xabc") = [x, ab, c]; encode("xa") = [x, a]: the continuation is whole[2:] = [c].
  const ChoiceRequest r = choice_request(toy_encoding(), "xa", "bc");
  EXPECT_EQ(r.context, bytes("xa"));
  EXPECT_EQ(r.continuation, bytes("c"));
}

TEST(MultipleChoice, AnEmptyContextIsThePrefixToken) {
  const ChoiceRequest r = choice_request(toy_encoding(), "", " yes");
  EXPECT_EQ(r.context, std::vector<int32_t>{7});
  EXPECT_EQ(r.continuation, bytes(" yes"));
  // A continuation that starts with the prefix token: that token is the context.
  const ChoiceRequest p = choice_request(toy_encoding(), "", "\x07yes");
  EXPECT_EQ(p.context, std::vector<int32_t>{7});
  EXPECT_EQ(p.continuation, bytes("yes"));
  RequestEncoding none = toy_encoding();
  none.prefix.reset();
  EXPECT_THROW(choice_request(none, "", "x"), InputError);
}

TEST(MultipleChoice, MetricsNormalizeByCharactersAndBytes) {
  ChoiceItem a;
  a.choices = {"abcd", "\xC3\xA9\xC3\xA9\xC3\xA9"};  // 4 chars / 4 bytes; 3 chars / 6 bytes
  a.gold = 0;
  // per char: -1.0 vs -1.1 (gold wins); per byte: -1.0 vs -0.55 (gold loses); raw: -4 < -3.3
  const std::vector<std::vector<double>> s1 = {{-4.0, -3.3}};
  ChoiceMetrics m = choice_metrics({a}, s1);
  EXPECT_EQ(m.acc.value, 0.0);
  EXPECT_EQ(m.acc_norm.value, 1.0);
  EXPECT_EQ(m.acc_bytes.value, 0.0);
  // Equal scores: the first maximum, as numpy's argmax.
  ChoiceItem b;
  b.choices = {"x", "y"};
  b.gold = 1;
  m = choice_metrics({a, b, b, b}, {{-4.0, -3.3}, {-1.0, -1.0}, {-2.0, -1.0}, {-2.0, -1.0}});
  EXPECT_DOUBLE_EQ(m.acc.value, 0.5);
  // values 0, 0, 1, 1: sample sd sqrt(1/3), / sqrt(4)
  EXPECT_DOUBLE_EQ(m.acc.stderr_, std::sqrt(1.0 / 3.0) / 2.0);
  EXPECT_EQ(utf8_chars("\xC3\xA9t\xE2\x82\xAC"), 3);
  EXPECT_EQ(mean_stderr({1.0}), 0.0);
}

TEST(MultipleChoice, TaskFileRefusalsNameTheLine) {
  ScratchDir dir("kktrain_mc_");
  const std::string good = R"({"context": "c", "choices": ["a", "b"], "gold": 1})";
  const std::pair<std::string, std::string> cases[] = {
      {"not json", "not valid JSON"},
      {R"({"context": "c", "choices": ["a"], "gold": 1})", "\"gold\" is 1"},
      {R"({"context": "c", "choices": [], "gold": 0})", "\"choices\" must be"},
      {R"({"context": 3, "choices": ["a"], "gold": 0})", "\"context\" must be"},
      {R"({"context": "c", "choices": ["a"], "gold": 0, "answer": 1})", "unknown field"},
      {R"({"context": "c", "choices": ["a", 2], "gold": 0})", "list of strings"},
  };
  for (const auto& [line, want] : cases) {
    const std::string path = dir.path("t.jsonl");
    std::ofstream(path) << good << "\n\n" << line << "\n";
    try {
      read_choice_items(path);
      ADD_FAILURE() << "accepted: " << line;
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(path + ":3: "), std::string::npos) << what;
      EXPECT_NE(what.find(want), std::string::npos) << what;
    }
  }
  const std::string path = dir.path("ok.jsonl");
  std::ofstream(path) << good << "\n"
                      << R"({"context": "d", "choices": ["e"], "gold": 0, "target_delimiter": ""})"
                      << "\n";
  const std::vector<ChoiceItem> items = read_choice_items(path);
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].delimiter, " ");
  EXPECT_EQ(items[1].delimiter, "");
  EXPECT_EQ(items[1].line, 2);
}

}  // namespace
}  // namespace kktrain
