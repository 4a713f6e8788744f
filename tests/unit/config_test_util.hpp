// Helpers shared by the config tests: load YAML text as "test.yaml", catch the error it raises,
// and locate a value in the text with an '@' marker so expected "file:line:col" strings are
// computed rather than counted by hand.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/errors.hpp"
#include "core/log.hpp"

namespace kktrain {
namespace testing_util {

inline Config load(const std::string& yaml, const std::vector<std::string>& overrides = {},
                   const LoadOptions& opts = LoadOptions{}) {
  return load_config_text(yaml, "test.yaml", overrides, opts);
}

// Removes the single '@' marker from `yaml` and returns "test.yaml:LINE:COL" of the character
// that followed it (1-based, as the loader reports it); "" when there is no marker.
inline std::string strip_marker(std::string* yaml) {
  const auto at = yaml->find('@');
  if (at == std::string::npos) return "";
  const std::string before = yaml->substr(0, at);
  const auto line = std::count(before.begin(), before.end(), '\n') + 1;
  const auto nl = before.rfind('\n');
  const auto col = nl == std::string::npos ? at + 1 : at - nl;
  yaml->erase(at, 1);
  return "test.yaml:" + std::to_string(line) + ":" + std::to_string(col);
}

struct CaughtConfigError {
  bool thrown = false;
  std::string key;
  std::string message;
};

// Loads and returns the ConfigError raised (thrown = false when loading succeeded).
inline CaughtConfigError catch_config_error(const std::string& yaml,
                                            const std::vector<std::string>& overrides = {},
                                            const LoadOptions& opts = LoadOptions{}) {
  CaughtConfigError r;
  try {
    load(yaml, overrides, opts);
  } catch (const ConfigError& e) {
    r.thrown = true;
    r.key = e.key();
    r.message = e.what();
    EXPECT_EQ(e.exit_code(), 2);
  }
  return r;
}

inline bool contains(const std::string& s, const std::string& sub) {
  return s.find(sub) != std::string::npos;
}

inline bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

inline bool has_warning(const std::string& sub) {
  for (const auto& w : log::warnings()) {
    if (contains(w, sub)) return true;
  }
  return false;
}

// The printed config without the storage_dtype_source line: that line says where the storage
// dtype came from, which legitimately changes once the printed (explicit) dtype is read back.
inline std::string without_storage_source(const std::string& yaml) {
  std::stringstream in(yaml);
  std::string out;
  for (std::string line; std::getline(in, line);) {
    if (line.find("storage_dtype_source:") != std::string::npos) continue;
    out += line + "\n";
  }
  return out;
}

}  // namespace testing_util
}  // namespace kktrain
