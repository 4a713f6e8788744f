// The kktrain configuration: typed sections read from YAML plus command-line overrides,
// validated, with every default filled and every dtype resolved.
//
// Sections (docs/precision.md, docs/cli.md): model, freeze_config, peft, optimizer, lr_scheduler,
// distributed, data, train, checkpoint. `_target_` strings (PyTorch / Transformer Engine class
// paths) select components; short names work too. load_config() is the single entry point;
// `kktrain config` prints Config::resolved.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/collective_impl.hpp"
#include "core/dtype.hpp"
#include "core/grad_sync.hpp"
#include "core/model_enums.hpp"
#include "core/precision.hpp"

namespace kktrain {

// model.rope_scaling: how the rotary inverse frequencies are rescaled for long contexts, as
// Hugging Face's rope_scaling (ops/rope.hpp computes them).
// model.rope_scaling.rope_type: no scaling (the config's default) or Llama 3.1 / 3.2's.
// linear: every frequency divided by `factor` (Gemma 3's global layers). longrope: Phi-3's
// per-frequency factors, short_factor for a forward whose positions stay within
// original_max_position_embeddings, long_factor beyond, cos and sin times attention_factor.
enum class RopeType { standard, llama3, linear, longrope };
const char* rope_type_name(RopeType t);  // "default" | "llama3" | "linear" | "longrope"

// The most factors a longrope list holds (one per rotary frequency: rotary_dim / 2 <= 32768).
constexpr int64_t kMaxLongropeFactors = int64_t(1) << 15;

struct RopeScaling {
  RopeType rope_type = RopeType::standard;
  double factor = 0.0;            // llama3: low frequencies are divided by it; linear: all
  double low_freq_factor = 0.0;   // wavelengths > original / low_freq_factor: divided
  double high_freq_factor = 0.0;  // wavelengths < original / high_freq_factor: kept
  // llama3: the context the frequencies were trained for; longrope: the longest sequence the
  // short factors serve (a forward with a later position uses the long ones).
  int64_t original_max_position_embeddings = 0;
  // longrope: inv_freq[j] = 1 / (factor[j] * theta^(2j / rotary_dim)), rotary_dim / 2 each, and
  // the resolved factor cos and sin are multiplied by.
  std::vector<double> short_factor, long_factor;
  double attention_factor = 1.0;
  bool llama3() const { return rope_type == RopeType::llama3; }
  bool longrope() const { return rope_type == RopeType::longrope; }
  bool scaled() const { return rope_type != RopeType::standard; }
  // longrope: whether a forward whose largest position is positions - 1 uses the long factors.
  bool uses_long(int64_t positions) const {
    return longrope() && positions > original_max_position_embeddings;
  }
};
// longrope's default attention_factor for max_position_embeddings / original = factor:
// sqrt(1 + ln(factor) / ln(original)) when factor > 1, else 1 (transformers'
// _compute_longrope_parameters).
double longrope_attention_factor(double factor, int64_t original);

// model.moe: a sparse MLP (mixture of experts, Mixtral semantics) in every decoder layer instead
// of the dense one (docs/moe.md). num_experts 0 keeps the dense MLPs.
struct MoeConfig {
  int64_t num_experts = 0;
  int64_t top_k = 2;              // experts per token
  int64_t intermediate_size = 0;  // per expert (null in a config: model.intermediate_size)
  bool norm_topk_prob = true;     // renormalize the k routing weights to sum to 1 (Mixtral)
  int64_t shared_expert_intermediate_size = 0;  // an always-active shared expert (0: none)
  double aux_loss_coef = 0.001;                 // weight of the load-balancing loss
  bool enabled() const { return num_experts > 0; }
};

// ---- Run options that were environment variables (issue 48): model.attention and
// model.attention_tiles; data.validate_at_load_tokens and train.memory_available_bytes below.
// model.attention: the causal attention's kernel (auto: the build's, tiled_gemm on host builds and
// team on GPU builds; ops/attention.hpp). model.attention_tiles "QxK": query rows per tile x keys
// per block instead of the kernel's defaults (0: the defaults; null in a config).
enum class AttentionChoice { automatic, tiled_gemm, team };
struct AttentionConfig {
  AttentionChoice kernel = AttentionChoice::automatic;
  int64_t q_rows = 0, k_cols = 0;
};
// model.gemm: how bf16 matrix products run (auto: the build's native bf16 backend where there is
// one; widened: every bf16 product widened to fp32 first, ops/gemm.hpp's reference path, for
// comparisons). model.gemm_fp32: the backend of fp32 products (auto: Kokkos Kernels, or oneDNN
// where OpenBLAS runs a generic pre-AVX kernel; kokkos-kernels; onednn). Were KKTRAIN_GEMM and
// KKTRAIN_GEMM_FP32.
enum class GemmChoice { automatic, widened };
enum class GemmFp32Choice { automatic, kokkos_kernels, onednn };
struct GemmConfig {
  GemmChoice bf16 = GemmChoice::automatic;
  GemmFp32Choice fp32 = GemmFp32Choice::automatic;
};

// What a model family computes differently from Llama (docs/huggingface.md, "Families"): data
// fixed when the config is loaded, read from config.json for a Hugging Face directory.
// model.family: the Hugging Face architecture the model is (its config.json and export names).
// A mixture of experts is a Mixtral in the llama family and Qwen3-MoE in qwen3_moe (the names of
// its router and experts: docs/moe.md).
enum class ModelFamily {
  llama,
  mistral,
  qwen2,
  qwen3,
  qwen3_moe,
  smollm3,
  gemma2,
  gemma3,
  olmo2,
  phi3
};
// "llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "smollm3", "gemma2", "gemma3", "olmo2",
// "phi3" (Phi-3 and Phi-4-mini: fused self_attn.qkv_proj and mlp.gate_up_proj parameters)
const char* model_family_name(ModelFamily f);
std::optional<ModelFamily> parse_model_family(const std::string& name);
// model.attention_bias: which attention projections add a bias (Qwen2: q, k, v; Qwen3's and
// Llama's attention_bias: true: all four).
enum class AttentionBias { none, qkv, qkvo };
const char* attention_bias_name(AttentionBias b);  // "none", "qkv", "qkvo"
std::optional<AttentionBias> parse_attention_bias(const std::string& name);
// model.qk_norm: an RMSNorm of each query and key head over head_dim after the projection and
// before the rotary embedding (per_head: Qwen3's and Gemma 3's q_norm / k_norm), or of the whole
// query and key projection outputs before the split into heads (whole: OLMo 2's).
// (enum QkNorm { none, per_head, whole }: core/model_enums.hpp)
const char* qk_norm_name(QkNorm q);  // "none", "per_head", "whole"
std::optional<QkNorm> parse_qk_norm(const std::string& name);

// model.layer_types: a layer's attention, "full_attention" or "sliding_attention" (the Hugging
// Face spellings).
enum class LayerAttention { full, sliding };
const char* layer_attention_name(LayerAttention a);
std::optional<LayerAttention> parse_layer_attention(const std::string& name);
// model.layer_rope: whether a layer applies the rotary embedding ("rope": model.rope_theta and
// model.rope_scaling), applies it with model.rope_local_theta unscaled ("local": Gemma 3's
// sliding layers) or not at all ("none": SmolLM3's no_rope_layers).
enum class LayerRope { rope, none, local };
const char* layer_rope_name(LayerRope r);  // "rope", "none", "local"
// The spellings of core/model_enums.hpp's choices and their inverses.
const char* norm_weight_name(NormWeight w);        // "plain", "fp32", "one_plus_fp32"
const char* norm_placement_name(NormPlacement p);  // "pre", "sandwich", "post"
const char* mlp_activation_name(MlpActivation a);  // "silu", "gelu_tanh"
const char* embed_scale_name(EmbedScale e);        // "none", "sqrt_hidden"
std::optional<NormWeight> parse_norm_weight(const std::string& name);
std::optional<NormPlacement> parse_norm_placement(const std::string& name);
std::optional<MlpActivation> parse_mlp_activation(const std::string& name);
std::optional<EmbedScale> parse_embed_scale(const std::string& name);
std::optional<LayerRope> parse_layer_rope(const std::string& name);

struct ModelConfig {
  int64_t vocab_size = 256;
  int64_t hidden_size = 128;
  int64_t num_layers = 4;
  int64_t num_heads = 4;
  int64_t num_kv_heads = 4;
  int64_t intermediate_size = 344;
  int64_t max_seq_len = 256;
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-5;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = true;
  uint64_t seed = 1234;
  double init_std = 0.02;
  std::optional<std::string> init_from;
  // The model's tokenizer (docs/huggingface.md): a tokenizer.json or a directory holding one;
  // null: model.init_from's when it is a Hugging Face directory with a tokenizer.json.
  std::optional<std::string> tokenizer;
  bool activation_checkpointing = false;
  // Rows (tokens) per chunk of the LM head + loss: the head GEMM, log-softmax, loss and dlogits
  // run chunk by chunk, so (loss_chunk_tokens, V) logits exist at a time, never (B*T, V).
  int64_t loss_chunk_tokens = 256;
  std::vector<std::string> keep_in_fp32;  // parameter globs kept fp32 (model-protected)
  int64_t mtp_num_layers = 0;             // multi-token-prediction head depth (0 = none)
  bool compute_mtp = true;
  double mtp_loss_weight = 0.3;  // total loss = main + weight * mean over MTP depths
  // Gemma 2's final-logit soft-capping: every LM head's logits become cap * tanh(logits / cap)
  // before the loss and before sampling (> 0: the cap; 0: off, null in a config).
  double final_logit_softcapping = 0.0;
  MoeConfig moe;
  AttentionConfig attention;  // model.attention, model.attention_tiles
  GemmConfig gemm;            // model.gemm, model.gemm_fp32
  ModelFamily family = ModelFamily::llama;
  int64_t explicit_head_dim = 0;  // model.head_dim (null: 0, hidden_size / num_heads)
  // model.rotary_dim: the first rotary_dim values of each query and key head rotate (pairs j and
  // j + rotary_dim / 2), the rest pass through (Phi-3's partial_rotary_factor; 0, null in a
  // config: all head_dim values).
  int64_t explicit_rotary_dim = 0;
  AttentionBias attention_bias = AttentionBias::none;
  QkNorm qk_norm = QkNorm::none;
  // model.sliding_window: a query at position q sees keys q - W < k <= q on the sliding layers
  // (0: no window, null in a config); model.layer_types: which layers slide ("sliding_attention")
  // and which see the whole context ("full_attention"), one per layer (empty, null in a config:
  // every layer slides when there is a window).
  int64_t sliding_window = 0;
  std::vector<LayerAttention> layer_types;
  NormWeight norm_weight = NormWeight::plain;
  NormPlacement norm_placement = NormPlacement::pre;
  MlpActivation mlp_activation = MlpActivation::silu;
  EmbedScale embed_scale = EmbedScale::none;
  // model.query_pre_attn_scalar: attention scores are scaled by its inverse square root (Gemma;
  // 0, null in a config: head_dim's). model.attn_logit_softcapping: scores become
  // cap * tanh(scores / cap) before the mask (Gemma 2; 0, null: off). model.rope_local_theta: the
  // rotary base of the "local" layers of model.layer_rope (0, null: none are local).
  double query_pre_attn_scalar = 0.0;
  double attn_logit_softcapping = 0.0;
  double rope_local_theta = 0.0;
  // model.layer_rope: which layers rotate q and k ("rope") and which attend without positions
  // ("none"; SmolLM3's no_rope_layers); empty (null in a config): every layer rotates.
  std::vector<LayerRope> layer_rope;
  LayerRope rope_of(int64_t l) const {
    return layer_rope.empty() ? LayerRope::rope : layer_rope[static_cast<std::size_t>(l)];
  }
  bool rotates(int64_t l) const { return rope_of(l) != LayerRope::none; }
  // The attention scores' scale: query_pre_attn_scalar^-1/2, or head_dim^-1/2.
  float attn_scale() const;
  // The window of layer l (0: none).
  int64_t window_of(int64_t l) const {
    if (sliding_window <= 0) return 0;
    if (layer_types.empty()) return sliding_window;
    return layer_types[static_cast<std::size_t>(l)] == LayerAttention::sliding ? sliding_window : 0;
  }
  int64_t head_dim() const {
    return explicit_head_dim > 0 ? explicit_head_dim : hidden_size / num_heads;
  }
  int64_t rotary_dim() const { return explicit_rotary_dim > 0 ? explicit_rotary_dim : head_dim(); }
  // Phi-3's single qkv_proj and gate_up_proj parameters instead of q/k/v_proj and gate/up_proj.
  bool fused_projections() const { return family == ModelFamily::phi3; }
};

struct FreezeConfig {
  std::vector<std::string> freeze_modules;       // module globs
  std::vector<std::string> unfreeze_modules;     // module globs
  std::vector<std::string> freeze_parameters;    // exact canonical names
  std::vector<std::string> unfreeze_parameters;  // exact canonical names
};

struct PeftConfig {
  bool enabled = false;
  std::vector<std::string> target_modules;  // module globs, e.g. "*.q_proj"
  int64_t dim = 8;
  double alpha = 32.0;
  double dropout = 0.0;
  std::optional<DType> lora_dtype;  // null: inherit the base layer's storage dtype
  // A PEFT adapter directory (adapter_config.json + adapter_model.safetensors) whose adapters
  // initialize this run's (io/peft.hpp); null: fresh adapters.
  std::optional<std::string> init_from;
};

enum class OptimizerKind { adamw, adam, fused_adam, sgd };
const char* optimizer_kind_name(OptimizerKind k);  // the canonical _target_

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::adamw;
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
  // FusedAdam (TE) options.
  bool adam_w_mode = true;
  bool bias_correction = true;
  bool master_weights = false;
  bool store_param_remainders = false;
  DType exp_avg_dtype = DType::float32;
  DType exp_avg_sq_dtype = DType::float32;
  // SGD options.
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;
  // kktrain extensions.
  bool stochastic_rounding = false;               // bf16 params without a master copy
  std::vector<std::string> weight_decay_exclude;  // parameter globs without weight decay
  bool is_adam_family() const { return kind != OptimizerKind::sgd; }
  bool is_torch_adam() const { return kind == OptimizerKind::adamw || kind == OptimizerKind::adam; }
};

