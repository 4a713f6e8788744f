// Examples (data.format chat, prompt_completion or preference): one JSONL line turned into the
// tokens the trainer sees and the loss mask over them (docs/data.md, "Chat and prompt/completion
// data"; docs/preference.md for pairs).
//
// chat: {"messages": [{"role": ..., "content": ...}, ...]} (every key of a message passed to
// the template; an optional "reasoning_content" a string or null) rendered with the model's chat
// template as transformers' apply_chat_template renders it for training (add_generation_prompt
// false; the tokenizer's special tokens as variables), then tokenized without adding special tokens
// (the template writes BOS itself). prompt_completion: {"prompt": ..., "completion": ...}: a user
// turn and an assistant turn through the chat template when the model has one; otherwise prompt +
// completion tokenized with the tokenizer's special tokens, then its eos token (when it names one).
//
// The template, in order (transformers' order for the last two: its chat_template.jinja file
// takes priority over tokenizer_config.json's key): data.chat_template, chat_template.jinja
// beside the tokenizer.json, tokenizer_config.json's chat_template.
//
// preference: {"prompt", "chosen", "rejected"}, a pair of completions of one prompt, rendered as
// two sides, each prompt + completion as prompt_completion renders it (loss on the completion):
//   strings      prompt, chosen and rejected strings (a user turn and an assistant turn, as
//                prompt_completion);
//   explicit     "prompt" a list of messages, "chosen" and "rejected" lists of assistant messages
//                (the reply): each side is the conversation prompt + reply;
//   implicit     no "prompt": "chosen" and "rejected" whole conversations; the prompt is their
//                shared opening messages, the rest of each must be assistant messages.
//   With a template, a side's loss tokens are its reply's assistant tokens (as loss_on assistant
//   marks them) that start after the prompt's text rendered with the generation prompt (TRL's
//   prompt/completion split); the side's text must begin with that text. A pair longer than
//   data.seq_len (its two sides share a row) is cut (truncate: each side to its first
//   data.seq_len / 2 tokens, the prompt kept from the start; a side left without completion
//   tokens drops the pair), dropped, or refused, as data.truncation says.
//   Shared prompt (data.share_prompt, unless the model has a sliding window or soft-caps its
//   attention logits): the sides' longest common run of tokens before the position that
//   predicts either side's first completion token is held once; the pair's length is then
//   len(chosen) + len(rejected) - shared. Errors name FILE:LINE:
//   a missing or mistyped field, an empty completion, a reply message not the assistant's, an
//   implicit pair without a shared opening, a prompt that is not a list when the replies are.
//
// Loss tokens (loss_mask[p] = 1: the prediction of ids[p] from ids[0..p) counts; loss_mask[0]
// is always 0):
//   all         every token but the first.
//   assistant / completion (the completion is the assistant turn; without a template, it is the
//               completion's tokens and the eos token)
//               with `{% generation %}` blocks in the template: every token that overlaps the
//               bytes the blocks produced (transformers' assistant mask). Otherwise, for each
//               assistant message: every token overlapping the bytes of its content and
//               reasoning_content the template printed, wherever they landed (the content spans
//               jinja::render_chat tracks by the origin rule of text/jinja.hpp Value::origins;
//               the template's literals, Qwen3's <think> tags, are not the message's), then its
//               end of turn: the tokens that follow the last of them up to and including the
//               first special token (an added token marked special: <|eot_id|>, <end_of_turn>,
//               </s>), provided every token before that one is whitespace. A token that
//               straddles a printed piece's first or last byte counts; empty content
//               contributes its end of turn only. An assistant message with non-empty content
//               none of which is printed (only through operations making other bytes: upper,
//               tojson), or that no special token closes, is an error, never a silent fallback;
//               open() checks the template on a probe conversation first.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "apps/dataprep/text_model.hpp"
#include "core/config.hpp"
#include "core/strings.hpp"
#include "io/example_data.hpp"
#include "text/tokenizer.hpp"

