#include "core/config_reader.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>

#include "core/errors.hpp"

namespace kktrain {

std::string ConfigOrigin::where(const std::string& key_path, const YAML::Node& node) const {
  // An override of this key or of any section above it takes the blame; so does one that wrote
  // below this key (it created or replaced what is being rejected here).
  const std::string prefix = key_path + ".";
  for (const auto& o : overrides) {
    if (o.first.compare(0, prefix.size(), prefix) == 0) return "override '" + o.second + "'";
  }
  std::string p = key_path;
  while (!p.empty()) {
    auto it = overrides.find(p);
    if (it != overrides.end()) return "override '" + it->second + "'";
    auto dot = p.rfind('.');
    if (dot == std::string::npos) break;
    p.resize(dot);
  }
  for (p = key_path; !p.empty();) {
    auto it = from_files.find(p);
    if (it != from_files.end()) return "from " + it->second;
    auto dot = p.rfind('.');
    if (dot == std::string::npos) break;
    p.resize(dot);
  }
  if (node.IsDefined() && !node.Mark().is_null() && !file.empty()) {
    return file + ":" + std::to_string(node.Mark().line + 1) + ":" +
           std::to_string(node.Mark().column + 1);
  }
  return file;
}

std::string ConfigOrigin::where_repeated(const std::string& key_path, const YAML::Node& key) const {
  // Only a mapping an override gave (`model={a: 1, a: 2}`) can repeat a key outside the file; an
  // override of the repeated key itself replaced one of the file's values, not the repetition.
  for (std::string p = key_path; p.rfind('.') != std::string::npos;) {
    p.resize(p.rfind('.'));
    auto it = overrides.find(p);
    if (it != overrides.end()) return "override '" + it->second + "'";
  }
  if (!key.Mark().is_null() && !file.empty()) {
    return file + ":" + std::to_string(key.Mark().line + 1) + ":" +
           std::to_string(key.Mark().column + 1);
  }
  return file;
}

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string closest_key(const std::string& key, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_d = std::string::npos;
  for (const auto& c : candidates) {
    const std::size_t d = edit_distance(key, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  // A typo, not a different word: allow about a third of the key to differ (at least 2 edits).
  const std::size_t limit = std::max<std::size_t>(2, key.size() / 3);
  return best_d <= limit ? best : "";
}

std::string format_double(double v) {
  char buf[64];
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof(buf), "%.1f", v);  // integral values read best as "10000.0"
    return buf;
  }
  if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof(buf), "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s(buf);
  // YAML 1.1 readers (PyYAML) need a '.' in the mantissa to see a float: "1e-05" -> "1.0e-05".
  const auto e = s.find_first_of("eE");
  if (e != std::string::npos && s.find('.') == std::string::npos) s.insert(e, ".0");
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

namespace {

std::string describe(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return "null";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  return "\"" + n.Scalar() + "\"";
}

bool parse_int(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || end != s.c_str() + s.size()) return false;
  *out = v;
  return true;
}

bool parse_double(const std::string& s, double* out) {
  if (s.empty()) return false;
  // YAML 1.2 spellings of the special values.
  if (s == ".inf" || s == ".Inf" || s == "+.inf") {
    *out = INFINITY;
    return true;
  }
  if (s == "-.inf" || s == "-.Inf") {
    *out = -INFINITY;
    return true;
  }
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return false;
  *out = v;
  return true;
}

}  // namespace

namespace {
SchemaRecorder* g_recorder = nullptr;

std::string range_text(const std::string& lo, const std::string& hi, bool unbounded) {
  return unbounded ? ">= " + lo : lo + " .. " + hi;
}
}  // namespace

SchemaRecorder::SchemaRecorder() {
  g_recorder = this;
}
SchemaRecorder::~SchemaRecorder() {
  g_recorder = nullptr;
}
void Section::accepts(const std::string& key, const std::string& text) const {
  if (!g_recorder) return;
  for (auto& e : g_recorder->entries) {
    if (e.key == key_path(key)) e.accepted = text;
  }
}

void SchemaRecorder::record(SchemaEntry e) {
  for (auto& x : entries) {
    if (x.key == e.key) {
      x = std::move(e);
      return;
    }
  }
  entries.push_back(std::move(e));
}

Section::Section(YAML::Node node, std::string path, std::shared_ptr<const ConfigOrigin> origin,
                 YAML::Node resolved)
    : node_(node), path_(std::move(path)), origin_(std::move(origin)), resolved_(resolved) {
  if (node_.IsDefined() && !node_.IsNull() && !node_.IsMap()) {
    throw ConfigError(path_, "expected a mapping of keys, got " + describe(node_),
                      origin_->where(path_, node_));
  }
  // YAML forbids duplicate keys, but yaml-cpp keeps both; other tools would read the last one
  // while we would read the first, so reject them.
  if (node_.IsDefined() && node_.IsMap()) {
    std::set<std::string> seen;
    for (const auto& kv : node_) {
      const std::string k = kv.first.Scalar();
      if (!seen.insert(k).second) {
        throw ConfigError(key_path(k), "duplicate key",
                          origin_->where_repeated(key_path(k), kv.first));
      }
    }
  }
}

std::string Section::key_path(const std::string& key) const {
  return path_.empty() ? key : path_ + "." + key;
}

YAML::Node Section::value(const std::string& key) const {
  if (!node_.IsDefined() || node_.IsNull()) return YAML::Node(YAML::NodeType::Undefined);
  const YAML::Node& n = node_;  // const access: never inserts the key
  return n[key];
}

bool Section::present(const std::string& key) const {
  return value(key).IsDefined();
}

bool Section::has(const std::string& key) const {
  const YAML::Node v = value(key);
  return v.IsDefined() && !v.IsNull();
}

void Section::known(const std::string& key) {
  if (std::find(known_.begin(), known_.end(), key) == known_.end()) known_.push_back(key);
}

void Section::accept(const std::string& key) {
  known(key);
}

void Section::set_resolved(const std::string& key, const YAML::Node& v) {
  resolved_[key] = v;
}

void Section::fail(const std::string& key, const std::string& msg) const {
  throw ConfigError(key_path(key), msg, origin_->where(key_path(key), value(key)));
}

void Section::fail_either(const std::string& a, const std::string& b,
                          const std::string& msg) const {
  const std::string wa = origin_->where(key_path(a), value(a));
  const std::string wb = origin_->where(key_path(b), value(b));
  if (wa.rfind("override ", 0) == 0 && wb.rfind("override ", 0) != 0) {
    throw ConfigError(key_path(a), msg, wa);
  }
  fail(b, msg);
}

int64_t Section::get_int(const std::string& key, int64_t def, int64_t min, int64_t max) {
  auto v = get_opt_int(key, def, min, max);
  return *v;
}

std::optional<int64_t> Section::get_opt_int(const std::string& key, std::optional<int64_t> def,
                                            int64_t min, int64_t max) {
  known(key);
  if (g_recorder) {
    g_recorder->record({key_path(key), "integer", def ? std::to_string(*def) : "null",
                        range_text(std::to_string(min), std::to_string(max),
                                   max >= std::numeric_limits<int32_t>::max())});
  }
  std::optional<int64_t> out = def;
  const YAML::Node v = value(key);
  if (v.IsDefined() && !v.IsNull()) {
    int64_t x = 0;
    if (!v.IsScalar() || !parse_int(v.Scalar(), &x)) {
      fail(key, "expected an integer, got " + describe(v));
    }
    out = x;
  }
  if (out && (*out < min || *out > max)) {
    fail(key, "value " + std::to_string(*out) + " is out of range [" + std::to_string(min) + ", " +
                  std::to_string(max) + "]");
  }
  resolved_[key] = out ? YAML::Node(*out) : YAML::Node(YAML::NodeType::Null);
  return out;
}

double Section::get_double(const std::string& key, double def, double min, double max) {
  known(key);
  if (g_recorder) {
    g_recorder->record({key_path(key), "number", format_double(def),
                        range_text(format_double(min), format_double(max), std::isinf(max))});
  }
  double out = def;
  const YAML::Node v = value(key);
  if (v.IsDefined() && !v.IsNull()) {
    if (!v.IsScalar() || !parse_double(v.Scalar(), &out)) {
      fail(key, "expected a number, got " + describe(v));
    }
  }
  if (!std::isfinite(out)) fail(key, "expected a finite number, got " + format_double(out));
  if (!(out >= min && out <= max)) {
    fail(key, "value " + format_double(out) + " is out of range [" + format_double(min) + ", " +
                  format_double(max) + "]");
  }
  resolved_[key] = YAML::Load(format_double(out));
  return out;
}

std::optional<double> Section::get_opt_double(const std::string& key, double min, double max) {
  known(key);
  if (g_recorder) {
    g_recorder->record({key_path(key), "number", "null",
                        range_text(format_double(min), format_double(max), std::isinf(max))});
  }
  const YAML::Node v = value(key);
  if (!v.IsDefined() || v.IsNull()) {
    resolved_[key] = YAML::Node(YAML::NodeType::Null);
    return std::nullopt;
  }
  double out = 0.0;
  if (!v.IsScalar() || !parse_double(v.Scalar(), &out)) {
    fail(key, "expected a number, got " + describe(v));
  }
  if (!std::isfinite(out)) fail(key, "expected a finite number, got " + format_double(out));
  if (!(out >= min && out <= max)) {
    fail(key, "value " + format_double(out) + " is out of range [" + format_double(min) + ", " +
                  format_double(max) + "]");
  }
  resolved_[key] = YAML::Load(format_double(out));
  return out;
}

bool Section::get_bool(const std::string& key, bool def) {
  known(key);
  if (g_recorder)
    g_recorder->record({key_path(key), "boolean", def ? "true" : "false", "true, false"});
  bool out = def;
  const YAML::Node v = value(key);
  if (v.IsDefined() && !v.IsNull()) {
    const std::string& s = v.IsScalar() ? v.Scalar() : std::string();
    if (s == "true" || s == "True" || s == "TRUE") {
      out = true;
    } else if (s == "false" || s == "False" || s == "FALSE") {
      out = false;
    } else {
      fail(key, "expected true or false, got " + describe(v));
    }
  }
  resolved_[key] = out;
  return out;
}

std::string Section::get_string(const std::string& key, const std::string& def) {
  auto v = get_opt_string(key);
  if (g_recorder) g_recorder->record({key_path(key), "string", "\"" + def + "\"", "any string"});
  std::string out = v ? *v : def;
  resolved_[key] = out;
  return out;
}

std::optional<std::string> Section::get_opt_string(const std::string& key) {
  known(key);
  if (g_recorder) g_recorder->record({key_path(key), "string", "null", "a string, or null"});
  const YAML::Node v = value(key);
  std::optional<std::string> out;
  if (v.IsDefined() && !v.IsNull()) {
    if (!v.IsScalar()) fail(key, "expected a string, got " + describe(v));
    out = v.Scalar();
  }
  resolved_[key] = out ? YAML::Node(*out) : YAML::Node(YAML::NodeType::Null);
  return out;
}

std::string Section::get_choice(const std::string& key, const std::string& def,
                                const std::vector<std::string>& choices) {
  std::string s = get_string(key, def);
  if (g_recorder) {
    std::string list;
    for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
    g_recorder->record({key_path(key), "choice", def, list});
  }
  if (std::find(choices.begin(), choices.end(), s) == choices.end()) {
    std::string list;
    for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
    fail(key, "\"" + s + "\" is not one of: " + list);
  }
  return s;
}

std::vector<std::string> Section::get_string_list(const std::string& key, GlobMaps glob_maps) {
  const bool allow_glob_maps = glob_maps == GlobMaps::accepted;
  known(key);
  if (g_recorder) {
    g_recorder->record({key_path(key), "list of strings", "[]",
                        allow_glob_maps ? "names or globs, or {glob: PATTERN}" : "strings"});
  }
  std::vector<std::string> out;
  const YAML::Node v = value(key);
  auto item = [&](const YAML::Node& n) {
    if (n.IsScalar()) {
      out.push_back(n.Scalar());
    } else if (allow_glob_maps && n.IsMap() && n.size() == 1 && n["glob"] && n["glob"].IsScalar()) {
      out.push_back(n["glob"].Scalar());
    } else {
      fail(key, std::string("expected a list of strings") +
                    (allow_glob_maps ? " or {glob: PATTERN} selectors" : "") + ", got an item " +
                    describe(n));
    }
  };
  if (v.IsDefined() && !v.IsNull()) {
    if (v.IsSequence()) {
      for (const auto& n : v) item(n);
    } else {
      item(v);
    }
  }
  YAML::Node r(YAML::NodeType::Sequence);
  for (const auto& s : out) r.push_back(s);
  r.SetStyle(YAML::EmitterStyle::Flow);
  resolved_[key] = r;
  return out;
}

std::vector<double> Section::get_number_list(const std::string& key, int64_t max_items, double min,
                                             double max) {
  known(key);
  if (g_recorder) {
    g_recorder->record({key_path(key), "list of numbers", "null",
                        "1 to " + std::to_string(max_items) + " numbers, each " +
                            range_text(format_double(min), format_double(max), std::isinf(max))});
  }
  std::vector<double> out;
  const YAML::Node v = value(key);
  YAML::Node r(YAML::NodeType::Sequence);
  if (v.IsDefined() && !v.IsNull()) {
    if (!v.IsSequence() || v.size() == 0 || static_cast<int64_t>(v.size()) > max_items) {
      fail(key, "expected a list of 1 to " + std::to_string(max_items) + " numbers, got " +
                    (v.IsSequence() ? std::to_string(v.size()) + " items" : describe(v)));
    }
    for (std::size_t i = 0; i < v.size(); ++i) {
      double x = 0.0;
      if (!v[i].IsScalar() || !parse_double(v[i].Scalar(), &x) || !std::isfinite(x)) {
        fail(key, "item " + std::to_string(i) + " is not a finite number: " + describe(v[i]));
      }
      if (!(x >= min && x <= max)) {
        fail(key, "item " + std::to_string(i) + " = " + format_double(x) + " is out of range [" +
                      format_double(min) + ", " + format_double(max) + "]");
      }
      out.push_back(x);
      r.push_back(YAML::Load(format_double(x)));
    }
    r.SetStyle(YAML::EmitterStyle::Flow);
    resolved_[key] = r;
  } else {
    resolved_[key] = YAML::Node(YAML::NodeType::Null);
  }
  return out;
}

std::vector<double> Section::get_double_list(const std::string& key, const std::vector<double>& def,
                                             double min, double max) {
  known(key);
  if (g_recorder) {
    std::string d;
    for (double x : def) d += (d.empty() ? "" : ", ") + format_double(x);
    g_recorder->record(
        {key_path(key), "list of " + std::to_string(def.size()) + " numbers", "[" + d + "]",
         "each " + range_text(format_double(min), format_double(max), std::isinf(max))});
  }
  std::vector<double> out = def;
  const YAML::Node v = value(key);
  if (v.IsDefined() && !v.IsNull()) {
    if (!v.IsSequence() || v.size() != def.size()) {
      fail(key,
           "expected a list of " + std::to_string(def.size()) + " numbers, got " + describe(v));
    }
    for (std::size_t i = 0; i < def.size(); ++i) {
      if (!v[i].IsScalar() || !parse_double(v[i].Scalar(), &out[i])) {
        fail(key, "item " + std::to_string(i) + " is not a number: " + describe(v[i]));
      }
    }
  }
  YAML::Node r(YAML::NodeType::Sequence);
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (!(out[i] >= min && out[i] <= max)) {
      fail(key, "item " + std::to_string(i) + " = " + format_double(out[i]) + " is out of range [" +
                    format_double(min) + ", " + format_double(max) + "]");
    }
    r.push_back(YAML::Load(format_double(out[i])));
  }
  r.SetStyle(YAML::EmitterStyle::Flow);
  resolved_[key] = r;
  return out;
}

