// `kktrain grads CONFIG --out FILE.h5`: one forward/backward on the first training batch, dumped
// for independent checking (tests/ recomputes everything in PyTorch from this file). Examples
// data (data.format chat or prompt_completion): the first micro-batch of rows of step 0, packed
// or one example a row as data.packing says, rendered into a scratch cache beside --out that is
// removed afterwards; the rows' example starts go into the dump as /batch/starts.
#include <stdlib.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "apps/cli/commands.hpp"
#include "apps/dataprep/example_cache.hpp"
#include "apps/dataprep/text_model.hpp"
#include "apps/train/app_model.hpp"
#include "core/files.hpp"
#include "core/log.hpp"
#include "io/data.hpp"
#include "io/example_data.hpp"
#include "io/h5.hpp"
#include "io/hf_config.hpp"
#include "io/model_weights.hpp"
#include "model/param_io.hpp"
#include "model/preference_loss.hpp"

namespace kktrain {

namespace {

void write_grads_file(const std::string& path, const Config& cfg, Transformer& model,
                      const Batch& batch, const ForwardResult& r) {
  h5::File f = h5::File::create(path);
  const ParamRegistry& reg = model.params();
  for (int i = 0; i < reg.size(); ++i) {
    const ParamInfo& p = reg.info(i);
    const auto values = param_to_host(reg, i);
    f.write_f32("/params/" + p.name, values.data(), p.shape);
    if (p.trainable) {
      const auto grads = param_to_host(reg, i, ParamPart::grad);
      f.write_f32("/grads/" + p.name, grads.data(), p.shape);
    }
    for (const auto& a : p.aliases) f.attr_str("/params/" + p.name, "alias", a);
    f.attr_str("/params/" + p.name, "storage_dtype", dtype_name(p.dtype));
  }
  f.write_i32("/batch/input_ids", batch.ids.data(), {batch.B, batch.T});
  f.write_i32("/batch/targets", batch.targets.data(), {batch.B, batch.T});
  if (!batch.starts.empty()) f.write_i32("/batch/starts", batch.starts.data(), {batch.B, batch.T});
  if (!batch.gaps.empty()) f.write_i32("/batch/gaps", batch.gaps.data(), {batch.B, batch.T, 2});
  f.write_scalar_f64("/loss", r.loss);
  if (model.mtp_depth() > 0) f.write_scalar_f64("/mtp_loss", r.mtp_loss);
  const ModelConfig& m = cfg.model;
  if (m.moe.enabled()) {
    f.write_scalar_f64("/aux_loss", r.aux_loss);
    f.attr_i64("/", "moe_num_experts", m.moe.num_experts);
    f.attr_i64("/", "moe_top_k", m.moe.top_k);
    f.attr_i64("/", "moe_intermediate_size", m.moe.intermediate_size);
    f.attr_i64("/", "moe_norm_topk_prob", m.moe.norm_topk_prob ? 1 : 0);
    f.attr_i64("/", "moe_shared_expert_intermediate_size", m.moe.shared_expert_intermediate_size);
    f.attr_f64("/", "moe_aux_loss_coef", m.moe.aux_loss_coef);
    for (int64_t l = 0; l < m.num_layers; ++l) {  // the experts each token chose
      f.write_i32("/moe/choice_layer_" + std::to_string(l), model.routing(l).data(),
                  {batch.B * batch.T, m.moe.top_k});
    }
  }
  f.attr_i64("/", "vocab_size", m.vocab_size);
  f.attr_i64("/", "hidden_size", m.hidden_size);
  f.attr_i64("/", "num_layers", m.num_layers);
  f.attr_i64("/", "num_heads", m.num_heads);
  f.attr_i64("/", "num_kv_heads", m.num_kv_heads);
  f.attr_i64("/", "intermediate_size", m.intermediate_size);
  f.attr_i64("/", "head_dim", m.head_dim());
  if (m.rotary_dim() != m.head_dim()) f.attr_i64("/", "rotary_dim", m.rotary_dim());
  f.attr_str("/", "family", model_family_name(m.family));
  f.attr_str("/", "attention_bias", attention_bias_name(m.attention_bias));
  f.attr_str("/", "qk_norm", qk_norm_name(m.qk_norm));
  if (!m.layer_rope.empty()) {  // per layer: no rotary '0', rotary '1', the local base's '2'
    f.attr_str("/", "rope_layers", layer_rope_text(m));
  }
  if (m.rope_local_theta > 0) f.attr_f64("/", "rope_local_theta", m.rope_local_theta);
  f.attr_str("/", "norm_weight", norm_weight_name(m.norm_weight));
  f.attr_str("/", "norm_placement", norm_placement_name(m.norm_placement));
  f.attr_str("/", "mlp_activation", mlp_activation_name(m.mlp_activation));
  f.attr_str("/", "embed_scale", embed_scale_name(m.embed_scale));
  if (m.query_pre_attn_scalar > 0) {
    f.attr_f64("/", "query_pre_attn_scalar", m.query_pre_attn_scalar);
  }
  if (m.attn_logit_softcapping > 0) {
    f.attr_f64("/", "attn_logit_softcapping", m.attn_logit_softcapping);
  }
  if (m.sliding_window > 0) {  // the window and, per layer, whether it slides
    f.attr_i64("/", "sliding_window", m.sliding_window);
    std::string layers;
    for (int64_t l = 0; l < m.num_layers; ++l) layers += m.window_of(l) > 0 ? '1' : '0';
    f.attr_str("/", "window_layers", layers);
  }
  f.attr_f64("/", "rope_theta", m.rope_theta);
  f.attr_f64("/", "rms_norm_eps", m.rms_norm_eps);
  if (m.rope_scaling.scaled()) f.attr_str("/", "rope_scaling", rope_scaling_json(m.rope_scaling));
  f.attr_i64("/", "tie_word_embeddings", m.tie_word_embeddings ? 1 : 0);
  f.attr_i64("/", "max_seq_len", m.max_seq_len);
  f.attr_i64("/", "mtp_num_layers", m.mtp_num_layers);
  f.attr_i64("/", "compute_mtp", m.compute_mtp ? 1 : 0);
  f.attr_f64("/", "mtp_loss_weight", m.mtp_loss_weight);
  if (m.final_logit_softcapping > 0) {
    f.attr_f64("/", "final_logit_softcapping", m.final_logit_softcapping);
  }
  f.attr_str("/", "storage_dtype", dtype_name(cfg.precision.storage));
  f.attr_str("/", "compute_dtype", dtype_name(cfg.precision.compute));
  f.attr_i64("/", "stream_bf16", model.roundings().stream == Rounding::bf16 ? 1 : 0);
}

// The pairs of a preference batch as the model reads them (no reference sums yet).
PairBatch preference_batch(const Config& cfg, const Batch& b) {
  PairBatch pb;
  pb.params = pair_params(cfg.dpo);
  for (const BatchPair& p : b.pairs) {
    const int64_t base = static_cast<int64_t>(p.row) * b.T;
    PairSpan s;
    s.chosen = base + p.chosen;
    s.rejected = base + p.rejected;
    s.end = base + p.end;
    pb.pairs.push_back(s);
  }
  return pb;
}

// The /dpo group of a preference batch's dump (the command's details say what it holds).
void write_pairs(const std::string& path, const Config& cfg, const Batch& b, const PairBatch& pb,
                 const std::vector<PairResult>& r) {
  h5::File f = h5::File::open_write(path);
  const int64_t P = static_cast<int64_t>(b.pairs.size());
  std::vector<int64_t> spans;
  std::vector<double> refc, refr, lc, lr, losses;
  std::vector<int64_t> nc, nr;
  const bool ref = uses_reference(cfg.dpo.loss);
  for (int64_t k = 0; k < P; ++k) {
    const BatchPair& p = b.pairs[static_cast<size_t>(k)];
    spans.insert(spans.end(), {p.row, p.chosen, p.rejected, p.end});
    const PairSpan& s = pb.pairs[static_cast<size_t>(k)];
    refc.push_back(ref ? s.ref_chosen : NAN);
    refr.push_back(ref ? s.ref_rejected : NAN);
    const PairResult& x = r.at(static_cast<size_t>(k));
    lc.push_back(x.logps_chosen);
    lr.push_back(x.logps_rejected);
    nc.push_back(x.tokens_chosen);
    nr.push_back(x.tokens_rejected);
    losses.push_back(x.loss);
  }
  f.write_i64("/dpo/pairs", spans.data(), {P, 4});
  f.write_f64("/dpo/ref_chosen", refc.data(), {P});
  f.write_f64("/dpo/ref_rejected", refr.data(), {P});
  f.write_f64("/dpo/logps_chosen", lc.data(), {P});
  f.write_f64("/dpo/logps_rejected", lr.data(), {P});
  f.write_i64("/dpo/tokens_chosen", nc.data(), {P});
  f.write_i64("/dpo/tokens_rejected", nr.data(), {P});
  f.write_f64("/dpo/losses", losses.data(), {P});
  f.attr_str("/dpo", "loss", preference_loss_name(cfg.dpo.loss));
  f.attr_f64("/dpo", "beta", cfg.dpo.beta);
  f.attr_f64("/dpo", "simpo_gamma", cfg.dpo.simpo_gamma);
  f.attr_f64("/dpo", "label_smoothing", cfg.dpo.label_smoothing);
}

// A scratch directory beside `out` (a new name, so never an input), removed with its contents
// when this goes out of scope.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& out) {
    const std::filesystem::path p(out);
    const std::filesystem::path dir = p.has_parent_path() ? p.parent_path() : ".";
    std::string templ = (dir / ".kktrain-grads-examples.XXXXXX").string();
    if (::mkdtemp(templ.data()) == nullptr) {
      throw RuntimeFailure("cannot create a scratch directory beside '" + out +
                           "' for the examples: " + std::strerror(errno));
    }
    path_ = templ;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The first training batch (micro_batch_size rows of step 0): windows of token files, or rows of
// examples (with their starts) rendered into a scratch cache beside `out`.
Batch first_batch(const Config& cfg, const ModelText& text, const std::string& out) {
  if (is_examples(cfg.data)) {
    const ScratchDir scratch(out);
    make_example_cache(cfg, text, scratch.path());
    const ExampleData data(scratch.path(), cfg.data);
    return data.train_batch(0, 0, cfg.data.micro_batch_size);
  }
  const TokenDataset data =
      TokenDataset::load(cfg.data, cfg.model.vocab_size, token_load_options(cfg.data));
  return data.train_batch(0, 0, cfg.data.micro_batch_size, cfg.data.seq_len);
}

int run_grads(const ParsedArgs& args, AppContext& ctx) {
  if (ctx.mpi->size() > 1) throw UsageError("kktrain grads runs on one rank");
  const Config cfg = load_app_config(args, ctx);
  const std::string out = args.options.at("--out");
  std::vector<std::pair<std::string, std::string>> inputs = {
      {"config file", args.positionals.at(0)},
      {"model.init_from file", cfg.model.init_from.value_or("")}};
  for (const auto& f : data_files(cfg.data)) inputs.emplace_back("data file (data.path)", f);
  inputs.emplace_back("validation file (data.val_path)", cfg.data.val_path.value_or(""));
  inputs.emplace_back("chat template (data.chat_template)", cfg.data.chat_template.value_or(""));
  inputs.emplace_back("tokenizer (model.tokenizer)", cfg.model.tokenizer.value_or(""));
  check_output_file("--out", out, inputs);
  const ModelText model_text = run_text(cfg);
  if (const TextTokens text = check_text_data(cfg, model_text); !text.files.empty()) {
    throw InputError("data.path '" + text.files[0] + "' is text for a model with a tokenizer (" +
                     text.tokenizer.json +
                     "): kktrain grads reads token files; tokenize it first "
                     "(kktrain tokenize --tokenizer " +
                     text.tokenizer.json + " ... --out PREFIX)");
  }
  SingleCommunicator one_rank;
  auto model = build_model(cfg, one_rank);
  const Batch batch = first_batch(cfg, model_text, out);
  ForwardOptions fo;
  fo.prepare_backward = true;
  fo.compute_mtp = cfg.model.compute_mtp;
  fo.keep_routing = true;
  // examples: attention within each token's example, rotary positions from its start; the loss is
  // this micro-batch's own mean (loss_tokens 0)
  if (!batch.starts.empty()) fo.row_starts = batch.starts.data();
  if (!batch.gaps.empty()) fo.row_gaps = batch.gaps.data();
  // preference pairs: the objective's mean over this micro-batch's pairs, the reference sums those
  // of these (the starting) weights
  PairBatch pairs;
  std::vector<PairResult> reference;
  if (is_preference(cfg.data)) {
    pairs = preference_batch(cfg, batch);
    fo.pairs = &pairs;
    if (uses_reference(cfg.dpo.loss)) {
      ForwardOptions ref = fo;
      ref.prepare_backward = false;
      model->forward(batch.ids.data(), batch.targets.data(), batch.B, batch.T, ref);
      reference = model->pair_results();
      for (size_t k = 0; k < reference.size(); ++k) {
        pairs.pairs[k].ref_chosen = reference[k].logps_chosen;
        pairs.pairs[k].ref_rejected = reference[k].logps_rejected;
      }
    }
  }
  const ForwardResult r =
      model->forward(batch.ids.data(), batch.targets.data(), batch.B, batch.T, fo);
  model->backward();
  write_grads_file(out, cfg, *model, batch, r);
  if (is_preference(cfg.data)) write_pairs(out, cfg, batch, pairs, model->pair_results());
  log::info("grads: loss " + std::to_string(r.loss) + " on " + std::to_string(r.tokens) +
            " tokens; wrote " + out);
  return 0;
}

}  // namespace

Command grads_command() {
  CommandSpec s;
  s.name = "grads";
  s.synopsis = "grads CONFIG --out FILE.h5 [key.path=VALUE ...]";
  s.summary = "One forward/backward on the first training batch; dump params, grads, loss.";
  s.details =
      "Writes FILE.h5 with fp32 copies of every parameter (/params/<name>) and gradient\n"
      "(/grads/<name>), the batch (/batch/input_ids, /batch/targets, int32 (B, T)), the mean\n"
      "loss (/loss), and the model hyperparameters plus storage_dtype and compute_dtype as\n"
      "attributes of the root group. A tied parameter appears once under its owner's name\n"
      "with an 'alias' attribute.\n"
      "Examples data (data.format chat or prompt_completion): the batch is the first\n"
      "micro_batch_size rows of step 0 (packed or one example a row, as data.packing says),\n"
      "rendered into a scratch directory beside FILE.h5 that is removed afterwards, and\n"
      "/batch/starts (int32 (B, T)) holds the position in its row where each token's example\n"
      "begins: attention sees only the token's own example, its rotary position is t - start;\n"
      "the loss is the mean over the batch's loss tokens (targets -1 do not count).\n"
      "Preference pairs (train.objective dpo): /loss is the objective's mean over the\n"
      "micro-batch's pairs, the reference log-probabilities those of the starting weights\n"
      "(the dumped ones), and the group /dpo holds: pairs (int64 (P, 4): row, chosen_begin,\n"
      "rejected_begin, end: the chosen side at [chosen_begin, rejected_begin) of the row, the\n"
      "rejected at [rejected_begin, end)), ref_chosen, ref_rejected, logps_chosen,\n"
      "logps_rejected (float64 sums over each side's completion tokens; NaN references for\n"
      "reference-free losses), tokens_chosen, tokens_rejected (int64), losses (float64 per\n"
      "pair), and attributes loss, beta, simpo_gamma, label_smoothing. With shared prompts\n"
      "(data.share_prompt) chosen_begin is the chosen side's first own token (its prompt\n"
      "before it, from its start in /batch/starts), and /batch/gaps (int32 (B, T, 2)) holds the\n"
      "keys [begin, end) each token does not see (the rejected side: the chosen side's own\n"
      "tokens), which its rotary position does not count either.\n";
  s.positionals = {"CONFIG"};
  s.takes_overrides = true;
  s.options = {{"--out", ""}};
  s.required_options = {"--out"};
  return Command{s, run_grads, true};
}

}  // namespace kktrain
