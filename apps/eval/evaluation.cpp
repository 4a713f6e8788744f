// Evaluation of a model's current weights (apps/eval/evaluation.hpp).
#include "apps/eval/evaluation.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>

#include "apps/dataprep/example_renderer.hpp"
#include "apps/dataprep/tokenize_inputs.hpp"
#include "core/errors.hpp"
#include "core/files.hpp"
#include "core/strings.hpp"
#include "io/data.hpp"
#include "io/metrics.hpp"
#include "io/token_file.hpp"
#include "model/transformer.hpp"
#include "parallel/agree.hpp"
#include "parallel/communicator.hpp"
#include "parallel/round_robin.hpp"

namespace kktrain {

namespace {

// The tokens every file's segments may hold in all (ids and targets: 8 bytes a token).
constexpr int64_t kMaxEvalTokens = int64_t(64) << 20;

std::string stem_of(const std::string& path) {
  std::string base = path.substr(path.find_last_of('/') + 1);
  const std::size_t dot = base.find_last_of('.');
  if (dot != std::string::npos && dot > 0) base = base.substr(0, dot);
  return base.empty() ? std::string("data") : base;
}

bool token_file_name(const std::string& p) {
  for (const char* e : {".bin", ".u16", ".uint16", ".u32", ".uint32"}) {
    if (ends_with(p, e)) return true;
  }
  return false;
}

// How the model encodes text: its tokenizer without special tokens, or bytes.
struct TextEncoding {
  std::shared_ptr<const text::Tokenizer> tokenizer;  // null: byte-level
  RequestEncoding request;
};

TextEncoding text_encoding(const ModelText& t, const std::string& file) {
  TextEncoding e;
  if (t.vocab == TextVocab::unknown) {
    throw InputError("eval: '" + file + "' is text, and " + t.model +
                     " has no tokenizer kktrain can use (" + t.why +
                     "): give model.tokenizer=PATH");
  }
  if (t.vocab == TextVocab::bytes) {
    e.request.encode = [](const std::string& s) { return byte_tokenize(s); };
    e.request.prefix = 0;  // the harness with prefix_token_id=0: every byte predicted once
    return e;
  }
  e.tokenizer = load_model_tokenizer(t);
  const auto tok = e.tokenizer;
  e.request.encode = [tok](const std::string& s) {
    text::Encoder enc(tok);
    return enc.encode(s, text::SpecialTokens::none);
  };
  e.request.prefix = tok->bos_id() ? tok->bos_id() : tok->eos_id();
  return e;
}

struct Budget {
  int64_t tokens = 0;
  void add(int64_t n, const std::string& file) {
    tokens += n;
    if (tokens > kMaxEvalTokens) {
      throw InputError("eval: '" + file + "' takes the evaluation past " +
                       std::to_string(kMaxEvalTokens >> 20) +
                       "Mi tokens, the most one evaluation holds; evaluate a part of it");
    }
  }
};

// Segments predicting full[1..] in windows of at most T inputs, the harness's rolling windows:
// the first from position 0, each later one the T tokens before its last prediction, scoring
// only what earlier windows did not.
void rolling_windows(const std::vector<int32_t>& full, int64_t T, std::vector<Segment>* out) {
  const int64_t n = static_cast<int64_t>(full.size());
  int64_t predicted = 0;  // targets full[1..predicted] are scored
  while (predicted < n - 1) {
    const int64_t end = std::min(predicted + T, n - 1);  // last target index
    const int64_t s = std::max<int64_t>(0, end - T);
    Segment seg;
    seg.ids.assign(full.begin() + s, full.begin() + end);
    seg.targets.assign(seg.ids.size(), -1);
    for (int64_t j = predicted + 1; j <= end; ++j) seg.targets[j - 1 - s] = full[j];
    out->push_back(std::move(seg));
    predicted = end;
  }
}

Evaluation::DataFile token_data(const std::string& path, const ModelText& text, int64_t T,
                                Budget* budget) {
  TokenFile f(path, "auto");
  const int64_t n = f.size();
  budget->add(n, path);
  std::vector<int32_t> tok(static_cast<std::size_t>(n));
  f.read(0, n, tok.data());
  for (int64_t i = 0; i < n; ++i) {
    if (tok[i] < 0 || tok[i] >= text.vocab_size) {
      throw InputError("eval: '" + path + "' holds token id " + std::to_string(tok[i]) +
                       " at token " + std::to_string(i) + ", not below the model's vocab_size " +
                       std::to_string(text.vocab_size));
    }
  }
  if (n < 2) throw InputError("eval: '" + path + "' holds fewer than 2 tokens");
  Evaluation::DataFile d;
  d.head.kind = EvalDataKind::tokens;
  d.head.documents = 1;
  for (int64_t b = 0; b + 1 < n; b += T) {
    const int64_t len = std::min(T + 1, n - b);
    Segment s;
    s.ids.assign(tok.begin() + b, tok.begin() + b + len - 1);
    s.targets.assign(tok.begin() + b + 1, tok.begin() + b + len);
    d.segments.push_back(std::move(s));
  }
  return d;
}

Evaluation::DataFile text_data(const std::string& path, const ModelText& text, int64_t T,
                               Budget* budget) {
  const TextEncoding enc = text_encoding(text, path);
  if (!enc.request.prefix) {
    throw InputError("eval: '" + path + "' is text, and the tokenizer has neither a BOS nor an " +
                     "EOS token to predict a document's first token from");
  }
  Evaluation::DataFile d;
  d.head.kind = EvalDataKind::text;
  DocumentReader reader({path}, "text");
  std::vector<InputDocument> batch;
  while (reader.next_batch(&batch, int64_t(8) << 20)) {
    for (const InputDocument& doc : batch) {
      ++d.head.documents;
      std::vector<int32_t> full = {*enc.request.prefix};
      const std::vector<int32_t> ids = enc.request.encode(doc.text);
      full.insert(full.end(), ids.begin(), ids.end());
      if (full.size() < 2) continue;
      budget->add(static_cast<int64_t>(full.size()), path);
      d.head.bytes += static_cast<int64_t>(doc.text.size());
      rolling_windows(full, T, &d.segments);
    }
  }
  if (d.segments.empty()) throw InputError("eval: '" + path + "' holds no text to score");
  return d;
}

// A data file read whole (at most kMaxTaskFileBytes), for its lines (core/strings.hpp
// nonblank_lines).
std::string whole_file(const std::string& path) {
  std::string all;
  if (auto why = read_regular_file(&all, path, kMaxTaskFileBytes)) {
    throw InputError("eval: '" + path + "' cannot be read: " + *why);
  }
  return all;
}

Evaluation::DataFile chat_data(const std::string& path, const std::vector<NumberedLine>& lines,
                               DataFormat format, const Config& cfg, const ModelText& text,
                               Budget* budget) {
  Config c = cfg;
  c.data.format = format;
  c.data.loss_on = format == DataFormat::chat ? LossOn::assistant : LossOn::completion;
  const ExampleRenderer r = ExampleRenderer::open(c, text);
  Evaluation::DataFile d;
  d.head.kind = EvalDataKind::chat;
  for (const NumberedLine& line : lines) {
    const RenderedExample e = r.render(line.text, path, line.no);
    ++d.head.documents;
    if (e.ids.size() < 2) continue;
    budget->add(static_cast<int64_t>(e.ids.size()), path);
    Segment s;
    s.ids.assign(e.ids.begin(), e.ids.end() - 1);
    s.targets.assign(s.ids.size(), -1);
    for (std::size_t t = 0; t + 1 < e.ids.size(); ++t) {
      if (e.loss_mask[t + 1] == 1) s.targets[t] = e.ids[t + 1];
    }
    d.segments.push_back(std::move(s));
  }
  if (d.segments.empty()) throw InputError("eval: '" + path + "' holds no example to score");
  return d;
}

// The first line of `path` that is not blank_line, and its number: a .jsonl data file's kind is
// read from it, so a text file of any size is classified without being read whole (its documents
// are read once, by DocumentReader, whose line bound this is).
struct FirstLine {
  int64_t no = 1;
  std::string text;
};
FirstLine first_nonblank_line(const std::string& path) {
  FileLines in;
  if (auto why = in.open(path)) throw InputError("eval: '" + path + "' cannot be read: " + *why);
  const auto max_line = static_cast<std::size_t>(DocumentLimits{}.max_jsonl_line_bytes);
  FirstLine first;
  while (in.next(&first.text, max_line)) {
    if (blank_line(first.text)) continue;
    first.no = in.line_number();
    return first;
  }
  throw InputError("eval: '" + path + "' holds no line");
}

// What a .jsonl data file holds, from its first line's fields.
DataFormat jsonl_kind(const std::string& path, const FirstLine& first) {
  const std::string where = path + ":" + std::to_string(first.no);
  const Json j = parse_json_bounded<Json>(first.text, where);
  if (!j.is_object()) throw InputError(where + ": not a JSON object");
  if (j.contains("messages")) return DataFormat::chat;
  if (j.contains("prompt") && j.contains("completion")) return DataFormat::prompt_completion;
  if (j.contains("text")) return DataFormat::text;
  throw InputError(where +
                   ": a data line is {\"text\": ...}, {\"messages\": [...]} or {\"prompt\", "
                   "\"completion\"} (a task file of multiple choice goes with --task)");
}

Evaluation::TaskFile task_data(const std::string& path, const ModelText& text, int64_t T,
                               Budget* budget) {
  Evaluation::TaskFile f;
  f.items = read_choice_items(path);
  const TextEncoding enc = text_encoding(text, path);
  for (const ChoiceItem& it : f.items) {
    const std::string where = path + ":" + std::to_string(it.line);
    f.first.push_back(static_cast<int64_t>(f.segments.size()));
    bool truncated = false;
    for (std::size_t c = 0; c < it.choices.size(); ++c) {
      ChoiceRequest rq;
      try {
        rq = choice_request(enc.request, it.context, it.delimiter + it.choices[c]);
      } catch (const InputError& e) {
        throw InputError(where + ": " + e.what());
      }
      const int64_t nc = static_cast<int64_t>(rq.continuation.size());
      if (nc == 0) {
        throw InputError(where + ": choice " + std::to_string(c) + " has no tokens of its own");
      }
      if (nc > T) {
        throw InputError(where + ": choice " + std::to_string(c) + " is " + std::to_string(nc) +
                         " tokens, more than data.seq_len " + std::to_string(T) + " can score");
      }
      std::vector<int32_t> full = rq.context;
      full.insert(full.end(), rq.continuation.begin(), rq.continuation.end());
      if (static_cast<int64_t>(full.size()) > T + 1) {  // from the left, as the harness
        truncated = true;
        full.erase(full.begin(), full.end() - (T + 1));
      }
      budget->add(static_cast<int64_t>(full.size()), path);
      Segment s;
      s.ids.assign(full.begin(), full.end() - 1);
      s.targets.assign(s.ids.size(), -1);
      const int64_t m = static_cast<int64_t>(s.ids.size());
      for (int64_t j = m - nc; j < m; ++j) s.targets[j] = full[j + 1];
      f.segments.push_back(std::move(s));
    }
    f.truncated += truncated;
  }
  return f;
}

}  // namespace

const char* eval_data_kind_name(EvalDataKind k) {
  switch (k) {
    case EvalDataKind::tokens:
      return "tokens";
    case EvalDataKind::text:
      return "text";
    case EvalDataKind::chat:
      return "chat";
  }
  return "?";
}

std::vector<SegmentScore> score_segments(Transformer& model, const std::vector<Segment>& segments,
                                         int64_t T, int64_t B, Communicator& comm,
                                         const std::function<void(int64_t, int64_t)>& progress) {
  // Pack: each segment at (row, offset), in order.
  std::vector<std::pair<int64_t, int64_t>> at(segments.size());
  int64_t rows = 0, fill = T;
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const int64_t n = static_cast<int64_t>(segments[i].ids.size());
    if (n < 1 || n > T || segments[i].targets.size() != segments[i].ids.size()) {
      throw InternalError("eval: a segment of " + std::to_string(n) + " positions for rows of " +
                          std::to_string(T));
    }
    if (fill + n > T) {
      ++rows;
      fill = 0;
    }
    at[i] = {rows - 1, fill};
    fill += n;
  }
  // The segments of each row, in order.
  std::vector<std::vector<int64_t>> of_row(static_cast<std::size_t>(rows));
  for (std::size_t i = 0; i < segments.size(); ++i) of_row[at[i].first].push_back(int64_t(i));
  // Micro-batches of B rows dealt round-robin (parallel/round_robin.hpp).
  const RoundRobinRows rr{rows, B, comm.size(), comm.rank()};
  std::vector<double> sums(2 * segments.size(), 0.0), none;
  std::vector<int32_t> ids(B * T), targets(B * T), starts(B * T);
  std::vector<float> losses(B * T);
  for (int64_t j = 0; j < rr.calls(); ++j) {
    const int64_t first = rr.first(j), count = rr.count(j);
    std::fill(ids.begin(), ids.end(), 0);
    std::fill(targets.begin(), targets.end(), -1);
    for (int64_t k = 0; k < B * T; ++k) starts[k] = static_cast<int32_t>(k % T);
    for (int64_t r = 0; r < count; ++r) {
      int64_t pos = 0;
      for (int64_t i : of_row[first + r]) {
        const Segment& s = segments[i];
        for (std::size_t t = 0; t < s.ids.size(); ++t) {
          ids[r * T + pos + t] = s.ids[t];
          targets[r * T + pos + t] = s.targets[t];
          starts[r * T + pos + t] = static_cast<int32_t>(pos);
        }
        pos += static_cast<int64_t>(s.ids.size());
      }
      for (int64_t t = pos; t < T; ++t) starts[r * T + t] = static_cast<int32_t>(pos);
    }
    ForwardOptions fo;
    fo.compute_mtp = false;
    fo.row_starts = starts.data();
    fo.token_losses = losses.data();
    model.forward(ids.data(), targets.data(), B, T, fo);
    for (int64_t r = 0; r < count; ++r) {
      for (int64_t i : of_row[first + r]) {
        const Segment& s = segments[i];
        const int64_t base = r * T + at[i].second;
        double sum = 0;
        int64_t n = 0;
        for (std::size_t t = 0; t < s.ids.size(); ++t) {
          if (s.targets[t] < 0) continue;
          sum -= static_cast<double>(losses[base + t]);
          ++n;
        }
        sums[2 * i] = sum;
        sums[2 * i + 1] = static_cast<double>(n);
      }
    }
    if (progress) progress(rr.done(j), rows);
  }
  comm.allreduce_host(sums, none);
  std::vector<SegmentScore> out(segments.size());
  for (std::size_t i = 0; i < segments.size(); ++i) {
    out[i].logprob = sums[2 * i];
    out[i].tokens = static_cast<int64_t>(sums[2 * i + 1]);
  }
  return out;
}

