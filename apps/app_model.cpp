#include "apps/app_model.hpp"

#include "core/errors.hpp"
#include "core/param_registry.hpp"
#include "io/h5.hpp"
#include "model/freeze.hpp"
#include "model/param_io.hpp"

namespace kktrain {

DType model_file_dtype(const std::string& path) {
  const h5::File f = h5::File::open_read(path);
  if (f.has_attr("/", "storage_dtype")) {
    DType d;
    const std::string s = f.read_attr_str("/", "storage_dtype");
    if (!parse_dtype(s, &d)) {
      throw InputError("model.init_from: '" + path + "' has an unknown storage_dtype \"" + s +
                       "\"");
    }
    return d;
  }
  if (!f.exists("/params")) {
    throw InputError("model.init_from: '" + path + "' has no /params group");
  }
  const auto names = f.list("/params");
  if (names.empty()) throw InputError("model.init_from: '" + path + "' has no parameters");
  const std::string kind = f.float_kind("/params/" + names.front());
  if (kind == "bfloat16") return DType::bfloat16;
  if (kind == "float32") return DType::float32;
  throw InputError("model.init_from: '" + path + "' stores parameters as " + kind +
                   ", not float32 or bfloat16");
}

void load_model_file(Transformer& model, const std::string& path) {
  const h5::File f = h5::File::open_read(path);
  ParamRegistry& reg = model.params();
  for (int i = 0; i < reg.size(); ++i) {
    const ParamInfo& p = reg.info(i);
    const std::string ds = "/params/" + p.name;
    if (!f.exists(ds)) {
      throw InputError("model.init_from: '" + path + "' has no parameter " + p.name);
    }
    if (f.shape(ds) != p.shape) {
      throw InputError("model.init_from: '" + path + "' parameter " + p.name + " has shape " +
                       shape_string(f.shape(ds)) + ", the model expects " + shape_string(p.shape));
    }
    param_from_host(reg, i, f.read_f32(ds));
  }
}

std::unique_ptr<Transformer> plan_model(const Config& cfg, int rank, int world) {
  auto model =
      std::make_unique<Transformer>(cfg.model, cfg.precision, /*allocate=*/false, cfg.peft);
  apply_freeze(model->params(), cfg.freeze, cfg.source);  // exact freezes before sharding
  model->plan_layout(rank, world);
  return model;
}

std::unique_ptr<Transformer> build_model(const Config& cfg, Communicator& comm) {
  auto model =
      std::make_unique<Transformer>(cfg.model, cfg.precision, /*allocate=*/false, cfg.peft);
  apply_freeze(model->params(), cfg.freeze, cfg.source);  // exact freezes before sharding
  ShardOptions so;
  so.comm = &comm;
  so.reshard_after_forward = cfg.distributed.reshard_after_forward;
  model->prepare(so);
  if (cfg.model.init_from) {
    load_model_file(*model, *cfg.model.init_from);
  } else {
    model->init_weights();
  }
  return model;
}

}  // namespace kktrain
