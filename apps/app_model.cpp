#include "apps/app_model.hpp"

#include "apps/checkpointing.hpp"
#include "core/errors.hpp"
#include "core/log.hpp"
#include "core/param_registry.hpp"
#include "io/checkpoint.hpp"
#include "io/h5.hpp"
#include "model/freeze.hpp"
#include "model/param_io.hpp"

namespace kktrain {

namespace {

// Opens what model.init_from names (a model file, or a checkpoint directory), with errors that
// name the key.
h5::File open_model_file(const std::string& path, std::string* resolved) {
  try {
    *resolved = resolve_checkpoint(path, "model.init_from");
    return h5::File::open_read(*resolved);
  } catch (const Error& e) {
    const std::string msg = e.what();
    if (msg.rfind("model.init_from", 0) == 0) throw;
    throw InputError("model.init_from: " + msg);
  }
}

bool is_adapter(const ParamInfo& p) {
  return p.role == ParamRole::lora_a || p.role == ParamRole::lora_b;
}

}  // namespace

DType model_file_dtype(const std::string& path) {
  std::string file;
  const h5::File f = open_model_file(path, &file);
  if (f.has_attr("/", "storage_dtype")) {
    DType d;
    const std::string s = f.read_attr_str("/", "storage_dtype");
    if (!parse_dtype(s, &d)) {
      throw InputError("model.init_from: '" + file + "' has an unknown storage_dtype \"" + s +
                       "\"");
    }
    return d;
  }
  if (!f.exists("/params")) {
    throw InputError("model.init_from: '" + file + "' has no /params group");
  }
  const auto names = f.list("/params");
  if (names.empty()) throw InputError("model.init_from: '" + file + "' has no parameters");
  const std::string kind = f.float_kind("/params/" + names.front());
  if (kind == "bfloat16") return DType::bfloat16;
  if (kind == "float32") return DType::float32;
  throw InputError("model.init_from: '" + file + "' stores parameters as " + kind +
                   ", not float32 or bfloat16");
}

void load_model_file(Transformer& model, const std::string& path) {
  std::string file;
  const h5::File f = open_model_file(path, &file);
  ParamRegistry& reg = model.params();
  int fresh_adapters = 0;
  for (int i = 0; i < reg.size(); ++i) {
    const ParamInfo& p = reg.info(i);
    const std::string ds = "/params/" + p.name;
    if (!f.exists(ds)) {
      if (is_adapter(p)) {  // fine-tuning a base model: adapters start from their init
        ++fresh_adapters;
        continue;
      }
      throw InputError("model.init_from: '" + file + "' has no parameter " + p.name);
    }
    if (f.shape(ds) != p.shape) {
      throw InputError("model.init_from: '" + file + "' parameter " + p.name + " has shape " +
                       shape_string(f.shape(ds)) + ", the model expects " + shape_string(p.shape));
    }
    if (f.has_attr(ds, "checksum")) {
      const h5::Elem e = f.elem_of(ds);
      const auto raw = read_full(f, ds, e);
      const uint64_t c = shard_checksum(raw.data(), e, p.numel, 0);
      if (checksum_hex(c) != f.read_attr_str(ds, "checksum")) {
        throw InputError("model.init_from: '" + file + "': dataset '" + ds +
                         "' fails its checksum: the file is corrupted");
      }
    }
    // The fp32 value (a checkpoint's master where it has one): fp32 destinations take it
    // as it is, bf16 ones round it once.
    param_from_host(reg, i, parameter_master(f, p.name));
  }
  if (fresh_adapters > 0) {
    log::info("model.init_from: " + std::to_string(fresh_adapters) +
              " LoRA adapter tensors are not in the file and start from their initialization");
  }
}

std::unique_ptr<Transformer> plan_model(const Config& cfg, int rank, int world) {
  auto model =
      std::make_unique<Transformer>(cfg.model, cfg.precision, /*allocate=*/false, cfg.peft);
  apply_freeze(model->params(), cfg.freeze, cfg.source);  // exact freezes before sharding
  model->plan_layout(rank, world);
  return model;
}

std::unique_ptr<Transformer> build_model(const Config& cfg, Communicator& comm, bool initialize) {
  auto model =
      std::make_unique<Transformer>(cfg.model, cfg.precision, /*allocate=*/false, cfg.peft);
  apply_freeze(model->params(), cfg.freeze, cfg.source);  // exact freezes before sharding
  ShardOptions so;
  so.comm = &comm;
  so.reshard_after_forward = cfg.distributed.reshard_after_forward;
  model->prepare(so);
  if (!initialize) return model;  // a checkpoint will provide every value
  model->init_weights();          // adapters missing from an init_from file keep these values
  if (cfg.model.init_from) load_model_file(*model, *cfg.model.init_from);
  return model;
}

}  // namespace kktrain
