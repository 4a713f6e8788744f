// model.init_from's own architecture merged into a config (a Hugging Face directory's
// config.json): keys the config leaves unset take the file's values, a key set to another value
// is one error naming both, and `kktrain config` marks each key that came from the file.
#pragma once

#include <yaml-cpp/yaml.h>

#include <map>
#include <string>

#include "core/config.hpp"
#include "core/config_reader.hpp"

namespace kktrain {

// model.init_from as the (overridden) config tree gives it, or "" when unset.
std::string init_from_in_tree(const YAML::Node& root);

// Writes the file's values into root's model section where it has none; records each key's
// source in origin->from_files and *keys. ConfigError naming the key, both values and both
// places when the config sets a key to a value other than the file's.
void apply_model_file_architecture(YAML::Node& root, const ModelFileArchitecture& arch,
                                   ConfigOrigin* origin, std::map<std::string, std::string>* keys);

// YAML text of a resolved config with "# from FILE" after each model key that came from a
// model file.
std::string mark_model_file_keys(const std::string& yaml,
                                 const std::map<std::string, std::string>& keys);

}  // namespace kktrain
