// LoRA adapters in PEFT's format (io/peft.hpp): the export from a checkpoint and the checked
// reader of an adapter directory.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "io/peft.hpp"

#include <pcre2.h>

#include <fcntl.h>
#include <unistd.h>

#include <yaml-cpp/yaml.h>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/errors.hpp"
#include "core/log.hpp"
#include "core/strings.hpp"
#include "io/durable.hpp"
#include "io/elem_convert.hpp"
#include "io/hf_config.hpp"
#include "io/lora_merge.hpp"
#include "io/model_weights.hpp"
#include "io/safetensors.hpp"

namespace kktrain {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kConfigFile = "adapter_config.json";
constexpr const char* kWeightsFile = "adapter_model.safetensors";
constexpr const char* kReadme = "README.md";  // PEFT's model card: the user's, kept
constexpr const char* kPeftPrefix = "base_model.model.";
// Every family's block projections (Phi-3's qkv_proj and gate_up_proj are fused ones).
const char* const kProjections[] = {"q_proj",    "k_proj",  "v_proj",       "qkv_proj", "o_proj",
                                    "gate_proj", "up_proj", "gate_up_proj", "down_proj"};
// Those of one model: Phi-3's, or every other family's.
std::vector<const char*> model_projections(bool fused) {
  if (fused) return {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"};
  return {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
}

// A block projection outside the MTP head ("model.layers.3.mlp.up_proj"); its kind, or "".
std::string projection_kind(const std::string& module) {
  if (starts_with(module, "mtp.")) return "";
  for (const char* p : kProjections) {
    if (ends_with(module, std::string(".") + p)) return p;
  }
  return "";
}

// The module of an adapter's canonical name ("X.lora_A.weight" -> "X"), or "".
std::string adapter_module(const std::string& name) {
  for (const char* w : {"A", "B"}) {
    const std::string base = lora_adapter_base(name, w);
    if (!base.empty()) return base.substr(0, base.size() - 7);  // ".weight"
  }
  return "";
}

// target_modules as PEFT reads a list: the short name of a projection adapted everywhere,
// the full names of one adapted in some layers only (sorted).
std::vector<std::string> target_modules(const std::vector<std::string>& modules,
                                        const std::set<std::string>& adapted) {
  std::set<std::string> out;
  for (const char* p : kProjections) {
    std::vector<std::string> all, with;
    for (const auto& m : modules) {
      if (projection_kind(m) != p) continue;
      all.push_back(m);
      if (adapted.count(m)) with.push_back(m);
    }
    if (with.empty()) continue;
    if (with.size() == all.size()) {
      out.insert(p);
    } else {
      out.insert(with.begin(), with.end());
    }
  }
  return {out.begin(), out.end()};
}

// The saved config's value at `section`.`key` (a checkpoint's root attribute "config"), or "".
std::string saved_config_value(const FileAttrs& a, const char* section, const char* key) {
  const auto it = a.str.find("config");
  if (it == a.str.end()) return "";
  try {
    const YAML::Node n = YAML::Load(it->second)[section][key];
    return n && n.IsScalar() ? n.as<std::string>() : "";
  } catch (const YAML::Exception&) {
    return "";
  }
}

// adapter_config.json for these adapters.
std::string adapter_config(const FileAttrs& a, const std::vector<std::string>& targets,
                           const std::string& checkpoint) {
  nlohmann::ordered_json j;
  j["peft_type"] = "LORA";
  j["task_type"] = "CAUSAL_LM";
  const std::string base = saved_config_value(a, "model", "init_from");
  std::error_code ec;
  j["base_model_name_or_path"] =
      !base.empty() && is_hf_directory(base) ? json(fs::absolute(base, ec).string()) : json();
  const auto dim = a.i64.find("lora_dim");
  const auto alpha = a.f64.find("lora_alpha");
  if (alpha == a.f64.end()) {
    throw InputError("export: '" + checkpoint + "' has lora_dim but no lora_alpha attribute");
  }
  j["r"] = dim->second;
  j["lora_alpha"] = alpha->second;
  const std::string dropout = saved_config_value(a, "peft", "dropout");
  j["lora_dropout"] = dropout.empty() ? 0.0 : std::stod(dropout);
  j["target_modules"] = targets;
  j["bias"] = "none";
  j["fan_in_fan_out"] = false;
  j["use_rslora"] = false;
  j["use_dora"] = false;
  j["init_lora_weights"] = true;
  j["inference_mode"] = true;
  j["modules_to_save"] = nullptr;
  j["layers_to_transform"] = nullptr;
  j["layers_pattern"] = nullptr;
  j["rank_pattern"] = json::object();
  j["alpha_pattern"] = json::object();
  j["revision"] = nullptr;
  return j.dump(2) + "\n";
}

// The files of the user's in the previous directory `out` that an export may replace (README.md,
// PEFT's model card, which kktrain does not write) into the new one `tmp`: hard links (the same
// file), or copies where the file system links no files.
void carry_user_files(const std::string& out, const std::string& tmp) {
  const fs::path from = fs::path(out) / kReadme, to = fs::path(tmp) / kReadme;
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(from, ec))) return;
  if (::link(from.c_str(), to.c_str()) == 0) return;
  if (fs::is_symlink(fs::symlink_status(from, ec))) {
    fs::copy_symlink(from, to, ec);
  } else {
    fs::copy_file(from, to, ec);
  }
  if (ec) {
    throw RuntimeFailure("cannot keep '" + from.string() + "' in the new export: " + ec.message());
  }
}

// The complete directory `tmp` takes `out`'s name; a previous one there steps aside first (a
// kill in between leaves it under tmp + ".old", which remove_stale_temporaries puts back).
void put_in_place(const std::string& tmp, const std::string& out) {
  const fs::path parent = fs::path(out).has_parent_path() ? fs::path(out).parent_path() : ".";
  std::error_code ec;
  if (fs::exists(out, ec)) {
    const std::string refusal = peft_out_refusal(out);  // checked again, just before
    if (!refusal.empty()) throw RuntimeFailure("export: " + refusal);
    carry_user_files(out, tmp);
    const std::string old = tmp + ".old";
    fs::rename(out, old, ec);
    if (ec) throw RuntimeFailure("cannot move '" + out + "' aside: " + ec.message());
    fs::rename(tmp, out, ec);
    if (ec) throw RuntimeFailure("cannot rename '" + tmp + "' to '" + out + "': " + ec.message());
    fsync_path(parent.string(), FsyncTarget::directory);
    fs::remove_all(old, ec);
  } else {
    fs::rename(tmp, out, ec);
    if (ec) throw RuntimeFailure("cannot rename '" + tmp + "' to '" + out + "': " + ec.message());
  }
  fsync_path(parent.string(), FsyncTarget::directory);
}

// One adapter's whole tensor as fp32 (adapters are small: r rows or r columns).
std::vector<float> whole_f32(WeightSource& src, const std::string& name, int64_t numel) {
  std::vector<float> out;
  out.reserve(static_cast<std::size_t>(numel));
  src.stream_rows_f32(name, int64_t(1) << 40,
                      [&](int64_t, int64_t, const float* v) { out.assign(v, v + numel); });
  for (float x : out) {
    if (!std::isfinite(x)) {
      throw InputError("export: '" + src.path() + "': adapter '" + name +
                       "' holds a non-finite value");
    }
  }
  return out;
}

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

// The adapters of `src` (outside the MTP head) as StTensors under PEFT's names, in `src`'s order.
std::vector<StTensor> plan(const WeightSource& src, const PeftExportOptions& o,
                           std::vector<std::string>* canonical, int* skipped_mtp) {
  std::vector<StTensor> out;
  for (const auto& n : src.names()) {
    if (adapter_module(n).empty()) continue;
    if (starts_with(n, "mtp.")) {
      ++*skipped_mtp;
      continue;
    }
    StTensor t;
    t.name = peft_tensor_name(n);
    t.shape = *src.shape(n);
    t.dtype = dtype_to_st(o.dtype.value_or(src.stored_dtype(n)));
    out.push_back(t);
    canonical->push_back(n);
  }
  return out;
}

}  // namespace

