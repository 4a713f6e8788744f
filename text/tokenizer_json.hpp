// Reading tokenizer.json: a key path for messages (Where) and typed readers (core/json_reader)
// that name the key and the file in their InputError ("tokenizer file 'F': key 'model.merges[12]':
// ..."). Private to text/ (the loader and the pipeline components' from_json).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/errors.hpp"
#include "core/json_reader.hpp"
#include "text/tokenizer.hpp"
#include "text/unicode.hpp"

namespace kktrain::text {

using Json = nlohmann::json;

// The file being read and a key path, for messages ("tokenizer file 'F': key 'K': ...");
// the typed readers of core/json_reader.hpp.
inline constexpr char kTokenizerFile[] = "tokenizer file ";
using Where = json_reader::JsonWhere<kTokenizerFile>;
using json_reader::as_bool;
using json_reader::as_int;
using json_reader::as_string;
using json_reader::bool_or;
using json_reader::member;
using json_reader::optional_member;
using json_reader::type_of;
using json_reader::unsupported;

// One character of a string key (Metaspace's replacement, Strip's content).
inline std::string one_char(const Json& v, const Where& w) {
  std::string s = as_string(v, w);
  if (s.empty() || first_invalid_utf8(s) >= 0 || size_t(utf8_len(uint8_t(s[0]))) != s.size()) {
    w.fail("expected one character, found '" + s + "'");
  }
  return s;
}

}  // namespace kktrain::text
