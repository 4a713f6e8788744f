// Reading tokenizer.json: a key path for messages (Where) and typed readers that name the key
// and the file in their InputError ("tokenizer file 'F': key 'model.merges[12]': ..."). Private
// to text/ (the loader and the pipeline components' from_json).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/errors.hpp"
#include "text/tokenizer.hpp"
#include "text/unicode.hpp"

namespace kktrain::text {

using Json = nlohmann::json;

// The file being read and a key path, for messages.
struct Where {
  const std::string& file;
  std::string key;
  Where at(const std::string& k) const { return {file, key.empty() ? k : key + "." + k}; }
  Where at(size_t i) const { return {file, key + "[" + std::to_string(i) + "]"}; }
  [[noreturn]] void fail(const std::string& what) const {
    throw InputError("tokenizer file '" + file +
                     "': " + (key.empty() ? "" : "key '" + key + "': ") + what);
  }
};

inline const Json& member(const Json& obj, const char* k, const Where& w) {
  if (!obj.is_object()) w.fail(std::string("expected an object, found ") + obj.type_name());
  const auto it = obj.find(k);
  if (it == obj.end()) w.at(k).fail("missing");
  return *it;
}
inline const Json* optional_member(const Json& obj, const char* k) {
  const auto it = obj.find(k);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}
inline std::string as_string(const Json& v, const Where& w) {
  if (!v.is_string()) w.fail(std::string("expected a string, found ") + v.type_name());
  return v.get<std::string>();
}
inline bool as_bool(const Json& v, const Where& w) {
  if (!v.is_boolean()) w.fail(std::string("expected true or false, found ") + v.type_name());
  return v.get<bool>();
}
inline int64_t as_int(const Json& v, const Where& w) {
  if (!v.is_number_integer()) w.fail(std::string("expected an integer, found ") + v.type_name());
  return v.get<int64_t>();
}
inline bool bool_or(const Json& obj, const char* k, bool dflt, const Where& w) {
  const Json* v = optional_member(obj, k);
  return v ? as_bool(*v, w.at(k)) : dflt;
}
inline std::string type_of(const Json& obj, const Where& w) {
  return as_string(member(obj, "type", w), w.at("type"));
}
[[noreturn]] inline void unsupported(const Where& w, const std::string& what,
                                     const char* supported) {
  w.fail("'" + what + "' is not supported (kktrain reads " + supported + ")");
}

// One character of a string key (Metaspace's replacement, Strip's content).
inline std::string one_char(const Json& v, const Where& w) {
  std::string s = as_string(v, w);
  if (s.empty() || first_invalid_utf8(s) >= 0 || size_t(utf8_len(uint8_t(s[0]))) != s.size()) {
    w.fail("expected one character, found '" + s + "'");
  }
  return s;
}

}  // namespace kktrain::text