bool peft_projection_module(const std::string& module) {
  return !projection_kind(module).empty();
}

std::string peft_tensor_name(const std::string& canonical) {
  return kPeftPrefix + canonical;
}

std::string peft_out_refusal(const std::string& out) {
  std::error_code ec;
  const fs::path link =
      fs::path(out).filename().empty() ? fs::path(out).parent_path() : fs::path(out);
  if (fs::is_symlink(fs::symlink_status(link, ec)) && !fs::exists(out, ec)) {
    return "'" + out + "' is a symbolic link to '" + fs::read_symlink(link, ec).string() +
           "', which does not exist";
  }
  if (!fs::exists(out, ec)) return "";
  if (!fs::is_directory(out, ec)) return "'" + out + "' exists and is not a directory";
  for (const auto& e : fs::directory_iterator(out, ec)) {
    const std::string n = e.path().filename().string();
    if ((n != kConfigFile && n != kWeightsFile && n != kReadme) || !e.is_regular_file(ec)) {
      return "'" + out + "' holds " + n +
             ", which a PEFT adapter export does not write; refusing to replace the directory "
             "(choose a new or empty one)";
    }
  }
  return "";
}

int64_t export_peft(const std::string& checkpoint, const std::string& out_named,
                    const PeftExportOptions& o) {
  const std::string out = export_directory_target(out_named);  // a link's target, never the link
  SingleCommunicator one;
  std::unique_ptr<WeightSource> src = open_weights(checkpoint, "export", one);
  const FileAttrs attrs = src->attributes();
  if (src->kind() != "kktrain checkpoint" || !attrs.i64.count("lora_dim")) {
    throw InputError("export: '" + checkpoint +
                     "' holds no LoRA adapters (a run without a peft section); --format peft "
                     "writes adapters only");
  }
  std::vector<std::string> canonical, modules;
  std::set<std::string> adapted;
  int skipped_mtp = 0;
  std::vector<StTensor> tensors = plan(*src, o, &canonical, &skipped_mtp);
  for (const auto& n : src->names()) {
    if (ends_with(n, ".weight") && adapter_module(n).empty())
      modules.push_back(n.substr(0, n.size() - 7));
  }
  for (const auto& n : canonical) adapted.insert(adapter_module(n));
  if (skipped_mtp > 0) {
    log::info("export: the multi-token-prediction head's " + std::to_string(skipped_mtp) +
              " adapter tensors are not written (PEFT's models have no such head)");
  }
  const std::string config = adapter_config(attrs, target_modules(modules, adapted), checkpoint);
  const std::string removed = removed_temporaries_text(remove_stale_temporaries(out));
  if (!removed.empty()) log::info("export: " + removed);
  const std::string tmp = temporary_name(out);
  std::error_code ec;
  fs::remove_all(tmp, ec);
  if (!fs::create_directory(tmp, ec) || ec) {
    throw RuntimeFailure("cannot create '" + tmp + "': " + ec.message());
  }
  try {
    StWriter w((fs::path(tmp) / kWeightsFile).string(), tensors, {{"format", "pt"}});
    int64_t bytes = 0;
    for (std::size_t k = 0; k < tensors.size(); ++k) {
      const int64_t n = numel_of(tensors[k].shape);
      const DType d = st_dtype_to_dtype(tensors[k].dtype, tensors[k].name);
      const std::vector<char> b = narrow_from_f32(whole_f32(*src, canonical[k], n), d);
      w.write(k, 0, b.data(), static_cast<int64_t>(b.size()));
      bytes += static_cast<int64_t>(b.size());
    }
    w.finish();
    write_new_file_synced((fs::path(tmp) / kConfigFile).string(), config);
    fsync_path(tmp, FsyncTarget::directory);
    put_in_place(tmp, out);
    return bytes;
  } catch (const Error& e) {
    fs::remove_all(tmp, ec);
    if (e.exit_code() == 1) throw RuntimeFailure("export to '" + out + "' failed: " + e.what());
    throw;
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

// ---- reading ----------------------------------------------------------------------------------

namespace {

std::string num(double v) {
  return json(v).dump();
}

// target_modules as the message shows it: JSON, cut after 120 characters.
std::string shown(const json& targets) {
  const std::string t = targets.dump();
  return t.size() > 120 ? t.substr(0, 120) + "..." : t;
}

// Python's re.fullmatch(pattern, name) for PEFT's target_modules string, through PCRE2 (whose
// syntax is Python's for what module names need; UTF + UCP as Python's str patterns). Each name
// is matched with at most kPeftRegexMatchLimit backtracking steps and kPeftRegexHeapKiB of
// backtracking memory: a pattern that needs more ("(.|.)*[XY]" on a 30-character name needs 2^30)
// is refused, never run to its end.
class FullMatch {
 public:
  FullMatch(const std::string& pattern, const std::string& where)
      : pattern_(pattern), where_(where) {
    int err = 0;
    PCRE2_SIZE at = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                          PCRE2_UTF | PCRE2_UCP, &err, &at, nullptr);
    if (!code_) {
      throw InputError(where + "target_modules " + shown(json(pattern)) +
                       " is not a regular expression kktrain reads (" + message(err) +
                       " at offset " + std::to_string(at) + ")");
    }
    md_ = pcre2_match_data_create_from_pattern(code_, nullptr);
    ctx_ = pcre2_match_context_create(nullptr);
    if (!md_ || !ctx_) {
      release();
      throw RuntimeFailure("out of memory matching target_modules");
    }
    pcre2_set_match_limit(ctx_, kPeftRegexMatchLimit);
    pcre2_set_depth_limit(ctx_, kPeftRegexMatchLimit);
    pcre2_set_heap_limit(ctx_, kPeftRegexHeapKiB);
  }
  ~FullMatch() { release(); }
  FullMatch(const FullMatch&) = delete;
  FullMatch& operator=(const FullMatch&) = delete;

  bool operator()(const std::string& name) const {
    const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(name.data()), name.size(), 0,
                               PCRE2_ANCHORED | PCRE2_ENDANCHORED, md_, ctx_);
    if (rc >= 0) return true;
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    const bool limit =
        rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT || rc == PCRE2_ERROR_HEAPLIMIT;
    throw InputError(
        where_ + "target_modules " + shown(json(pattern_)) + ": matching '" + name + "' " +
        (limit ? "needs more than kktrain's limit of " + std::to_string(kPeftRegexMatchLimit) +
                     " backtracking steps (a pattern that backtracks exponentially; "
                     "list the module names instead)"
               : "failed (" + message(rc) + ")"));
  }

 private:
  static std::string message(int code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(code, msg, sizeof msg);
    return reinterpret_cast<const char*>(msg);
  }
  void release() {
    pcre2_match_context_free(ctx_);
    pcre2_match_data_free(md_);
    pcre2_code_free(code_);
  }
  std::string pattern_, where_;
  pcre2_code* code_ = nullptr;
  pcre2_match_data* md_ = nullptr;
  pcre2_match_context* ctx_ = nullptr;
};

// The modules `targets` (a list by PEFT's name rule, or a string: a full-match regular
// expression, or "all-linear") selects among `modules`.
std::set<std::string> selected(const json& targets, const std::vector<std::string>& modules,
                               const std::string& where) {
  std::set<std::string> out;
  if (targets.is_string()) {
    const std::string t = targets.get<std::string>();
    if (t == "all-linear") return {modules.begin(), modules.end()};
    const FullMatch matches(t, where);
    for (const auto& m : modules) {
      if (matches(m)) out.insert(m);
    }
    return out;
  }
  if (!targets.is_array())
    throw InputError(where + "target_modules must be a list of names or a string");
  for (const auto& t : targets) {
    if (!t.is_string())
      throw InputError(where + "target_modules holds " + shown(t) + ", not a name");
  }
  for (const auto& m : modules) {
    for (const auto& t : targets) {
      const std::string s = t.get<std::string>();
      if (m == s || ends_with(m, "." + s)) out.insert(m);
    }
  }
  return out;
}

// The keys that would make the adapters mean something else than plain LoRA: each at its
// default (or absent).
void check_plain_lora(const json& j, const std::string& where) {
  const auto is = [&](const char* k, const json& ok) { return !j.contains(k) || j[k] == ok; };
  const auto empty = [&](const char* k) {
    return !j.contains(k) || j[k].is_null() || (j[k].is_structured() && j[k].empty());
  };
  for (const char* k : {"use_rslora", "use_dora", "fan_in_fan_out"}) {
    if (!is(k, false))
      throw InputError(where + k + " " + j[k].dump() +
                       ": kktrain reads plain LoRA adapters (false)");
  }
  if (!is("bias", "none"))
    throw InputError(where + "bias " + j["bias"].dump() +
                     ": kktrain's adapters have no bias (\"none\")");
  for (const char* k : {"rank_pattern", "alpha_pattern", "layers_to_transform", "layers_pattern",
                        "modules_to_save"}) {
    if (!empty(k))
      throw InputError(where + k + " " + j[k].dump() + ": not read by kktrain (it must be empty)");
  }
}

// adapter_config.json read and checked to be a LoRA config of plain LoRA's keys.
json read_adapter_config(const std::string& file, const std::string& where) {
  std::string text;
  try {
    text = read_small_file(file);
  } catch (const InputError& err) {
    throw InputError("peft.init_from: " + std::string(err.what()));
  }
  refuse_duplicate_keys(file, text);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& err) {
    throw InputError(where + "not valid JSON (" + std::string(err.what()) + ")");
  }
  if (!j.is_object()) throw InputError(where + "not a JSON object");
  if (!j.contains("peft_type") || j["peft_type"] != "LORA") {
    throw InputError(where + "peft_type " +
                     (j.contains("peft_type") ? shown(j["peft_type"]) : "missing") +
                     ": LORA expected");
  }
  check_plain_lora(j, where);
  return j;
}

