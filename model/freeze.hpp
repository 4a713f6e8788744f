// Parameter freezing (freeze_config): module selectors and exact parameter names, with the
// precedence of docs/precision.md, "Freezing". In order:
//   freeze_modules      globs over module paths (a module and everything inside it)
//   unfreeze_modules    globs; unfreeze what an earlier selector froze
//   unfreeze_parameters exact canonical names or aliases
//   freeze_parameters   exact names; applied last, so exact exclusions win over everything
// Unknown exact names are errors (with the closest name suggested); freezing any alias of a tied
// parameter freezes the shared storage. Empty lists are no-ops. With expert parallelism
// (expert_parallel > 1) an exact name of an expert parameter is refused, naming the expert module
// to select instead.
#pragma once

#include "core/config.hpp"
#include "core/param_registry.hpp"

namespace kktrain {

// `where` (the config file) is named in errors.
void apply_freeze(ParamRegistry& params, const FreezeConfig& cfg, const std::string& where = "",
                  int expert_parallel = 1);

}  // namespace kktrain
