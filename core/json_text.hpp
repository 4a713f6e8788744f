// JSON text in kktrain's layout, written through nlohmann::json.
//
// kktrain's machine-readable outputs (metrics.jsonl rows, `kktrain audit --json`) keep the layout
// their readers and earlier runs know: ", " between items, ": " after keys, members in insertion
// order (nlohmann::ordered_json), NaN and infinities as Python's json reads them (NaN, Infinity,
// -Infinity). Numbers are formatted here (nlohmann's dump prints doubles shortest-round-trip and
// NaN as null); keys and strings are escaped by nlohmann (quotes, backslashes and every control
// character; bytes that are not UTF-8 become U+FFFD), so any string becomes valid JSON.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

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

}  // namespace kktrain