Evaluation Evaluation::prepare(const std::vector<std::string>& data,
                               const std::vector<std::string>& tasks, const Config& cfg,
                               const ModelText& text, Communicator& comm, const Keys& keys) {
  Evaluation e;
  e.T_ = cfg.data.seq_len;
  e.B_ = cfg.data.micro_batch_size;
  std::map<std::string, int> names;
  auto unique_name = [&](const std::string& path) {
    const std::string stem = stem_of(path);
    const int k = ++names[stem];
    return k == 1 ? stem : stem + "_" + std::to_string(k);
  };
  collectively(comm, [&] {
    Budget budget;
    for (const std::string& p : data) {
      if (auto why = unreadable_regular_file(p)) {
        throw InputError(keys.data + ": '" + p + "' cannot be read: " + *why);
      }
      DataFile d;
      if (token_file_name(p)) {
        d = token_data(p, text, e.T_, &budget);
      } else if (ends_with(p, ".jsonl")) {
        const DataFormat f = jsonl_kind(p, first_nonblank_line(p));
        if (f == DataFormat::text) {
          d = text_data(p, text, e.T_, &budget);
        } else {
          const std::string all = whole_file(p);
          d = chat_data(p, nonblank_lines(all), f, cfg, text, &budget);
        }
      } else {
        d = text_data(p, text, e.T_, &budget);
      }
      d.head.file = p;
      d.head.name = unique_name(p);
      e.data_.push_back(std::move(d));
    }
    for (const std::string& p : tasks) {
      if (auto why = unreadable_regular_file(p)) {
        throw InputError(keys.tasks + ": '" + p + "' cannot be read: " + *why);
      }
      TaskFile t = task_data(p, text, e.T_, &budget);
      t.file = p;
      t.name = unique_name(p);
      e.tasks_.push_back(std::move(t));
    }
  });
  return e;
}

