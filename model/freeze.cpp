// Parameter freezing (model/freeze.hpp).
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

// What a selector makes the parameters it selects.
enum class Make { frozen, trainable };

void apply_selectors(ParamRegistry& params, const std::vector<std::string>& globs, Make make,
                     const char* key) {
  const bool trainable = make == Make::trainable;
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

// Expert parallelism renumbers the experts each rank holds when the layout changes, so an exact
// name of an expert parameter would select a different tensor; the owning expert module is the
// stable selector (docs/moe.md, "Freezing").
void refuse_expert_under_expert_parallelism(const ParamInfo& p, const std::string& given,
                                            const char* key, const std::string& where,
                                            int expert_parallel) {
  if (expert_parallel <= 1 || p.moe != MoePart::expert) return;
  const std::string owner = p.module.substr(0, p.module.rfind('.'));  // the expert's module
  throw ConfigError(std::string("freeze_config.") + key,
                    "'" + given + "' is an expert parameter and distributed.expert_parallel_size " +
                        std::to_string(expert_parallel) +
                        " repartitions experts, renumbering each rank's local ones: select its "
                        "module '" +
                        owner + "' in freeze_modules / unfreeze_modules instead",
                    where);
}

void apply_exact(ParamRegistry& params, const std::vector<std::string>& names, Make make,
                 const char* key, const std::string& where, int expert_parallel) {
  const bool trainable = make == Make::trainable;
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
    refuse_expert_under_expert_parallelism(params.info(i), n, key, where, expert_parallel);
    params.info_mut(i).trainable = trainable;
  }
}

}  // namespace

void apply_freeze(ParamRegistry& params, const FreezeConfig& cfg, const std::string& where,
                  int expert_parallel) {
  apply_selectors(params, cfg.freeze_modules, Make::frozen, "freeze_modules");
  apply_selectors(params, cfg.unfreeze_modules, Make::trainable, "unfreeze_modules");
  apply_exact(params, cfg.unfreeze_parameters, Make::trainable, "unfreeze_parameters", where,
              expert_parallel);
  apply_exact(params, cfg.freeze_parameters, Make::frozen, "freeze_parameters", where,
              expert_parallel);
}

}  // namespace kktrain
