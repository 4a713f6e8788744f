// Model weights from kktrain's HDF5 files (io/model_weights.hpp).
#include "io/model_weights.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "core/config_reader.hpp"
#include "core/errors.hpp"
#include "core/strings.hpp"
#include "io/checkpoint.hpp"
#include "io/elem_convert.hpp"
#include "io/h5_rows.hpp"
#include "io/hf_config.hpp"
#include "io/hf_weights.hpp"
#include "parallel/agree.hpp"

namespace kktrain {

namespace {

namespace fs = std::filesystem;

// /params/<name> of a checkpoint, an export or a grads dump; a checkpoint's /optim/<name>/master
// or /optim/<name>/remainder give the fp32 value the parameter stands for.
class H5Weights final : public WeightSource {
 public:
  H5Weights(const std::string& file, Communicator& comm) : r_(file, comm) {
    const FileIndex& ix = r_.index();
    const auto it = ix.root().str.find("format");
    const std::string f = it == ix.root().str.end() ? "" : it->second;
    kind_ = f == "kktrain-checkpoint" ? "kktrain checkpoint"
            : f == "kktrain-export"   ? "kktrain export"
                                      : "HDF5 file";
    names_ = ix.list("/params");
    if (names_.empty()) {
      throw InputError("'" + file + "' holds no parameters (no datasets under /params)");
    }
  }
  const std::string& path() const override { return r_.path(); }
  std::string kind() const override { return kind_; }
  std::vector<std::string> names() const override { return names_; }

  std::optional<std::vector<int64_t>> shape(const std::string& name) const override {
    const DatasetInfo* d = r_.index().find("/params/" + name);
    if (!d) return std::nullopt;
    return d->shape;
  }

  DType stored_dtype(const std::string& name) const override {
    if (master(name) || remainder(name)) return DType::float32;
    return param(name).elem(path()) == h5::Elem::bf16 ? DType::bfloat16 : DType::float32;
  }

  std::vector<float> read_rows_f32(const std::string& name, int64_t row_begin,
                                   int64_t rows) override {
    const DatasetInfo& p = param(name);
    if (const DatasetInfo* m = master(name)) {
      return widen_to_f32(r_.read_rows(m->path, row_begin, rows), m->elem(path()), what(*m));
    }
    const std::vector<char> stored = r_.read_rows(p.path, row_begin, rows);
    if (const DatasetInfo* rem = remainder(name)) {
      check_remainder(p, *rem);
      return rebuild_masters(stored, r_.read_rows(rem->path, row_begin, rows));
    }
    return widen_to_f32(stored, p.elem(path()), what(p));
  }

  void stream_rows_f32(const std::string& name, int64_t piece_rows,
                       const std::function<void(int64_t, int64_t, const float*)>& take) override {
    const DatasetInfo& p = param(name);
    const DatasetInfo* m = master(name);
    const DatasetInfo* rem = m ? nullptr : remainder(name);
    if (rem) check_remainder(p, *rem);
    const DatasetInfo& first = m ? *m : p;
    ChecksumCheck c1(path(), first), c2(path(), rem ? *rem : p);
    const int64_t total = p.shape.empty() ? 1 : p.shape[0];
    for (int64_t b = 0; b < total || b == 0; b += piece_rows) {
      const int64_t n = std::min(piece_rows, total - b);
      const h5::Elem e = first.elem(path());
      const std::vector<char> bytes = r_.read_rows_local(first, b, n);
      c1.add(bytes.data(), e, b, n);
      std::vector<float> values;
      if (rem) {
        const std::vector<char> rb = r_.read_rows_local(*rem, b, n);
        c2.add(rb.data(), h5::Elem::i16, b, n);
        values = rebuild_masters(bytes, rb);
      } else {
        values = widen_to_f32(bytes, e, what(first));
      }
      take(b, n, values.data());
      if (n <= 0) break;
    }
    c1.verify();
    if (rem) c2.verify();
  }

  const FileAttrs& attributes() const override { return r_.index().root(); }

  std::string tensor_attribute(const std::string& name, const std::string& attr) const override {
    const DatasetInfo* d = r_.index().find("/params/" + name);
    if (!d) return "";
    const auto it = d->attrs.find(attr);
    return it == d->attrs.end() ? "" : it->second;
  }

