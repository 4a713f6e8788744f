// `kktrain generate MODEL [--prompt TEXT | --prompt-ids 1,2,3] [--tokenizer PATH]
// [--max-new-tokens N] [--temperature T] [--top-k K] [--seed S]`: continues a prompt with a model
// file, one token at a time through a KV cache (model/generate.hpp); a text prompt goes through
// the model's tokenizer and the answer is printed as it is generated
// (apps/dataprep/text_model.hpp).

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "apps/cli/commands.hpp"
#include "apps/dataprep/chat_template_file.hpp"
#include "apps/dataprep/text_model.hpp"
#include "apps/train/model_source.hpp"
#include "core/errors.hpp"
#include "core/files.hpp"
#include "core/log.hpp"
#include "core/strings.hpp"
#include "io/data.hpp"
#include "io/finite_weights.hpp"
#include "io/h5_rows.hpp"
#include "io/lora_merge.hpp"
#include "io/model_weights.hpp"
#include "model/generate.hpp"
#include "text/jinja.hpp"

namespace kktrain {

namespace {

int64_t parse_int(const std::string& opt, const std::string& text, int64_t min) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || v < min) {
    throw UsageError("generate: " + opt + " must be an integer of at least " + std::to_string(min) +
                     ", got '" + text + "'");
  }
  return v;
}

double parse_number(const std::string& opt, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || errno != 0 || !std::isfinite(v) || v < 0) {
    throw UsageError("generate: " + opt + " must be a number of at least 0, got '" + text + "'");
  }
  return v;
}

std::vector<int32_t> prompt_ids(const std::string& text, int64_t vocab) {
  std::vector<int32_t> ids;
  std::string item;
  for (std::size_t i = 0; i <= text.size(); ++i) {
    if (i < text.size() && text[i] != ',') {
      item += text[i];
      continue;
    }
    const int64_t id = parse_int("--prompt-ids", item, 0);
    if (id >= vocab) {
      throw UsageError("generate: --prompt-ids: token id " + item +
                       " is not below the model's "
                       "vocab_size " +
                       std::to_string(vocab));
    }
    ids.push_back(static_cast<int32_t>(id));
    item.clear();
  }
  return ids;
}

// A text prompt as ids: through the model's tokenizer (with its special tokens, as Hugging
// Face's encode), or its bytes for a byte-level model (apps/dataprep/text_model.hpp).
struct PromptText {
  std::vector<int32_t> ids;
  std::shared_ptr<const text::Tokenizer> tokenizer;  // null: byte-level
};

PromptText text_prompt(const std::string& text, const std::string& model, const FileAttrs& attrs,
                       const ModelConfig& cfg, const std::string& tokenizer) {
  const ModelText t = model_file_text(model, attrs, cfg.vocab_size, tokenizer);
  if (t.vocab != TextVocab::tokenizer && cfg.vocab_size < 256) {
    throw UsageError(
        "generate: --prompt is byte-level text, which needs vocab_size >= 256; "
        "this model has " +
        std::to_string(cfg.vocab_size) + " (give token ids with --prompt-ids)");
  }
  if (t.vocab == TextVocab::unknown) {
    throw UsageError("generate: --prompt is text, but " + t.model + " has a vocabulary of " +
                     std::to_string(cfg.vocab_size) +
                     " tokens that is not kktrain's byte-level one and no tokenizer (" + t.why +
                     "): give --tokenizer PATH, or token ids with --prompt-ids");
  }
  PromptText p;
  if (t.vocab == TextVocab::bytes) {
    p.ids = byte_tokenize(text);
    return p;
  }
  p.tokenizer = load_model_tokenizer(t);
  text::Encoder enc(p.tokenizer);
  p.ids = enc.encode(text, text::SpecialTokens::add);
  return p;
}

