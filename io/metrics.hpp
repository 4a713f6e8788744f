// metrics.jsonl: one JSON object per line, written and flushed as the run goes, so a crash
// loses at most the line being written. Numbers are printed with full precision (%.17g), so two
// deterministic runs produce byte-identical loss and grad_norm fields; columns keep the order
// they are added in, and keys and strings are escaped by nlohmann::json (core/json_text.hpp).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/json_text.hpp"

namespace kktrain {

class EventFileWriter;

class JsonLine {
 public:
  JsonLine& num(const std::string& key, double v);
  JsonLine& integer(const std::string& key, int64_t v);
  JsonLine& boolean(const std::string& key, bool v);
  JsonLine& str(const std::string& key, const std::string& v);
  JsonLine& null(const std::string& key);
  // A nested object: {"key": {inner's fields}}.
  JsonLine& object(const std::string& key, const JsonLine& inner);
  std::string text() const { return json_text(row_); }
  // The row's numbers as TensorBoard scalars (tag, value) in column order, a nested object's as
  // "key/inner", with torchtitan's tags where it has one (tensorboard_tag); booleans, strings and
  // nulls are not scalars. step: the row's "step" (-1 without one).
  std::vector<std::pair<std::string, float>> scalars(int64_t* step) const;

 private:
  Json row_ = Json::object();
};

class MetricsWriter {
 public:
  // Creates the directory if needed and starts `path` afresh; an earlier file at `path` is kept
  // as path.1 (or the first free path.N), never overwritten. A resumed run passes the step it
  // resumes from: the earlier file's rows up to that step are copied into the new one first, so
  // metrics.jsonl reads as one run.
  explicit MetricsWriter(const std::string& path, int64_t keep_through_step = -1);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  // RuntimeFailure naming the file and the system's reason when the row does not reach it.
  void write(const JsonLine& line);
  // From now on every row with a step also goes to a new TensorBoard event file in `dir`
  // (io/tensorboard.hpp) as its scalars (JsonLine::scalars).
  void add_tensorboard(const std::string& dir);
  // The event file, or "" without one.
  std::string tensorboard_path() const;
  const std::string& path() const { return path_; }
  // Where an earlier file was moved, or "" when there was none.
  const std::string& previous() const { return previous_; }

 private:
  void put(const std::string& text);
  std::string path_, previous_;
  std::FILE* f_ = nullptr;
  std::unique_ptr<EventFileWriter> tb_;
};

// The TensorBoard tag of a metrics column: torchtitan's name where it has one
// (loss -> loss_metrics/global_avg_loss, tokens_per_s -> throughput(tps), val_loss ->
// validation_metrics/loss, peak_* -> memory/peak_*), else the column's own.
std::string tensorboard_tag(const std::string& column);

}  // namespace kktrain