namespace kktrain {

// empty: the example renders to no tokens (a template that prints nothing for it; an empty
// prompt and completion through a tokenizer that adds nothing): skipped and counted unless
// data.truncation is error.
enum class ExampleFate { kept, truncated, dropped, empty };

// The longest line of a data file an example may take (longer: one error naming FILE:LINE):
// rendering, tokenizing and masking a line take about 34 times its size in memory.
constexpr int64_t kMaxExampleLineBytes = int64_t(16) << 20;

// loss_mask's value at a preference pair's rejected side's first token: a new sequence starts
// there (the token is never a loss target: its prediction would cross from the chosen side).
constexpr uint8_t kSideStart = kSideStartMark;

struct RenderedExample {
  std::string text;                // the rendered text (template applied, or prompt+completion)
  std::vector<int32_t> ids;        // its tokens (after truncation), at most data.seq_len
  std::vector<uint8_t> loss_mask;  // 0/1 per id: 1 = this token is a loss target
  // Preference pairs: ids, loss_mask and text above are the chosen side's followed by the
  // rejected side's, which starts at ids[rejected_begin] (loss_mask kSideStart there) and whose
  // text is rejected_text. 0: not a pair.
  int64_t rejected_begin = 0;
  std::string rejected_text;
  // A shared prompt (data.share_prompt): the sides' first `shared` tokens are held once, so ids
  // are the chosen side, then the rejected side's tokens from its `shared`-th on (loss_mask
  // kSharedPromptMark at the chosen side's token `shared`); the rejected side is
  // ids[0, shared) + ids[rejected_begin, end). 0: none.
  int64_t shared = 0;
  ExampleFate fate = ExampleFate::kept;  // dropped, empty: ids and loss_mask empty
  int64_t full_tokens = 0;               // the tokens before truncation
  int64_t full_loss_tokens = 0;          // the loss tokens before truncation
};

enum class ExampleFormat { chat, prompt_completion, preference };
// LossOn and Truncation: data.loss_on and data.truncation (core/config.hpp).

// A data file's blank lines (core/strings.hpp blank_line) hold no example: they are skipped, by
// `kktrain render`, the training data and `kktrain eval` alike; render() refuses them.

// Whether cfg's preference pairs hold their shared prompt once (data.share_prompt, and a model
// without a sliding window or attention soft-capping, whose masks and positions would count the
// chosen side).
bool shares_prompt(const Config& cfg);

class ExampleRenderer {
 public:
  // From cfg (data.format, data.loss_on, data.truncation, data.seq_len, data.chat_template) and
  // the run's text `t` (apps/dataprep/text_model.hpp run_text, found once): loads the tokenizer and
  // the template and checks the template on a probe conversation. InputError (one line naming the
  // file or key) for a model without a tokenizer, a missing or unreadable template, chat data
  // without a template, a template that fails on the probe or whose assistant tokens cannot be
  // isolated.
  static ExampleRenderer open(const Config& cfg, const ModelText& t);

  // One JSONL line of `file` (line_no 1-based, for messages) -> the example. InputError
  // "FILE:LINE: ..." for a line that is not a JSON object, no "messages" list (or
  // "prompt"/"completion" strings), a message without a string role or content, a template
  // error, an assistant message whose tokens cannot be isolated, a line longer than
  // kMaxExampleLineBytes, and (data.truncation: error) an example longer than data.seq_len or of
  // no tokens. Thread-safe (encoders are pooled per call). Linear in the example's size.
  RenderedExample render(std::string_view line, const std::string& file, int64_t line_no) const;

  const text::Tokenizer& tokenizer() const;
  // Where the template came from ("data.chat_template 'F'", "chat_template.jinja 'F'",
  // "tokenizer_config.json 'F'"), or "" without one.
  const std::string& template_source() const;
  // Examples render() truncated / dropped / found empty so far (for the run's log).
  int64_t truncated() const;
  int64_t dropped() const;
  int64_t empty() const;

  struct State;

 private:
  std::shared_ptr<State> s_;
};

}  // namespace kktrain
