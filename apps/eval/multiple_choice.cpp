// Multiple-choice tasks (apps/eval/multiple_choice.hpp).
#include "apps/eval/multiple_choice.hpp"

#include <cmath>
#include <string_view>

#include "core/errors.hpp"
#include "core/files.hpp"
#include "core/json_text.hpp"
#include "core/strings.hpp"
#include "text/unicode.hpp"

namespace kktrain {

namespace {

// What Python's str.rstrip() strips: White_Space, and U+001C..U+001F (str.isspace's separators).
bool python_space(char32_t cp) {
  return text::is_whitespace(cp) || (cp >= 0x1C && cp <= 0x1F);
}

ChoiceItem parse_item(std::string_view line, const std::string& where) {
  const Json j = parse_json_bounded<Json>(line, where);
  if (!j.is_object()) throw InputError(where + ": not a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    if (k != "context" && k != "choices" && k != "gold" && k != "target_delimiter") {
      throw InputError(where + ": unknown field \"" + k +
                       "\" (an item is {\"context\", \"choices\", \"gold\"} and optionally "
                       "\"target_delimiter\")");
    }
  }
  ChoiceItem item;
  const auto ctx = j.find("context");
  if (ctx == j.end() || !ctx->is_string()) {
    throw InputError(where + ": \"context\" must be a string");
  }
  item.context = ctx->get<std::string>();
  const auto ch = j.find("choices");
  if (ch == j.end() || !ch->is_array() || ch->empty()) {
    throw InputError(where + ": \"choices\" must be a non-empty list of strings");
  }
  if (ch->size() > kMaxChoices) {
    throw InputError(where + ": " + std::to_string(ch->size()) + " choices, more than " +
                     std::to_string(kMaxChoices));
  }
  for (const Json& c : *ch) {
    if (!c.is_string()) throw InputError(where + ": \"choices\" must be a list of strings");
    item.choices.push_back(c.get<std::string>());
  }
  const auto gold = j.find("gold");
  if (gold == j.end() || !gold->is_number_integer()) {
    throw InputError(where + ": \"gold\" must be an integer, the index of the right choice");
  }
  const int64_t g = gold->get<int64_t>();
  if (g < 0 || g >= static_cast<int64_t>(item.choices.size())) {
    throw InputError(where + ": \"gold\" is " + std::to_string(g) + ", not the index of one of " +
                     std::to_string(item.choices.size()) + " choices");
  }
  item.gold = g;
  const auto d = j.find("target_delimiter");
  if (d != j.end()) {
    if (!d->is_string()) throw InputError(where + ": \"target_delimiter\" must be a string");
    item.delimiter = d->get<std::string>();
  }
  return item;
}

}  // namespace

std::vector<ChoiceItem> read_choice_items(const std::string& path) {
  std::string text;
  if (auto why = read_regular_file(&text, path, kMaxTaskFileBytes)) {
    throw InputError("task file '" + path + "' cannot be read: " + *why);
  }
  std::vector<ChoiceItem> items;
  for (const NumberedLine& line : nonblank_lines(text)) {
    ChoiceItem item = parse_item(line.text, path + ":" + std::to_string(line.no));
    item.line = line.no;
    items.push_back(std::move(item));
  }
  if (items.empty()) throw InputError("task file '" + path + "' holds no item");
  return items;
}

ChoiceRequest choice_request(const RequestEncoding& enc, const std::string& context,
                             const std::string& continuation) {
  ChoiceRequest r;
  if (context.empty()) {
    if (!enc.prefix) {
      throw InputError(
          "an empty context needs a prefix token (the tokenizer's BOS or EOS), and this model "
          "has none");
    }
    // The continuation's own first token when it is the prefix token, else the prefix token.
    r.continuation = enc.encode(continuation);
    if (!r.continuation.empty() && r.continuation[0] == *enc.prefix) {
      r.context = {r.continuation[0]};
      r.continuation.erase(r.continuation.begin());
    } else {
      r.context = {*enc.prefix};
    }
    return r;
  }
  // Trailing whitespace of the context moves onto the continuation.
  std::size_t cut = context.size();
  while (cut > 0) {
    const std::size_t start = text::char_start(context, cut - 1);
    if (!python_space(text::decode_at(context, start).cp)) break;
    cut = start;
  }
  const std::string ctx = context.substr(0, cut);
  const std::string cont = context.substr(cut) + continuation;
  const std::vector<int32_t> whole = enc.encode(ctx + cont);
  r.context = enc.encode(ctx);
  const std::size_t n = std::min(r.context.size(), whole.size());
  r.continuation.assign(whole.begin() + static_cast<std::ptrdiff_t>(n), whole.end());
  return r;
}

double mean_stderr(const std::vector<double>& x) {
  const std::size_t n = x.size();
  if (n < 2) return 0.0;
  double mean = 0;
  for (double v : x) mean += v;
  mean /= static_cast<double>(n);
  double ss = 0;
  for (double v : x) ss += (v - mean) * (v - mean);
  return std::sqrt(ss / static_cast<double>(n - 1)) / std::sqrt(static_cast<double>(n));
}

int64_t utf8_chars(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += !text::is_continuation(c);
  return n;
}

ChoiceMetrics choice_metrics(const std::vector<ChoiceItem>& items,
                             const std::vector<std::vector<double>>& scores) {
  if (scores.size() != items.size()) throw InternalError("choice_metrics: scores per item");
  std::vector<double> acc, norm, bytes;
  auto argmax = [](const std::vector<double>& v) {
    std::size_t best = 0;
    for (std::size_t i = 1; i < v.size(); ++i) {
      if (v[i] > v[best]) best = i;
    }
    return static_cast<int64_t>(best);
  };
  for (std::size_t i = 0; i < items.size(); ++i) {
    const ChoiceItem& it = items[i];
    const std::vector<double>& s = scores[i];
    if (s.size() != it.choices.size()) throw InternalError("choice_metrics: scores per choice");
    std::vector<double> by_chars(s.size()), by_bytes(s.size());
    for (std::size_t c = 0; c < s.size(); ++c) {
      // Python divides by float(len): an empty choice gives +-inf or NaN, as numpy does.
      by_chars[c] = s[c] / static_cast<double>(utf8_chars(it.choices[c]));
      by_bytes[c] = s[c] / static_cast<double>(it.choices[c].size());
    }
    acc.push_back(argmax(s) == it.gold ? 1.0 : 0.0);
    norm.push_back(argmax(by_chars) == it.gold ? 1.0 : 0.0);
    bytes.push_back(argmax(by_bytes) == it.gold ? 1.0 : 0.0);
  }
  auto metric = [](const std::vector<double>& x) {
    MetricValue m;
    for (double v : x) m.value += v;
    m.value /= static_cast<double>(x.size());
    m.stderr_ = mean_stderr(x);
    return m;
  };
  ChoiceMetrics m;
  m.acc = metric(acc);
  m.acc_norm = metric(norm);
  m.acc_bytes = metric(bytes);
  return m;
}

}  // namespace kktrain
