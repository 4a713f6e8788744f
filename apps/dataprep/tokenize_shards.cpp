// Text files through a tokenizer into llm.c shards (apps/dataprep/tokenize_shards.hpp).
//
// Streaming: documents are read in batches of at most TokenizeOptions::batch_bytes of text (a
// document is read whole), the batch's documents are encoded in parallel (one text::Encoder per
// worker thread, documents handed out one at a time), and their ids appended to the shards in
// document order, so memory is bounded by the batch and the output bytes are the same for any
// thread count. A batch of one document (a text file larger than a batch) is encoded by one
// encoder whose long segments' pieces are spread over the threads
// (text::Encoder::set_piece_threads). A stop request (TokenizeOptions::stop_requested) hands out
// no more documents, and this run's shards are removed.
#include "apps/dataprep/tokenize_shards.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>

#include "apps/dataprep/tokenize_inputs.hpp"
#include "core/errors.hpp"
#include "core/fan_out.hpp"
#include "core/files.hpp"
#include "core/log.hpp"
#include "io/token_shards.hpp"
#include "parallel/threads.hpp"
#include "text/tokenizer.hpp"

namespace kktrain {

namespace {

using Clock = std::chrono::steady_clock;

// What the run did so far (read by the progress line while workers encode).
struct Progress {
  std::atomic<int64_t> bytes{0}, documents{0}, tokens{0};
};

int usable_cpus() {
  return std::max(1, plan_threads(read_thread_inputs()).allowed_cpus);
}

double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // Linux reports KiB
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

// The EOS id each document ends with, or -1 for none.
int32_t eos_id(const text::Tokenizer& tok, const TokenizeOptions& o, const std::string& path) {
  if (o.eos == Eos::none) return -1;
  if (o.eos == Eos::token) {
    if (auto id = tok.token_to_id(o.eos_token)) return *id;
    throw InputError("--eos '" + o.eos_token + "' is not a token of the tokenizer '" + path + "'");
  }
  if (auto id = tok.eos_id()) return *id;
  if (const auto it = tok.config().special_tokens.find("eos_token");
      it != tok.config().special_tokens.end())  // named, but no token
    throw InputError("eos_token '" + it->second + "' of '" + tok.config().path +
                     "' is not a token of the vocabulary of '" + path +
                     "': give --eos TOKEN (the token that ends each document) or --no-eos");
  throw InputError("the tokenizer '" + path +
                   "' names no eos_token (tokenizer_config.json): give --eos TOKEN (the token "
                   "that ends each document) or --no-eos");
}

// Encodes docs[i] into ids[i] (then the EOS id) on one worker thread per encoder (at most one per
// document), documents handed out in turn; `tick` runs on the calling thread every half second
// meanwhile. The first failure (by document order) is rethrown once every worker has stopped.
// A stop request (`stop`, when set) hands out no more documents (core/fan_out.hpp).
void encode_batch(std::vector<std::vector<int32_t>>* ids, const std::vector<InputDocument>& docs,
                  std::vector<text::Encoder>& encoders, int32_t eos, Progress* progress,
                  const std::function<void()>& tick, const std::function<int()>& stop) {
  ids->assign(docs.size(), {});
  FanOutHooks hooks;
  hooks.tick = tick;
  if (stop) hooks.stop = [&] { return stop() != 0; };
  fan_out(
      docs.size(), static_cast<int>(encoders.size()),
      [&](int w, std::size_t i) {
        auto count = [&] {  // a document whose encoding fails counts as read too
          progress->bytes += static_cast<int64_t>(docs[i].text.size());
          progress->documents += 1;
          progress->tokens += static_cast<int64_t>((*ids)[i].size());
        };
        try {
          encoders[static_cast<std::size_t>(w)].encode(&(*ids)[i], docs[i].text,
                                                       text::SpecialTokens::add);
          if (eos >= 0) (*ids)[i].push_back(eos);
        } catch (...) {
          count();
          throw;
        }
        count();
      },
      hooks);
}

// When ProgressLine::tick shows the line: at most every half second, or now (the last line).
enum class Show { when_due, now };

// The progress line, updated in place on a terminal: at most every half second.
class ProgressLine {
 public:
  ProgressLine(const Progress& p, int64_t total_bytes)
      : p_(p), total_(total_bytes), tty_(::isatty(2) == 1), start_(Clock::now()) {}
  void tick(Show show = Show::when_due) {
    if (!tty_) return;
    const auto now = Clock::now();
    if (show == Show::when_due && now - last_ < std::chrono::milliseconds(500)) return;
    last_ = now;
    const double s = seconds(), mb = p_.bytes / 1e6;
    const double rate = s > 0 ? mb / s : 0;
    std::string eta = "?";
    if (rate > 0 && total_ > 0) {
      const double left = std::max(0.0, (total_ / 1e6 - mb) / rate);
      eta = std::to_string(int64_t(left) / 60) + "m" + std::to_string(int64_t(left) % 60) + "s";
    }
    std::fprintf(stderr,
                 "\rtokenize: %.1f / %.1f MB, %.2f MB/s, %lld documents, %lld tokens, "
                 "ETA %s\x1b[K",
                 mb, total_ / 1e6, rate, static_cast<long long>(p_.documents.load()),
                 static_cast<long long>(p_.tokens.load()), eta.c_str());
    std::fflush(stderr);
    shown_ = true;
  }
  void end() {
    if (shown_) std::fputs("\n", stderr);
  }
  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