EvalFigures Evaluation::run(Transformer& model, Communicator& comm, bool show_progress) const {
  const auto t0 = std::chrono::steady_clock::now();
  // One pass over every file's segments.
  std::vector<Segment> all;
  for (const DataFile& d : data_) all.insert(all.end(), d.segments.begin(), d.segments.end());
  for (const TaskFile& t : tasks_) all.insert(all.end(), t.segments.begin(), t.segments.end());
  const bool shown = show_progress && comm.rank() == 0 && isatty(2);
  EvalFigures f;
  const std::vector<SegmentScore> s =
      score_segments(model, all, T_, B_, comm, [&](int64_t done, int64_t rows) {
        f.rows = rows;
        if (!shown) return;
        std::fprintf(stderr, "\reval: rows %lld/%lld  ", static_cast<long long>(done),
                     static_cast<long long>(rows));
        if (done == rows) std::fputc('\n', stderr);
      });
  std::size_t k = 0;
  for (const DataFile& d : data_) {
    DataFigures x = d.head;
    for (std::size_t i = 0; i < d.segments.size(); ++i, ++k) {
      x.nll -= s[k].logprob;
      x.tokens += s[k].tokens;
    }
    f.data.push_back(std::move(x));
  }
  for (const TaskFile& t : tasks_) {
    TaskFigures x;
    x.file = t.file;
    x.name = t.name;
    x.items = static_cast<int64_t>(t.items.size());
    x.truncated = t.truncated;
    for (const ChoiceItem& it : t.items) {
      std::vector<double> sc;
      std::vector<int64_t> nt;
      for (std::size_t c = 0; c < it.choices.size(); ++c, ++k) {
        sc.push_back(s[k].logprob);
        nt.push_back(s[k].tokens);
      }
      x.scores.push_back(std::move(sc));
      x.choice_tokens.push_back(std::move(nt));
    }
    x.metrics = choice_metrics(t.items, x.scores);
    f.tasks.push_back(std::move(x));
  }
  f.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return f;
}

