// Typed, validating access to one YAML mapping of the config.
//
// A Section is read key by key with typed getters that take the default and the valid range.
// Every getter also writes the resolved value into a parallel "resolved" tree, so the full,
// defaults-filled config that `kktrain config` prints is produced by the same code that reads it
// (each key is named exactly once). finish() rejects any key that no getter asked for, suggesting
// the closest valid key. Errors name the dotted key path and where the value came from: a
// file:line:col for values from the config file, or the command-line override that set it.
#pragma once

#include <yaml-cpp/yaml.h>

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/dtype.hpp"

namespace kktrain {

// Where config values came from; shared by every Section of one config.
struct ConfigOrigin {
  std::string file;                               // config file path
  std::map<std::string, std::string> overrides;   // key path -> "key=value" as typed
  std::map<std::string, std::string> from_files;  // key path -> the model file it came from
  // "file:line:col", "override 'a.b=1'", "from FILE" (a value taken from a model file), or ""
  // when nothing better is known.
  std::string where(const std::string& key_path, const YAML::Node& node) const;
  // Where a key that appears twice in one mapping was written: the file's line of the second
  // `key` node, or the override that gave the whole mapping.
  std::string where_repeated(const std::string& key_path, const YAML::Node& key) const;
};

// Levenshtein distance; used to suggest the closest valid key.
std::size_t edit_distance(const std::string& a, const std::string& b);
// The candidate closest to `key`, or "" when nothing is close enough to be a likely typo.
std::string closest_key(const std::string& key, const std::vector<std::string>& candidates);

// Formats a double with the fewest digits that read back to the same value ("0.0003", "1e-08").
std::string format_double(double v);

// The configuration's schema as the readers below define it: while a SchemaRecorder exists,
// every Section getter records the key it reads, its type, the default it was given and the
// values it accepts (kktrain config --schema prints them, so the reference cannot drift from
// the code).
struct SchemaEntry {
  std::string key, type, default_value, accepted;
};
class SchemaRecorder {
 public:
  SchemaRecorder();
  ~SchemaRecorder();
  SchemaRecorder(const SchemaRecorder&) = delete;
  SchemaRecorder& operator=(const SchemaRecorder&) = delete;
  // Entries in the order first read; a key read again (the same getter called twice, or a
  // wrapper such as get_choice refining get_string) replaces its entry.
  std::vector<SchemaEntry> entries;
  void record(SchemaEntry e);
};

// Whether Section::get_string_list accepts {glob: PATTERN} mappings as items.
enum class GlobMaps { refused, accepted };
// Whether Section::get_dtype accepts null (no dtype) and "auto".
enum class DTypeNull { refused, accepted };
enum class DTypeAuto { refused, accepted };

class Section {
 public:
  // `node` may be undefined or null (an absent section: every key takes its default).
  Section(YAML::Node node, std::string path, std::shared_ptr<const ConfigOrigin> origin,
          YAML::Node resolved);

  const std::string& path() const { return path_; }
  std::string key_path(const std::string& key) const;

  // True when the key is present with a non-null value.
  bool has(const std::string& key) const;
  // True when the key is present at all (possibly null).
  bool present(const std::string& key) const;

  int64_t get_int(const std::string& key, int64_t def, int64_t min, int64_t max);
  // Integer that may be null; returns nullopt for null/absent when `def` is nullopt.
  std::optional<int64_t> get_opt_int(const std::string& key, std::optional<int64_t> def,
                                     int64_t min, int64_t max);
  double get_double(const std::string& key, double def, double min, double max);
  // A finite number in [min, max] that may be null; nullopt for null or absent.
  std::optional<double> get_opt_double(const std::string& key, double min, double max);
  bool get_bool(const std::string& key, bool def);
  std::string get_string(const std::string& key, const std::string& def);
  std::optional<std::string> get_opt_string(const std::string& key);
  std::string get_choice(const std::string& key, const std::string& def,
                         const std::vector<std::string>& choices);
  // A list of strings; a single string is accepted as a one-element list. Items may also be
  // mappings {glob: "..."} when `glob_maps` is GlobMaps::accepted (ModuleSelector(glob=...)
  // spelling).
  std::vector<std::string> get_string_list(const std::string& key,
                                           GlobMaps glob_maps = GlobMaps::refused);
  // A list of 1 to max_items numbers, each finite and in [min, max] (null or absent: empty).
  std::vector<double> get_number_list(const std::string& key, int64_t max_items, double min,
                                      double max);
  // A list of exactly n numbers (betas).
  std::vector<double> get_double_list(const std::string& key, const std::vector<double>& def,
                                      double min, double max);

  // A dtype string. Returns nullopt for null (when DTypeNull::accepted) and the string "auto" is
  // returned through *is_auto (when DTypeAuto::accepted). The resolved tree records the canonical
  // spelling.
  std::optional<DType> get_dtype(const std::string& key, std::optional<DType> def, DTypeNull null,
                                 DTypeAuto auto_ = DTypeAuto::refused, bool* is_auto = nullptr);

  // For the schema: what a key read as a plain string accepts (checked by the caller).
  void accepts(const std::string& key, const std::string& text) const;

  // A nested mapping (absent or null gives an empty section with defaults).
  Section sub(const std::string& key);

  // Marks a key as known without reading it (read elsewhere, or accepted and ignored).
  void accept(const std::string& key);
  // Records a resolved value for a key directly (values computed after reading).
  void set_resolved(const std::string& key, const YAML::Node& value);
  YAML::Node resolved() const { return resolved_; }

  // Rejects keys nobody asked for. `foreign` lists keys that are valid elsewhere (e.g. for other
  // optimizers) with an explanation, so the error can say why a key does not apply here.
  void finish(const std::map<std::string, std::string>& foreign = {}) const;

  [[noreturn]] void fail(const std::string& key, const std::string& msg) const;
  // A rule between two keys of this section that fails: blames `a` when an override set it and
  // not `b` (what the user just typed is the likelier mistake), else `b`.
  [[noreturn]] void fail_either(const std::string& a, const std::string& b,
                                const std::string& msg) const;

 private:
  YAML::Node value(const std::string& key) const;
  void known(const std::string& key);

  YAML::Node node_;
  std::string path_;
  std::shared_ptr<const ConfigOrigin> origin_;
  YAML::Node resolved_;
  std::vector<std::string> known_;
};

// Applies one "a.b.c=VALUE" override to `root` (VALUE parsed as YAML), recording its origin.
void apply_override(YAML::Node& root, const std::string& text, ConfigOrigin* origin);

}  // namespace kktrain
