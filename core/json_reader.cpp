// The errors of a JSON document's readers (core/json_reader.hpp).
#include "core/json_reader.hpp"

#include "core/errors.hpp"

namespace kktrain {
namespace json_reader {

void fail_at_key(const char* document, const std::string& file, const std::string& key,
                 const std::string& what) {
  throw InputError(document + ("'" + file + "': ") + (key.empty() ? "" : "key '" + key + "': ") +
                   what);
}

void fail_at_value(const char* document, const std::string& file, const std::string& key,
                   const nlohmann::json* value, const std::string& what) {
  const std::string shown = value ? " = " + value->dump() : "";
  throw InputError(document + ("'" + file + "': ") + key + shown + ": " + what);
}

}  // namespace json_reader
}  // namespace kktrain
