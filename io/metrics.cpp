#include "io/metrics.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/errors.hpp"
#include "core/files.hpp"
#include "core/log.hpp"
#include "io/tensorboard.hpp"

namespace kktrain {

JsonLine& JsonLine::num(const std::string& k, double v) {
  row_[k] = v;
  return *this;
}

JsonLine& JsonLine::integer(const std::string& k, int64_t v) {
  row_[k] = v;
  return *this;
}

JsonLine& JsonLine::boolean(const std::string& k, bool v) {
  row_[k] = v;
  return *this;
}

JsonLine& JsonLine::null(const std::string& k) {
  row_[k] = nullptr;
  return *this;
}

JsonLine& JsonLine::object(const std::string& k, const JsonLine& inner) {
  row_[k] = inner.row_;
  return *this;
}

JsonLine& JsonLine::str(const std::string& k, const std::string& v) {
  row_[k] = v;
  return *this;
}

MetricsWriter::MetricsWriter(const std::string& path, int64_t keep_through_step) : path_(path) {
  const std::filesystem::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  if (ec) {
    throw InputError("train.output_dir: cannot create '" + p.parent_path().string() +
                     "': " + ec.message());
  }
  // An earlier run's metrics are kept, not overwritten: metrics.jsonl -> metrics.jsonl.1, .2, ...
  if (std::filesystem::exists(p, ec)) {
    for (int n = 1;; ++n) {
      const std::filesystem::path old = path + "." + std::to_string(n);
      if (std::filesystem::exists(old, ec)) continue;
      std::filesystem::rename(p, old, ec);
      if (ec) {
        throw InputError("train.output_dir: cannot move the earlier '" + path +
                         "' aside: " + ec.message());
      }
      previous_ = old.string();
      break;
    }
  }
  f_ = std::fopen(path.c_str(), "w");
  if (!f_) {
    throw InputError("train.output_dir: cannot write '" + path + "': " + std::strerror(errno));
  }
  if (keep_through_step >= 0 && !previous_.empty()) {
    // Opened without blocking and only as a regular file (core/files.hpp): the earlier file is
    // the user's, and a FIFO left under its name must not stall the run.
    FileDescriptor fd;
    FILE* in = nullptr;
    if (const auto why = open_regular_file(&fd, previous_)) {
      log::warn("train.output_dir: the earlier '" + previous_ + "' " + *why +
                "; its rows are not carried over");
    } else if ((in = ::fdopen(::dup(fd.get()), "r")) == nullptr) {
      std::fclose(f_);
      throw RuntimeFailure("cannot read '" + previous_ + "': " + std::strerror(errno));
    }
    char* buf = nullptr;
    std::size_t cap = 0;
    try {
      while (in != nullptr && ::getline(&buf, &cap, in) >= 0) {
        std::string line(buf);
        if (!line.empty() && line.back() == '\n') line.pop_back();
        const auto k = line.find("\"step\": ");
        if (k == std::string::npos) continue;
        if (std::strtoll(line.c_str() + k + 8, nullptr, 10) > keep_through_step) break;
        put(line);
      }
    } catch (...) {
      std::free(buf);
      if (in != nullptr) std::fclose(in);
      std::fclose(f_);
      throw;
    }
    std::free(buf);
    if (in != nullptr) std::fclose(in);
  }
}

MetricsWriter::~MetricsWriter() {
  if (f_) std::fclose(f_);
}

void MetricsWriter::write(const JsonLine& line) {
  put(line.text());
  if (tb_) {
    int64_t step = -1;
    const auto values = line.scalars(&step);
    if (step >= 0 && !values.empty()) tb_->scalars(step, values);
  }
}

void MetricsWriter::add_tensorboard(const std::string& dir) {
  tb_ = std::make_unique<EventFileWriter>(dir);
}

std::string MetricsWriter::tensorboard_path() const {
  return tb_ ? tb_->path() : std::string();
}

std::string tensorboard_tag(const std::string& column) {
  if (column == "loss") return "loss_metrics/global_avg_loss";
  if (column == "tokens_per_s") return "throughput(tps)";
  if (column == "val_loss") return "validation_metrics/loss";
  if (column.rfind("peak_", 0) == 0) return "memory/" + column;
  return column;
}

namespace {

void add_scalars(const Json& obj, const std::string& prefix,
                 std::vector<std::pair<std::string, float>>* out) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    const Json& v = it.value();
    if (v.is_object()) {
      add_scalars(v, prefix + it.key() + "/", out);
    } else if (v.is_number() && it.key() != "step") {
      out->emplace_back(prefix.empty() ? tensorboard_tag(it.key()) : prefix + it.key(),
                        v.get<float>());
    }
  }
}

}  // namespace

std::vector<std::pair<std::string, float>> JsonLine::scalars(int64_t* step) const {
  *step =
      row_.contains("step") && row_["step"].is_number_integer() ? row_["step"].get<int64_t>() : -1;
  std::vector<std::pair<std::string, float>> out;
  add_scalars(row_, "", &out);
  return out;
}

void MetricsWriter::put(const std::string& text) {
  // Every row reaches the file or the run fails naming it: a full disk must not lose rows
  // silently.
  errno = 0;
  const bool ok = std::fprintf(f_, "%s\n", text.c_str()) >= 0 && std::fflush(f_) == 0;
  if (!ok || std::ferror(f_)) {
    const int err = errno;
    throw RuntimeFailure("cannot write '" + path_ +
                         "': " + (err != 0 ? std::strerror(err) : "a write did not complete"));
  }
}

}  // namespace kktrain