// The chat template of --chat: --chat-template FILE, else chat_template.jinja beside the
// tokenizer.json, else tokenizer_config.json's chat_template
// (apps/dataprep/chat_template_file.hpp).
std::unique_ptr<text::jinja::Template> chat_template(const text::Tokenizer& tok,
                                                     const std::string& file) {
  const std::optional<ChatTemplateText> t = find_chat_template(
      tok, "--chat-template", file.empty() ? std::nullopt : std::optional<std::string>(file));
  if (!t) {
    throw UsageError(
        "generate: --chat renders the message with the model's chat template, and "
        "the tokenizer '" +
        tok.path() +
        "' has none (no chat_template.jinja beside it, no chat_template in "
        "tokenizer_config.json): give --chat-template FILE, or use --prompt");
  }
  return std::make_unique<text::jinja::Template>(t->text, t->source);
}

// --chat: [--system message,] the user message rendered with the chat template and the
// assistant's turn opened (add_generation_prompt), tokenized without adding special tokens (the
// template writes them); the answer ends at the first special token (its end of turn) or EOS.
PromptText chat_prompt(const std::string& user, const std::string& system,
                       const std::string& template_file, const std::string& model,
                       const FileAttrs& attrs, const ModelConfig& cfg, const std::string& tokenizer,
                       SamplingOptions* o) {
  const ModelText t = model_file_text(model, attrs, cfg.vocab_size, tokenizer);
  if (t.vocab != TextVocab::tokenizer) {
    throw UsageError("generate: --chat needs the model's tokenizer and chat template, and " +
                     t.model + " has no tokenizer.json: give --tokenizer PATH, or use --prompt");
  }
  PromptText p;
  p.tokenizer = load_model_tokenizer(t);
  const auto tmpl = chat_template(*p.tokenizer, template_file);
  namespace jinja = text::jinja;
  auto message = [](const std::string& role, const std::string& content) {
    jinja::Dict d;
    d.set("role", jinja::Value::string(role));
    d.set("content", jinja::Value::string(content));
    return jinja::Value::make_dict(std::move(d));
  };
  std::vector<jinja::Value> list;
  if (!system.empty()) list.push_back(message("system", system));
  list.push_back(message("user", user));
  const jinja::RenderedChat rc =
      jinja::render_chat(*tmpl, jinja::Value::make_list(std::move(list)),
                         jinja::GenerationPrompt::yes, p.tokenizer->config().special_tokens);
  text::Encoder enc(p.tokenizer);
  p.ids = enc.encode(rc.text, text::SpecialTokens::none);
  for (int32_t id = 0; id < p.tokenizer->vocab_size(); ++id) {
    if (p.tokenizer->is_special(id)) o->stop_tokens.push_back(id);
  }
  if (p.tokenizer->eos_id()) o->stop_tokens.push_back(*p.tokenizer->eos_id());
  return p;
}

// Prints generated tokens as text while they arrive (stdout flushed per piece): bytes, or the
// tokenizer's decoded text with a character held until its bytes are complete. Special tokens
// and the EOS that ends the answer, and ids the tokenizer has no token for, print nothing.
class TextPrinter {
 public:
  explicit TextPrinter(std::shared_ptr<const text::Tokenizer> tok) : tok_(std::move(tok)) {
    if (tok_) stream_.emplace(*tok_);
  }
  void push(int32_t id) {
    if (!tok_) return write(std::string(1, static_cast<char>(id & 0xff)));
    if (id >= tok_->vocab_size() || tok_->is_special(id) || id == tok_->eos_id()) return;
    write(stream_->push(id));
  }
  void finish() {
    if (stream_) write(stream_->finish());
    write("\n");
  }

 private:
  void write(const std::string& s) {
    if (s.empty()) return;
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
  }
  std::shared_ptr<const text::Tokenizer> tok_;
  std::optional<text::StreamDecoder> stream_;
};

// Kokkos reports a failed allocation as a runtime_error of several lines (Kokkos 3.4: "Kokkos
// failed to allocate memory for label ... Allocation of size 29.8 G failed ...\n\nTraceback ...";
// Kokkos 4.x: "Kokkos ERROR: Host memory space failed to allocate 1024 MiB (label=...)."): one
// line saying what could not be allocated, exit 1. Anything else returns.
void throw_if_allocation_failure(const std::runtime_error& e, int64_t positions) {
  if (dynamic_cast<const Error*>(&e)) return;
  std::string what = e.what();
  what = what.substr(0, what.find('\n'));
  if (what.rfind("Kokkos", 0) != 0 || what.find("failed to allocate") == std::string::npos) return;
  while (!what.empty() && what.back() == ' ') what.pop_back();
  throw RuntimeFailure("generate: out of memory for a model and KV cache of " +
                       std::to_string(positions) + " positions: " + what +
                       " (fewer --max-new-tokens need a smaller cache)");
}

