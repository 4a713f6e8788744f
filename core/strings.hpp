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

// A name from a file (a tensor, a JSON key) as a message can print it: control characters
// escaped as \u00XX, as JSON writes them (an embedded NUL would otherwise end the message there).
inline std::string printable_name(const std::string& name) {
  static const char hex[] = "0123456789abcdef";
  std::string out;
  for (const char ch : name) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) {
      out += "\\u00";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += ch;
    }
  }
  return out;
}

// Seconds on a monotonic clock (differences only).
inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace kktrain
