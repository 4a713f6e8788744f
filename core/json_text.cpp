#include "core/json_text.hpp"

#include <cmath>
#include <cstdio>

namespace kktrain {

namespace {

std::string double_text(double v, JsonDoubles doubles) {
  if (!std::isfinite(v)) return std::isnan(v) ? "NaN" : (v > 0 ? "Infinity" : "-Infinity");
  char buf[32];
  std::snprintf(buf, sizeof(buf), doubles == JsonDoubles::round_trip ? "%.17g" : "%g", v);
  return buf;
}

void append(std::string& out, const Json& v, JsonDoubles doubles) {
  switch (v.type()) {
    case Json::value_t::object: {
      out += '{';
      bool first = true;
      for (const auto& item : v.items()) {
        if (!first) out += ", ";
        first = false;
        out += json_quoted(item.key()) + ": ";
        append(out, item.value(), doubles);
      }
      out += '}';
      return;
    }
    case Json::value_t::array: {
      out += '[';
      for (std::size_t i = 0; i < v.size(); ++i) {
        if (i) out += ", ";
        append(out, v[i], doubles);
      }
      out += ']';
      return;
    }
    case Json::value_t::number_float:
      out += double_text(v.get<double>(), doubles);
      return;
    case Json::value_t::string:
      out += json_quoted(v.get_ref<const std::string&>());
      return;
    default:  // null, booleans, integers: nlohmann's text is kktrain's
      out += v.dump();
      return;
  }
}

}  // namespace

std::string json_text(const Json& v, JsonDoubles doubles) {
  std::string out;
  append(out, v, doubles);
  return out;
}

std::string json_quoted(const std::string& s) {
  return Json(s).dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::optional<std::string> json_nesting_error(std::string_view text, int max_depth) {
  int depth = 0;
  std::size_t line = 1, line_start = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      line_start = i + 1;
    } else if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character (a quote or backslash does not end the string)
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        const std::string column = "column " + std::to_string(i - line_start + 1);
        return "JSON nested deeper than " + std::to_string(max_depth) +
               " levels (arrays and objects) at " +
               (line == 1 ? column : "line " + std::to_string(line) + ", " + column);
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::nullopt;
}

void check_json_nesting(std::string_view text, const std::string& what, int max_depth) {
  if (auto why = json_nesting_error(text, max_depth)) throw InputError(what + ": " + *why);
}

}  // namespace kktrain
