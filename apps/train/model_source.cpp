// One loader and one validation for every command that reads a model (apps/train/model_source.hpp).
#include "apps/train/model_source.hpp"

#include <yaml-cpp/yaml.h>

#include "apps/train/app_model.hpp"
#include "core/errors.hpp"
#include "core/strings.hpp"
#include "io/finite_weights.hpp"
#include "io/hf_config.hpp"

namespace kktrain {

namespace {

bool is_adapter_name(const std::string& n) {
  return n.find(".lora_A.") != std::string::npos || n.find(".lora_B.") != std::string::npos;
}

bool is_hf_source(const WeightSource& src) {
  const auto it = src.attributes().str.find("format");
  return it != src.attributes().str.end() && it->second == "huggingface";
}

// A kktrain file's architecture attributes as config keys (what config.json gives for a
// Hugging Face directory, io/hf_config.hpp hf_model_file_architecture).
ModelFileArchitecture kktrain_file_architecture(const WeightSource& src) {
  const ModelConfig m = architecture_of(src);
  ModelFileArchitecture f;
  f.source = src.path();
  auto add = [&](const char* key, const char* attr, YAML::Node v) {
    f.values.push_back({key, attr, v});
  };
  add("vocab_size", "vocab_size", YAML::Node(m.vocab_size));
  add("hidden_size", "hidden_size", YAML::Node(m.hidden_size));
  add("intermediate_size", "intermediate_size", YAML::Node(m.intermediate_size));
  add("num_layers", "num_layers", YAML::Node(m.num_layers));
  add("num_heads", "num_heads", YAML::Node(m.num_heads));
  add("num_kv_heads", "num_kv_heads", YAML::Node(m.num_kv_heads));
  add("rms_norm_eps", "rms_norm_eps", YAML::Node(m.rms_norm_eps));
  add("rope_theta", "rope_theta", YAML::Node(m.rope_theta));
  add("max_seq_len", "max_seq_len", YAML::Node(m.max_seq_len));
  add("tie_word_embeddings", "tie_word_embeddings", YAML::Node(m.tie_word_embeddings));
  add("mtp_num_layers", "mtp_num_layers", YAML::Node(m.mtp_num_layers));
  add("rope_scaling", "rope_scaling", rope_scaling_node(m.rope_scaling));
  // Absent: off (null). Any value the file holds goes to the config reader, which refuses a
  // forged one (0, negative, not finite) naming the key and the file.
  const auto& f64 = src.attributes().f64;
  add("final_logit_softcapping", "final_logit_softcapping",
      f64.count("final_logit_softcapping") ? YAML::Node(m.final_logit_softcapping)
                                           : YAML::Node(YAML::NodeType::Null));
  add("family", "family", YAML::Node(model_family_name(m.family)));
  add("head_dim", "head_dim",
      m.explicit_head_dim > 0 ? YAML::Node(m.explicit_head_dim) : YAML::Node(YAML::NodeType::Null));
  add("rotary_dim", "rotary_dim",
      m.explicit_rotary_dim > 0 ? YAML::Node(m.explicit_rotary_dim)
                                : YAML::Node(YAML::NodeType::Null));
  add("attention_bias", "attention_bias", YAML::Node(attention_bias_name(m.attention_bias)));
  add("qk_norm", "qk_norm", YAML::Node(qk_norm_name(m.qk_norm)));
  add("sliding_window", "sliding_window",
      m.sliding_window > 0 ? YAML::Node(m.sliding_window) : YAML::Node(YAML::NodeType::Null));
  YAML::Node types(YAML::NodeType::Sequence);  // empty: null (the config prints [])
  for (auto t : m.layer_types) types.push_back(layer_attention_name(t));
  add("layer_types", "layer_types", types);
  YAML::Node ropes(YAML::NodeType::Sequence);  // empty: null
  for (auto r : m.layer_rope) ropes.push_back(layer_rope_name(r));
  add("layer_rope", "layer_rope", ropes);
  add("norm_weight", "norm_weight", YAML::Node(norm_weight_name(m.norm_weight)));
  add("norm_placement", "norm_placement", YAML::Node(norm_placement_name(m.norm_placement)));
  add("mlp_activation", "mlp_activation", YAML::Node(mlp_activation_name(m.mlp_activation)));
  add("embed_scale", "embed_scale", YAML::Node(embed_scale_name(m.embed_scale)));
  auto number_or_null = [](double v) {
    return v > 0 ? YAML::Node(v) : YAML::Node(YAML::NodeType::Null);
  };
  add("query_pre_attn_scalar", "query_pre_attn_scalar", number_or_null(m.query_pre_attn_scalar));
  add("attn_logit_softcapping", "attn_logit_softcapping", number_or_null(m.attn_logit_softcapping));
  add("rope_local_theta", "rope_local_theta", number_or_null(m.rope_local_theta));
  if (m.moe.enabled()) {
    const MoeConfig& e = m.moe;
    add("moe.num_experts", "moe_num_experts", YAML::Node(e.num_experts));
    add("moe.top_k", "moe_top_k", YAML::Node(e.top_k));
    add("moe.intermediate_size", "moe_intermediate_size", YAML::Node(e.intermediate_size));
    add("moe.norm_topk_prob", "moe_norm_topk_prob", YAML::Node(e.norm_topk_prob));
    add("moe.shared_expert_intermediate_size", "moe_shared_expert_intermediate_size",
        YAML::Node(e.shared_expert_intermediate_size));
    add("moe.aux_loss_coef", "moe_aux_loss_coef", YAML::Node(e.aux_loss_coef));
  }
  return f;
}

}  // namespace

void check_model_file(const WeightSource& src, const ParamRegistry& reg, const std::string& what,
                      AdapterTensors adapter_policy) {
  const std::string file = what + ": '" + src.path() + "'";
  std::vector<std::string> adapters, unused;
  for (const auto& n : src.names()) {
    const int i = reg.find(n);
    if (i < 0) {
      if (!is_adapter_name(n)) {
        unused.push_back(printable_name(n));
      } else if (adapter_policy == AdapterTensors::refuse) {
        adapters.push_back(printable_name(n));
      }
    } else if (reg.info(i).name != n && src.shape(reg.info(i).name)) {
      if (is_hf_source(src)) {
        throw InputError(file + " holds " + n + " although its config.json ties it to " +
                         reg.info(i).name + " (tie_word_embeddings: true): which one is meant?");
      }
      throw InputError(file + " holds " + n + " separately, but this model ties it to " +
                       reg.info(i).name + " (set model.tie_word_embeddings: false)");
    }
  }
  if (!adapters.empty()) {
    throw InputError(file + " holds " + std::to_string(adapters.size()) +
                     " trained LoRA adapter tensors (" + adapters.front() +
                     ", ...) and this model has no adapters: their training would be lost; "
                     "start from an export with them merged (kktrain export CHECKPOINT --out "
                     "FILE.h5 --lora merged) or set the same peft settings");
  }
  if (!unused.empty()) {
    std::string list;
    for (std::size_t k = 0; k < unused.size() && k < 5; ++k) list += (k ? ", " : "") + unused[k];
    if (unused.size() > 5) list += ", ... (" + std::to_string(unused.size()) + " in all)";
    throw InputError(file + " has tensors this model does not use: " + list +
                     " (a model of another architecture?)");
  }
  for (const auto& p : reg.all()) {
    const auto shape = src.shape(p.name);
    if (!shape) {
      if (p.role == ParamRole::lora_a || p.role == ParamRole::lora_b) continue;
      throw InputError(file + " has no parameter " + p.name);
    }
    if (*shape != p.shape) {
      throw InputError(file + " parameter " + p.name + " has shape " + shape_string(*shape) +
                       ", the model expects " + shape_string(p.shape));
    }
  }
}

ModelFileArchitecture source_architecture(const WeightSource& src, const std::string& what) {
  try {
    return is_hf_source(src) ? hf_model_file_architecture(read_hf_config(src.path()))
                             : kktrain_file_architecture(src);
  } catch (const InputError& e) {
    throw InputError(what + ": " + e.what());
  }
}

ModelConfig model_file_config(const WeightSource& src, const std::string& what) {
  const ModelFileArchitecture arch = source_architecture(src, what);
  // The smallest config that takes the file's architecture: model.init_from names the file
  // (its keys come from it, as for training), nothing else is asked of it.
  YAML::Emitter text;
  text << YAML::BeginMap << YAML::Key << "model" << YAML::Value << YAML::BeginMap << YAML::Key
       << "init_from" << YAML::Value << YAML::DoubleQuoted << src.path() << YAML::Key << "dtype"
       << YAML::Value << "float32" << YAML::EndMap << YAML::Key << "data" << YAML::Value
       << YAML::BeginMap << YAML::Key << "seq_len" << YAML::Value << 1 << YAML::EndMap
       << YAML::EndMap;
  LoadOptions opts;
  opts.model_file_architecture = [&](const std::string&) { return arch; };
  try {
    return load_config_text(text.c_str(), what, {}, opts).model;
  } catch (const ConfigError& e) {
    throw InputError(what + ": " + e.what());
  }
}

ModelConfig check_self_described(const WeightSource& src, const std::string& what,
                                 AdapterTensors adapters) {
  Config cfg;
  cfg.model = model_file_config(src, what);
  const auto planned = plan_model(cfg, 0, 1);
  check_model_file(src, planned->params(), what, adapters);
  return cfg.model;
}

std::function<std::unique_ptr<WeightSource>(std::unique_ptr<WeightSource>)> export_source_check(
    const ExportOptions& o) {
  const DType dtype = o.dtype;
  const AdapterTensors adapters =
      o.lora == LoraExport::separate ? AdapterTensors::keep : AdapterTensors::refuse;
  return [dtype, adapters](std::unique_ptr<WeightSource> src) {
    check_self_described(*src, "export", adapters);
    const WeightSource* s = src.get();
    return with_finite_check(std::move(src), "export", [dtype, s](const std::string& n) {
      const bool keep = s->tensor_attribute(n, "keep_in_fp32") == "1";
      return dtype == DType::bfloat16 && !keep ? DType::bfloat16 : DType::float32;
    });
  };
}

}  // namespace kktrain