namespace {

double bits_per_byte(const DataFigures& d) {
  return d.bytes > 0 ? d.nll / static_cast<double>(d.bytes) / std::log(2.0) : 0.0;
}

}  // namespace

Json eval_json(const EvalFigures& f) {
  Json out = Json::object();
  Json data = Json::array();
  for (const DataFigures& d : f.data) {
    Json j = Json::object();
    j["file"] = d.file;
    j["name"] = d.name;
    j["kind"] = eval_data_kind_name(d.kind);
    j["documents"] = d.documents;
    j["tokens"] = d.tokens;
    j["loss"] = d.loss();
    j["perplexity"] = std::exp(d.loss());
    if (d.kind == EvalDataKind::text) {
      j["bytes"] = d.bytes;
      j["bits_per_byte"] = bits_per_byte(d);
    }
    data.push_back(std::move(j));
  }
  Json tasks = Json::array();
  for (const TaskFigures& t : f.tasks) {
    Json j = Json::object();
    j["file"] = t.file;
    j["name"] = t.name;
    j["items"] = t.items;
    j["truncated"] = t.truncated;
    const std::pair<const char*, const MetricValue*> m[] = {{"acc", &t.metrics.acc},
                                                            {"acc_norm", &t.metrics.acc_norm},
                                                            {"acc_bytes", &t.metrics.acc_bytes}};
    for (const auto& [name, v] : m) {
      j[name] = v->value;
      // The harness's "N/A" for a single item.
      j[std::string(name) + "_stderr"] = t.items > 1 ? Json(v->stderr_) : Json(nullptr);
    }
    j["scores"] = t.scores;
    j["choice_tokens"] = t.choice_tokens;
    tasks.push_back(std::move(j));
  }
  out["data"] = std::move(data);
  out["tasks"] = std::move(tasks);
  out["rows"] = f.rows;
  out["seconds"] = f.seconds;
  return out;
}

