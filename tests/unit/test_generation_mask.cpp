// ExampleRenderer (apps/dataprep/example_renderer.hpp) with `{% generation %}` blocks in the chat
// template: the blocks alone decide the loss mask (transformers' assistant mask): every token
// overlapping the bytes they printed, and nothing else; the content rule (an assistant message's
// content, then its end of turn up to the first special token) adds nothing, and asks nothing of
// the template (the content may reach the output through any operation).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "apps/dataprep/example_renderer.hpp"
#include "tests/unit/scratch_dir.hpp"

namespace kktrain {
namespace {

using Json = nlohmann::json;

const char* const kSpecial[] = {"<|im_start|>", "<|im_end|>"};

// One token per printable ASCII character and newline, and the two ChatML special tokens.
std::string chatml_tokenizer(const ScratchDir& dir) {
  Json vocab = Json::object();
  int id = 0;
  vocab["\n"] = id++;
  for (char c = ' '; c <= '~'; ++c) vocab[std::string(1, c)] = id++;
  Json added = Json::array();
  for (const char* t : kSpecial) {
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
  std::ofstream(dir.path("tokenizer_config.json")) << Json{{"eos_token", "<|im_end|>"}}.dump();
  return dir.path("tokenizer.json");
}

// The mask that marks exactly the tokens inside the text between `open` and `close` markers
// (each pair a generation block's output, found in order), from the ids' byte lengths.
std::vector<uint8_t> block_mask(const RenderedExample& ex,
                                const std::vector<std::pair<std::string, std::string>>& blocks) {
  std::vector<std::pair<std::size_t, std::size_t>> spans;
  std::size_t from = 0;
  for (const auto& [open, close] : blocks) {
    const std::size_t b = ex.text.find(open, from) + open.size();
    const std::size_t e = ex.text.find(close, b);
    spans.emplace_back(b, e);
    from = e;
  }
  std::vector<uint8_t> mask;
  std::size_t at = 0;
  for (const int32_t id : ex.ids) {
    const std::size_t len = id >= 96 ? std::string(kSpecial[id - 96]).size() : 1;
    uint8_t in = 0;
    for (const auto& [b, e] : spans) in = in || (at < e && at + len > b);
    mask.push_back(in);
    at += len;
  }
  return mask;
}

// The mask as '0'/'1' characters (a readable failure).
std::string bits(const std::vector<uint8_t>& mask) {
  std::string out;
  for (const uint8_t m : mask) out += m ? '1' : '0';
  return out;
}

RenderedExample render(const ScratchDir& dir, const std::string& tmpl, const Json& messages) {
  Config cfg;
  cfg.model.tokenizer = chatml_tokenizer(dir);
  cfg.model.vocab_size = 128;
  cfg.data.format = DataFormat::chat;
  cfg.data.loss_on = LossOn::assistant;
  cfg.data.seq_len = 400;
  std::ofstream(dir.path("t.jinja")) << tmpl;
  cfg.data.chat_template = dir.path("t.jinja");
  const ExampleRenderer r = ExampleRenderer::open(cfg, run_text(cfg));
  return r.render(Json{{"messages", messages}}.dump(), "f", 1);
}

const Json kChat = Json::array({{{"role", "user"}, {"content", "Hi there"}},
                                {{"role", "assistant"}, {"content", "Hello!"}},
                                {{"role", "user"}, {"content", "Bye"}},
                                {{"role", "assistant"}, {"content", "See you."}}});

TEST(GenerationMask, TheBlockWithoutTheEndOfTurn) {
  // The blocks hold only the content, <|im_end|> right after them: it is not a loss token (the
  // content rule would add it as the assistant's end of turn).
  ScratchDir dir("kktrain_gen_");
  const RenderedExample ex = render(
      dir,
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.role == 'assistant' %}"
      "{% generation %}{{ m.content }}{% endgeneration %}{% else %}{{ m.content }}{% endif %}"
      "<|im_end|>\n{% endfor %}",
      kChat);
  const auto want = block_mask(ex, {{"assistant\n", "<|im_end|>"}, {"assistant\n", "<|im_end|>"}});
  EXPECT_EQ(bits(ex.loss_mask), bits(want));
  EXPECT_EQ(std::count(ex.loss_mask.begin(), ex.loss_mask.end(), 1), 6 + 8);
}

TEST(GenerationMask, TheBlockWithItsEndOfTurnAndMore) {
  // The blocks hold a prefix, the content and <|im_end|>: all of it, nothing outside.
  ScratchDir dir("kktrain_gen_");
  const RenderedExample ex =
      render(dir,
             "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.role == 'assistant' %}"
             "{% generation %}A: {{ m.content }}<|im_end|>{% endgeneration %}{{ '\\n' }}"
             "{% else %}{{ m.content }}<|im_end|>\n{% endif %}{% endfor %}",
             kChat);
  const auto want = block_mask(ex, {{"assistant\n", "\n"}, {"assistant\n", "\n"}});
  EXPECT_EQ(bits(ex.loss_mask), bits(want));
  EXPECT_EQ(std::count(ex.loss_mask.begin(), ex.loss_mask.end(), 1), (3 + 6 + 1) + (3 + 8 + 1));
}

TEST(GenerationMask, TheContentNeedNotBePrintedAsItIs) {
  // Without blocks this template is refused for loss_on: assistant (`upper` loses where the
  // content came from); with them, the blocks are the mask.
  ScratchDir dir("kktrain_gen_");
  const RenderedExample ex =
      render(dir,
             "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.role == 'assistant' %}"
             "[{% generation %}{{ m.content | upper }}{% endgeneration %}]{% else %}{{ m.content }}"
             "{% endif %}<|im_end|>\n{% endfor %}",
             kChat);
  EXPECT_NE(ex.text.find("[HELLO!]"), std::string::npos);
  EXPECT_EQ(bits(ex.loss_mask), bits(block_mask(ex, {{"[", "]"}, {"[", "]"}})));
}

}  // namespace
}  // namespace kktrain
