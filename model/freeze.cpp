#include "model/freeze.hpp"

#include "core/config_reader.hpp"
#include "core/errors.hpp"
#include "core/glob.hpp"
#include "core/log.hpp"

namespace kktrain {

namespace {

// The module paths a parameter lives under: its own and those of its aliases.
std::vector<std::string> modules_of(const ParamInfo& p) {
  std::vector<std::string> m = {p.module};
  for (const auto& a : p.aliases) {
    const auto dot = a.rfind('.');
    m.push_back(dot == std::string::npos ? a : a.substr(0, dot));
  }
  return m;
}

void apply_selectors(ParamRegistry& params, const std::vector<std::string>& globs, bool trainable,
                     const char* key) {
  for (const auto& g : globs) {
    bool matched = false;
    for (int i = 0; i < params.size(); ++i) {
      for (const auto& m : modules_of(params.info(i))) {
        if (module_selected(g, m)) {
          params.info_mut(i).trainable = trainable;
          matched = true;
          break;
        }
      }
    }
    if (!matched)
      log::warn(std::string("freeze_config.") + key + ": '" + g + "' selects no module");
  }
}

void apply_exact(ParamRegistry& params, const std::vector<std::string>& names, bool trainable,
                 const char* key, const std::string& where) {
  std::vector<std::string> all;
  for (const auto& p : params.all()) {
    all.push_back(p.name);
    for (const auto& a : p.aliases) all.push_back(a);
  }
  for (const auto& n : names) {
    const int i = params.find(n);
    if (i < 0) {
      std::string msg = "unknown parameter '" + n + "'";
      const std::string near = closest_key(n, all);
      if (!near.empty()) msg += "; did you mean '" + near + "'?";
      throw ConfigError(std::string("freeze_config.") + key, msg, where);
    }
    params.info_mut(i).trainable = trainable;
  }
}

}  // namespace

void apply_freeze(ParamRegistry& params, const FreezeConfig& cfg, const std::string& where) {
  apply_selectors(params, cfg.freeze_modules, false, "freeze_modules");
  apply_selectors(params, cfg.unfreeze_modules, true, "unfreeze_modules");
  apply_exact(params, cfg.unfreeze_parameters, true, "unfreeze_parameters", where);
  apply_exact(params, cfg.freeze_parameters, false, "freeze_parameters", where);
}

}  // namespace kktrain
