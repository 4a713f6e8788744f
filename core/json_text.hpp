// JSON text in kktrain's layout, written through nlohmann::json.
//
// kktrain's machine-readable outputs (metrics.jsonl rows, `kktrain audit --json`) keep the layout
// their readers and earlier runs know: ", " between items, ": " after keys, members in insertion
// order (nlohmann::ordered_json), NaN and infinities as Python's json reads them (NaN, Infinity,
// -Infinity). Numbers are formatted here (nlohmann's dump prints doubles shortest-round-trip and
// NaN as null); keys and strings are escaped by nlohmann (quotes, backslashes and every control
// character; bytes that are not UTF-8 become U+FFFD), so any string becomes valid JSON.
//
// JSON read from untrusted files (tokenizer.json, a chat data line) is parsed with its nesting
// bounded: parse_json_bounded refuses text nested deeper than kMaxJsonDepth arrays and objects
// before nlohmann parses it, so no reader that walks the value recursively (the tokenizer's
// Sequences, Jinja values, destructors) can run out of stack.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "core/errors.hpp"

namespace kktrain {

using Json = nlohmann::ordered_json;

// How doubles are printed: round_trip with %.17g (two equal doubles print the same bytes and
// every double reads back exactly: metrics), six_digits with %g (as an ostream prints: the
// audit's ratios).
enum class JsonDoubles { round_trip, six_digits };

// `v` as one line of JSON text in the layout above.
std::string json_text(const Json& v, JsonDoubles doubles = JsonDoubles::round_trip);
// `s` as a JSON string literal, quotes included (nlohmann's escaping).
std::string json_quoted(const std::string& s);

// The deepest nesting of arrays and objects parse_json_bounded accepts: serde_json's default
// recursion limit, so every tokenizer.json Hugging Face's `tokenizers` (Rust) loads is read.
constexpr int kMaxJsonDepth = 128;

// Where `text` opens an array or object deeper than max_depth ("JSON nested deeper than 128
// levels (arrays and objects) at line L, column C", or "at column C" on the first line), or
// nullopt. One pass over the bytes, strings skipped as JSON's lexer skips them, so for any text
// nlohmann accepts up to that point the depth counted is the parser's.
std::optional<std::string> json_nesting_error(std::string_view text, int max_depth = kMaxJsonDepth);

// InputError "<what>: <json_nesting_error>" when text nests too deep.
void check_json_nesting(std::string_view text, const std::string& what,
                        int max_depth = kMaxJsonDepth);

// `text` parsed as J (nlohmann::json or nlohmann::ordered_json) with its nesting bounded:
// InputError "<what>: JSON nested deeper than ..." (check_json_nesting) or "<what>: not valid
// JSON: <nlohmann's reason, with line and column>".
template <class J>
J parse_json_bounded(std::string_view text, const std::string& what,
                     int max_depth = kMaxJsonDepth) {
  check_json_nesting(text, what, max_depth);
  try {
    return J::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    throw InputError(what + ": not valid JSON: " + e.what());
  }
}

}  // namespace kktrain
