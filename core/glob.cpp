#include "core/glob.hpp"

#include <fnmatch.h>

namespace kktrain {

bool glob_match(const std::string& pattern, const std::string& name) {
  return fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
}

bool glob_match_any(const std::vector<std::string>& patterns, const std::string& name) {
  for (const auto& p : patterns) {
    if (glob_match(p, name)) return true;
  }
  return false;
}

bool module_selected(const std::string& pattern, const std::string& module) {
  if (glob_match(pattern, module)) return true;
  for (std::size_t dot = module.find('.'); dot != std::string::npos;
       dot = module.find('.', dot + 1)) {
    if (glob_match(pattern, module.substr(0, dot))) return true;
  }
  return false;
}

}  // namespace kktrain
