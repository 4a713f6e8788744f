// ExampleRenderer (apps/dataprep/example_renderer.hpp) called from several threads at once on one
// renderer: the same examples as one thread renders (tests/cli/test_chat_data.py checks what they
// are); an example of no tokens skipped or refused as data.truncation says. ContentHash
// (apps/dataprep/cache_manifest.hpp): XXH64's values, the same for a stream fed in any pieces.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "apps/dataprep/cache_manifest.hpp"
#include "apps/dataprep/example_renderer.hpp"
#include "core/errors.hpp"
#include "tests/unit/scratch_dir.hpp"

namespace kktrain {
namespace {

using Json = nlohmann::json;

// A tokenizer of one token per printable ASCII character and newline, with the ChatML special
// tokens, and a ChatML template.
std::string chatml_tokenizer(const ScratchDir& dir) {
  Json vocab = Json::object();
  int id = 0;
  vocab["\n"] = id++;
  for (char c = ' '; c <= '~'; ++c) vocab[std::string(1, c)] = id++;
  Json added = Json::array();
  for (const char* t : {"<|im_start|>", "<|im_end|>"}) {
    added.push_back({{"id", id++},
                     {"content", t},
                     {"special", true},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"single_word", false},
                     {"normalized", false}});
  }
  const Json tok = {{"version", "1.0"},
                    {"added_tokens", added},
                    {"normalizer", nullptr},
                    {"pre_tokenizer", nullptr},
                    {"post_processor", nullptr},
                    {"decoder", nullptr},
                    {"model",
                     {{"type", "BPE"},
                      {"vocab", vocab},
                      {"merges", Json::array()},
                      {"ignore_merges", true},
                      {"unk_token", nullptr}}}};
  std::ofstream(dir.path("tokenizer.json")) << tok.dump();
  const Json config = {{"eos_token", "<|im_end|>"},
                       {"chat_template",
                        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
                        "<|im_end|>\n{% endfor %}"}};
  std::ofstream(dir.path("tokenizer_config.json")) << config.dump();
  return dir.path("tokenizer.json");
}

TEST(ExampleRenderer, ThreadsRenderAsOneThreadDoes) {
  ScratchDir dir("kktrain_chat_");
  Config cfg;
  cfg.model.tokenizer = chatml_tokenizer(dir);
  cfg.model.vocab_size = 128;
  cfg.data.format = DataFormat::chat;
  cfg.data.loss_on = LossOn::assistant;
  cfg.data.seq_len = 60;
  const ExampleRenderer r = ExampleRenderer::open(cfg, run_text(cfg));
  std::vector<std::string> lines;
  for (int i = 0; i < 64; ++i) {
    const std::string answer(size_t(i), char('a' + i % 26));
    lines.push_back(Json{{"messages",
                          {{{"role", "user"}, {"content", "q" + std::to_string(i)}},
                           {{"role", "assistant"}, {"content", answer}}}}}
                        .dump());
  }
  std::vector<RenderedExample> want;
  for (size_t i = 0; i < lines.size(); ++i) want.push_back(r.render(lines[i], "f", int64_t(i)));
  EXPECT_EQ(want[3].ids.size(), want[3].loss_mask.size());
  EXPECT_EQ(std::count(want[3].loss_mask.begin(), want[3].loss_mask.end(), 1), 3 + 1);
  EXPECT_EQ(want.back().fate, ExampleFate::truncated);
  std::vector<std::vector<RenderedExample>> got(4, std::vector<RenderedExample>(lines.size()));
  std::vector<std::thread> threads;
  for (size_t t = 0; t < got.size(); ++t) {
    threads.emplace_back([&, t] {
      for (size_t k = 0; k < lines.size(); ++k) {
        const size_t i = (k * 7 + t * 13) % lines.size();
        got[t][i] = r.render(lines[i], "f", int64_t(i));
      }
    });
  }
  for (auto& th : threads) th.join();
  for (const auto& g : got) {
    for (size_t i = 0; i < lines.size(); ++i) {
      EXPECT_EQ(g[i].text, want[i].text);
      EXPECT_EQ(g[i].ids, want[i].ids);
      EXPECT_EQ(g[i].loss_mask, want[i].loss_mask);
    }
  }
}

// A template that prints nothing for a conversation opening with NOTHING: that example is of no
// tokens (it crashed the renderer: loss_mask[0] of an empty vector).
TEST(ExampleRenderer, AnExampleOfNoTokensIsSkippedOrRefused) {
  ScratchDir dir("kktrain_chat_");
  Config cfg;
  cfg.model.tokenizer = chatml_tokenizer(dir);
  cfg.model.vocab_size = 128;
  cfg.data.format = DataFormat::chat;
  cfg.data.seq_len = 60;
  std::ofstream(dir.path("t.jinja"))
      << "{% if messages[0].content != 'NOTHING' %}{% for m in messages %}<|im_start|>{{ m.role }}"
         "\n{{ m.content }}<|im_end|>\n{% endfor %}{% endif %}";
  cfg.data.chat_template = dir.path("t.jinja");
  const std::string line =
      R"({"messages": [{"role": "user", "content": "NOTHING"}, {"role": "assistant", "content": ""}]})";
  for (const LossOn loss_on : {LossOn::all, LossOn::assistant}) {
    cfg.data.loss_on = loss_on;
    cfg.data.truncation = Truncation::truncate;
    const ExampleRenderer r = ExampleRenderer::open(cfg, run_text(cfg));
    const RenderedExample ex = r.render(line, "f", 3);
    EXPECT_EQ(ex.fate, ExampleFate::empty) << loss_on_name(loss_on);
    EXPECT_TRUE(ex.ids.empty() && ex.loss_mask.empty());
    EXPECT_EQ(r.empty(), 1);
    cfg.data.truncation = Truncation::error;
    const ExampleRenderer strict = ExampleRenderer::open(cfg, run_text(cfg));
    try {
      strict.render(line, "f", 3);
      ADD_FAILURE() << "no error";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("f:3: the example renders to no tokens"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(ContentHash, IsXxh64AndTheSameForAnyPieces) {
  const std::pair<std::string, uint64_t> known[] = {
      {"", 0xef46db3751d8e999ull},
      {"a", 0xd24ec4f1a98c6e5bull},
      {"abc", 0x44bc2cf5ad770999ull},
      {"Nobody inspects the spammish repetition", 0xfbcea83c8a378bf1ull}};
  for (const auto& [text, want] : known) {
    ContentHash h;
    h.update(text.data(), text.size());
    EXPECT_EQ(h.digest(), want) << text;
  }
  std::string data(1000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = char((i * 131) ^ (i >> 3));
  ContentHash whole;
  whole.update(data.data(), data.size());
  for (size_t piece : {1, 3, 31, 32, 33, 100}) {
    ContentHash h;
    for (size_t i = 0; i < data.size(); i += piece) {
      h.update(data.data() + i, std::min(piece, data.size() - i));
    }
    EXPECT_EQ(h.digest(), whole.digest()) << piece;
  }
  data[500] ^= 1;  // one bit
  ContentHash other;
  other.update(data.data(), data.size());
  EXPECT_NE(other.digest(), whole.digest());
}

}  // namespace
}  // namespace kktrain
