// The pre-tokenizers (text/pre_tokenizers.hpp).
#include "text/pre_tokenizers.hpp"

#include "text/unicode.hpp"

namespace kktrain::text {

namespace {

// Which ranges count as the split's matches: the pattern's matches, or (Split's `invert`) the
// text between them.
enum class Matched { pattern, between };

// *r = the matches as ranges covering [0, n), each flagged as a match or not (per `matched`).
void cover(std::vector<SplitRange>* r, const Matches& m, size_t n, Matched matched) {
  const bool invert = matched == Matched::between;
  r->clear();
  size_t prev = 0;
  for (const auto& [b, e] : m) {
    if (prev < b) r->push_back({prev, b, invert});
    r->push_back({b, e, !invert});
    prev = e;
  }
  if (prev < n) r->push_back({prev, n, invert});
}

// Rust's NormalizedString::split with a SplitDelimiterBehavior, in place: the ranges to keep.
void apply_behavior(std::vector<SplitRange>* ranges, SplitBehavior b) {
  std::vector<SplitRange>& v = *ranges;
  const size_t n = v.size();
  size_t w = 0;
  bool prev_match = false;
  switch (b) {
    case SplitBehavior::isolated:
      return;
    case SplitBehavior::removed:
      for (size_t i = 0; i < n; ++i)
        if (!v[i].match) v[w++] = v[i];
      break;
    case SplitBehavior::merged_with_previous:
    case SplitBehavior::contiguous:
      for (size_t i = 0; i < n; ++i) {
        const SplitRange r = v[i];
        const bool merge =
            b == SplitBehavior::contiguous ? r.match == prev_match : r.match && !prev_match;
        if (merge && w > 0) {
          v[w - 1].end = r.end;
        } else {
          v[w++] = r;
        }
        prev_match = r.match;
      }
      break;
    case SplitBehavior::merged_with_next: {
      w = n;  // written backwards into [w, n)
      for (size_t i = n; i-- > 0;) {
        const SplitRange r = v[i];
        if (r.match && !prev_match && w < n) {
          v[w].begin = r.begin;
        } else {
          v[--w] = r;
        }
        prev_match = r.match;
      }
      v.erase(v.begin(), v.begin() + std::ptrdiff_t(w));
      return;
    }
  }
  v.resize(w);
}

// Splits p into *out at the matches (relative to p's start, of a text of n bytes): the matches
// and the text between them, each a piece (cover, then emit, for SplitBehavior::isolated, whose
// ranges need no flag).
void emit_isolated(std::vector<Piece>* out, const Piece& p, const Matches& m, size_t n) {
  size_t prev = 0;
  for (const auto& [b, e] : m) {
    if (prev < b) out->push_back({p.begin + prev, p.begin + b, p.origin && prev == 0});
    if (e > b) out->push_back({p.begin + b, p.begin + e, p.origin && b == 0});
    prev = e;
  }
  if (prev < n) out->push_back({p.begin + prev, p.begin + n, p.origin && prev == 0});
}

// Splits p into *out by ranges relative to p's start (empty ones dropped).
void emit(std::vector<Piece>* out, const Piece& p, const std::vector<SplitRange>& ranges) {
  for (const SplitRange& r : ranges) {
    if (r.end > r.begin)
      out->push_back({p.begin + r.begin, p.begin + r.end, p.origin && r.begin == 0});
  }
}

SplitBehavior read_behavior(const Json& v, const Where& w) {
  const std::string b = as_string(v, w);
  if (b == "Removed") return SplitBehavior::removed;
  if (b == "Isolated") return SplitBehavior::isolated;
  if (b == "MergedWithPrevious") return SplitBehavior::merged_with_previous;
  if (b == "MergedWithNext") return SplitBehavior::merged_with_next;
  if (b == "Contiguous") return SplitBehavior::contiguous;
  unsupported(w, b, "Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
}

// GPT-2's pre-tokenizer regex (the ByteLevel pre-tokenizer's own when use_regex is true).
const char* kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace

void PreTokenizedString::reset(std::string_view text, const ByteRange* from, bool origin) {
  arena.assign(text);
  if (tracked) align.assign(from, from + text.size());
  pieces.clear();
  pieces.push_back({0, arena.size(), origin});
}

ByteRange PreTokenizedString::before(const Piece& p) const {
  const size_t at = p.begin < align.size() ? align[p.begin].begin
                    : align.empty()        ? 0
                                           : align.back().end;
  return {at, at};
}

Piece PreTokenizedString::prepended(const Piece& p, std::string_view prefix) {
  const size_t b = arena.size();
  arena.append(prefix);
  arena.append(arena, p.begin, p.end - p.begin);
  if (tracked) {
    const ByteRange at = before(p);
    align.insert(align.end(), prefix.size(), at);
    for (size_t i = p.begin; i < p.end; ++i) {
      const ByteRange r = align[i];
      align.push_back(r);
    }
  }
  return {b, arena.size(), p.origin};
}

void pre_tokenize(const std::vector<std::unique_ptr<PreTokenizer>>& steps, PreTokenizedString* s,
                  std::vector<RegexMatcher>& matchers) {
  for (const auto& step : steps) {
    if (step->passes_through()) continue;
    s->next.clear();
    for (const Piece& p : s->pieces) step->split(s, p, matchers);
    std::swap(s->pieces, s->next);
  }
}

std::unique_ptr<PreTokenizer> PreTokenizer::from_json(const std::string& type, const Json& j,
                                                      const Where& w, Regexes* regexes) {
  if (type == "ByteLevel") return ByteLevelPreTokenizer::from_json(j, w, regexes);
  if (type == "Split") return SplitPreTokenizer::from_json(j, w, regexes);
  if (type == "Metaspace") return MetaspacePreTokenizer::from_json(j, w);
  if (type == "Digits") return DigitsPreTokenizer::from_json(j, w);
  return nullptr;
}

// ---- ByteLevel -------------------------------------------------------------------------------
std::unique_ptr<ByteLevelPreTokenizer> ByteLevelPreTokenizer::from_json(const Json& j,
                                                                        const Where& w,
                                                                        Regexes* regexes) {
  auto p = std::make_unique<ByteLevelPreTokenizer>();
  p->add_prefix_space_ = bool_or(j, "add_prefix_space", true, w);
  p->use_regex_ = bool_or(j, "use_regex", true, w);
  if (p->use_regex_) {
    p->regex_ = Pattern::own_regex(
        kGpt2Regex, "tokenizer file '" + w.file + "': key '" + w.key + "' (ByteLevel's regex)",
        regexes);
  }
  return p;
}

void ByteLevelPreTokenizer::split(PreTokenizedString* s, const Piece& piece,
                                  std::vector<RegexMatcher>& matchers) const {
  Piece p = piece;
  if (add_prefix_space_ && (p.end == p.begin || s->arena[p.begin] != ' ')) p = s->prepended(p, " ");
  const size_t first = s->next.size();
  if (use_regex_) {
    regex_.find(&s->matches, s->view(p), matchers);
    emit_isolated(&s->next, p, s->matches, p.end - p.begin);
  } else {
    s->next.push_back(p);
  }
  if (!map_) return;
  for (size_t q = first; q < s->next.size(); ++q) {  // a later step reads the mapped text
    Piece& x = s->next[q];
    const size_t b = s->arena.size();
    for (size_t i = x.begin; i < x.end; ++i) {
      const std::string& c = byte_to_unicode(uint8_t(s->arena[i]));
      s->arena += c;
      if (s->tracked) {
        const ByteRange r = s->align[i];
        s->align.insert(s->align.end(), c.size(), r);
      }
    }
    x = {b, s->arena.size(), x.origin};
  }
}

// ---- Split -----------------------------------------------------------------------------------
std::unique_ptr<SplitPreTokenizer> SplitPreTokenizer::from_json(const Json& j, const Where& w,
                                                                Regexes* regexes) {
  auto p = std::make_unique<SplitPreTokenizer>();
  p->pattern_ = Pattern::from_json(member(j, "pattern", w), w.at("pattern"), regexes);
  p->behavior_ = read_behavior(member(j, "behavior", w), w.at("behavior"));
  p->invert_ = bool_or(j, "invert", false, w);
  return p;
}

void SplitPreTokenizer::split(PreTokenizedString* s, const Piece& p,
                              std::vector<RegexMatcher>& matchers) const {
  pattern_.find(&s->matches, s->view(p), matchers);
  if (behavior_ == SplitBehavior::isolated) {  // invert or not: every range a piece
    emit_isolated(&s->next, p, s->matches, p.end - p.begin);
    return;
  }
  cover(&s->ranges, s->matches, p.end - p.begin, invert_ ? Matched::between : Matched::pattern);
  apply_behavior(&s->ranges, behavior_);
  emit(&s->next, p, s->ranges);
}

// ---- Metaspace -------------------------------------------------------------------------------
std::unique_ptr<MetaspacePreTokenizer> MetaspacePreTokenizer::from_json(const Json& j,
                                                                        const Where& w) {
  auto p = std::make_unique<MetaspacePreTokenizer>();
  p->replacement_ = one_char(member(j, "replacement", w), w.at("replacement"));
  p->prepend_ = read_prepend(j, w);
  p->split_ = bool_or(j, "split", true, w);
  return p;
}

void MetaspacePreTokenizer::split(PreTokenizedString* s, const Piece& p,
                                  std::vector<RegexMatcher>&) const {
  const std::string_view rep = replacement_;
  std::string text(s->view(p));
  Matches m;
  for (size_t at = text.find(' '); at != std::string::npos; at = text.find(' ', at + 1))
    m.emplace_back(at, at + 1);
  if (!m.empty()) text = replace_all(text, m, rep);
  const bool starts = text.compare(0, rep.size(), rep) == 0;
  const bool prepend = !starts && (prepend_ == PrependScheme::always ||
                                   (prepend_ == PrependScheme::first && p.origin));
  if (prepend) text.insert(0, rep);
  Piece q{s->arena.size(), 0, p.origin};
  s->arena += text;
  q.end = s->arena.size();
  if (s->tracked) {
    s->align.reserve(s->align.size() + text.size());
    if (prepend) s->align.insert(s->align.end(), rep.size(), s->before(p));
    for (size_t i = p.begin; i < p.end; ++i) {
      const ByteRange r = s->align[i];
      s->align.insert(s->align.end(), s->arena[i] == ' ' ? rep.size() : 1, r);
    }
  }
  if (!split_) {
    s->next.push_back(q);
    return;
  }
  m.clear();
  for (size_t at = text.find(rep); at != std::string::npos; at = text.find(rep, at + rep.size()))
    m.emplace_back(at, at + rep.size());
  cover(&s->ranges, m, text.size(), Matched::pattern);
  apply_behavior(&s->ranges, SplitBehavior::merged_with_next);
  emit(&s->next, q, s->ranges);
}

// ---- Digits ----------------------------------------------------------------------------------
std::unique_ptr<DigitsPreTokenizer> DigitsPreTokenizer::from_json(const Json& j, const Where& w) {
  auto p = std::make_unique<DigitsPreTokenizer>();
  p->individual_digits_ = bool_or(j, "individual_digits", false, w);
  return p;
}

void DigitsPreTokenizer::split(PreTokenizedString* s, const Piece& p,
                               std::vector<RegexMatcher>&) const {
  Matches m;
  const std::string_view text = s->view(p);
  for (size_t i = 0; i < text.size();) {
    const CodePoint c = decode_at(text, i);
    if (is_numeric(c.cp)) m.emplace_back(i, i + size_t(c.len));
    i += size_t(c.len);
  }
  cover(&s->ranges, m, text.size(), Matched::pattern);
  apply_behavior(&s->ranges,
                 individual_digits_ ? SplitBehavior::isolated : SplitBehavior::contiguous);
  emit(&s->next, p, s->ranges);
}

}  // namespace kktrain::text
