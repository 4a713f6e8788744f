#include "optim/audit.hpp"

#include <cstdio>
#include <sstream>

#include "core/json_text.hpp"

namespace kktrain {

namespace {

int64_t size_of(const std::optional<DType>& d) {
  return d ? static_cast<int64_t>(dtype_size(*d)) : 0;
}

int64_t master_bytes(MasterKind k) {
  switch (k) {
    case MasterKind::float32:
      return 4;
    case MasterKind::remainder:
      return 2;  // the int16 remainder; the high half is the bf16 parameter itself
    case MasterKind::none:
      break;
  }
  return 0;
}

Json json_dtype(const std::optional<DType>& d) {
  return d ? Json(dtype_name(*d)) : Json(nullptr);
}

std::string fmt_bytes(double b) {
  char buf[32];
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024.0 && u < 4) {
    b /= 1024.0;
    ++u;
  }
  std::snprintf(buf, sizeof(buf), u ? "%.2f %s" : "%.0f %s", b, unit[u]);
  return buf;
}

}  // namespace

std::string format_bytes(double bytes) {
  return fmt_bytes(bytes);
}

std::pair<std::string, int64_t> PeakBreakdown::largest() const {
  const std::pair<std::string, int64_t> groups[] = {{"parameters", parameters},
                                                    {"gradients", gradients},
                                                    {"optimizer_state", optimizer_state},
                                                    {"compute_weights", compute_weights},
                                                    {"activations", activations},
                                                    {"workspaces", workspaces},
                                                    {"data", data},
                                                    {"baseline", baseline}};
  std::pair<std::string, int64_t> best = groups[0];
  for (const auto& g : groups) {
    if (g.second > best.second) best = g;
  }
  return best;
}

std::string peak_text(const PeakBreakdown& p) {
  std::ostringstream os;
  os << "predicted peak: " << fmt_bytes(p.total()) << " (" << p.total() << " bytes) = parameters "
     << fmt_bytes(p.parameters) << " + gradients " << fmt_bytes(p.gradients)
     << " + optimizer state " << fmt_bytes(p.optimizer_state) << " + compute weights "
     << fmt_bytes(p.compute_weights) << " + activations " << fmt_bytes(p.activations)
     << " + workspaces " << fmt_bytes(p.workspaces) << " + data " << fmt_bytes(p.data)
     << " + baseline " << fmt_bytes(p.baseline) << "\n";
  os << "activations: " << fmt_bytes(p.activations_without_checkpointing)
     << " without checkpointing, " << fmt_bytes(p.activations_with_checkpointing)
     << " with model.activation_checkpointing\n";
  return os.str();
}

std::pair<bool, std::vector<std::string>> precision_warnings(const Config& cfg,
                                                             const ParamRegistry& params) {
  std::vector<std::string> w;
  const OptimizerConfig& o = cfg.optimizer;
  int64_t bf16_params = 0, bf16_elements = 0, bf16_adapters = 0;
  for (const auto& p : params.all()) {
    if (!p.trainable || p.dtype != DType::bfloat16) continue;
    ++bf16_params;
    bf16_elements += p.numel;
    if (p.role == ParamRole::lora_a || p.role == ParamRole::lora_b) ++bf16_adapters;
  }
  bool risky = false;
  if (o.is_torch_adam() && bf16_params > 0) {
    risky = true;
    std::string msg = std::string(optimizer_kind_name(o.kind)) + " with " +
                      std::to_string(bf16_params) + " trainable bfloat16 parameters (" +
                      std::to_string(bf16_elements) + " elements";
    if (bf16_adapters > 0) msg += ", " + std::to_string(bf16_adapters) + " of them LoRA adapters";
    msg +=
        "): their exp_avg and exp_avg_sq will be bfloat16 too, and bf16's 7-bit mantissa rounds "
        "small moment updates away; long full-parameter runs can converge slower or turn "
        "unstable. Recommended: (A) transformer_engine FusedAdam with master_weights: true and "
        "exp_avg_dtype/exp_avg_sq_dtype float32, keeping model.dtype: bfloat16; or (B) "
        "torch.optim.AdamW with model.dtype: float32 (and peft.lora_dtype: float32 for "
        "adapters)";
    w.push_back(msg);
  }
  bool bf16_trainable = bf16_params > 0;
  if (o.kind == OptimizerKind::fused_adam && o.master_weights && !bf16_trainable) {
    w.push_back(
        "optimizer.master_weights has no effect: no trainable parameter is bfloat16 "
        "(fp32 parameters are their own master)");
  }
  if (o.stochastic_rounding && !bf16_trainable) {
    w.push_back("optimizer.stochastic_rounding has no effect: no trainable parameter is bfloat16");
  }
  return {risky, w};
}