// lr_scheduler.lr_decay_style: how the learning rate falls after the warmup.
enum class LrDecayStyle { constant, cosine, linear };
const char* lr_decay_style_name(LrDecayStyle s);  // as the config spells it

struct SchedulerConfig {
  LrDecayStyle lr_decay_style = LrDecayStyle::constant;
  int64_t lr_warmup_steps = 0;
  std::optional<int64_t> lr_decay_steps;  // null: decay until train.max_steps
  double min_lr = 0.0;
};

// distributed.strategy: the only one, FSDP2-style sharding over all ranks.
enum class DistributedStrategy { fsdp2 };

struct DistributedConfig {
  DistributedStrategy strategy = DistributedStrategy::fsdp2;
  MixedPrecisionPolicy mp_policy;
  std::optional<DType> autocast_dtype;
  // Several ranks: free each layer's gathered weights after its forward and gather them again
  // for its backward (FSDP2's default); false keeps them from forward to backward (memory for
  // one all-gather per layer less).
  bool reshard_after_forward = true;
  // Several ranks, several micro-batches per step: reduce-scatter every micro-batch and sum the
  // shards in fp32 (FSDP2's way, gradient memory 1/W per rank), or sum the unsharded gradients
  // and reduce-scatter once on the last micro-batch ("last_micro_batch": one collective per
  // step, the whole gradient in reduce_dtype on every rank).
  GradSync grad_sync = GradSync::every_micro_batch;
  // Several ranks: start each unit's reduce-scatter non-blocking (MPI_Ireduce_scatter_block) and
  // complete it while the next unit's backward runs, and prefetch the next unit's all-gather
  // (MPI_Iallgather) while a unit computes (parallel/fsdp.hpp), at the cost of two reduce wires
  // of their own; false: each collective completes at once (bench/scaling_bench.py measures both).
  bool nonblocking_collectives = false;
  // Who runs the reduce-scatters and all-reduces of an MPI job: kktrain's ring over
  // point-to-point MPI, the MPI library's, or auto (kktrain's wherever the buffers are host
  // memory; parallel/ring_collectives.hpp). NCCL jobs keep NCCL's.
  CollectiveImpl collectives = CollectiveImpl::automatic;
  // A rank that fails inside a collective step waits this long for the others to agree, then
  // aborts the job (they are stuck in a collective it will never join).
  double failed_rank_wait_s = 60.0;
  // A collective that makes no progress this long (a rank stopped: SIGSTOP, a frozen node) ends
  // the job with one line naming the ranks that stopped answering (parallel/peer_wait.hpp).
  double stuck_peer_wait_s = 300.0;
  // Experts split over this many ranks (docs/moe.md); it divides the ranks and model.moe's
  // num_experts.
  int64_t expert_parallel_size = 1;
  // The compute dtype of the MoE layers' experts (null: the root's, mp_policy.param_dtype or
  // autocast_dtype). Another dtype than the root's is refused unless the guard below allows it.
  std::optional<DType> moe_param_dtype;
  bool allow_moe_param_dtype_mismatch = false;
};

