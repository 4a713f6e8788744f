#include "apps/train/app_model.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>

#include <map>
#include <optional>

#include "apps/train/memory_plan.hpp"
#include "apps/train/model_source.hpp"
#include "apps/train/peft_run.hpp"
#include "core/errors.hpp"
#include "core/log.hpp"
#include "core/param_registry.hpp"
#include "core/strings.hpp"
#include "io/finite_weights.hpp"
#include "io/hf_config.hpp"
#include "io/model_weights.hpp"
#include "model/freeze.hpp"
#include "model/param_io.hpp"
#include "parallel/agree.hpp"
#include "parallel/world_agree.hpp"

namespace kktrain {

GradSync grad_sync_of(const Config& cfg) {
  return cfg.distributed.grad_sync;
}

namespace {

// A Hugging Face directory's dtype: config.json's torch_dtype, which at least one tensor must have;
// without it, the one dtype of all tensors. float16 is refused (kktrain stores float32 or
// bfloat16; a float16 file loads into either when model.dtype says which).
DType hf_dtype(const WeightSource& src) {
  std::map<DType, std::string> held;  // dtype -> a tensor stored in it
  for (const auto& n : src.names()) held.emplace(src.stored_dtype(n), n);
  const std::string dir = "model.init_from: '" + src.path() + "'";
  std::optional<DType> d;
  const auto it = src.attributes().str.find("storage_dtype");
  if (it != src.attributes().str.end()) {
    DType t;
    parse_dtype(it->second, &t);
    if (!held.count(t)) {
      throw InputError(dir + ": config.json says torch_dtype " + it->second +
                       " but no tensor is stored in it (" + held.begin()->second + " is " +
                       dtype_name(held.begin()->first) + "); set model.dtype");
    }
    d = t;
  } else if (held.size() == 1) {
    d = held.begin()->first;
  } else {
    throw InputError(dir + " has tensors in " + std::to_string(held.size()) +
                     " dtypes and config.json has no torch_dtype; set model.dtype");
  }
  if (*d == DType::float16) {
    throw InputError(dir +
                     " holds float16 weights and kktrain stores float32 or bfloat16: set "
                     "model.dtype (float16 values widen exactly to float32 and round once "
                     "to bfloat16)");
  }
  return *d;
}

// Config-time reads of model.init_from run on every rank before any communicator exists (the
// config says which to make). So that a file every rank fails on is named once, by the lowest
// failing rank, the ranks agree through parallel/world_agree.hpp. Every wait is bounded
// (failed_rank_wait): ranks whose configs differ (an MPMD launch) never meet here, and then each
// goes on alone, a failing one with its own error (main prints it and ends the job), a succeeding
// one to where its config is compared with the others'.
template <class F>
auto agreed_at_config(F&& read) {
  int rank = 0, size = 1;
  world_rank_size(&rank, &size);
  if (size <= 1) return read();
  std::exception_ptr error;
  std::string msg;
  int code = 0;
  try {
    auto r = read();
    int first = size;
    if (!world_reduce_bounded(&first, WorldReduce::min) || first >= size) return r;
  } catch (const Error& e) {
    error = std::current_exception();
    msg = e.what();
    code = e.exit_code();
  } catch (const std::exception& e) {
    error = std::current_exception();
    msg = std::string("internal error: ") + e.what();
    code = 1;
  }
  if (!error) {  // another rank failed: it says why
    int c = 0;
    world_reduce_bounded(&c, WorldReduce::max);
    throw CollectiveError("", std::max(c, 1));
  }
  int first = rank;
  if (!world_reduce_bounded(&first, WorldReduce::min)) std::rethrow_exception(error);
  int status = code;
  world_reduce_bounded(&status, WorldReduce::max);
  throw CollectiveError(first == rank ? msg : std::string(), status);
}

}  // namespace

DType model_file_dtype(const std::string& path) {
  return agreed_at_config([&] { return model_file_dtype_here(path); });
}

std::optional<ModelFileArchitecture> model_file_architecture(const std::string& path) {
  return agreed_at_config([&] { return model_file_architecture_here(path); });
}

DType model_file_dtype_here(const std::string& path) {
  SingleCommunicator one;
  const auto src = open_weights(path, "model.init_from", one);
  if (src->attributes().str.count("format") &&
      src->attributes().str.at("format") == "huggingface") {
    return hf_dtype(*src);
  }
  const auto it = src->attributes().str.find("storage_dtype");
  if (it != src->attributes().str.end()) {
    DType d;
    if (!parse_dtype(it->second, &d)) {
      throw InputError("model.init_from: '" + src->path() + "' has an unknown storage_dtype \"" +
                       it->second + "\"");
    }
    return d;
  }
  return src->stored_dtype(src->names().front());
}

std::optional<ModelFileArchitecture> model_file_architecture_here(const std::string& path) {
  if (!is_hf_directory(path)) return std::nullopt;
  try {
    return hf_model_file_architecture(read_hf_config(path));
  } catch (const InputError& e) {
    throw InputError("model.init_from: " + std::string(e.what()));
  }
}

void load_model_file(Transformer& model, const std::string& path, Communicator& comm) {
  load_model_source(model, open_weights(path, "model.init_from", comm), comm);
}

void load_model_source(Transformer& model, std::unique_ptr<WeightSource> opened,
                       Communicator& comm) {
  ParamRegistry& reg = model.params();
  const std::string path = opened->path();
  // Each rank checks the values of the rows it reads (io/finite_weights.hpp): finite, and finite
  // in the dtype its parameter stores them in.
  const auto src =
      with_finite_check(std::move(opened), "model.init_from", [&](const std::string& n) {
        const int i = reg.find(n);
        return i < 0 ? DType::float32 : reg.info(i).dtype;
      });
  collectively(comm, [&] { check_model_file(*src, reg, "model.init_from"); });
  const auto vision = src->attributes().i64.find("unread_vision_tensors");
  if (vision != src->attributes().i64.end()) {  // Gemma3ForConditionalGeneration
    log::info("model.init_from: '" + path +
              "' is a Gemma3ForConditionalGeneration: kktrain reads its language model (the " +
              std::to_string(vision->second) +
              " tensors of the vision tower and projector are not read) and exports it as a "
              "text-only Gemma3ForCausalLM");
  }
  // Adapters the file lacks start from their seeded initialization; nothing else is initialized
  // (the file's values replace it).
  model.init_weights([&](const std::string& name) { return !src->shape(name); });
  int fresh_adapters = 0;
  const double t0 = now_s();
  double bytes = 0.0;  // of the file read by this rank
  for (int i = 0; i < reg.size(); ++i) {
    const ParamInfo& p = reg.info(i);
    if (!src->shape(p.name)) {  // fine-tuning a base model: adapters start from their init
      ++fresh_adapters;
      continue;
    }
    // This rank's rows of the fp32 value (a checkpoint's master where it has one): fp32
    // destinations take it as it is, bf16 ones round it once.
    std::vector<float> rows;
    try {
      rows =
          collectively(comm, [&] { return src->read_rows_f32(p.name, p.row_begin, p.local_rows); });
    } catch (const CollectiveError& e) {  // every rank: the one that saw it names the key
      const std::string msg = e.what();
      if (!e.printed_here() || msg.rfind("model.init_from", 0) == 0) throw;
      throw CollectiveError("model.init_from: " + msg, e.exit_code());
    }
    bytes += static_cast<double>(rows.size() * dtype_size(src->stored_dtype(p.name)));
    shard_from_host(reg, i, rows);
  }
  const double seconds = comm.allreduce_max_host(now_s() - t0);
  const double total = comm.allreduce_sum_host(bytes);
  const double rss = comm.allreduce_max_host(peak_rss_bytes());
  char line[256];
  std::snprintf(line, sizeof(line),
                "%.1f MiB of weights read by %d rank%s in %.2f s (%.0f MiB/s); peak RSS %.1f MiB%s",
                total / 1048576.0, comm.size(), comm.size() > 1 ? "s" : "", seconds,
                total / 1048576.0 / std::max(seconds, 1e-9), rss / 1048576.0,
                comm.size() > 1 ? " (largest rank)" : "");
  log::info("model.init_from: " + src->path() + ": " + line);
  if (fresh_adapters > 0) {
    log::info("model.init_from: " + std::to_string(fresh_adapters) +
              " LoRA adapter tensors are not in the file and start from their initialization");
  }
}

TokenLoadOptions token_load_options(const DataConfig& data) {
  TokenLoadOptions o;
  o.validate_at_load_tokens = data.validate_at_load_tokens;
  return o;
}

std::unique_ptr<Transformer> plan_model(const Config& cfg, int rank, int world) {
  auto model =
      std::make_unique<Transformer>(cfg.model, cfg.precision, Allocation::after_prepare, cfg.peft);
  // exact freezes before sharding
  apply_freeze(model->params(), cfg.freeze, cfg.where("freeze_config"),
               static_cast<int>(cfg.distributed.expert_parallel_size));
  model->plan_layout(rank, world, static_cast<int>(cfg.distributed.expert_parallel_size));
  return model;
}

namespace {

// The run's starting values: model.init_from's (initializing what the file lacks) or the seeded
// initialization, then peft.init_from's adapters.
template <class PeftDir>
void starting_values(Transformer& model, const Config& cfg, Communicator& comm, PeftDir* peft_dir) {
  if (cfg.model.init_from) {
    load_model_file(model, *cfg.model.init_from, comm);  // initializes what the file lacks
  } else {
    model.init_weights();
  }
  load_peft_init(model, peft_dir, comm);  // then the adapters take its values
}

}  // namespace

std::unique_ptr<Transformer> build_model(const Config& cfg, Communicator& comm, bool initialize) {
  auto model =
      std::make_unique<Transformer>(cfg.model, cfg.precision, Allocation::after_prepare, cfg.peft);
  // exact freezes before sharding
  apply_freeze(model->params(), cfg.freeze, cfg.where("freeze_config"),
               static_cast<int>(cfg.distributed.expert_parallel_size));
  comm.set_nonblocking(cfg.distributed.nonblocking_collectives);
  comm.set_collectives(cfg.distributed.collectives);
  ShardOptions so;
  so.comm = &comm;
  so.reshard_after_forward = cfg.distributed.reshard_after_forward;
  so.grad_sync = grad_sync_of(cfg);
  so.expert_parallel = static_cast<int>(cfg.distributed.expert_parallel_size);
  model->prepare(so);
  // peft.init_from: checked against the laid-out model before anything is read or initialized
  const auto peft_dir = open_peft_init(
      *model, cfg, comm, initialize ? ModelValues::initialized : ModelValues::from_checkpoint);
  if (!initialize) return model;  // a checkpoint will provide every value
  starting_values(*model, cfg, comm, peft_dir.get());
  return model;
}

void initialize_model(Transformer& model, const Config& cfg, Communicator& comm) {
  const auto peft_dir = open_peft_init(model, cfg, comm, ModelValues::initialized);
  starting_values(model, cfg, comm, peft_dir.get());
}

}  // namespace kktrain
