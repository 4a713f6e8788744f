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

}  // namespace kktrain
