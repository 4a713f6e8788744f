// Reading a JSON document (nlohmann::json) whose every error names the file and the key path.
//
// JsonWhere<Document> is a place in one file: the file and a key path ("model.merges[12]",
// extended with at()). Its errors are InputErrors in one of two layouts, Document being the words
// before the quoted file name ("tokenizer file " reads "tokenizer file 'x.json'", "" reads
// "'x.json'"):
//   fail(what)                "<Document>'<file>': key '<path>': <what>" (at the document's
//                             root "<Document>'<file>': <what>"): text/tokenizer_load.cpp
//   fail_valued(value, what)  "<Document>'<file>': <path> = <value>: <what>" (value as JSON;
//                             without " = <value>" when value is null): io/hf_config.cpp
// The readers below (json_reader::member, as_string, ...) take a JsonWhere and fail through it in
// the first layout: "missing", "expected a string, found number", "'X' is not supported
// (kktrain reads A, B)".
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace kktrain {
namespace json_reader {

// The InputError messages of JsonWhere (above).
[[noreturn]] void fail_at_key(const char* document, const std::string& file, const std::string& key,
                              const std::string& what);
[[noreturn]] void fail_at_value(const char* document, const std::string& file,
                                const std::string& key, const nlohmann::json* value,
                                const std::string& what);

template <const char* Document>
struct JsonWhere {
  const std::string& file;  // outlives every JsonWhere made from it
  std::string key;
  JsonWhere at(const std::string& k) const { return {file, key.empty() ? k : key + "." + k}; }
  JsonWhere at(std::size_t i) const { return {file, key + "[" + std::to_string(i) + "]"}; }
  [[noreturn]] void fail(const std::string& what) const { fail_at_key(Document, file, key, what); }
  [[noreturn]] void fail_valued(const nlohmann::json* value, const std::string& what) const {
    fail_at_value(Document, file, key, value, what);
  }
};

// "object", "string", "number", ... (nlohmann's names).
inline const char* type_name(const nlohmann::json& v) {
  return v.type_name();
}

// obj[k]: fails at w when obj is not an object ("expected an object, found array") and at
// w.at(k) when k is absent ("missing").
template <class W>
const nlohmann::json& member(const nlohmann::json& obj, const char* k, const W& w) {
  if (!obj.is_object()) w.fail(std::string("expected an object, found ") + type_name(obj));
  const auto it = obj.find(k);
  if (it == obj.end()) w.at(k).fail("missing");
  return *it;
}
// obj[k], or null when it is absent or JSON null (obj need not be an object).
inline const nlohmann::json* optional_member(const nlohmann::json& obj, const char* k) {
  const auto it = obj.find(k);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}
template <class W>
std::string as_string(const nlohmann::json& v, const W& w) {
  if (!v.is_string()) w.fail(std::string("expected a string, found ") + type_name(v));
  return v.get<std::string>();
}
template <class W>
bool as_bool(const nlohmann::json& v, const W& w) {
  if (!v.is_boolean()) w.fail(std::string("expected true or false, found ") + type_name(v));
  return v.get<bool>();
}
template <class W>
int64_t as_int(const nlohmann::json& v, const W& w) {
  if (!v.is_number_integer()) w.fail(std::string("expected an integer, found ") + type_name(v));
  return v.get<int64_t>();
}
// obj[k] as a bool, dflt when absent or null.
template <class W>
bool bool_or(const nlohmann::json& obj, const char* k, bool dflt, const W& w) {
  const nlohmann::json* v = optional_member(obj, k);
  return v ? as_bool(*v, w.at(k)) : dflt;
}
// obj["type"] as a string (tokenizer.json's component tag).
template <class W>
std::string type_of(const nlohmann::json& obj, const W& w) {
  return as_string(member(obj, "type", w), w.at("type"));
}
// "'<what>' is not supported (kktrain reads <supported>)" at w.
template <class W>
[[noreturn]] void unsupported(const W& w, const std::string& what, const char* supported) {
  w.fail("'" + what + "' is not supported (kktrain reads " + supported + ")");
}

}  // namespace json_reader
}  // namespace kktrain