std::optional<DType> Section::get_dtype(const std::string& key, std::optional<DType> def,
                                        DTypeNull null, DTypeAuto auto_, bool* is_auto) {
  const bool allow_null = null == DTypeNull::accepted, allow_auto = auto_ == DTypeAuto::accepted;
  known(key);
  if (g_recorder) {
    // float16 spellings parse but are refused (kktrain computes in float32 and bfloat16 only).
    g_recorder->record({key_path(key), "dtype", def ? dtype_name(*def) : "null",
                        std::string("float32 (fp32, torch.float32), bfloat16 (bf16, "
                                    "torch.bfloat16)") +
                            (allow_auto ? ", auto" : "") + (allow_null ? ", null" : "")});
  }
  if (is_auto) *is_auto = false;
  const YAML::Node v = value(key);
  std::optional<DType> out = def;
  if (v.IsDefined() && !v.IsNull()) {
    const std::string s = v.IsScalar() ? v.Scalar() : std::string();
    DType d;
    if (allow_auto && s == "auto") {
      if (is_auto) *is_auto = true;
      out.reset();
    } else if (parse_dtype(s, &d)) {
      out = d;
    } else {
      fail(key, "unknown dtype " + describe(v) + "; accepted: " + dtype_spellings() +
                    (allow_auto ? ", auto" : "") + (allow_null ? ", null" : ""));
    }
  } else if (v.IsDefined() && v.IsNull()) {
    if (!allow_null) {
      fail(key, std::string("null is not allowed here; accepted: ") + dtype_spellings());
    }
    out.reset();  // an explicit null overrides a non-null default (mp_policy.param_dtype: null)
  }
  if (is_auto && *is_auto) {
    resolved_[key] = "auto";
  } else {
    resolved_[key] = out ? YAML::Node(dtype_name(*out)) : YAML::Node(YAML::NodeType::Null);
  }
  return out;
}