// data.format: how data.path's files are read (auto picks text or a token format by each file's
// name and header: io/token_file.hpp).
enum class DataFormat {
  automatic,
  text,
  jsonl,
  chat,
  prompt_completion,
  preference,
  uint16,
  uint32,
  llmc
};
const char* data_format_name(DataFormat f);  // as the config spells it ("auto" for automatic)
// data.loss_on: the tokens of an example the loss counts (the config's auto is resolved when it
// is read: assistant for chat, completion for prompt_completion, all otherwise).
enum class LossOn { assistant, completion, all };
const char* loss_on_name(LossOn l);
// data.truncation: what happens to an example longer than data.seq_len.
enum class Truncation { truncate, drop, error };
const char* truncation_name(Truncation t);

struct DataConfig {
  // data.path: token files or globs, in order (empty: the embedded default corpus). One file or
  // a list; windows never straddle two files.
  std::vector<std::string> paths;
  // auto | text | jsonl | uint16 | uint32 | llmc (llm.c .bin shards); jsonl: documents through
  // the model's tokenizer (apps/dataprep/text_data.hpp), the string at jsonl_key of each line
  DataFormat format = DataFormat::automatic;
  std::string jsonl_key = "text";
  // Examples (format chat or prompt_completion; apps/dataprep/example_renderer.hpp): the tokens the
  // loss counts (auto resolves to assistant for chat, completion for prompt_completion, all
  // otherwise), what happens to an example longer than seq_len, whether examples are packed into
  // rows, a template file replacing the tokenizer's chat template, and a validation file (else
  // val_fraction of the examples).
  LossOn loss_on = LossOn::all;  // the config's auto: resolved by format
  Truncation truncation = Truncation::truncate;
  bool packing = false;
  // Preference pairs: whether a pair's two sides hold their shared prompt once (the rejected
  // side then sees the prompt, not the chosen side; apps/dataprep/example_renderer.hpp). Models
  // with a sliding window or attention soft-capping never share.
  bool share_prompt = true;
  std::optional<std::string> chat_template;
  std::optional<std::string> val_path;
  int64_t seq_len = 128;
  int64_t micro_batch_size = 8;
  int64_t global_batch_size = 8;
  uint64_t seed = 42;
  double val_fraction = 0.05;
  // data.validate_at_load_tokens: token files of at most this many tokens have every id checked
  // when they are opened, larger ones as windows are drawn (io/data.hpp kValidateAtLoadTokens).
  int64_t validate_at_load_tokens = int64_t(16) << 20;
};