std::vector<std::string> eval_lines(const EvalFigures& f) {
  std::vector<std::string> lines;
  char buf[512];
  for (const DataFigures& d : f.data) {
    std::snprintf(buf, sizeof(buf),
                  "eval: %s (%s, %lld %s): loss %.4f, perplexity %.4g, %lld tokens", d.file.c_str(),
                  eval_data_kind_name(d.kind), static_cast<long long>(d.documents),
                  d.kind == EvalDataKind::tokens ? "file"
                  : d.kind == EvalDataKind::chat ? "examples"
                                                 : "documents",
                  d.loss(), std::exp(d.loss()), static_cast<long long>(d.tokens));
    std::string line = buf;
    if (d.kind == EvalDataKind::text) {
      std::snprintf(buf, sizeof(buf), ", bits per byte %.4f", bits_per_byte(d));
      line += buf;
    }
    lines.push_back(line);
  }
  for (const TaskFigures& t : f.tasks) {
    std::snprintf(buf, sizeof(buf),
                  "eval: %s (%lld items, %lld truncated): acc %.4f +- %.4f, acc_norm %.4f +- "
                  "%.4f, acc_bytes %.4f +- %.4f",
                  t.file.c_str(), static_cast<long long>(t.items),
                  static_cast<long long>(t.truncated), t.metrics.acc.value, t.metrics.acc.stderr_,
                  t.metrics.acc_norm.value, t.metrics.acc_norm.stderr_, t.metrics.acc_bytes.value,
                  t.metrics.acc_bytes.stderr_);
    lines.push_back(buf);
  }
  return lines;
}

void add_eval_columns(JsonLine& row, const EvalFigures& f) {
  for (const DataFigures& d : f.data) {
    const std::string p = "eval/" + d.name + "/";
    row.num(p + "loss", d.loss());
    row.num(p + "perplexity", std::exp(d.loss()));
    if (d.kind == EvalDataKind::text) row.num(p + "bits_per_byte", bits_per_byte(d));
  }
  for (const TaskFigures& t : f.tasks) {
    const std::string p = "eval/" + t.name + "/";
    row.num(p + "acc", t.metrics.acc.value);
    row.num(p + "acc_norm", t.metrics.acc_norm.value);
    row.num(p + "acc_bytes", t.metrics.acc_bytes.value);
  }
  row.num("eval_seconds", f.seconds);
}

}  // namespace kktrain
