// Timing and option-parsing helpers shared by the bench programs.
#pragma once

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace kktrain {
namespace bench {

inline double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// The number `text` spells in full (no sign, nothing after it but `rest`); throws
// std::invalid_argument.
inline double whole_number(const std::string& text, std::string* rest = nullptr) {
  std::size_t used = 0;
  double v = 0;
  if (!text.empty() && (std::isdigit(static_cast<unsigned char>(text[0])) || text[0] == '.')) {
    try {
      v = std::stod(text, &used);
    } catch (const std::logic_error&) {
      used = 0;
    }
  }
  if (used == 0 || (rest == nullptr && used != text.size())) {
    throw std::invalid_argument("not a number");
  }
  if (rest != nullptr) *rest = text.substr(used);
  return v;
}

// "4096", "4K", "4KiB", "16M", "16MiB", "1G", "1GiB" -> bytes; throws std::invalid_argument.
inline std::size_t parse_bytes(const std::string& text) {
  std::string unit;
  const double n = whole_number(text, &unit);
  double scale = 1;
  if (unit == "K" || unit == "k" || unit == "KiB") {
    scale = 1024.0;
  } else if (unit == "M" || unit == "MiB") {
    scale = 1024.0 * 1024.0;
  } else if (unit == "G" || unit == "GiB") {
    scale = 1024.0 * 1024.0 * 1024.0;
  } else if (!unit.empty()) {
    throw std::invalid_argument("unknown unit '" + unit + "'");
  }
  const double bytes = n * scale;
  if (bytes != std::floor(bytes) || bytes > 1e15) throw std::invalid_argument("not a byte count");
  return static_cast<std::size_t>(bytes);
}

// A whole count; throws std::invalid_argument.
inline long parse_count(const std::string& text) {
  const double v = whole_number(text);
  if (v != std::floor(v) || v > 1e9) throw std::invalid_argument("not a count");
  return static_cast<long>(v);
}

}  // namespace bench
}  // namespace kktrain