// Examples (data.format chat, prompt_completion or preference) rather than a stream of tokens.
inline bool is_examples(const DataConfig& d) {
  return d.format == DataFormat::chat || d.format == DataFormat::prompt_completion ||
         d.format == DataFormat::preference;
}
// Preference pairs (data.format preference): each example is a pair, its chosen and its rejected
// side (apps/dataprep/example_renderer.hpp).
inline bool is_preference(const DataConfig& d) {
  return d.format == DataFormat::preference;
}

// train.objective: what a step minimizes. sft: the mean token loss of the data; dpo: a preference
// objective over data.format preference pairs (dpo.loss, model/preference_loss.hpp).
enum class Objective { sft, dpo };
const char* objective_name(Objective o);

// dpo.loss: the preference objective, each as TRL computes it (docs/preference.md). sigmoid and
// ipo compare with the reference model's log-probabilities (the starting weights'), simpo and
// orpo are reference-free.
enum class PreferenceLoss { sigmoid, ipo, simpo, orpo };
const char* preference_loss_name(PreferenceLoss l);
inline bool uses_reference(PreferenceLoss l) {
  return l == PreferenceLoss::sigmoid || l == PreferenceLoss::ipo;
}
// Whether the loss reads each side's mean token log-probability rather than its sum.
inline bool averages_logps(PreferenceLoss l) {
  return l != PreferenceLoss::sigmoid;
}