// The sampling options of the command line (--max-new-tokens, --temperature, --top-k, --seed).
SamplingOptions sampling_options(const ParsedArgs& args) {
  SamplingOptions o;
  o.max_new_tokens = parse_int("--max-new-tokens", args.options.at("--max-new-tokens"), 0);
  o.temperature = parse_number("--temperature", args.options.at("--temperature"));
  o.top_k = parse_int("--top-k", args.options.at("--top-k"), 0);
  o.seed = static_cast<uint64_t>(parse_int("--seed", args.options.at("--seed"), 0));
  return o;
}

// The decoder of `opened`'s weights as the file stores them (bf16 stays bf16; fp32 masters and
// float16 files are fp32), with a KV cache of `positions`; *dtype is the weights' dtype.
std::unique_ptr<Decoder> load_decoder(std::unique_ptr<WeightSource> opened, const ModelConfig& cfg,
                                      int64_t positions, DType* dtype) {
  *dtype = opened->stored_dtype("model.embed_tokens.weight") == DType::bfloat16 ? DType::bfloat16
                                                                                : DType::float32;
  const DType d = *dtype;
  const auto src =
      with_finite_check(std::move(opened), "generate", [d](const std::string&) { return d; });
  try {
    return std::make_unique<Decoder>(
        cfg, d,
        [&](const std::string& name) {
          const auto shape = src->shape(name);
          if (!shape) {
            throw InputError("generate: '" + src->path() + "' has no tensor " + name +
                             " (the model needs it)");
          }
          return src->read_rows_f32(name, 0, shape->empty() ? 1 : (*shape)[0]);
        },
        std::max<int64_t>(1, positions));
  } catch (const std::runtime_error& e) {
    throw_if_allocation_failure(e, positions);
    throw;
  }
}

int run_generate(const ParsedArgs& args, AppContext& ctx) {
  if (ctx.mpi->size() > 1) throw UsageError("kktrain generate runs on one rank");
  const std::string& chat = args.options.at("--chat");
  const std::string& text = chat.empty() ? args.options.at("--prompt") : chat;
  const std::string& ids_text = args.options.at("--prompt-ids");
  const int given = !args.options.at("--prompt").empty() + !ids_text.empty() + !chat.empty();
  if (given != 1) {
    throw UsageError(
        "generate: give --prompt TEXT, --chat MESSAGE or --prompt-ids 1,2,3 (one of them)");
  }
  if (chat.empty() &&
      (!args.options.at("--system").empty() || !args.options.at("--chat-template").empty())) {
    throw UsageError("generate: --system and --chat-template go with --chat");
  }
  SamplingOptions o = sampling_options(args);

  // The same loader and checks as model.init_from (apps/train/model_source.hpp): the architecture
  // within the config's bounds, every tensor the model's and of its shape, values finite.
  SingleCommunicator one;
  auto opened = with_lora_merged(open_weights(args.positionals.at(0), "generate", one));
  const ModelConfig cfg = check_self_described(*opened, "generate");
  PromptText pt;
  if (!chat.empty()) {
    pt = chat_prompt(chat, args.options.at("--system"), args.options.at("--chat-template"),
                     args.positionals.at(0), opened->attributes(), cfg,
                     args.options.at("--tokenizer"), &o);
  } else if (!text.empty()) {
    pt = text_prompt(text, args.positionals.at(0), opened->attributes(), cfg,
                     args.options.at("--tokenizer"));
    if (pt.tokenizer && pt.tokenizer->eos_id()) o.stop_tokens.push_back(*pt.tokenizer->eos_id());
  } else {
    pt.ids = prompt_ids(ids_text, cfg.vocab_size);
  }
  const std::vector<int32_t>& prompt = pt.ids;
  const int64_t positions = static_cast<int64_t>(prompt.size()) + o.max_new_tokens;
  if (positions > cfg.max_seq_len) {
    throw UsageError("generate: " + std::to_string(prompt.size()) + " prompt tokens + " +
                     std::to_string(o.max_new_tokens) + " new ones exceed the model's " +
                     "max_seq_len " + std::to_string(cfg.max_seq_len));
  }
  const double t_load = now_s();
  DType dtype = DType::float32;
  const std::unique_ptr<Decoder> decoder = load_decoder(std::move(opened), cfg, positions, &dtype);
  Decoder& dec = *decoder;
  const double t0 = now_s();
  TextPrinter printer(pt.tokenizer);
  const std::vector<int32_t> out = generate_tokens(dec, prompt, o, [&](int32_t id) {
    if (!text.empty()) printer.push(id);
  });
  const double seconds = now_s() - t0;
  if (!text.empty()) {
    printer.finish();
  } else {
    std::string line;
    for (int32_t t : out) line += (line.empty() ? "" : ",") + std::to_string(t);
    std::printf("%s\n", line.c_str());
  }
  char info[256];
  std::snprintf(info, sizeof(info),
                "generate: %zu prompt + %zu new tokens in %.2f s (%.1f tokens/s; weights %s, "
                "%.1f MiB, loaded in %.2f s; KV cache %.1f MiB)",
                prompt.size(), out.size(), seconds,
                static_cast<double>(prompt.size() + out.size()) / std::max(seconds, 1e-9),
                dtype_name(dtype), dec.weight_bytes() / 1048576.0, t0 - t_load,
                dec.cache_bytes() / 1048576.0);
  log::info(info);
  return 0;
}

}  // namespace

