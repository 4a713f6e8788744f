// Shell-style glob matching for parameter and module selectors ("*.q_proj", "model.layers.0*").
// Semantics of Python's fnmatch.fnmatchcase: '*' and '?' also match '.', '[...]' classes work.
#pragma once

#include <string>
#include <vector>

namespace kktrain {

bool glob_match(const std::string& pattern, const std::string& name);
bool glob_match_any(const std::vector<std::string>& patterns, const std::string& name);

// A module selector matches a parameter when it matches the parameter's module or any module
// above it: "model.layers.0" selects everything inside layer 0, "*" selects everything.
bool module_selected(const std::string& pattern, const std::string& module);

}  // namespace kktrain