 private:
  const DatasetInfo& param(const std::string& name) const {
    const DatasetInfo* d = r_.index().find("/params/" + name);
    if (!d) throw InputError("'" + path() + "' has no parameter '" + name + "'");
    return *d;
  }
  const DatasetInfo* master(const std::string& name) const {
    return r_.index().find("/optim/" + name + "/master");
  }
  const DatasetInfo* remainder(const std::string& name) const {
    return r_.index().find("/optim/" + name + "/remainder");
  }
  void check_remainder(const DatasetInfo& p, const DatasetInfo& rem) const {
    if (p.kind != "bfloat16" || rem.kind != "int16" || rem.shape != p.shape) {
      throw InputError("'" + path() + "': " + rem.path + " is not the int16 remainder of a " +
                       "bfloat16 parameter of the same shape");
    }
  }
  std::string what(const DatasetInfo& d) const {
    return "'" + path() + "': dataset '" + d.path + "'";
  }
  RowReader r_;
  std::string kind_;
  std::vector<std::string> names_;
};

// A file a Hugging Face model directory holds (not a model by itself).
bool is_hf_part(const std::string& base) {
  return base == "config.json" || base == "model.safetensors.index.json" ||
         ends_with(base, ".safetensors");
}

}  // namespace

void check_model_path(const std::string& path, const std::string& what) {
  std::error_code ec;
  const fs::path p(path);
  const bool dir = fs::is_directory(p, ec);
  if (!dir && fs::exists(p, ec) && is_hf_part(p.filename().string())) {
    const std::string holder = p.has_parent_path() ? p.parent_path().string() : ".";
    throw InputError(what + ": '" + path +
                     "' is a file of a Hugging Face model; a Hugging Face model is the "
                     "directory holding it with its config.json ('" +
                     holder + "')");
  }
  if (!dir || fs::exists(p / "config.json", ec)) return;
  for (const auto& e : fs::directory_iterator(p, ec)) {
    const std::string base = e.path().filename().string();
    if (is_hf_part(base)) {
      throw InputError(what + ": '" + path + "' holds " + base +
                       " but no config.json: a Hugging Face model directory needs its "
                       "config.json (the architecture)");
    }
  }
}

ModelConfig architecture_of(const WeightSource& src) {
  const FileAttrs& a = src.attributes();
  auto i64 = [&](const char* k) {
    const auto it = a.i64.find(k);
    if (it == a.i64.end()) {
      throw InputError("'" + src.path() + "' has no integer attribute '" + k +
                       "' (not a kktrain model file?)");
    }
    return it->second;
  };
  auto f64 = [&](const char* k) {
    const auto it = a.f64.find(k);
    if (it == a.f64.end()) {
      throw InputError("'" + src.path() + "' has no numeric attribute '" + k +
                       "' (not a kktrain model file?)");
    }
    return it->second;
  };
  ModelConfig m;
  m.vocab_size = i64("vocab_size");
  m.hidden_size = i64("hidden_size");
  m.num_layers = i64("num_layers");
  m.num_heads = i64("num_heads");
  m.num_kv_heads = i64("num_kv_heads");
  m.intermediate_size = i64("intermediate_size");
  m.max_seq_len = i64("max_seq_len");
  m.tie_word_embeddings = i64("tie_word_embeddings") != 0;
  m.mtp_num_layers = a.i64.count("mtp_num_layers") ? a.i64.at("mtp_num_layers") : 0;
  m.rope_theta = f64("rope_theta");
  m.rms_norm_eps = f64("rms_norm_eps");
  const auto rs = a.str.find("rope_scaling");
  if (rs != a.str.end()) m.rope_scaling = rope_scaling_from_json(rs->second, src.path());
  m.moe = moe_from_attrs(a);
  m.final_logit_softcapping = softcap_from_attrs(a);
  family_from_attrs(a, src.path(), &m);
  if (m.num_heads <= 0 || (m.explicit_head_dim == 0 && m.hidden_size % m.num_heads != 0) ||
      m.num_kv_heads <= 0 || m.num_heads % m.num_kv_heads != 0) {
    throw InputError("'" + src.path() + "': inconsistent architecture attributes (hidden_size " +
                     std::to_string(m.hidden_size) + ", num_heads " + std::to_string(m.num_heads) +
                     ", num_kv_heads " + std::to_string(m.num_kv_heads) + ")");
  }
  return m;
}

void family_to_attrs(const ModelConfig& m, FileAttrs* a) {
  if (m.family != ModelFamily::llama) a->str["family"] = model_family_name(m.family);
  if (m.attention_bias != AttentionBias::none) {
    a->str["attention_bias"] = attention_bias_name(m.attention_bias);
  }
  if (m.qk_norm != QkNorm::none) a->str["qk_norm"] = qk_norm_name(m.qk_norm);
  if (m.explicit_head_dim > 0) a->i64["head_dim"] = m.explicit_head_dim;
  if (m.explicit_rotary_dim > 0) a->i64["rotary_dim"] = m.explicit_rotary_dim;
  if (m.sliding_window > 0) a->i64["sliding_window"] = m.sliding_window;
  if (!m.layer_types.empty()) a->str["layer_types"] = layer_types_text(m);
  if (!m.layer_rope.empty()) a->str["layer_rope"] = layer_rope_text(m);
  if (m.norm_weight != NormWeight::plain) a->str["norm_weight"] = norm_weight_name(m.norm_weight);
  if (m.norm_placement != NormPlacement::pre) {
    a->str["norm_placement"] = norm_placement_name(m.norm_placement);
  }
  if (m.mlp_activation != MlpActivation::silu) {
    a->str["mlp_activation"] = mlp_activation_name(m.mlp_activation);
  }
  if (m.embed_scale != EmbedScale::none) a->str["embed_scale"] = embed_scale_name(m.embed_scale);
  if (m.query_pre_attn_scalar > 0) a->f64["query_pre_attn_scalar"] = m.query_pre_attn_scalar;
  if (m.attn_logit_softcapping > 0) a->f64["attn_logit_softcapping"] = m.attn_logit_softcapping;
  if (m.rope_local_theta > 0) a->f64["rope_local_theta"] = m.rope_local_theta;
}

std::string layer_rope_text(const ModelConfig& m) {
  std::string out;
  for (auto r : m.layer_rope) out += r == LayerRope::rope ? '1' : r == LayerRope::local ? '2' : '0';
  return out;
}

std::string layer_types_text(const ModelConfig& m) {
  std::string out;
  for (auto t : m.layer_types) out += t == LayerAttention::sliding ? '1' : '0';
  return out;
}

void family_from_attrs(const FileAttrs& a, const std::string& file, ModelConfig* m) {
  auto text = [&](const char* key, const char* dflt) {
    const auto it = a.str.find(key);
    return it == a.str.end() ? std::string(dflt) : it->second;
  };
  auto refuse = [&](const char* key, const std::string& v) {
    throw InputError("'" + file + "': attribute " + key + " = \"" + printable_name(v) +
                     "\" is not one this kktrain knows (a file of a newer kktrain?)");
  };
  const std::string family = text("family", "llama");
  const std::string bias = text("attention_bias", "none");
  const std::string qk = text("qk_norm", "none");
  const auto f = parse_model_family(family);
  if (!f) refuse("family", family);
  const auto b = parse_attention_bias(bias);
  if (!b) refuse("attention_bias", bias);
  const auto q = parse_qk_norm(qk);
  if (!q) refuse("qk_norm", qk);
  m->family = *f;
  m->attention_bias = *b;
  m->qk_norm = *q;
  const auto sw = a.i64.find("sliding_window");
  m->sliding_window = sw == a.i64.end() ? 0 : sw->second;
  if (m->sliding_window < 0) {
    throw InputError("'" + file + "': attribute sliding_window = " +
                     std::to_string(m->sliding_window) + " is negative");
  }
  m->layer_types.clear();
  for (char c : text("layer_types", "")) {
    if (c != '0' && c != '1') refuse("layer_types", text("layer_types", ""));
    m->layer_types.push_back(c == '1' ? LayerAttention::sliding : LayerAttention::full);
  }
  m->layer_rope.clear();
  for (char c : text("layer_rope", "")) {
    if (c != '0' && c != '1' && c != '2') refuse("layer_rope", text("layer_rope", ""));
    m->layer_rope.push_back(c == '1'   ? LayerRope::rope
                            : c == '2' ? LayerRope::local
                                       : LayerRope::none);
  }
  auto choice = [&](const char* key, const char* dflt, auto parse) {
    const std::string v = text(key, dflt);
    const auto e = parse(v);
    if (!e) refuse(key, v);
    return *e;
  };
  m->norm_weight = choice("norm_weight", "plain", parse_norm_weight);
  m->norm_placement = choice("norm_placement", "pre", parse_norm_placement);
  m->mlp_activation = choice("mlp_activation", "silu", parse_mlp_activation);
  m->embed_scale = choice("embed_scale", "none", parse_embed_scale);
  auto positive = [&](const char* key) {
    const auto it = a.f64.find(key);
    if (it == a.f64.end()) return 0.0;
    if (!(it->second > 0) || !std::isfinite(it->second)) {
      throw InputError("'" + file + "': attribute " + key + " = " + format_double(it->second) +
                       " is not a positive number");
    }
    return it->second;
  };
  m->query_pre_attn_scalar = positive("query_pre_attn_scalar");
  m->attn_logit_softcapping = positive("attn_logit_softcapping");
  m->rope_local_theta = positive("rope_local_theta");
  const auto hd = a.i64.find("head_dim");
  m->explicit_head_dim = hd == a.i64.end() ? 0 : hd->second;
  if (m->explicit_head_dim < 0 || m->explicit_head_dim % 2 != 0 || m->explicit_head_dim > 65536) {
    throw InputError("'" + file +
                     "': attribute head_dim = " + std::to_string(m->explicit_head_dim) +
                     " is not an even number from 2 to 65536");
  }
  const auto rd = a.i64.find("rotary_dim");
  m->explicit_rotary_dim = rd == a.i64.end() ? 0 : rd->second;
  if (m->explicit_rotary_dim < 0 || m->explicit_rotary_dim % 2 != 0 ||
      m->explicit_rotary_dim > 65536) {
    throw InputError("'" + file +
                     "': attribute rotary_dim = " + std::to_string(m->explicit_rotary_dim) +
                     " is not an even number from 2 to 65536");
  }
}

void softcap_to_attrs(double cap, FileAttrs* a) {
  if (cap > 0) a->f64["final_logit_softcapping"] = cap;
}

double softcap_from_attrs(const FileAttrs& a) {
  const auto it = a.f64.find("final_logit_softcapping");
  return it == a.f64.end() ? 0.0 : it->second;
}

void moe_to_attrs(const MoeConfig& e, FileAttrs* a) {
  if (!e.enabled()) return;
  a->i64["moe_num_experts"] = e.num_experts;
  a->i64["moe_top_k"] = e.top_k;
  a->i64["moe_intermediate_size"] = e.intermediate_size;
  a->i64["moe_norm_topk_prob"] = e.norm_topk_prob ? 1 : 0;
  a->i64["moe_shared_expert_intermediate_size"] = e.shared_expert_intermediate_size;
  a->f64["moe_aux_loss_coef"] = e.aux_loss_coef;
}

MoeConfig moe_from_attrs(const FileAttrs& a) {
  MoeConfig e;
  const auto n = a.i64.find("moe_num_experts");
  if (n == a.i64.end() || n->second <= 0) return e;
  auto i64 = [&](const char* k, int64_t dflt) {
    const auto it = a.i64.find(k);
    return it == a.i64.end() ? dflt : it->second;
  };
  e.num_experts = n->second;
  e.top_k = i64("moe_top_k", e.top_k);
  e.intermediate_size = i64("moe_intermediate_size", 0);
  e.norm_topk_prob = i64("moe_norm_topk_prob", 1) != 0;
  e.shared_expert_intermediate_size = i64("moe_shared_expert_intermediate_size", 0);
  const auto c = a.f64.find("moe_aux_loss_coef");
  if (c != a.f64.end()) e.aux_loss_coef = c->second;
  return e;
}

std::string moe_kind_mismatch(const FileAttrs& a, const ModelConfig& m) {
  const MoeConfig f = moe_from_attrs(a);
  if (f.enabled() == m.moe.enabled()) return "";
  if (m.moe.enabled()) {
    return "holds a dense model (its MLPs have no experts) and the config asks for a mixture of "
           "experts (model.moe.num_experts " +
           std::to_string(m.moe.num_experts) + "); set model.moe.num_experts: 0 to continue it";
  }
  return "holds a mixture-of-experts model (" + std::to_string(f.num_experts) +
         " experts per layer) and the config asks for a dense one (model.moe.num_experts 0); "
         "set model.moe.num_experts: " +
         std::to_string(f.num_experts) + " to continue it";
}

std::unique_ptr<WeightSource> open_weights(const std::string& path, const std::string& what,
                                           Communicator& comm) {
  collectively(comm, [&] { check_model_path(path, what); });
  if (is_hf_directory(path)) {
    try {
      return open_hf_weights(path, comm);
    } catch (const CollectiveError& e) {
      if (!e.printed_here()) throw;
      throw CollectiveError(what + ": " + e.what(), e.exit_code());
    }
  }
  const std::string file = collectively(comm, [&] {
    try {
      return resolve_checkpoint(path, what);
    } catch (const Error& e) {
      const std::string msg = e.what();
      if (msg.rfind(what, 0) == 0) throw;
      throw InputError(what + ": " + msg);
    }
  });
  try {
    return collectively(comm, [&]() -> std::unique_ptr<WeightSource> {
      return std::make_unique<H5Weights>(file, comm);
    });
  } catch (const CollectiveError& e) {
    if (!e.printed_here()) throw;
    const std::string msg = e.what();
    if (msg.rfind(what, 0) == 0) throw;
    throw CollectiveError(what + ": " + msg, e.exit_code());
  }
}

}  // namespace kktrain
