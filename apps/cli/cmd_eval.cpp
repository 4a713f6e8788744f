// `kktrain eval MODEL [--data FILE]... [--task FILE]... [--json OUT] [--tokenizer PATH]
// [key.path=VALUE ...]`: the loss and perplexity of data files and the multiple-choice scores of
// task files with a model's weights (apps/eval/evaluation.hpp), on one rank or with the model
// sharded and the rows shared over the ranks of an mpirun launch.
#include <cmath>
#include <cstdio>

#include "apps/cli/commands.hpp"
#include "apps/dataprep/text_model.hpp"
#include "apps/eval/evaluation.hpp"
#include "apps/train/app_model.hpp"
#include "apps/train/model_source.hpp"
#include "core/errors.hpp"
#include "core/files.hpp"
#include "core/log.hpp"
#include "io/durable.hpp"
#include "io/lora_merge.hpp"
#include "io/model_weights.hpp"
#include "model/transformer.hpp"
#include "parallel/agree.hpp"
#include "parallel/communicator.hpp"

namespace kktrain {

namespace {

bool overrides_key(const std::vector<std::string>& overrides, const std::string& key) {
  for (const std::string& o : overrides) {
    if (o.rfind(key + "=", 0) == 0) return true;
  }
  return false;
}

// The config of an evaluation: the model file's architecture and storage dtype
// (model.init_from, as training from it would take them), data.seq_len the model's length (at
// most kDefaultEvalLength) unless given, and the overrides.
constexpr int64_t kDefaultEvalLength = 2048;

Config eval_config(const WeightSource& src, const std::vector<std::string>& overrides, int world) {
  const ModelConfig m = model_file_config(src, "eval");
  const ModelFileArchitecture arch = source_architecture(src, "eval");
  YAML::Emitter text;
  text << YAML::BeginMap << YAML::Key << "model" << YAML::Value << YAML::BeginMap << YAML::Key
       << "init_from" << YAML::Value << YAML::DoubleQuoted << src.path() << YAML::Key << "dtype"
       << YAML::Value << "auto" << YAML::EndMap;
  // Computing in the weights' dtype, as the harness runs a model in its dtype, and (several
  // ranks) passing the units' outputs on in it, so that every rank count computes the same.
  const bool param = !overrides_key(overrides, "distributed.mp_policy.param_dtype") &&
                     !overrides_key(overrides, "distributed.autocast_dtype");
  const bool output = !overrides_key(overrides, "distributed.mp_policy.output_dtype");
  if (param || output) {
    text << YAML::Key << "distributed" << YAML::Value << YAML::BeginMap << YAML::Key << "mp_policy"
         << YAML::Value << YAML::BeginMap;
    if (param) text << YAML::Key << "param_dtype" << YAML::Value << YAML::Null;
    if (output) text << YAML::Key << "output_dtype" << YAML::Value << YAML::Null;
    text << YAML::EndMap << YAML::EndMap;
  }
  if (!overrides_key(overrides, "data.seq_len")) {
    text << YAML::Key << "data" << YAML::Value << YAML::BeginMap << YAML::Key << "seq_len"
         << YAML::Value << std::min(m.max_seq_len, kDefaultEvalLength) << YAML::EndMap;
  }
  text << YAML::EndMap;
  LoadOptions opts;
  opts.world_size = world;
  opts.checkpoint_dtype = model_file_dtype;
  opts.model_file_architecture = [&](const std::string&) {
    return std::optional<ModelFileArchitecture>(arch);
  };
  return load_config_text(text.c_str(), "eval", overrides, opts);
}

int run_eval(const ParsedArgs& args, AppContext& ctx) {
  std::unique_ptr<Communicator> comm = ctx.mpi->make_communicator();
  const std::vector<std::string> data =
      args.repeated.count("--data") ? args.repeated.at("--data") : std::vector<std::string>{};
  const std::vector<std::string> tasks =
      args.repeated.count("--task") ? args.repeated.at("--task") : std::vector<std::string>{};
  if (data.empty() && tasks.empty()) {
    throw UsageError("eval: give --data FILE or --task FILE (each may be given several times)");
  }
  const std::string json = args.options.at("--json");
  const std::string model_path = args.positionals.at(0);
  if (!json.empty()) {
    std::vector<std::pair<std::string, std::string>> inputs;
    for (const auto& f : data) inputs.emplace_back("data file", f);
    for (const auto& f : tasks) inputs.emplace_back("task file", f);
    collectively(*comm, [&] { check_output_file("--json", json, inputs); });
  }
  // A LoRA run's checkpoint is evaluated with its adapters merged, as generate and export do.
  std::unique_ptr<WeightSource> src = with_lora_merged(open_weights(model_path, "eval", *comm));
  const Config cfg =
      collectively(*comm, [&] { return eval_config(*src, args.overrides, comm->size()); });
  const ModelText text = collectively(*comm, [&] {
    return model_file_text(model_path, src->attributes(), cfg.model.vocab_size,
                           args.options.at("--tokenizer"));
  });
  const Evaluation ev = Evaluation::prepare(data, tasks, cfg, text, *comm, {});
  if (comm->rank() == 0) {
    if (!ctx.threads_warning.empty()) log::warn_about_launch(ctx.threads_warning);
    if (!ctx.threads.empty()) log::info(ctx.threads);
  }
  std::unique_ptr<Transformer> model = build_model(cfg, *comm, /*initialize=*/false);
  load_model_source(*model, std::move(src), *comm);
  const EvalFigures f = ev.run(*model, *comm, true);
  if (comm->rank() != 0) return 0;
  for (const std::string& line : eval_lines(f)) log::info(line);
  char info[256];
  std::snprintf(info, sizeof(info),
                "eval: %lld rows of %lld tokens on %d rank(s) in %.2f s (weights %s, compute %s)",
                static_cast<long long>(f.rows), static_cast<long long>(cfg.data.seq_len),
                comm->size(), f.seconds, dtype_name(cfg.precision.storage),
                dtype_name(cfg.precision.compute));
  log::info(info);
  if (!json.empty()) {
    Json out = Json::object();
    out["model"] = model_path;
    out["ranks"] = comm->size();
    out["seq_len"] = cfg.data.seq_len;
    out["micro_batch_size"] = cfg.data.micro_batch_size;
    const Json figures = eval_json(f);
    for (auto it = figures.begin(); it != figures.end(); ++it) out[it.key()] = it.value();
    write_text_atomically(json, json_text(out) + "\n");  // whole or not at all
  }
  return 0;
}

}  // namespace

Command eval_command() {
  CommandSpec s;
  s.name = "eval";
  s.synopsis =
      "eval MODEL [--data FILE]... [--task FILE]... [--json OUT] [--tokenizer PATH] "
      "[key.path=VALUE ...]";
  s.summary = "Loss and perplexity of data, multiple-choice scores of tasks, with a model.";
  s.details =
      "MODEL is a run directory, a checkpoint, a kktrain export or a Hugging Face directory.\n"
      "--data FILE: token files (.bin, .u16, .u32) in disjoint windows; text (a file is one\n"
      "document, a .jsonl of {\"text\"} lines one a line) through the model's tokenizer, in\n"
      "rolling windows with bits per byte; chat or prompt/completion JSONL rendered as training\n"
      "renders it, the loss over the assistant's tokens. --task FILE: JSONL of\n"
      "{\"context\", \"choices\", \"gold\"[, \"target_delimiter\"]} scored as\n"
      "lm-evaluation-harness scores multiple choice: acc, acc_norm (per character), acc_bytes\n"
      "(per UTF-8 byte), each with its standard error. The model's length is data.seq_len\n"
      "(default: max_seq_len, at most 2048); longer items are cut from the left and counted.\n"
      "Rows of data.micro_batch_size are shared over the ranks; every rank count gives the\n"
      "same figures. --json OUT writes every figure, with each choice's score.\n";
  s.positionals = {"MODEL"};
  s.takes_overrides = true;
  s.options = {{"--json", ""}, {"--tokenizer", ""}};
  s.repeated_options = {"--data", "--task"};
  return Command{s, run_eval, true};
}

}  // namespace kktrain
