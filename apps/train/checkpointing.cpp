// Training checkpoints of the model and optimizer: what goes into the file, and how a file is
// loaded back into (possibly differently sharded, possibly differently typed) storage. See
// apps/train/checkpointing.hpp and docs/checkpoints.md.
#include "apps/train/checkpointing.hpp"

#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/config_reader.hpp"
#include "core/errors.hpp"
#include "core/host_sync.hpp"
#include "core/log.hpp"
#include "core/strings.hpp"
#include "io/checkpoint.hpp"
#include "io/elem_convert.hpp"
#include "io/h5_rows.hpp"
#include "io/hf_config.hpp"
#include "io/model_weights.hpp"
#include "parallel/agree.hpp"

namespace kktrain {

namespace {

h5::Elem elem_of(DType d) {
  return d == DType::bfloat16 ? h5::Elem::bf16 : h5::Elem::f32;
}

// The model's shape-defining settings, checked on resume.
std::vector<std::pair<std::string, int64_t>> architecture(const ModelConfig& m) {
  std::vector<std::pair<std::string, int64_t>> a = {
      {"vocab_size", m.vocab_size},        {"hidden_size", m.hidden_size},
      {"num_layers", m.num_layers},        {"num_heads", m.num_heads},
      {"num_kv_heads", m.num_kv_heads},    {"intermediate_size", m.intermediate_size},
      {"max_seq_len", m.max_seq_len},      {"tie_word_embeddings", m.tie_word_embeddings ? 1 : 0},
      {"mtp_num_layers", m.mtp_num_layers}};
  if (m.moe.enabled()) {  // the sparse MLP's shape (io/model_weights.hpp moe_to_attrs)
    a.insert(a.end(),
             {{"moe_num_experts", m.moe.num_experts},
              {"moe_top_k", m.moe.top_k},
              {"moe_intermediate_size", m.moe.intermediate_size},
              {"moe_shared_expert_intermediate_size", m.moe.shared_expert_intermediate_size}});
  }
  return a;
}

std::vector<std::pair<std::string, double>> architecture_f64(const ModelConfig& m) {
  return {{"rope_theta", m.rope_theta}, {"rms_norm_eps", m.rms_norm_eps}};
}

void upload(const DBytesU& dev, const void* host, std::size_t bytes) {
  if (dev.extent(0) != bytes) {
    throw InternalError("checkpoint upload of " + std::to_string(bytes) + " bytes into " +
                        std::to_string(dev.extent(0)));
  }
  if (bytes == 0) return;
  Kokkos::deep_copy(dev, HostBytesU(static_cast<char*>(const_cast<void*>(host)), bytes));
}

[[noreturn]] void refuse(const std::string& file, const std::string& what) {
  throw InputError("checkpoint '" + file + "': " + what);
}

}  // namespace

std::string checkpoint_root(const Config& cfg) {
  if (cfg.checkpoint.dir) return *cfg.checkpoint.dir;
  return (std::filesystem::path(cfg.train.output_dir) / "checkpoints").string();
}

std::string save_training_checkpoint(const Config& cfg, Transformer& model, Optimizer& opt,
                                     const TrainProgress& p, double next_lr, Communicator& comm) {
  const ParamRegistry& reg = model.params();
  std::vector<ShardRef> shards;
  for (int i = 0; i < reg.size(); ++i) {
    const ParamInfo& pi = reg.info(i);
    ShardRef s;
    s.dataset = "/params/" + pi.name;
    s.elem = elem_of(pi.dtype);
    s.shape = pi.shape;
    s.row_begin = pi.row_begin;
    s.rows = pi.local_rows;
    s.row_len = pi.row_len;
    s.data = dispatch_dtype(pi.dtype, [&](auto tag) {
      using T = decltype(tag);
      return bytes_of(reg.data<T>(i));
    });
    s.attrs["trainable"] = pi.trainable ? "1" : "0";
    s.attrs["keep_in_fp32"] = pi.keep_fp32 ? "1" : "0";
    if (!pi.aliases.empty()) s.attrs["aliases"] = join(pi.aliases);
    shards.push_back(s);
    for (const StateRef& st : opt.state_refs(i)) {
      ShardRef o = s;
      o.dataset = "/optim/" + pi.name + "/" + st.name;
      o.elem = st.int16 ? h5::Elem::i16 : elem_of(st.dtype);
      o.data = st.data;
      o.attrs.clear();
      shards.push_back(o);
    }
  }
  FileAttrs a;
  a.str["format"] = "kktrain-checkpoint";
  a.str["kktrain_version"] = kKktrainVersion;
  a.str["config"] = to_yaml(cfg);
  a.str["optimizer"] = opt.name();
  a.str["storage_dtype"] = dtype_name(cfg.precision.storage);
  a.str["compute_dtype"] = dtype_name(cfg.precision.compute);
  a.i64["format_version"] = kCheckpointFormatVersion;
  a.i64["step"] = p.step;
  a.i64["optimizer_steps"] = p.optimizer_steps;
  a.i64["nonfinite_in_row"] = p.nonfinite;
  a.i64["world_size"] = comm.size();
  a.i64["model_seed"] = static_cast<int64_t>(cfg.model.seed);
  a.i64["data_seed"] = static_cast<int64_t>(cfg.data.seed);
  a.f64["next_lr"] = next_lr;
  for (const auto& [k, v] : architecture(cfg.model)) a.i64[k] = v;
  for (const auto& [k, v] : architecture_f64(cfg.model)) a.f64[k] = v;
  moe_to_attrs(cfg.model.moe, &a);
  softcap_to_attrs(cfg.model.final_logit_softcapping, &a);
  family_to_attrs(cfg.model, &a);
  if (cfg.model.rope_scaling.scaled())
    a.str["rope_scaling"] = rope_scaling_json(cfg.model.rope_scaling);
  if (cfg.peft.enabled) {
    a.i64["lora_dim"] = cfg.peft.dim;
    a.f64["lora_alpha"] = cfg.peft.alpha;
  }
  host_sync();
  return save_checkpoint_dir(checkpoint_root(cfg), p.step, cfg.checkpoint.keep_last, comm,
                             [&](const std::string& file) { write_shards(file, shards, a, comm); });
}

std::optional<std::string> resume_source(const Config& cfg) {
  if (cfg.checkpoint.resume == ResumeFrom::none) return std::nullopt;
  if (cfg.checkpoint.resume == ResumeFrom::latest) {
    const std::string root = checkpoint_root(cfg);
    std::string note;
    auto file = latest_checkpoint(root, &note);
    if (!note.empty()) log::warn("checkpoint: " + note);
    // `latest` names a damaged step directory and nothing else can be resumed: starting afresh
    // would throw away a run the user expects to continue.
    const std::string damaged = file ? "" : damaged_latest(root);
    if (!damaged.empty()) {
      throw InputError("checkpoint.resume: auto: " + damaged +
                       ", and no complete checkpoint is left in '" + root +
                       "' to resume from; refusing to start afresh. Put the checkpoint back, "
                       "name one with checkpoint.resume=PATH, or start afresh with "
                       "checkpoint.resume=none (the directory is then moved to earlier_N/ with "
                       "everything in it)");
    }
    return file;
  }
  return resolve_checkpoint(cfg.checkpoint.resume_path, "checkpoint.resume");
}

namespace {

// The header: format, version, architecture, optimizer, and the progress attributes (a forged or
// damaged step count must not start a run at a negative step or make bias corrections
// non-finite).
void check_header(const FileIndex& ix, const std::string& file, const Config& cfg,
                  const Optimizer& opt) {
  if (!ix.root().str.count("format") || ix.root_str("format") != "kktrain-checkpoint") {
    refuse(file, "not a kktrain training checkpoint (no format attribute 'kktrain-checkpoint')");
  }
  const int64_t v = ix.root_i64("format_version");
  if (v != kCheckpointFormatVersion) {
    refuse(file, "format version " + std::to_string(v) + "; this kktrain reads version " +
                     std::to_string(kCheckpointFormatVersion));
  }
  const std::string kind = moe_kind_mismatch(ix.root(), cfg.model);  // dense vs experts
  if (!kind.empty()) refuse(file, kind);
  for (const auto& [k, want] : architecture(cfg.model)) {
    const int64_t got = ix.root_i64(k);
    if (got != want) {
      refuse(file, "saved for model." + k + " = " + std::to_string(got) + ", the config has " +
                       std::to_string(want));
    }
  }
  for (const auto& [k, want] : architecture_f64(cfg.model)) {
    const double got = ix.root_f64(k);
    if (got != want) {
      refuse(file, "saved for model." + k + " = " + format_double(got) + ", the config has " +
                       format_double(want));
    }
  }
  const double saved_cap = softcap_from_attrs(ix.root());
  if (saved_cap != cfg.model.final_logit_softcapping) {
    const auto text = [](double c) { return c > 0 ? format_double(c) : std::string("null"); };
    refuse(file, "saved for model.final_logit_softcapping = " + text(saved_cap) +
                     ", the config has " + text(cfg.model.final_logit_softcapping));
  }
  ModelConfig saved_family;
  family_from_attrs(ix.root(), file, &saved_family);
  auto family_text = [](const ModelConfig& m) {
    return std::string("family ") + model_family_name(m.family) + ", head_dim " +
           std::to_string(m.head_dim()) + ", rotary_dim " + std::to_string(m.rotary_dim()) +
           ", attention_bias " + attention_bias_name(m.attention_bias) + ", qk_norm " +
           qk_norm_name(m.qk_norm) + ", sliding_window " + std::to_string(m.sliding_window) +
           ", layer_types [" + layer_types_text(m) + "], layer_rope [" + layer_rope_text(m) +
           "], norm_weight " + norm_weight_name(m.norm_weight) + ", norm_placement " +
           norm_placement_name(m.norm_placement) + ", mlp_activation " +
           mlp_activation_name(m.mlp_activation) + ", embed_scale " +
           embed_scale_name(m.embed_scale) + ", query_pre_attn_scalar " +
           format_double(m.query_pre_attn_scalar) + ", attn_logit_softcapping " +
           format_double(m.attn_logit_softcapping) + ", rope_local_theta " +
           format_double(m.rope_local_theta);
  };
  saved_family.hidden_size = cfg.model.hidden_size;
  saved_family.num_heads = cfg.model.num_heads;
  if (family_text(saved_family) != family_text(cfg.model)) {
    refuse(file, "saved for model " + family_text(saved_family) + "; the config has " +
                     family_text(cfg.model));
  }
  const auto rs = ix.root().str.find("rope_scaling");
  const std::string saved_scaling = rs == ix.root().str.end() ? "" : rs->second;
  if (saved_scaling != rope_scaling_json(cfg.model.rope_scaling)) {
    refuse(file, "saved for model.rope_scaling " +
                     (saved_scaling.empty() ? std::string("default") : saved_scaling) +
                     ", the config has " +
                     (cfg.model.rope_scaling.scaled() ? rope_scaling_json(cfg.model.rope_scaling)
                                                      : std::string("default")));
  }
  const std::string& o = ix.root_str("optimizer");
  if (o != opt.name()) {
    refuse(file, "saved with optimizer " + o + ", the config uses " + opt.name() +
                     "; a different optimizer cannot take over its state (start from the "
                     "weights with model.init_from instead)");
  }
  const int64_t step = ix.root_i64("step");
  auto bad = [&](const std::string& what, const std::string& value, const std::string& rule) {
    refuse(file,
           "attribute " + what + " = " + value + " is invalid (" + rule + "): the file is damaged");
  };
  if (step < 0) bad("step", std::to_string(step), "a step count is at least 0");
  const int64_t updates = ix.root_i64("optimizer_steps");
  if (updates < 0 || updates > step) {
    bad("optimizer_steps", std::to_string(updates), "between 0 and step = " + std::to_string(step));
  }
  const int64_t nonfinite = ix.root_i64("nonfinite_in_row");
  if (nonfinite < 0 || nonfinite > step - updates) {
    bad("nonfinite_in_row", std::to_string(nonfinite),
        "between 0 and the " + std::to_string(step - updates) + " steps without an update");
  }
  const double next_lr = ix.root_f64("next_lr");
  if (!std::isfinite(next_lr) || next_lr < 0.0) {
    bad("next_lr", format_double(next_lr), "a finite learning rate of at least 0");
  }
  const int64_t world = ix.root_i64("world_size");
  if (world < 1) bad("world_size", std::to_string(world), "at least 1");
  ix.root_i64("model_seed");  // present (any value: seeds are 64-bit patterns)
  ix.root_i64("data_seed");
}

// One parameter's rows as a checkpoint holds them: the stored parameter and its state tensors.
struct FileParam {
  h5::Elem elem = h5::Elem::f32;
  std::vector<char> stored;
  std::vector<std::pair<std::string, std::vector<char>>> state;  // in the file's order
  std::vector<h5::Elem> state_elem;
  const std::vector<char>* find(const std::string& name) const {
    for (const auto& [n, bytes] : state) {
      if (n == name) return &bytes;
    }
    return nullptr;
  }
  h5::Elem elem_of(const std::string& name) const {
    for (std::size_t k = 0; k < state.size(); ++k) {
      if (state[k].first == name) return state_elem[k];
    }
    return h5::Elem::f32;
  }
};

// Checks a parameter against the file and reads its rows (collective: every rank reads the same
// datasets in the same order).
FileParam read_param(RowReader& r, const std::string& file, const ParamInfo& p) {
  const FileIndex& ix = r.index();
  const std::string ds = "/params/" + p.name;
  const DatasetInfo* d = ix.find(ds);
  if (!d) refuse(file, "has no parameter '" + p.name + "'");
  if (d->shape != p.shape) {
    refuse(file, "parameter '" + p.name + "' has shape " + shape_string(d->shape) +
                     ", the model expects " + shape_string(p.shape));
  }
  const auto t = d->attrs.find("trainable");
  const bool was_trainable = t != d->attrs.end() && t->second == "1";
  if (was_trainable != p.trainable) {
    refuse(file, "parameter '" + p.name + "' was " + (was_trainable ? "trainable" : "frozen") +
                     " when saved and is " + (p.trainable ? "trainable" : "frozen") +
                     " now; resume with the same freeze_config and peft (or start from the "
                     "weights with model.init_from)");
  }
  FileParam fp;
  fp.elem = d->elem(file);
  if (fp.elem == h5::Elem::i16) refuse(file, "parameter '" + p.name + "' holds int16 data");
  fp.stored = r.read_rows(ds, p.row_begin, p.local_rows);
  const std::string sg = "/optim/" + p.name;
  for (const auto& s : ix.list(sg)) {
    const DatasetInfo& sd = ix.at(sg + "/" + s);
    if (sd.shape != p.shape) {
      refuse(file, "optimizer state '" + sd.path + "' has shape " + shape_string(sd.shape) +
                       ", its parameter " + shape_string(p.shape));
    }
    fp.state_elem.push_back(sd.elem(file));
    fp.state.emplace_back(s, r.read_rows(sd.path, p.row_begin, p.local_rows));
  }
  if (fp.find("remainder") &&
      (fp.elem != h5::Elem::bf16 || fp.elem_of("remainder") != h5::Elem::i16)) {
    refuse(file, "remainder of parameter '" + p.name +
                     "' is not the int16 remainder of a bf16 "
                     "parameter");
  }
  if (fp.find("master") && fp.elem_of("master") != h5::Elem::f32) {
    refuse(file, "master of parameter '" + p.name + "' is not float32");
  }
  return fp;
}

// The parameter's fp32 value: its master when the file has one.
std::vector<float> master_of(const FileParam& fp, const std::string& what) {
  if (const auto* m = fp.find("master")) return widen_to_f32(*m, h5::Elem::f32, what);
  if (const auto* rem = fp.find("remainder")) return rebuild_masters(fp.stored, *rem);
  return widen_to_f32(fp.stored, fp.elem, what);
}

// Stores parameter i (and its master or remainder) from the file's rows by the conversion rules
// of the header; returns whether the stored dtype changed.
bool load_param(const FileParam& fp, ParamRegistry& reg, int i, Optimizer& opt) {
  const ParamInfo& p = reg.info(i);
  const MasterKind kind = opt.state_info(i).master;
  const DBytesU dst = dispatch_dtype(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    return bytes_of(reg.data<T>(i));
  });
  StateRef master_ref, remainder_ref;
  for (const StateRef& st : opt.state_refs(i)) {
    if (st.name == "master") master_ref = st;
    if (st.name == "remainder") remainder_ref = st;
  }
  // Fast path, the usual resume: the same dtype and the same kind of master in the file.
  const bool same_dtype = fp.elem == elem_of(p.dtype);
  const auto* file_master = fp.find("master");
  const auto* file_rem = fp.find("remainder");
  const bool same_master = (kind == MasterKind::none && !file_master && !file_rem) ||
                           (kind == MasterKind::float32 && file_master) ||
                           (kind == MasterKind::remainder && file_rem);
  if (same_dtype && same_master) {
    upload(dst, fp.stored.data(), fp.stored.size());
    if (kind == MasterKind::float32)
      upload(master_ref.data, file_master->data(), file_master->size());
    if (kind == MasterKind::remainder)
      upload(remainder_ref.data, file_rem->data(), file_rem->size());
    return false;
  }
  const std::vector<float> master = master_of(fp, "parameter '" + p.name + "'");
  std::vector<char> value;
  if (p.dtype == DType::float32) {
    value = narrow_from_f32(master, DType::float32);
  } else if (kind == MasterKind::remainder) {
    // TE's split: parameter + remainder rebuild the fp32 value exactly.
    value.resize(master.size() * 2);
    std::vector<char> remainder(master.size() * 2);
    auto* pv = reinterpret_cast<uint16_t*>(value.data());
    auto* rv = reinterpret_cast<int16_t*>(remainder.data());
    for (std::size_t k = 0; k < master.size(); ++k) {
      const Bf16Remainder sp = split_remainder(master[k]);
      pv[k] = sp.high.bits;
      rv[k] = sp.remainder;
    }
    upload(remainder_ref.data, remainder.data(), remainder.size());
  } else if (fp.elem == h5::Elem::bf16) {
    value = fp.stored;  // the stored bf16 parameter itself
  } else {
    value = narrow_from_f32(master, DType::bfloat16);
  }
  if (kind == MasterKind::float32) {
    const auto bytes = narrow_from_f32(master, DType::float32);
    upload(master_ref.data, bytes.data(), bytes.size());
  }
  upload(dst, value.data(), value.size());
  return !same_dtype;
}

// Moments and momentum: converted to their dtype in this run (nearest even, or exact widening).
void load_moments(const FileParam& fp, const std::string& file, const ParamInfo& p, Optimizer& opt,
                  int i) {
  for (const StateRef& st : opt.state_refs(i)) {
    if (st.name == "master" || st.name == "remainder") continue;
    const auto* s = fp.find(st.name);
    if (!s) {
      refuse(file, "has no optimizer state '" + st.name + "' for parameter '" + p.name +
                       "' (saved with other optimizer settings)");
    }
    const h5::Elem se = fp.elem_of(st.name);
    const std::string what =
        "'" + file + "': optimizer state '" + st.name + "' of '" + p.name + "'";
    const auto bytes =
        se == elem_of(st.dtype) ? *s : narrow_from_f32(widen_to_f32(*s, se, what), st.dtype);
    upload(st.data, bytes.data(), bytes.size());
  }
}

}  // namespace