void check_config(const std::string& file, const PeftExpectation& e) {
  const std::string where = "peft.init_from: '" + file + "': ";
  json j = read_adapter_config(file, where);
  if (!j.contains("r") || !j["r"].is_number_integer() || j["r"].get<int64_t>() != e.r) {
    throw InputError(where + "r " + (j.contains("r") ? j["r"].dump() : "missing") +
                     " disagrees with peft.dim " + std::to_string(e.r));
  }
  if (!j.contains("lora_alpha") || !j["lora_alpha"].is_number() ||
      j["lora_alpha"].get<double>() != e.alpha) {
    throw InputError(where + "lora_alpha " +
                     (j.contains("lora_alpha") ? j["lora_alpha"].dump() : "missing") +
                     " disagrees with peft.alpha " + num(e.alpha));
  }
  if (!j.contains("target_modules")) throw InputError(where + "target_modules missing");
  const std::set<std::string> file_sel = selected(j["target_modules"], e.modules, where);
  std::set<std::string> run_sel;
  for (const auto& [n, s] : e.adapters) run_sel.insert(adapter_module(n));
  for (const auto& m : e.modules) {  // in the model's order: the first disagreement
    if (file_sel.count(m) != run_sel.count(m)) {
      throw InputError(where + "target_modules " + shown(j["target_modules"]) +
                       (file_sel.count(m)
                            ? " selects " + m + ", which peft.target_modules does not"
                            : " does not select " + m + ", which peft.target_modules adapts"));
    }
  }
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::vector<std::string> parts;
  for (auto d : s) parts.push_back(std::to_string(d));
  return "[" + join(parts, ", ") + "]";
}

