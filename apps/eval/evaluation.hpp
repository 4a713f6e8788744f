// Evaluation of a model's current weights (docs/eval.md): `kktrain eval` and, during training,
// eval.every. Two kinds of file:
//
//   data   the loss and perplexity of a file's tokens:
//            token files (.bin llm.c shards, .u16/.uint16, .u32/.uint32): disjoint windows of
//              L + 1 tokens, every token after the first predicted once;
//            text (a text file is one document, a .jsonl of {"text": ...} lines one a line):
//              each document encoded without special tokens and scored in the harness's rolling
//              windows of L predictions, the first after the prefix token (the tokenizer's BOS,
//              else its EOS; byte 0 for a byte-level model), so every token is predicted once.
//              Also bits per byte: the summed loss / ln 2 / the documents' UTF-8 bytes;
//            chat or prompt_completion JSONL: each example rendered as training renders it, the
//              loss over its assistant (completion) tokens only;
//   tasks  multiple choice (apps/eval/multiple_choice.hpp).
// L is data.seq_len. Every request (a window, an example, a choice) is a segment of at most L
// positions packed with others into rows of L (packed rows see only their own segment), the rows
// dealt round-robin to the ranks in micro-batches of data.micro_batch_size; each segment's sum is
// computed on one rank and summed over ranks, so any rank count gives the same figures.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "apps/dataprep/text_model.hpp"
#include "apps/eval/multiple_choice.hpp"
#include "core/config.hpp"
#include "core/json_text.hpp"

namespace kktrain {

class Communicator;
class Transformer;
class JsonLine;

// One request: ids (n) and targets (n, -1 where not scored); the segment's score is the sum of
// its scored targets' log-probabilities.
struct Segment {
  std::vector<int32_t> ids, targets;
};

// Each segment's (sum of log-probabilities, scored tokens) through `model`, segments of at most
// T positions packed into rows of T, micro-batches of B rows dealt round-robin to the ranks
// (collective: every rank gives the same segments and gets every sum). `progress` (may be null)
// is told the rows done and the rows in all after each call.
struct SegmentScore {
  double logprob = 0;
  int64_t tokens = 0;
};
std::vector<SegmentScore> score_segments(
    Transformer& model, const std::vector<Segment>& segments, int64_t T, int64_t B,
    Communicator& comm, const std::function<void(int64_t, int64_t)>& progress = nullptr);

enum class EvalDataKind { tokens, text, chat };
const char* eval_data_kind_name(EvalDataKind k);

struct DataFigures {
  std::string file, name;
  EvalDataKind kind = EvalDataKind::tokens;
  int64_t documents = 0, tokens = 0, bytes = 0;  // bytes: text only
  double nll = 0;                                // summed over the tokens
  double loss() const { return tokens > 0 ? nll / static_cast<double>(tokens) : 0.0; }
};
struct TaskFigures {
  std::string file, name;
  int64_t items = 0, truncated = 0;
  std::vector<std::vector<double>> scores;
  std::vector<std::vector<int64_t>> choice_tokens;
  ChoiceMetrics metrics;
};
struct EvalFigures {
  std::vector<DataFigures> data;
  std::vector<TaskFigures> tasks;
  double seconds = 0;
  int64_t rows = 0;
};

// The files' requests, read and tokenized once (on every rank; an error on one rank is every
// rank's, one line naming FILE or FILE:LINE).
class Evaluation {
 public:
  // `cfg`: data.seq_len (L), data.micro_batch_size, and for chat files its chat template and
  // tokenizer settings; `text`: the model's text (tokenizer or bytes).
  // `keys`: what the files were given as, for messages ("--data" and "--task", or "eval.data"
  // and "eval.tasks").
  struct Keys {
    std::string data = "--data", tasks = "--task";
  };
  static Evaluation prepare(const std::vector<std::string>& data,
                            const std::vector<std::string>& tasks, const Config& cfg,
                            const ModelText& text, Communicator& comm, const Keys& keys);
  // Every file's figures with the model's current weights (collective).
  EvalFigures run(Transformer& model, Communicator& comm, bool show_progress) const;
  bool empty() const { return data_.empty() && tasks_.empty(); }

  struct DataFile {
    DataFigures head;  // file, name, kind, documents, bytes
    std::vector<Segment> segments;
  };
  struct TaskFile {
    std::string file, name;
    std::vector<ChoiceItem> items;
    std::vector<int64_t> first;  // the segment of each item's first choice
    int64_t truncated = 0;
    std::vector<Segment> segments;
  };

 private:
  std::vector<DataFile> data_;
  std::vector<TaskFile> tasks_;
  int64_t T_ = 0, B_ = 0;
};

// The figures as JSON (kktrain eval --json), the human lines, and the metrics row's columns
// (eval/<name>/<figure>).
Json eval_json(const EvalFigures& f);
std::vector<std::string> eval_lines(const EvalFigures& f);
void add_eval_columns(JsonLine& row, const EvalFigures& f);

}  // namespace kktrain