namespace {

bool is_expert(const ParamInfo& p) {
  return p.moe == MoePart::expert;
}

AuditReport::Moe moe_audit(const ParamRegistry& params) {
  AuditReport::Moe m;
  m.expert_parallel = params.expert_parallel();
  m.expert_elements_per_rank.assign(params.shard_world(), 0);
  for (const auto& p : params.all()) {
    if (p.moe == MoePart::router) m.routers.push_back(p.name);
    if (!is_expert(p)) continue;
    m.expert_elements += p.numel;
    for (int rank = 0; rank < params.shard_world(); ++rank) {
      m.expert_elements_per_rank[rank] += params.rows_on_rank(p, rank) * p.row_len;
    }
  }
  return m;
}

std::string moe_text(const AuditReport::Moe& m, int world) {
  std::ostringstream os;
  os << "mixture of experts: " << m.routers.size()
     << " routers, protected fp32 (storage, compute and gradient; routing math fp32): ";
  for (std::size_t i = 0; i < m.routers.size(); ++i) os << (i ? ", " : "") << m.routers[i];
  os << "\nexpert parameters: " << m.expert_elements << " elements";
  if (world > 1) {
    os << ", expert_parallel_size " << m.expert_parallel << "; held per rank:";
    for (int r = 0; r < world; ++r) os << " " << m.expert_elements_per_rank[r];
  }
  os << "\n";
  return os.str();
}

}  // namespace

AuditReport precision_audit(const Config& cfg, const ParamRegistry& params,
                            const std::vector<std::string>& config_warnings) {
  AuditReport r;
  r.optimizer = optimizer_kind_name(cfg.optimizer.kind);
  r.precision = cfg.precision;
  r.warnings = config_warnings;
  for (const auto& w : precision_warnings(cfg, params).second) r.warnings.push_back(w);
  for (const auto& p : params.all()) {
    AuditRow row;
    row.param = &p;
    row.state = plan_state(cfg.optimizer, p);
    if (p.trainable) row.grad = p.dtype;
    const int64_t moments =
        size_of(row.state.exp_avg) + size_of(row.state.exp_avg_sq) + size_of(row.state.momentum);
    const int64_t master = master_bytes(row.state.master);
    row.bytes_per_element =
        static_cast<int64_t>(dtype_size(p.dtype)) + size_of(row.grad) + moments + master;
    row.bytes = row.bytes_per_element * p.numel;
    r.total_elements += p.numel;
    r.bytes_params += static_cast<int64_t>(dtype_size(p.dtype)) * p.numel;
    r.bytes_grads += size_of(row.grad) * p.numel;
    r.bytes_moments += moments * p.numel;
    r.bytes_master += master * p.numel;
    if (p.trainable) {
      r.trainable_elements += p.numel;
      r.bytes_trainable += row.bytes;
    }
    r.rows.push_back(row);
  }
  // Per rank: each parameter contributes its shard's rows on that rank.
  r.world = params.shard_world();
  for (int rank = 0; rank < r.world; ++rank) {
    RankBytes b;
    b.rank = rank;
    for (const auto& row : r.rows) {
      const ParamInfo& p = *row.param;
      const int64_t n = params.rows_on_rank(p, rank) * p.row_len;
      b.bytes_params += static_cast<int64_t>(dtype_size(p.dtype)) * n;
      b.bytes_grads += size_of(row.grad) * n;
      b.bytes_moments += (size_of(row.state.exp_avg) + size_of(row.state.exp_avg_sq) +
                          size_of(row.state.momentum)) *
                         n;
      b.bytes_master += master_bytes(row.state.master) * n;
    }
    if (rank == 0 || b.total() > r.per_rank.total()) r.per_rank = b;
  }
  if (cfg.model.moe.enabled()) r.moe = moe_audit(params);
  return r;
}