StFile check_tensors(const std::string& file, const PeftExpectation& e) {
  StFile f;
  try {
    f = read_safetensors_header(file);
  } catch (const InputError& err) {
    throw InputError("peft.init_from: " + std::string(err.what()));
  }
  const std::string where = "peft.init_from: '" + file + "': ";
  std::set<std::string> seen;
  for (const StTensor& t : f.tensors) {
    const std::string canonical =
        starts_with(t.name, kPeftPrefix) ? t.name.substr(std::strlen(kPeftPrefix)) : "";
    const auto it = e.adapters.find(canonical);
    if (it == e.adapters.end()) {
      throw InputError(where + "tensor '" + printable_name(t.name) +
                       "' is not a LoRA adapter of this run's model");
    }
    if (t.shape != it->second) {
      throw InputError(where + "tensor '" + t.name + "' has shape " + shape_text(t.shape) +
                       "; this run's adapter is " + shape_text(it->second));
    }
    st_dtype_to_dtype(t.dtype, where + "tensor '" + t.name + "'");
    seen.insert(canonical);
  }
  for (const auto& [n, s] : e.adapters) {
    if (!seen.count(n)) throw InputError(where + "no tensor '" + peft_tensor_name(n) + "'");
  }
  return f;
}

void require_adapter_dir(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw InputError("peft.init_from: '" + dir +
                     "' is not a directory (a PEFT adapter directory: " + kConfigFile + " and " +
                     kWeightsFile + ")");
  }
}