struct DpoConfig {
  PreferenceLoss loss = PreferenceLoss::sigmoid;
  double beta = 0.1;             // each loss's TRL beta (orpo: the odds-ratio term's weight)
  double simpo_gamma = 0.5;      // simpo's target margin
  double label_smoothing = 0.0;  // sigmoid, simpo: the conservative loss's label noise, [0, 0.5)
};

// train.progress: whether rank 0 draws a progress bar (auto: when stderr is a terminal).
enum class ProgressMode { automatic, on, off };
const char* progress_mode_name(ProgressMode p);  // "auto" for automatic

struct TrainConfig {
  Objective objective = Objective::sft;
  int64_t max_steps = 200;
  bool max_steps_set = false;  // max_steps given in the config (then it caps train.epochs)
  int64_t epochs = 0;          // examples data: passes over the training examples (0: max_steps)
  int64_t log_every = 10;
  int64_t val_every = 50;
  int64_t val_batches = 4;
  double grad_clip = 1.0;  // 0 disables clipping
  std::string output_dir = "runs/default";
  int64_t max_nonfinite_steps = 5;
  bool fail_on_precision_warning = false;
  // The runtime precision warning: update_lost_frac (optim/lost_updates.hpp) above this fraction
  // on every logged step for this many steps (0: never).
  double update_lost_warn_frac = 0.5;
  int64_t update_lost_warn_steps = 100;
  ProgressMode progress = ProgressMode::automatic;
  // train.memory_available_bytes: the memory the predicted peak is checked against instead of
  // the measured one (null: measured, apps/train/memory_plan.hpp).
  std::optional<int64_t> memory_available_bytes;
};