Command generate_command() {
  CommandSpec s;
  s.name = "generate";
  s.synopsis =
      "generate MODEL (--prompt TEXT | --chat MESSAGE [--system TEXT] [--chat-template FILE] "
      "| --prompt-ids 1,2,3) [--tokenizer PATH] [--max-new-tokens N] [--temperature T] "
      "[--top-k K] [--seed S]";
  s.summary = "Continue a prompt with a model (greedy or sampled), one token at a time.";
  s.details =
      "MODEL is a run directory, a checkpoint (file, step directory or root), a kktrain\n"
      "export or a Hugging Face model directory. --prompt is text, encoded by the model's\n"
      "tokenizer (--tokenizer PATH, a tokenizer.json or a directory holding one; else the\n"
      "model directory's tokenizer.json, or that of the directory its checkpoint was trained\n"
      "from) with its special tokens; the answer is printed as text while it is generated and\n"
      "ends at the tokenizer's EOS. A byte-level model (kktrain's own, vocab_size >= 256)\n"
      "takes the text's bytes. --chat MESSAGE is a user turn (after --system TEXT, if given)\n"
      "rendered with the model's chat template (--chat-template FILE, else chat_template.jinja\n"
      "beside the tokenizer.json, else tokenizer_config.json's) with the assistant's turn\n"
      "opened, as transformers' apply_chat_template(add_generation_prompt=True); the reply\n"
      "ends at the first special token (the end of its turn) or EOS.\n"
      "--prompt-ids are token ids and the answer is printed as ids.\n"
      "Each new token runs one position through a KV cache; prompt + new tokens must fit\n"
      "max_seq_len.\n"
      "Weights stay in the dtype the file stores (LoRA adapters merged); activations and\n"
      "logits are fp32. --temperature 0 (default) is greedy: the argmax of the logits (the\n"
      "first of equal maxima). Otherwise tokens are drawn from softmax(logits / T) over the\n"
      "--top-k largest (0: all), keyed on --seed: the same seed gives the same answer.\n";
  s.positionals = {"MODEL"};
  s.takes_overrides = false;
  s.options = {{"--prompt", ""},       {"--prompt-ids", ""},
               {"--tokenizer", ""},    {"--max-new-tokens", "32"},
               {"--temperature", "0"}, {"--top-k", "0"},
               {"--seed", "0"},        {"--chat", ""},
               {"--system", ""},       {"--chat-template", ""}};
  return Command{s, run_generate, true};
}

}  // namespace kktrain
