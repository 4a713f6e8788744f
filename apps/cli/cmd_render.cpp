// `kktrain render CONFIG [overrides] [--count N] [--tokens]`: the first N examples of data.path
// (data.format chat or prompt_completion) as the trainer sees them
// (apps/dataprep/example_renderer.hpp), one JSON object per line on stdout, in file order.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "apps/cli/commands.hpp"
#include "apps/dataprep/example_renderer.hpp"
#include "core/errors.hpp"
#include "core/files.hpp"
#include "io/data.hpp"

namespace kktrain {

namespace {

using Json = nlohmann::ordered_json;

int64_t parse_count(const std::string& v) {
  char* end = nullptr;
  errno = 0;
  const long long n = v.empty() ? -1 : std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0 || n < 0) {
    throw UsageError("kktrain render: --count '" + v +
                     "': expected an integer >= 0 (0: every example)");
  }
  return n;
}

// A preference pair's side: its text, and the ids and mask of the pair's [0, shared) (a shared
// prompt) then [b, e) (its own tokens; the markers of io/example_data.hpp are prompt tokens, 0).
Json side_json(const std::string& text, const RenderedExample& ex, size_t shared, size_t b,
               size_t e, bool tokens) {
  Json j = {{"text", text}};
  if (tokens) {
    std::vector<int32_t> ids(ex.ids.begin(), ex.ids.begin() + shared);
    ids.insert(ids.end(), ex.ids.begin() + b, ex.ids.begin() + e);
    std::vector<uint8_t> mask(ex.loss_mask.begin(), ex.loss_mask.begin() + shared);
    mask.insert(mask.end(), ex.loss_mask.begin() + b, ex.loss_mask.begin() + e);
    for (auto& m : mask) m = m == 1 ? 1 : 0;
    j["ids"] = ids;
    j["loss_mask"] = mask;
  }
  return j;
}

// One example as its output line.
Json example_json(const RenderedExample& ex, bool tokens) {
  if (ex.rejected_begin > 0) {  // a preference pair
    const size_t r = static_cast<size_t>(ex.rejected_begin);
    const size_t shared = static_cast<size_t>(ex.shared);
    Json j = {{"chosen", side_json(ex.text, ex, 0, 0, r, tokens)},
              {"rejected", side_json(ex.rejected_text, ex, shared, r, ex.ids.size(), tokens)}};
    if (ex.fate == ExampleFate::truncated) j["truncated"] = ex.full_tokens;
    return j;
  }
  Json j = {{"text", ex.text}};
  if (ex.fate == ExampleFate::truncated) j["truncated"] = ex.full_tokens;
  if (ex.fate == ExampleFate::dropped) j["dropped"] = ex.full_tokens;
  if (ex.fate == ExampleFate::empty) j["empty"] = true;
  if (tokens) {
    j["ids"] = ex.ids;
    j["loss_mask"] = ex.loss_mask;
  }
  return j;
}

int run_render(const ParsedArgs& args, AppContext& ctx) {
  const int64_t count = parse_count(args.options.at("--count"));
  const bool tokens = args.flags.count("--tokens") > 0;
  const Config cfg = load_app_config(args, ctx);
  if (cfg.data.paths.empty()) {
    throw InputError("kktrain render shows examples of data.path, and data.path is unset");
  }
  const ExampleRenderer renderer = ExampleRenderer::open(cfg, run_text(cfg));
  int64_t shown = 0;
  for (const std::string& file : data_files(cfg.data)) {
    FileLines in;  // a regular file: a FIFO or a directory is refused, never waited on
    if (auto why = in.open(file)) {
      throw InputError("data.path '" + file + "' " +
                       (why->rfind("is ", 0) == 0 ? *why : "cannot be read: " + *why));
    }
    std::string line;
    for (int64_t no = 1; (count == 0 || shown < count) && in.next(&line); ++no) {
      if (blank_line(line)) continue;
      const RenderedExample ex = renderer.render(line, file, no);
      if (ctx.mpi->rank() == 0) std::printf("%s\n", example_json(ex, tokens).dump().c_str());
      ++shown;
    }
    if (count > 0 && shown >= count) break;
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace

Command render_command() {
  CommandSpec s;
  s.name = "render";
  s.synopsis = "render CONFIG [key.path=VALUE ...] [--count N] [--tokens]";
  s.summary = "Print the first examples of data.path as the trainer sees them (chat data).";
  s.details =
      "For data.format chat, prompt_completion or preference: the first N examples of\n"
      "data.path, in file\n"
      "order (blank lines skipped), rendered with the model's chat template and tokenized\n"
      "exactly as training does, one JSON object per line on stdout:\n"
      "  {\"text\": the rendered text}\n"
      "with --tokens also \"ids\" and \"loss_mask\" (1: the token is a loss target). An example\n"
      "longer than data.seq_len carries \"truncated\": or \"dropped\": its full token count\n"
      "(data.truncation; a dropped one has empty ids); an example of no tokens (a template\n"
      "that prints nothing for it) carries \"empty\": true (training skips it).\n"
      "A preference pair prints {\"chosen\": {...}, \"rejected\": {...}}, each side as above\n"
      "(prompt + completion; the mask on the completion's tokens).\n\n"
      "options:\n"
      "  --count N   examples to print (default 5; 0: all)\n"
      "  --tokens    also print ids and loss_mask\n"
      "Exit status: 0 on success, 2 with one line on stderr for any invalid input.\n";
  s.positionals = {"CONFIG"};
  s.flags = {"--tokens"};
  s.options = {{"--count", "5"}};
  s.takes_overrides = true;
  return Command{s, run_render, false};
}

}  // namespace kktrain