// The block projections PEFT could target in a model of `num_layers` layers, by full name.
std::vector<std::string> projection_modules(int64_t num_layers, bool fused) {
  std::vector<std::string> out;
  for (int64_t i = 0; i < num_layers; ++i) {
    for (const char* p : model_projections(fused)) {
      const bool attn = p[0] == 'q' || p[0] == 'k' || p[0] == 'v' || p[0] == 'o';
      out.push_back("model.layers." + std::to_string(i) + (attn ? ".self_attn." : ".mlp.") + p);
    }
  }
  return out;
}

}  // namespace

PeftAdapterSettings read_peft_adapter_settings(const std::string& dir, int64_t num_layers,
                                               bool fused) {
  require_adapter_dir(dir);
  const std::string file = (fs::path(dir) / kConfigFile).string();
  const std::string where = "peft.init_from: '" + file + "': ";
  const json j = read_adapter_config(file, where);
  PeftAdapterSettings out;
  const json r = j.contains("r") ? j["r"] : json();
  if (!r.is_number_integer() || r.get<int64_t>() < 1 || r.get<int64_t>() > kMaxLoraRank) {
    throw InputError(where + "r " + (r.is_null() ? "missing" : shown(r)) +
                     ": the rank must be an integer in [1, " + std::to_string(kMaxLoraRank) + "]");
  }
  out.dim = r.get<int64_t>();
  const json a = j.contains("lora_alpha") ? j["lora_alpha"] : json();
  if (!a.is_number() || !std::isfinite(a.get<double>()) || a.get<double>() < 0) {
    throw InputError(where + "lora_alpha " + (a.is_null() ? "missing" : shown(a)) +
                     ": a finite number >= 0 expected");
  }
  out.alpha = a.get<double>();
  if (!j.contains("target_modules")) throw InputError(where + "target_modules missing");
  const json& t = j["target_modules"];
  const std::vector<std::string> modules = projection_modules(num_layers, fused);
  const std::set<std::string> chosen = selected(t, modules, where);
  if (t.is_array()) {
    for (const auto& name : t) {
      const std::string n = name.get<std::string>();
      if (n.empty() || n.find_first_of("*?[") != std::string::npos) {
        throw InputError(where + "target_modules holds " + shown(name) +
                         ", which names no module (PEFT matches names, not patterns)");
      }
      out.target_modules.push_back(n);
    }
  } else {
    for (const auto& m : modules) {  // in the model's order
      if (chosen.count(m)) out.target_modules.push_back(m);
    }
  }
  if (chosen.empty()) {
    std::string names;
    for (const char* p : model_projections(fused))
      names += (names.empty() ? "" : ", ") + std::string(p);
    throw InputError(where + "target_modules " + shown(t) + " selects none of the model's " +
                     "projections (" + names + " of " + std::to_string(num_layers) + " layers)");
  }
  return out;
}

PeftAdapterDir::PeftAdapterDir(const std::string& dir, const PeftExpectation& e) : dir_(dir) {
  require_adapter_dir(dir);
  check_config((fs::path(dir) / kConfigFile).string(), e);
  reader_ = std::make_unique<StReader>(check_tensors((fs::path(dir) / kWeightsFile).string(), e));
}

PeftAdapterDir::~PeftAdapterDir() = default;

std::vector<float> PeftAdapterDir::read_rows_f32(const std::string& name, int64_t row_begin,
                                                 int64_t rows) const {
  const StTensor* t = reader_->file().find(peft_tensor_name(name));
  std::vector<float> v = reader_->read_rows_f32(*t, row_begin, rows);
  for (float x : v) {
    if (!std::isfinite(x)) {
      throw InputError("peft.init_from: '" + reader_->file().path + "': tensor '" + t->name +
                       "' holds a non-finite value");
    }
  }
  return v;
}

}  // namespace kktrain
