// The normalizers (text/normalizers.hpp).
#include "text/normalizers.hpp"

#include <algorithm>

namespace kktrain::text {

ByteRange covering(const ByteRange* a, size_t n) {
  ByteRange r{n ? a[0].begin : 0, n ? a[0].begin : 0};
  bool any = false;
  for (size_t i = 0; i < n; ++i) {
    if (a[i].end == a[i].begin) continue;
    r.begin = any ? std::min(r.begin, a[i].begin) : a[i].begin;
    r.end = any ? std::max(r.end, a[i].end) : a[i].end;
    any = true;
  }
  return r;
}

NormalizedString::NormalizedString(std::string_view s, size_t at, Alignment alignment)
    : text(s), tracked(alignment == Alignment::tracked) {
  if (!tracked) return;
  align.resize(s.size());
  for (size_t i = 0; i < s.size(); ++i) align[i] = {at + i, at + i + 1};
}

std::unique_ptr<Normalizer> Normalizer::from_json(const std::string& type, const Json& j,
                                                  const Where& w, Regexes* regexes) {
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(NormalForm::nfc);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(NormalForm::nfd);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(NormalForm::nfkc);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(NormalForm::nfkd);
  if (type == "Prepend") return PrependNormalizer::from_json(j, w);
  if (type == "Replace") return ReplaceNormalizer::from_json(j, w, regexes);
  if (type == "Strip") return StripNormalizer::from_json(j, w);
  return nullptr;
}

// ---- Unicode forms ---------------------------------------------------------------------------
namespace {

// The alignment of `out` = normalize(s.text) (which differs from s.text): runs of s.text that
// each start at a starter, joined while normalizing them apart differs from normalizing them
// together; a run that changes gives all its new bytes its range.
std::vector<ByteRange> align_runs(const NormalizedString& s, const std::string& out,
                                  NormalForm form) {
  const std::string_view text = s.text;
  std::vector<size_t> cuts;  // where runs begin, then text.size()
  for (size_t i = 0; i < text.size();) {
    const CodePoint c = decode_at(text, i);
    if (i == 0 || is_starter(c.cp)) cuts.push_back(i);
    i += size_t(c.len);
  }
  cuts.push_back(text.size());
  struct Run {
    size_t begin, end;
    std::string normalized;
  };
  std::vector<Run> runs;
  for (size_t k = 0; k + 1 < cuts.size(); ++k) {
    const size_t b = cuts[k], e = cuts[k + 1];
    std::string alone = normalize(text.substr(b, e - b), form);
    if (!runs.empty()) {
      Run& last = runs.back();
      std::string joined = normalize(text.substr(last.begin, e - last.begin), form);
      if (joined != last.normalized + alone) {
        last.end = e;
        last.normalized = std::move(joined);
        continue;
      }
    }
    runs.push_back({b, e, std::move(alone)});
  }
  std::string all;
  for (const Run& r : runs) all += r.normalized;
  if (all != out) runs = {{0, text.size(), out}};  // one run: the whole text
  std::vector<ByteRange> align;
  align.reserve(out.size());
  for (const Run& r : runs) {
    const ByteRange* from = s.align.data() + r.begin;
    if (text.substr(r.begin, r.end - r.begin) == r.normalized) {
      align.insert(align.end(), from, from + (r.end - r.begin));
    } else {
      align.insert(align.end(), r.normalized.size(), covering(from, r.end - r.begin));
    }
  }
  return align;
}

}  // namespace

void UnicodeNormalizer::run(NormalizedString* s, std::vector<RegexMatcher>&) const {
  std::string out = normalize(s->text, form_);
  if (s->tracked && out != s->text) s->align = align_runs(*s, out, form_);
  s->text = std::move(out);
}

// U+FDFA decomposes into 18 code points; a canonical form makes a character at most 4 times
// longer.
double UnicodeNormalizer::growth() const {
  return form_ == NormalForm::nfc || form_ == NormalForm::nfd ? 4.0 : 18.0;
}

// ---- Prepend ---------------------------------------------------------------------------------
std::unique_ptr<PrependNormalizer> PrependNormalizer::from_json(const Json& j, const Where& w) {
  auto n = std::make_unique<PrependNormalizer>();
  n->prepend_ = as_string(member(j, "prepend", w), w.at("prepend"));
  return n;
}

void PrependNormalizer::run(NormalizedString* s, std::vector<RegexMatcher>&) const {
  if (s->text.empty()) return;
  if (s->tracked) {
    const size_t at = s->align[0].begin;
    s->align.insert(s->align.begin(), prepend_.size(), ByteRange{at, at});
  }
  s->text = prepend_ + s->text;
}

// ---- Replace ---------------------------------------------------------------------------------
std::unique_ptr<ReplaceNormalizer> ReplaceNormalizer::from_json(const Json& j, const Where& w,
                                                                Regexes* regexes) {
  auto n = std::make_unique<ReplaceNormalizer>();
  n->rule_ = Replacement::from_json(j, w, regexes);
  return n;
}

void ReplaceNormalizer::run(NormalizedString* s, std::vector<RegexMatcher>& matchers) const {
  Matches m;
  rule_.pattern.find(&m, s->text, matchers);
  if (m.empty()) return;
  if (s->tracked) {
    std::vector<ByteRange> align;
    align.reserve(s->align.size());
    size_t prev = 0;
    for (const auto& [b, e] : m) {
      align.insert(align.end(), s->align.begin() + std::ptrdiff_t(prev),
                   s->align.begin() + std::ptrdiff_t(b));
      const size_t last = char_start(s->text, e - 1, b);  // the match's last character
      align.insert(align.end(), rule_.content.size(), covering(s->align.data() + last, e - last));
      prev = e;
    }
    align.insert(align.end(), s->align.begin() + std::ptrdiff_t(prev), s->align.end());
    s->align = std::move(align);
  }
  s->text = replace_all(s->text, m, rule_.content);
}

// ---- Strip -----------------------------------------------------------------------------------
std::unique_ptr<StripNormalizer> StripNormalizer::from_json(const Json& j, const Where& w) {
  auto n = std::make_unique<StripNormalizer>();
  n->left_ = bool_or(j, "strip_left", true, w);
  n->right_ = bool_or(j, "strip_right", true, w);
  return n;
}

void StripNormalizer::run(NormalizedString* s, std::vector<RegexMatcher>&) const {
  const std::string& t = s->text;
  size_t b = 0, e = t.size();
  if (left_) {
    while (b < e) {
      const CodePoint c = decode_at(t, b);
      if (!is_whitespace(c.cp)) break;
      b += size_t(c.len);
    }
  }
  if (right_) {
    while (e > b) {
      const size_t k = char_start(t, e - 1, b);
      if (!is_whitespace(decode_at(t, k).cp)) break;
      e = k;
    }
  }
  if (s->tracked) {
    s->align.erase(s->align.begin() + std::ptrdiff_t(e), s->align.end());
    s->align.erase(s->align.begin(), s->align.begin() + std::ptrdiff_t(b));
  }
  s->text = t.substr(b, e - b);
}

}  // namespace kktrain::text
