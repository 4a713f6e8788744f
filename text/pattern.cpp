// Patterns of tokenizer.json (text/pattern.hpp).
#include "text/pattern.hpp"

#include <algorithm>

namespace kktrain::text {

Pattern Pattern::from_json(const Json& v, const Where& w, Regexes* regexes) {
  Pattern p;
  if (const Json* s = v.is_object() ? optional_member(v, "String") : nullptr) {
    p.literal = as_string(*s, w.at("String"));
  } else if (const Json* r = v.is_object() ? optional_member(v, "Regex") : nullptr) {
    p.regex = std::make_unique<Regex>(as_string(*r, w.at("Regex")),
                                      "tokenizer file '" + w.file + "': key '" + w.key + ".Regex'");
    p.matcher = int(regexes->size());
    regexes->push_back(p.regex.get());
  } else {
    w.fail("expected {\"String\": ...} or {\"Regex\": ...}");
  }
  return p;
}

Pattern Pattern::own_regex(const char* pattern, const std::string& where, Regexes* regexes) {
  Pattern p;
  p.regex = std::make_unique<Regex>(pattern, where);
  p.matcher = int(regexes->size());
  regexes->push_back(p.regex.get());
  return p;
}

void Pattern::find(Matches* out, std::string_view s, std::vector<RegexMatcher>& matchers) const {
  out->clear();
  if (regex) {
    matchers[size_t(matcher)].find_all(out, s);
    return;
  }
  if (literal.empty()) return;
  for (size_t at = s.find(literal); at != std::string_view::npos;
       at = s.find(literal, at + literal.size())) {
    out->emplace_back(at, at + literal.size());
  }
}

double Pattern::growth(const std::string& content) const {
  return double(content.size()) / double(regex ? 1 : std::max<size_t>(1, literal.size()));
}

Replacement Replacement::from_json(const Json& j, const Where& w, Regexes* regexes) {
  Replacement r;
  r.pattern = Pattern::from_json(member(j, "pattern", w), w.at("pattern"), regexes);
  r.content = as_string(member(j, "content", w), w.at("content"));
  return r;
}

std::string replace_all(std::string_view s, const Matches& m, std::string_view with) {
  std::string out;
  size_t prev = 0;
  for (const auto& [b, e] : m) {
    out.append(s.substr(prev, b - prev));
    out.append(with);
    prev = e;
  }
  out.append(s.substr(prev));
  return out;
}

PrependScheme read_prepend(const Json& obj, const Where& w) {
  if (const Json* v = optional_member(obj, "prepend_scheme")) {
    const std::string s = as_string(*v, w.at("prepend_scheme"));
    if (s == "always") return PrependScheme::always;
    if (s == "first") return PrependScheme::first;
    if (s == "never") return PrependScheme::never;
    w.at("prepend_scheme").fail("expected always, first or never, found '" + s + "'");
  }
  return bool_or(obj, "add_prefix_space", true, w) ? PrependScheme::always : PrependScheme::never;
}

}  // namespace kktrain::text
