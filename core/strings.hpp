// Small string and time helpers used across modules (one definition each).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kktrain {

inline bool starts_with(const std::string& s, const std::string& prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

inline bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// "64 MiB" for a whole number of MiB, else "N bytes" (limits in error messages).
inline std::string byte_count(int64_t n) {
  return n % (int64_t(1) << 20) == 0 ? std::to_string(n >> 20) + " MiB"
                                     : std::to_string(n) + " bytes";
}

// Whether a line holds nothing but spaces, tabs, carriage returns and newlines.
inline bool blank_line(std::string_view line) {
  return line.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

// The lines of `text` that are not blank_line, each with its line number (from 1; a last line
// without its '\n' counts), viewing into `text`.
struct NumberedLine {
  int64_t no;
  std::string_view text;
};
inline std::vector<NumberedLine> nonblank_lines(std::string_view text) {
  std::vector<NumberedLine> lines;
  std::size_t pos = 0;
  int64_t no = 0;
  while (pos < text.size()) {
    std::size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    const std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++no;
    if (!blank_line(line)) lines.push_back(NumberedLine{no, line});
  }
  return lines;
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
