// Multiple-choice tasks scored as EleutherAI's lm-evaluation-harness scores its `multiple_choice`
// tasks (docs/eval.md):
//
//   - a task file is JSONL, one item a line: {"context": str, "choices": [str, ...], "gold": i}
//     and optionally "target_delimiter" (default " ");
//   - each choice is the continuation target_delimiter + choice of the context; whitespace at the
//     end of the context moves onto the front of the continuation; the continuation's tokens are
//     encode(context + continuation)[len(encode(context)):], encoding without special tokens
//     (lm-evaluation-harness's add_bos_token=False, its default up to 0.4.9.1); an empty context
//     is the prefix token, and the continuation is encoded on its own (when that encoding starts
//     with the prefix token, that token is the context);
//   - a choice's score is the sum of its continuation tokens' log-probabilities;
//   - acc: the highest score is gold's (the first of equal maxima); acc_norm: the same of the
//     scores divided by each choice's length in characters (Unicode code points), acc_bytes: in
//     UTF-8 bytes; each the mean over the items, its standard error the harness's
//     (sample standard deviation / sqrt(n)).
//
// A task file is untrusted: at most kMaxTaskFileBytes, valid UTF-8, every line a JSON object of
// the fields above (nesting bounded) with 1..kMaxChoices choices and gold among them; anything
// else is one InputError "FILE:LINE: ...".
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace kktrain {

constexpr std::size_t kMaxTaskFileBytes = std::size_t(256) << 20;
constexpr std::size_t kMaxChoices = 1024;

struct ChoiceItem {
  std::string context;
  std::vector<std::string> choices;
  int64_t gold = 0;
  std::string delimiter = " ";
  int64_t line = 0;  // 1-based, for messages
};

// The items of a task file in file order (blank lines skipped). InputError as above; a file with
// no item is one too.
std::vector<ChoiceItem> read_choice_items(const std::string& path);

// How text becomes token ids for a request: the model's encoding without special tokens, and the
// prefix token an empty context stands for (the tokenizer's BOS, else its EOS; byte 0 for a
// byte-level model).
struct RequestEncoding {
  std::function<std::vector<int32_t>(const std::string&)> encode;
  std::optional<int32_t> prefix;
};

// A choice's request: the context's ids and the continuation's (the harness's split above).
struct ChoiceRequest {
  std::vector<int32_t> context, continuation;
};
ChoiceRequest choice_request(const RequestEncoding& enc, const std::string& context,
                             const std::string& continuation);

struct MetricValue {
  double value = 0, stderr_ = 0;
};
struct ChoiceMetrics {
  MetricValue acc, acc_norm, acc_bytes;
};

// The metrics of `items` given each item's choice scores (scores[i][c]).
ChoiceMetrics choice_metrics(const std::vector<ChoiceItem>& items,
                             const std::vector<std::vector<double>>& scores);

// The harness's standard error of a mean: sample standard deviation (n - 1) / sqrt(n); 0 for
// fewer than two values.
double mean_stderr(const std::vector<double>& x);

// The number of Unicode code points of valid UTF-8 text.
int64_t utf8_chars(const std::string& s);

}  // namespace kktrain
