// model.init_from's architecture merged into the config (core/config_model_file.hpp).
#include "core/config_model_file.hpp"

#include <sstream>

#include "core/errors.hpp"

namespace kktrain {

namespace {

// Values equal as a config means them: numbers by value (1e-05 == 0.00001), booleans by truth,
// mappings key by key, lists item by item (an empty list is null), anything else by its text.
bool same_value(const YAML::Node& a, const YAML::Node& b) {
  auto empty = [](const YAML::Node& n) { return n.IsNull() || (n.IsSequence() && n.size() == 0); };
  if (a.IsSequence() || b.IsSequence()) {
    if (empty(a) && empty(b)) return true;
    if (!a.IsSequence() || !b.IsSequence() || a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (!same_value(a[i], b[i])) return false;
    }
    return true;
  }
  if (a.IsMap() || b.IsMap()) {
    if (!a.IsMap() || !b.IsMap() || a.size() != b.size()) return false;
    for (const auto& kv : a) {
      const YAML::Node other = b[kv.first.Scalar()];
      if (!other.IsDefined() || !same_value(kv.second, other)) return false;
    }
    return true;
  }
  if (!a.IsScalar() || !b.IsScalar()) return a.IsNull() && b.IsNull();
  double x = 0, y = 0;
  if (YAML::convert<double>::decode(a, x) && YAML::convert<double>::decode(b, y)) return x == y;
  bool p = false, q = false;
  if (YAML::convert<bool>::decode(a, p) && YAML::convert<bool>::decode(b, q)) return p == q;
  return a.Scalar() == b.Scalar();
}

std::string flow(const YAML::Node& n) {
  YAML::Emitter e;
  e.SetNullFormat(YAML::LowerNull);
  e << YAML::Flow << n;
  return e.c_str();
}

}  // namespace

std::string init_from_in_tree(const YAML::Node& root) {
  const YAML::Node& r = root;
  if (!r.IsMap()) return "";
  const YAML::Node model = r["model"];
  if (!model.IsDefined() || !model.IsMap()) return "";
  const YAML::Node path = model["init_from"];
  if (!path.IsDefined() || !path.IsScalar()) return "";
  return path.Scalar();
}

void apply_model_file_architecture(YAML::Node& root, const ModelFileArchitecture& arch,
                                   ConfigOrigin* origin, std::map<std::string, std::string>* keys) {
  YAML::Node model = root["model"];
  if (!model.IsMap()) return;  // init_from was found in it, so it is a map
  for (const auto& v : arch.values) {
    const std::string path = "model." + v.key;
    // A key of a sub-section ("moe.num_experts") lives in that section, made when absent.
    YAML::Node section = model;
    std::string key = v.key;
    const std::size_t dot = key.find('.');
    if (dot != std::string::npos) {
      const std::string sub = key.substr(0, dot);
      key = key.substr(dot + 1);
      const YAML::Node& cmodel = model;
      const YAML::Node existing = cmodel[sub];
      if (!existing.IsDefined() || existing.IsNull()) model[sub] = YAML::Node(YAML::NodeType::Map);
      if (!model[sub].IsMap()) continue;  // the config reader names the bad section
      section.reset(model[sub]);          // rebinds (operator= would overwrite model's content)
    }
    const YAML::Node& csection = section;
    const YAML::Node given = csection[key];
    if (given.IsDefined() && !given.IsNull()) {
      if (!same_value(given, v.value)) {
        throw ConfigError(path,
                          flow(given) + " contradicts model.init_from's " + arch.source + " (" +
                              v.file_key + ": " + flow(v.value) +
                              "); leave the key unset to take the file's value",
                          origin->where(path, given));
      }
    } else {
      section[key] = v.value;
      origin->from_files[path] = arch.source;  // errors about the value blame the file
    }
    (*keys)[path] = arch.source;
  }
}

std::string mark_model_file_keys(const std::string& yaml,
                                 const std::map<std::string, std::string>& keys) {
  if (keys.empty()) return yaml;
  std::istringstream in(yaml);
  std::string out, line, section;
  while (std::getline(in, line)) {
    if (!line.empty() && line[0] != ' ' && line[0] != '#') {
      section = line.substr(0, line.find(':'));
    } else if (line.size() > 2 && line[0] == ' ' && line[1] == ' ' && line[2] != ' ') {
      const auto it = keys.find(section + "." + line.substr(2, line.find(':') - 2));
      if (it != keys.end()) line += "  # from " + it->second;
    }
    out += line + "\n";
  }
  return out;
}

}  // namespace kktrain