std::string audit_table(const AuditReport& r) {
  std::ostringstream os;
  char line[512];
  std::snprintf(line, sizeof(line), "%-48s %-5s %-13s %-8s %-8s %-8s %-10s %-9s %5s %10s%s\n",
                "parameter", "train", "shape", "storage", "grad", "exp_avg", "exp_avg_sq", "master",
                "B/el", "bytes", r.world > 1 ? "  rows/rank" : "");
  os << line;
  auto dt = [](const std::optional<DType>& d) { return d ? dtype_name(*d) : "-"; };
  for (const auto& row : r.rows) {
    const ParamInfo& p = *row.param;
    std::string name = p.name;
    for (const auto& a : p.aliases) name += " (=" + a + ")";
    const std::optional<DType> ea = row.state.momentum ? row.state.momentum : row.state.exp_avg;
    char rows[32] = "";
    if (r.world > 1)
      std::snprintf(rows, sizeof(rows), "  %lld", static_cast<long long>(p.shard_rows));
    std::snprintf(line, sizeof(line), "%-48s %-5s %-13s %-8s %-8s %-8s %-10s %-9s %5lld %10s%s\n",
                  name.c_str(), p.trainable ? "yes" : "no", shape_string(p.shape).c_str(),
                  dtype_name(p.dtype), dt(row.grad), dt(ea), dt(row.state.exp_avg_sq),
                  p.trainable ? master_kind_name(row.state.master) : "-",
                  static_cast<long long>(row.bytes_per_element), fmt_bytes(row.bytes).c_str(),
                  rows);
    os << line;
  }
  os << "\noptimizer: " << r.optimizer << "\n";
  os << "compute dtype: " << dtype_name(r.precision.compute) << " (" << r.precision.compute_source
     << ")\n";
  os << "reduce dtype:  " << dtype_name(r.precision.reduce) << "\n";
  os << "output dtype:  " << (r.precision.output ? dtype_name(*r.precision.output) : "null")
     << (r.precision.output_applied ? "" : " (not applied on one rank)") << "\n";
  os << "storage dtype: " << dtype_name(r.precision.storage) << " (" << r.precision.storage_source
     << ")\n";
  std::snprintf(
      line, sizeof(line),
      "parameters: %lld elements, %lld trainable\n"
      "bytes: params %s, grads %s, moments %s, master %s, total %s\n"
      "bytes per trainable parameter: %.2f\n",
      static_cast<long long>(r.total_elements), static_cast<long long>(r.trainable_elements),
      fmt_bytes(r.bytes_params).c_str(), fmt_bytes(r.bytes_grads).c_str(),
      fmt_bytes(r.bytes_moments).c_str(), fmt_bytes(r.bytes_master).c_str(),
      fmt_bytes(r.bytes_params + r.bytes_grads + r.bytes_moments + r.bytes_master).c_str(),
      r.bytes_per_trainable());
  os << line;
  if (r.world > 1) {
    const RankBytes& b = r.per_rank;
    std::snprintf(line, sizeof(line),
                  "sharded over %d ranks (dim 0, ceil(rows / %d) rows each); rank %d holds the "
                  "most: params %s, grads %s, moments %s, master %s, total %s\n",
                  r.world, r.world, b.rank, fmt_bytes(b.bytes_params).c_str(),
                  fmt_bytes(b.bytes_grads).c_str(), fmt_bytes(b.bytes_moments).c_str(),
                  fmt_bytes(b.bytes_master).c_str(), fmt_bytes(b.total()).c_str());
    os << line;
  }
  if (r.moe) os << moe_text(*r.moe, r.world);
  if (r.peak) os << peak_text(*r.peak);
  if (!r.pattern_peaks.empty()) {
    os << "predicted peak of this model and run under each pattern:\n";
    for (const auto& pp : r.pattern_peaks) {
      os << "  pattern " << pp.name << " (" << pp.description << "): ";
      if (pp.peak) {
        os << fmt_bytes(pp.peak->total()) << " (parameters + gradients + optimizer state "
           << fmt_bytes(pp.peak->parameters + pp.peak->gradients + pp.peak->optimizer_state)
           << ")\n";
      } else {
        os << "not planned: " << pp.error << "\n";
      }
    }
  }
  for (const auto& w : r.warnings) os << "warning: " << w << "\n";
  return os.str();
}