TrainProgress load_training_checkpoint(const std::string& file, const Config& cfg,
                                       Transformer& model, Optimizer& opt, Communicator& comm) {
  return collectively(comm, [&] {
    RowReader r(file, comm);
    const FileIndex& ix = r.index();
    check_header(ix, file, cfg, opt);
    ParamRegistry& reg = model.params();
    for (const auto& n : ix.list("/params")) {
      if (reg.find(n) < 0) refuse(file, "has parameter '" + n + "', which this model does not");
    }
    int converted = 0;
    for (int i = 0; i < reg.size(); ++i) {
      const FileParam fp = read_param(r, file, reg.info(i));
      converted += load_param(fp, reg, i, opt) ? 1 : 0;
      load_moments(fp, file, reg.info(i), opt, i);
    }
    host_sync();
    TrainProgress p;
    p.step = ix.root_i64("step");
    p.optimizer_steps = ix.root_i64("optimizer_steps");
    p.nonfinite = ix.root_i64("nonfinite_in_row");
    if (ix.root().str.count("config")) p.saved_config = ix.root_str("config");
    opt.set_steps(p.optimizer_steps);
    if (converted > 0) {
      log::info("checkpoint: " + std::to_string(converted) +
                " parameters converted from the file's dtype to this config's storage dtype");
    }
    return p;
  });
}

}  // namespace kktrain