// logging: where the metrics rows go besides metrics.jsonl.
struct LoggingConfig {
  // Rank 0 also writes every row's numbers to a TensorBoard event file in
  // <train.output_dir>/tb/ (io/tensorboard.hpp).
  bool tensorboard = true;
};

// eval: evaluation during training (apps/eval/evaluation.hpp), every `every` steps (0: off) and
// after the last step, on the current weights: the loss and perplexity of each of `data`'s files
// and the multiple-choice scores of each of `tasks`' files, as `kktrain eval` computes them.
struct EvalConfig {
  int64_t every = 0;
  std::vector<std::string> data;
  std::vector<std::string> tasks;
};

// checkpoint.resume: the latest checkpoint under the directory if any (auto), none, or one path.
enum class ResumeFrom { latest, none, path };
// checkpoint.export_format: hdf5 (export.h5) | safetensors (export/ directory) | peft (LoRA runs:
// the adapters in PEFT's format in adapter/, io/peft.hpp, beside the merged export.h5).
enum class ExportKind { hdf5, safetensors, peft };
const char* export_kind_name(ExportKind k);
// The kind a name spells (as export_kind_name writes it), if any: `kktrain export --format`.
std::optional<ExportKind> parse_export_kind(const std::string& name);

struct CheckpointConfig {
  std::optional<std::string> dir;  // null: <train.output_dir>/checkpoints
  int64_t save_every = 0;          // 0: only at the end (and on SIGTERM/SIGINT)
  int64_t keep_last = 2;           // step directories kept
  ResumeFrom resume = ResumeFrom::latest;
  std::string resume_path;               // ResumeFrom::path: the checkpoint
  DType export_dtype = DType::bfloat16;  // the consolidated export written at the end
  ExportKind export_format = ExportKind::hdf5;
};
// checkpoint.resume as the config spells it: auto, none or the path.
std::string resume_name(const CheckpointConfig& c);