 private:
  const Progress& p_;
  int64_t total_;
  bool tty_, shown_ = false;
  Clock::time_point start_, last_{};
};

}  // namespace

TokenizeSummary tokenize_to_shards(const TokenizeOptions& o,
                                   const text::TokenizerFiles& tokenizer) {
  const std::string& tok_path = tokenizer.given;
  // Everything that can be checked is checked before anything is written.
  const int64_t total_bytes = check_inputs(o.inputs);
  std::vector<std::pair<std::string, std::string>> named;
  for (const auto& in : o.inputs) named.emplace_back("input", in);
  // --out's directory is made when missing (with its parents), once the rest has been checked.
  const std::string first = train_shard_name(o.out, 0);
  const std::filesystem::path out_dir = std::filesystem::path(first).parent_path();
  std::error_code ec;
  const bool make_dir =
      !out_dir.empty() && !std::filesystem::exists(std::filesystem::symlink_status(out_dir, ec));
  if (make_dir) {
    if (const std::string why = unwritable_dir(out_dir.string()); !why.empty()) {
      throw UsageError("--out: cannot write '" + first + "': " + why);
    }
  } else {
    check_output_file("--out", first, named);
  }
  const auto old = existing_shards(o.out);
  if (!old.empty()) {
    throw UsageError("--out: '" + old.front() + "' exists (" + std::to_string(old.size()) +
                     " shard file(s) of an earlier run with this prefix): remove them or give "
                     "another --out");
  }
  const auto tok = text::Tokenizer::load(tokenizer);
  const int32_t eos = eos_id(*tok, o, tok_path);
  if (make_dir) {
    std::filesystem::create_directories(out_dir, ec);
    if (ec) {
      throw UsageError("--out: cannot make the directory '" + out_dir.string() + "' to write '" +
                       first + "': " + ec.message());
    }
    check_output_file("--out", first, named);
  }
  const std::string removed = removed_temporaries_text(remove_stale_shard_temporaries(o.out));
  if (!removed.empty()) log::info("--out: " + removed);
  const int cpus = usable_cpus();
  const int threads = o.threads > 0 ? std::min(o.threads, cpus) : cpus;
  if (o.threads > cpus) {
    log::warn("--threads " + std::to_string(o.threads) + ": this process may use " +
              std::to_string(cpus) + " CPU(s); encoding on " + std::to_string(threads));
  }
  std::vector<text::Encoder> encoders;
  for (int t = 0; t < threads; ++t) encoders.emplace_back(tok);
  // A batch of one document (a text file larger than a batch, or the last of the corpus) is
  // spread over the threads piece by piece instead (text::Encoder::set_piece_threads).
  std::vector<text::Encoder> solo;
  solo.emplace_back(tok);
  solo[0].set_piece_threads(threads);

  ShardPlan plan;
  plan.prefix = o.out;
  plan.ids = shard_ids_for_vocab(tok->vocab_size());
  plan.shard_tokens = o.shard_tokens;
  plan.val_tokens = o.val_tokens;
  ShardWriter writer(plan);
  DocumentReader reader(o.inputs, o.jsonl_key);
  Progress progress;
  ProgressLine line(progress, total_bytes);
  const int64_t max_bytes = o.batch_bytes;
  std::vector<InputDocument> batch;
  std::vector<std::vector<int32_t>> ids;
  const auto stopped = [&] { return o.stop_requested ? o.stop_requested() : 0; };
  while (stopped() == 0 && reader.next_batch(&batch, max_bytes)) {
    encode_batch(
        &ids, batch, batch.size() == 1 && threads > 1 ? solo : encoders, eos, &progress,
        [&] { line.tick(); }, o.stop_requested);
    if (stopped() != 0) break;  // the batch may be incomplete: none of it is written
    for (const auto& d : ids) writer.add_document(d.data(), static_cast<int64_t>(d.size()));
    line.tick();
  }
  if (const int sig = stopped()) {
    line.end();
    TokenizeSummary summary;
    summary.stopped_by = sig;
    summary.files_removed = writer.discard();
    return summary;
  }
  if (writer.tokens() == 0) {
    throw InputError("the inputs hold no text (no token to write)");
  }
  if (!writer.val_done()) {
    log::warn("--val-tokens " + std::to_string(o.val_tokens) + ": the corpus has only " +
              std::to_string(writer.tokens()) + " tokens; all of them went into the val shard");
  }
  TokenizeSummary summary;
  summary.shards = writer.finish();
  const auto& shards = summary.shards;
  line.tick(Show::now);
  line.end();
  const double s = line.seconds();
  log::info(
      "tokenize: " + std::to_string(o.inputs.size()) + " files, " +
      std::to_string(progress.documents.load()) + " documents, " + std::to_string(writer.tokens()) +
      " tokens (" + std::to_string(writer.val_tokens_written()) + " val) in " +
      std::to_string(shards.size()) + " shards of " + shard_ids_name(plan.ids) + " ids (" + o.out +
      "_*.bin); " + fixed(total_bytes / 1e6 / std::max(s, 1e-9), 2) + " MB/s, " + fixed(s, 2) +
      " s, " + std::to_string(threads) + " threads, peak RSS " + fixed(peak_rss_mib(), 1) + " MiB");
  summary.documents = progress.documents.load();
  summary.tokens = writer.tokens();
  summary.vocab_size = tok->vocab_size();
  return summary;
}

}  // namespace kktrain
