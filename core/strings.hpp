// Small string and time helpers used across modules (one definition each).
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace kktrain {

inline bool starts_with(const std::string& s, const std::string& prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

inline bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The items separated by `sep` ("a,b,c").
inline std::string join(const std::vector<std::string>& items, const std::string& sep = ",") {
  std::string s;
  for (const auto& x : items) s += (s.empty() ? "" : sep) + x;
  return s;
}

// Seconds on a monotonic clock (differences only).
inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace kktrain