struct Config {
  ModelConfig model;
  FreezeConfig freeze;
  PeftConfig peft;
  OptimizerConfig optimizer;
  SchedulerConfig lr_scheduler;
  DistributedConfig distributed;
  DataConfig data;
  TrainConfig train;
  DpoConfig dpo;  // train.objective dpo
  LoggingConfig logging;
  EvalConfig eval;
  CheckpointConfig checkpoint;
  ResolvedPrecision precision;
  YAML::Node resolved;  // the full config as `kktrain config` prints it
  std::string source;   // config file path
  // Where a key's value came from, for errors found after loading (a freeze selector that names
  // no parameter): "override 'a.b=1'", "FILE:line:col", or the file when nothing better is known.
  std::function<std::string(const std::string& key_path)> locate;
  std::string where(const std::string& key_path) const {
    return locate ? locate(key_path) : source;
  }
  // model keys that came from model.init_from's own architecture (a Hugging Face config.json):
  // key path ("model.hidden_size") -> the file.
  std::map<std::string, std::string> model_file_keys;
};

// The architecture a model file records about itself (a Hugging Face directory's config.json),
// as values of model.* keys. A config that leaves a key unset takes the file's value; one that
// sets it to another value is refused.
struct ModelFileArchitecture {
  struct Value {
    std::string key;       // under model. ("num_layers")
    std::string file_key;  // as the file names it ("num_hidden_layers")
    YAML::Node value;
  };
  std::string source;  // the file, for messages
  std::vector<Value> values;
};

// The LoRA settings of a PEFT adapter directory (peft.init_from), for the keys a peft section
// leaves unset (LoadOptions::peft_adapter).
struct PeftAdapterSettings {
  int64_t dim = 0;
  double alpha = 0.0;
  std::vector<std::string> target_modules;
};

struct LoadOptions {
  int world_size = 1;
  // Reads the storage dtype of a checkpoint (for model.dtype: auto with model.init_from); set by
  // the application layer, which owns HDF5. Unset: init_from with auto is an error.
  std::function<DType(const std::string& path)> checkpoint_dtype;
  // The architecture of model.init_from when the file records one (nullopt otherwise); set by
  // the application layer, which reads model files.
  std::function<std::optional<ModelFileArchitecture>(const std::string& path)>
      model_file_architecture;
  // peft.init_from's r, lora_alpha and target_modules (`num_layers`: the model's), for a peft
  // section that leaves dim, alpha or target_modules unset; set by the application layer, which
  // reads adapter files. Unset: such a section without target_modules is refused.
  // `fused`: the model's projections are Phi-3's (qkv_proj, o_proj, gate_up_proj, down_proj).
  std::function<PeftAdapterSettings(const std::string& dir, int64_t num_layers, bool fused)>
      peft_adapter;
};

// Parses YAML text (no file); `name` is used in error locations.
Config load_config_text(const std::string& text, const std::string& name,
                        const std::vector<std::string>& overrides, const LoadOptions& opts);
// The largest config file read (bytes); a larger one is refused before it is parsed.
constexpr std::size_t kMaxConfigBytes = std::size_t(4) << 20;
// Reads and parses a config file. Throws ConfigError/UsageError on any invalid input.
Config load_config(const std::string& path, const std::vector<std::string>& overrides,
                   const LoadOptions& opts);

// The resolved config as YAML text.
std::string to_yaml(const Config& cfg);

// The keys whose values differ between two configs as to_yaml writes them (e.g. the config a
// checkpoint was saved with and the one resuming it), as "key.path: OLD -> NEW" in the order of
// `after` (keys only in `before` last), values in YAML flow style; keys equal to or under one of
// `ignore` are left out. Text that is not a YAML map compares as one value.
std::vector<std::string> config_differences(const std::string& before, const std::string& after,
                                            const std::vector<std::string>& ignore);

// Every config key with its type, default and accepted values, as the readers define them
// (recorded while reading configs that take each optimizer's and PEFT's branch; a key whose
// default depends on the optimizer lists each). One markdown table row per key, in reading order.
std::string config_schema_markdown();

}  // namespace kktrain
