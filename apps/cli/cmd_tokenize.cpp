// `kktrain tokenize`: text through a Hugging Face tokenizer into llm.c-format token shards
// (io/token_shards.hpp; the pipeline is apps/dataprep/tokenize_shards.hpp), or one text's ids
// (--ids) and one list of ids' text (--decode).
//
// SIGINT / SIGTERM (apps/train/signals.hpp, not announced when they arrive): no more documents are
// handed out, this run's shards are removed, one line says so, and the exit is 128 + the signal.
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>

#include "apps/cli/commands.hpp"
#include "apps/dataprep/tokenize_shards.hpp"
#include "apps/train/signals.hpp"
#include "core/errors.hpp"
#include "core/log.hpp"
#include "io/token_shards.hpp"
#include "text/tokenizer.hpp"

namespace kktrain {

namespace {

int64_t parse_count(const std::string& opt, const std::string& v, int64_t lo, int64_t hi) {
  char* end = nullptr;
  errno = 0;
  const long long n = v.empty() ? 0 : std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0 || n < lo || n > hi) {
    throw UsageError("kktrain tokenize: " + opt + " '" + v + "': expected an integer in [" +
                     std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return n;
}

const char* signal_name(int sig) {
  return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal";
}

std::vector<int32_t> parse_ids(const std::string& list) {
  std::vector<int32_t> ids;
  std::size_t at = 0;
  while (at <= list.size()) {
    std::size_t end = list.find(',', at);
    if (end == std::string::npos) end = list.size();
    std::string item = list.substr(at, end - at);
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    if (!(item.empty() && end == list.size() && !ids.empty())) {
      ids.push_back(int32_t(parse_count("--decode", item, 0, 0x7fffffff)));
    }
    at = end + 1;
  }
  return ids;
}

int run_tokenize(const ParsedArgs& args, AppContext& ctx) {
  if (ctx.mpi->rank() != 0) return 0;
  const auto& opt = args.options;
  const std::string tok_path = opt.at("--tokenizer");
  const bool ids = !opt.at("--ids").empty(), decode = !opt.at("--decode").empty();
  if (ids || decode) {
    if (ids && decode) throw UsageError("kktrain tokenize: give --ids or --decode, not both");
    if (!args.positionals.empty() || !opt.at("--out").empty()) {
      throw UsageError("kktrain tokenize: " + std::string(ids ? "--ids" : "--decode") +
                       " takes no INPUT and no --out");
    }
    const auto tok = text::Tokenizer::load(tok_path);
    if (decode) {
      const std::string text = tok->decode(parse_ids(opt.at("--decode")));
      std::fwrite(text.data(), 1, text.size(), stdout);  // every byte, a NUL included
      std::fputc('\n', stdout);
      return 0;
    }
    text::Encoder enc(tok);
    std::string line;
    for (int32_t id : enc.encode(opt.at("--ids"), text::SpecialTokens::add)) {
      line += (line.empty() ? "" : ",") + std::to_string(id);
    }
    std::printf("%s\n", line.c_str());
    return 0;
  }
  TokenizeOptions o;
  o.inputs = args.positionals;
  o.out = opt.at("--out");
  if (o.inputs.empty()) throw UsageError("kktrain tokenize: no INPUT given (see --help)");
  if (o.out.empty()) throw UsageError("kktrain tokenize: --out PREFIX is required");
  o.jsonl_key = opt.at("--jsonl-key");
  o.eos_token = opt.at("--eos");
  const bool no_eos = args.flags.count("--no-eos") > 0;
  if (no_eos && !o.eos_token.empty()) {
    throw UsageError("kktrain tokenize: give --eos TOKEN or --no-eos, not both");
  }
  o.eos = no_eos ? Eos::none : o.eos_token.empty() ? Eos::from_config : Eos::token;
  o.shard_tokens = parse_count("--shard-tokens", opt.at("--shard-tokens"), 1, kMaxShardTokens);
  o.val_tokens = parse_count("--val-tokens", opt.at("--val-tokens"), 0, kMaxShardTokens);
  o.batch_bytes = parse_count("--batch-bytes", opt.at("--batch-bytes"), 1, int64_t(1) << 40);
  o.threads = opt.at("--threads").empty()
                  ? 0
                  : static_cast<int>(parse_count("--threads", opt.at("--threads"), 1, 4096));
  // SIGINT / SIGTERM stop between documents, and this run's shards are removed (a second signal
  // exits at once: its shards are then temporaries, which the next run with this --out removes).
  StopSignals signals(Announce::no);
  o.stop_requested = [] { return StopSignals::received(); };
  const TokenizeSummary s = tokenize_to_shards(o, text::locate_tokenizer(tok_path));
  if (s.stopped_by == 0) return 0;
  log::info(std::string("tokenize: stopped by ") + signal_name(s.stopped_by) +
            " before the end: removed this run's " + std::to_string(s.files_removed) +
            " shard file(s), complete or being written; no shard of this run was kept");
  return 128 + s.stopped_by;
}

}  // namespace

Command tokenize_command() {
  CommandSpec s;
  s.name = "tokenize";
  s.synopsis =
      "tokenize --tokenizer PATH INPUT... --out PREFIX [options]\n"
      "       kktrain tokenize --tokenizer PATH --ids TEXT | --decode ID,ID,...";
  s.summary = "Tokenize text files into llm.c-format token shards (or show ids / text).";
  s.details =
      "PATH is a model directory holding tokenizer.json (and tokenizer_config.json), or a\n"
      "tokenizer.json. Each INPUT text file is one document; a .jsonl INPUT gives one document\n"
      "per line, the string at --jsonl-key (default text). Each document is encoded with the\n"
      "tokenizer's special tokens (its BOS where it adds one), then the EOS token.\n"
      "Inputs must be UTF-8 (invalid bytes are an error naming the file and the byte offset).\n\n"
      "Output: PREFIX_val_000000.bin (with --val-tokens), PREFIX_000000.bin, PREFIX_000001.bin,\n"
      "...: llm.c shards (256 int32 header: magic, version, token count; then the ids), uint16\n"
      "ids (magic 20240520, version 1) when the vocabulary fits 16 bits, else uint32 ids (magic\n"
      "20240801, version 7). A document never straddles two shards (one longer than\n"
      "--shard-tokens gets a shard of its own). Shards appear complete and together (written\n"
      "under temporary names, renamed at the end); a failure leaves none of this run's shards,\n"
      "nor does SIGINT or SIGTERM, which stops the run between documents, removes its shards,\n"
      "says so and exits 130 or 143 (a second signal exits at once, leaving temporaries that\n"
      "the next run with this PREFIX removes). Train on them with data.path: PREFIX_*.bin. The\n"
      "output bytes are the same for any --threads.\n\n"
      "options:\n"
      "  --tokenizer PATH    model directory or tokenizer.json (required)\n"
      "  --out PREFIX        shard name prefix (its missing directories are made)\n"
      "  --jsonl-key K       the key of a .jsonl line's text (default text)\n"
      "  --eos TOKEN         end each document with TOKEN (default: tokenizer_config.json's\n"
      "                      eos_token)\n"
      "  --no-eos            end documents with nothing\n"
      "  --shard-tokens N    tokens per shard (default 100000000)\n"
      "  --val-tokens N      whole documents into PREFIX_val_000000.bin first, until it holds\n"
      "                      at least N tokens (default 0: no val shard)\n"
      "  --threads N         encoding threads (default and most: the CPUs this process may use)\n"
      "  --batch-bytes N     text read and encoded at a time (default 16 MiB; memory grows with "
      "it)\n"
      "  --ids TEXT          print TEXT's ids, comma-separated (with the special tokens the\n"
      "                      tokenizer adds; no EOS)\n"
      "  --decode IDS        print the text of comma-separated ids, then a newline\n\n"
      "Progress: on a terminal a line updated in place (MB/s, documents, tokens, ETA); always a\n"
      "summary line at the end (files, documents, tokens, shards, MB/s, seconds, peak RSS).\n";
  s.positionals = {};
  s.more_positionals = "INPUT";
  s.takes_overrides = false;
  s.flags = {"--no-eos"};
  s.options = {{"--tokenizer", ""},
               {"--out", ""},
               {"--jsonl-key", "text"},
               {"--eos", ""},
               {"--shard-tokens", "100000000"},
               {"--val-tokens", "0"},
               {"--threads", ""},
               {"--batch-bytes", std::to_string(kBatchBytes)},
               {"--ids", ""},
               {"--decode", ""}};
  s.required_options = {"--tokenizer"};
  return Command{s, run_tokenize, false};
}

}  // namespace kktrain