namespace {

// One parameter's entry of the audit's "parameters".
Json param_json(const AuditRow& row) {
  const ParamInfo& p = *row.param;
  Json j;
  j["name"] = p.name;
  j["aliases"] = p.aliases;
  j["trainable"] = p.trainable;
  j["shape"] = p.shape;
  j["storage_dtype"] = dtype_name(p.dtype);
  j["grad_dtype"] = json_dtype(row.grad);
  j["exp_avg_dtype"] = json_dtype(row.state.exp_avg);
  j["exp_avg_sq_dtype"] = json_dtype(row.state.exp_avg_sq);
  j["momentum_dtype"] = json_dtype(row.state.momentum);
  j["master"] = p.trainable ? Json(master_kind_name(row.state.master)) : Json(nullptr);
  Json e;
  e["param"] = dtype_size(p.dtype);
  e["grad"] = size_of(row.grad);
  e["exp_avg"] = size_of(row.state.exp_avg);
  e["exp_avg_sq"] = size_of(row.state.exp_avg_sq);
  e["momentum"] = size_of(row.state.momentum);
  e["master"] = master_bytes(row.state.master);
  j["element_bytes"] = e;
  j["bytes_per_element"] = row.bytes_per_element;
  j["bytes"] = row.bytes;
  j["shard_rows"] = p.shard_rows;
  j["protected_fp32"] = p.keep_fp32;
  return j;
}

Json peak_json(const PeakBreakdown& p) {
  Json j;
  j["parameters"] = p.parameters;
  j["gradients"] = p.gradients;
  j["optimizer_state"] = p.optimizer_state;
  j["compute_weights"] = p.compute_weights;
  j["activations"] = p.activations;
  j["activations_without_checkpointing"] = p.activations_without_checkpointing;
  j["activations_with_checkpointing"] = p.activations_with_checkpointing;
  j["workspaces"] = p.workspaces;
  j["data"] = p.data;
  j["baseline"] = p.baseline;
  return j;
}

// The audit's "totals": bytes by kind, per rank, and the predicted peaks when planned.
Json totals_json(const AuditReport& r) {
  Json t;
  t["elements"] = r.total_elements;
  t["trainable_elements"] = r.trainable_elements;
  t["bytes_params"] = r.bytes_params;
  t["bytes_grads"] = r.bytes_grads;
  t["bytes_moments"] = r.bytes_moments;
  t["bytes_master"] = r.bytes_master;
  t["bytes_per_trainable_parameter"] = r.bytes_per_trainable();
  const RankBytes& b = r.per_rank;
  Json pr;
  pr["rank"] = b.rank;
  pr["bytes_params"] = b.bytes_params;
  pr["bytes_grads"] = b.bytes_grads;
  pr["bytes_moments"] = b.bytes_moments;
  pr["bytes_master"] = b.bytes_master;
  pr["bytes_total"] = b.total();
  t["per_rank"] = pr;
  if (r.peak) {
    t["bytes_peak_predicted"] = r.peak->total();
    t["peak_breakdown"] = peak_json(*r.peak);
  }
  if (!r.pattern_peaks.empty()) {
    Json pp = Json::object();
    for (const auto& one : r.pattern_peaks) {
      Json e;
      e["description"] = one.description;
      e["bytes_peak_predicted"] = one.peak ? Json(one.peak->total()) : Json(nullptr);
      if (!one.peak) e["error"] = one.error;
      pp[one.name] = e;
    }
    t["pattern_peaks"] = pp;
  }
  return t;
}

}  // namespace

std::string audit_json(const AuditReport& r) {
  Json j;
  j["parameters"] = Json::array();
  for (const AuditRow& row : r.rows) j["parameters"].push_back(param_json(row));
  const ResolvedPrecision& pr = r.precision;
  j["optimizer"] = r.optimizer;
  j["storage_dtype"] = json_dtype(pr.storage);
  j["compute_dtype"] = json_dtype(pr.compute);
  j["reduce_dtype"] = json_dtype(pr.reduce);
  j["output_dtype"] = json_dtype(pr.output);
  j["output_dtype_applied"] = pr.output_applied;
  j["totals"] = totals_json(r);
  if (r.moe) {
    Json m;
    m["routers"] = r.moe->routers;
    m["router_dtype"] = "float32";
    m["expert_parallel_size"] = r.moe->expert_parallel;
    m["expert_elements"] = r.moe->expert_elements;
    m["expert_elements_per_rank"] = r.moe->expert_elements_per_rank;
    j["moe"] = m;
  }
  j["world_size"] = r.world;
  j["warnings"] = r.warnings;
  // Ratios as an ostream prints them (%g): bytes_per_trainable_parameter reads e.g. 14.0124.
  return json_text(j, JsonDoubles::six_digits) + "\n";
}

}  // namespace kktrain