Section Section::sub(const std::string& key) {
  known(key);
  resolved_[key] = YAML::Node(YAML::NodeType::Map);
  return Section(value(key), key_path(key), origin_, resolved_[key]);
}

void Section::finish(const std::map<std::string, std::string>& foreign) const {
  if (!node_.IsDefined() || node_.IsNull()) return;
  for (const auto& kv : node_) {
    const std::string key = kv.first.Scalar();
    if (std::find(known_.begin(), known_.end(), key) != known_.end()) continue;
    auto f = foreign.find(key);
    if (f != foreign.end()) fail(key, f->second);
    std::string msg = "unknown key";
    const std::string near = closest_key(key, known_);
    if (!near.empty()) msg += "; did you mean '" + key_path(near) + "'?";
    throw ConfigError(key_path(key), msg, origin_->where(key_path(key), kv.first));
  }
}

void apply_override(YAML::Node& root, const std::string& text, ConfigOrigin* origin) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw UsageError("override '" + text + "': expected key.path=VALUE");
  }
  const std::string path = text.substr(0, eq);
  const std::string raw = text.substr(eq + 1);
  YAML::Node value;
  try {
    value = raw.empty() ? YAML::Node(YAML::NodeType::Null) : YAML::Load(raw);
  } catch (const YAML::Exception& e) {
    throw UsageError("override '" + text + "': VALUE is not valid YAML: " + e.msg);
  }
  std::vector<std::string> parts;
  if (path.back() == '.') {  // getline drops a trailing empty field
    throw UsageError("override '" + text + "': empty key in path '" + path + "'");
  }
  std::stringstream ss(path);
  for (std::string p; std::getline(ss, p, '.');) {
    if (p.empty()) throw UsageError("override '" + text + "': empty key in path '" + path + "'");
    parts.push_back(p);
  }
  // Walk down, creating sections as needed. YAML::Node handles are references, so assigning
  // through `cur` edits the tree; reset() rebinds the handle instead of assigning through it.
  YAML::Node cur = root;
  std::string walked;
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    walked += (walked.empty() ? "" : ".") + parts[i];
    YAML::Node next = cur[parts[i]];
    if (next.IsNull() || !next.IsDefined()) {
      next = YAML::Node(YAML::NodeType::Map);
      cur[parts[i]] = next;
      next.reset(cur[parts[i]]);
    } else if (!next.IsMap()) {
      throw ConfigError(walked, "override '" + text + "' goes below a key that is not a section");
    }
    cur.reset(next);
  }
  cur[parts.back()] = value;
  origin->overrides[path] = text;
}

}  // namespace kktrain
