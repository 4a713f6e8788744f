// The encode pipeline, as the Rust `tokenizers` library runs it for one sequence:
//   1. split out added tokens matched in the raw text (leftmost-longest; lstrip, rstrip,
//      single_word), 2. normalize each other segment, 3. split out added tokens matched in the
//   normalized text, 4. pre-tokenize each remaining segment into pieces, 5. BPE each piece,
//   6. the post-processor's special tokens around the sequence.
// (Encoder; the Tokenizer itself is text/tokenizer.cpp.)
#include <algorithm>
#include <deque>
#include <exception>
#include <queue>
#include <thread>

#include "core/errors.hpp"
#include "text/piece_cache.hpp"
#include "text/tokenizer_impl.hpp"

namespace kktrain::text {

// ---------------------------------------------------------------------------------------------
// Pieces and splitting
// ---------------------------------------------------------------------------------------------
namespace {

// A piece of text on its way through the pipeline: bytes [begin, end) of the encoder's arena;
// `origin`: it starts at the start of the original text (Metaspace's prepend_scheme "first").
struct Piece {
  size_t begin, end;
  bool origin;
};

struct Range {
  size_t begin, end;
  bool match;
};

using Matches = std::vector<std::pair<size_t, size_t>>;

// Successive non-overlapping matches of a pattern in s.
void find_matches(Matches* out, const Pattern& p, std::string_view s,
                  std::vector<RegexMatcher>& matchers) {
  out->clear();
  if (p.regex) {
    matchers[size_t(p.matcher)].find_all(out, s);
    return;
  }
  if (p.literal.empty()) return;
  for (size_t at = s.find(p.literal); at != std::string_view::npos;
       at = s.find(p.literal, at + p.literal.size())) {
    out->emplace_back(at, at + p.literal.size());
  }
}

// *r = the matches as ranges covering [0, n) (a match flag each; `invert` flips it).
void cover(std::vector<Range>* r, const Matches& m, size_t n, bool invert) {
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
void apply_behavior(std::vector<Range>* ranges, SplitBehavior b) {
  std::vector<Range>& v = *ranges;
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
        const Range r = v[i];
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
        const Range r = v[i];
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

// Splits p into *out by ranges relative to p's start (empty ones dropped).
void emit(std::vector<Piece>* out, const Piece& p, const std::vector<Range>& ranges) {
  for (const Range& r : ranges) {
    if (r.end > r.begin)
      out->push_back({p.begin + r.begin, p.begin + r.end, p.origin && r.begin == 0});
  }
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

}  // namespace

std::string apply_normalizers(const Tokenizer::Impl& t, std::string s,
                              std::vector<RegexMatcher>& matchers) {
  Matches m;
  for (const NormalizerStep& n : t.normalizers) {
    switch (n.kind) {
      case NormalizerStep::Kind::unicode:
        s = normalize(s, n.form);
        break;
      case NormalizerStep::Kind::prepend:
        if (!s.empty()) s = n.text + s;
        break;
      case NormalizerStep::Kind::replace:
        find_matches(&m, n.pattern, s, matchers);
        if (!m.empty()) s = replace_all(s, m, n.text);
        break;
      case NormalizerStep::Kind::strip: {
        size_t b = 0, e = s.size();
        if (n.left) {
          while (b < e) {
            const CodePoint c = decode_at(s, b);
            if (!is_whitespace(c.cp)) break;
            b += size_t(c.len);
          }
        }
        if (n.right) {
          while (e > b) {
            size_t k = e - 1;
            while (k > b && (uint8_t(s[k]) & 0xC0) == 0x80) --k;
            if (!is_whitespace(decode_at(s, k).cp)) break;
            e = k;
          }
        }
        s = s.substr(b, e - b);
        break;
      }
    }
  }
  return s;
}

// ---------------------------------------------------------------------------------------------
// Encoder
// ---------------------------------------------------------------------------------------------
struct Encoder::State {
  std::vector<RegexMatcher> matchers;
  PieceCache cache;  // BPE results of short pieces
  // ... and of pieces up to kLongPieceBytes (lines, under tokenizers that do not split at
  // spaces), keyed by their bytes; cleared when it holds kLongPieces.
  std::unordered_map<std::string, std::vector<int32_t>> long_cache;
  std::string arena;  // the text of the segment being pre-tokenized, and what steps made of it
  std::string mapped;
  Matches matches;
  std::vector<Range> ranges;
  std::vector<Piece> pieces, next;
  // set_piece_threads: the other threads' states (their caches) and the size that uses them.
  std::vector<std::unique_ptr<State>> helpers;
  size_t parallel_bytes = 0;
};

namespace {

// One segment of text: an added token (token >= 0, an index into Impl::added) or text.
struct Segment {
  size_t begin, end;
  int token;
};

bool word_char(char32_t c) {
  return c == U'_' || is_alphanumeric(c);
}

// Splits s at the added tokens of `trie` (leftmost-longest), with lstrip/rstrip/single_word.
void split_added(std::vector<Segment>* out, const Tokenizer::Impl& t,
                 const Tokenizer::Impl::Trie& trie, std::string_view s) {
  out->clear();
  if (trie.empty()) {
    if (!s.empty()) out->push_back({0, s.size(), -1});
    return;
  }
  size_t start = 0, i = 0;
  while (i < s.size()) {
    if (!trie.first[uint8_t(s[i])]) {
      ++i;
      continue;
    }
    int32_t node = 0;
    int best = -1;
    size_t best_end = 0;
    for (size_t j = i; j < s.size(); ++j) {
      const auto it = trie.edges.find((uint64_t(uint32_t(node)) << 8) | uint8_t(s[j]));
      if (it == trie.edges.end()) break;
      node = it->second;
      if (trie.token[size_t(node)] >= 0) {
        best = trie.token[size_t(node)];
        best_end = j + 1;
      }
    }
    if (best < 0 || (uint8_t(s[i]) & 0xC0) == 0x80) {
      ++i;
      continue;
    }
    const AddedToken& a = t.added[size_t(best)];
    size_t b = i, e = best_end;
    if (a.single_word) {
      bool word_before = false, word_after = false;
      if (b > 0) {
        size_t k = b - 1;
        while (k > 0 && (uint8_t(s[k]) & 0xC0) == 0x80) --k;
        word_before = word_char(decode_at(s, k).cp);
      }
      if (e < s.size()) word_after = word_char(decode_at(s, e).cp);
      if (word_before || word_after) {
        ++i;
        continue;
      }
    }
    if (a.lstrip) {
      while (b > start) {
        size_t k = b - 1;
        while (k > start && (uint8_t(s[k]) & 0xC0) == 0x80) --k;
        if (!is_whitespace(decode_at(s, k).cp)) break;
        b = k;
      }
    }
    if (a.rstrip) {
      while (e < s.size()) {
        const CodePoint c = decode_at(s, e);
        if (!is_whitespace(c.cp)) break;
        e += size_t(c.len);
      }
    }
    if (start < b) out->push_back({start, b, -1});
    out->push_back({b, e, best});
    start = i = e;
  }
  if (start < s.size()) out->push_back({start, s.size(), -1});
}

// Whether the last pre-tokenizer step is ByteLevel: then its pieces stay raw bytes in the
// arena and are mapped to the byte-level alphabet only when BPE'd (a cache miss).
constexpr size_t kLongPieceBytes = 256;  // longer pieces are not cached
constexpr size_t kLongPieces = size_t(1) << 15;

bool lazy_byte_level(const Tokenizer::Impl& t) {
  return !t.pre_tokenizers.empty() &&
         t.pre_tokenizers.back().kind == PreTokenizerStep::Kind::byte_level;
}

void map_bytes(std::string* out, std::string_view raw) {
  out->clear();
  for (const char c : raw) *out += byte_to_unicode(uint8_t(c));
}

void pre_tokenize(const Tokenizer::Impl& t, Encoder::State& st);

// The ids of one piece by BPE (arena bytes, raw when the byte-level mapping is lazy), appended.
void compute_piece(std::vector<int32_t>* out, const Tokenizer::Impl& t, Encoder::State& st,
                   std::string_view piece, bool lazy) {
  std::string_view text = piece;
  if (lazy) {
    map_bytes(&st.mapped, piece);
    text = st.mapped;
  }
  if (t.ignore_merges) {
    const auto it = t.vocab.find(text);
    if (it != t.vocab.end()) {
      out->push_back(it->second);
      return;
    }
  }
  bpe_piece(out, t, text);
}

void model_long_piece(std::vector<int32_t>* out, const Tokenizer::Impl& t, Encoder::State& st,
                      std::string_view piece, bool lazy);

// The ids of one piece, appended: through the piece caches.
void model_piece(std::vector<int32_t>* out, const Tokenizer::Impl& t, Encoder::State& st,
                 std::string_view piece, bool lazy) {
  if (PieceCache::cacheable(piece)) {
    const uint64_t h = PieceCache::hash(piece);
    if (st.cache.find(out, piece, h)) return;
    const size_t before = out->size();
    compute_piece(out, t, st, piece, lazy);
    st.cache.put(piece, h, out->data() + before, out->size() - before);
    return;
  }
  if (piece.size() > kLongPieceBytes) {
    model_long_piece(out, t, st, piece, lazy);
    return;
  }
  std::string key(piece);
  auto it = st.long_cache.find(key);
  if (it == st.long_cache.end()) {
    std::vector<int32_t> ids;
    model_long_piece(&ids, t, st, piece, lazy);  // may add to (or clear) long_cache itself
    if (st.long_cache.size() >= kLongPieces) st.long_cache.clear();
    it = st.long_cache.emplace(std::move(key), std::move(ids)).first;
  }
  out->insert(out->end(), it->second.begin(), it->second.end());
}

// A piece too long for PieceCache: cut where BPE cannot merge across (each part through the
// caches), or BPE'd whole.
void model_long_piece(std::vector<int32_t>* out, const Tokenizer::Impl& t, Encoder::State& st,
                      std::string_view piece, bool lazy) {
  if (!t.merge_join_bits.empty() && !lazy) {
    size_t start = 0;
    char32_t prev = decode_at(piece, 0).cp;
    for (size_t i = size_t(utf8_len(uint8_t(piece[0]))); i < piece.size();) {
      const CodePoint c = decode_at(piece, i);
      if (bpe_boundary(t, prev, c.cp)) {
        model_piece(out, t, st, piece.substr(start, i - start), lazy);
        start = i;
      }
      prev = c.cp;
      i += size_t(c.len);
    }
    if (start > 0) {
      model_piece(out, t, st, piece.substr(start), lazy);
      return;
    }
  }
  compute_piece(out, t, st, piece, lazy);
}

// The pieces' parts for `threads` threads: views of the pieces in order, a piece longer than a
// part cut where BPE cannot merge across (when the tokenizer allows), grouped into `threads`
// runs of about equal bytes.
std::vector<std::vector<std::string_view>> piece_parts(const Tokenizer::Impl& t,
                                                       const Encoder::State& st, bool lazy,
                                                       size_t total, size_t threads) {
  const size_t target = (total + threads - 1) / threads;
  std::vector<std::string_view> units;
  for (const Piece& p : st.pieces) {
    std::string_view v = std::string_view(st.arena).substr(p.begin, p.end - p.begin);
    while (v.size() > target && !t.merge_join_bits.empty() && !lazy) {
      size_t i = target;  // the first boundary at or after `target`
      while (i < v.size() && (uint8_t(v[i]) & 0xC0) == 0x80) ++i;
      size_t k = i - 1;
      while (k > 0 && (uint8_t(v[k]) & 0xC0) == 0x80) --k;
      char32_t prev = decode_at(v, k).cp;
      while (i < v.size()) {
        const CodePoint c = decode_at(v, i);
        if (bpe_boundary(t, prev, c.cp)) break;
        prev = c.cp;
        i += size_t(c.len);
      }
      if (i >= v.size()) break;
      units.push_back(v.substr(0, i));
      v.remove_prefix(i);
    }
    if (!v.empty()) units.push_back(v);
  }
  std::vector<std::vector<std::string_view>> parts(1);
  size_t in_part = 0;
  for (const std::string_view u : units) {
    if (in_part >= target && parts.size() < threads) {
      parts.emplace_back();
      in_part = 0;
    }
    parts.back().push_back(u);
    in_part += u.size();
  }
  return parts;
}

// model_piece over st.pieces, appended in order; on the helpers' threads too for a long segment.
void model_pieces(std::vector<int32_t>* out, const Tokenizer::Impl& t, Encoder::State& st,
                  bool lazy) {
  size_t total = 0;
  for (const Piece& p : st.pieces) total += p.end - p.begin;
  if (st.helpers.empty() || total < st.parallel_bytes) {
    for (const Piece& p : st.pieces) {
      if (p.end > p.begin)
        model_piece(out, t, st, std::string_view(st.arena).substr(p.begin, p.end - p.begin), lazy);
    }
    return;
  }
  const auto parts = piece_parts(t, st, lazy, total, st.helpers.size() + 1);
  std::vector<std::vector<int32_t>> ids(parts.size());
  std::vector<std::exception_ptr> errors(parts.size());
  auto run = [&](size_t k) {
    Encoder::State& s = k == 0 ? st : *st.helpers[k - 1];
    try {
      for (const std::string_view u : parts[k]) model_piece(&ids[k], t, s, u, lazy);
    } catch (...) {
      errors[k] = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  for (size_t k = 1; k < parts.size(); ++k) pool.emplace_back(run, k);
  run(0);
  for (auto& th : pool) th.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  for (const auto& v : ids) out->insert(out->end(), v.begin(), v.end());
}

}  // namespace

void Encoder::set_piece_threads(int threads, size_t min_bytes) {
  state_->helpers.clear();
  for (int k = 1; k < threads; ++k) state_->helpers.push_back(std::make_unique<State>());
  state_->parallel_bytes = min_bytes;
}

Encoder::Encoder(std::shared_ptr<const Tokenizer> tokenizer)
    : tokenizer_(std::move(tokenizer)), state_(std::make_unique<State>()) {
  for (const Regex* r : tokenizer_->impl().regexes) state_->matchers.emplace_back(*r);
}
Encoder::~Encoder() = default;
Encoder::Encoder(Encoder&&) noexcept = default;
Encoder& Encoder::operator=(Encoder&&) noexcept = default;

namespace {

// Appends the ids of `seg`, a stretch of raw text between added tokens (`origin`: it starts the
// text).
void encode_text_segment(std::vector<int32_t>* out, const Tokenizer::Impl& t, Encoder::State& st,
                         std::string_view seg, bool origin, bool lazy, std::vector<Segment>* norm) {
  std::string normalized;
  if (!t.normalizers.empty()) {
    normalized = apply_normalizers(t, std::string(seg), st.matchers);
    seg = normalized;
  }
  if (seg.empty()) return;
  split_added(norm, t, t.normalized_trie, seg);
  for (const Segment& n : *norm) {
    if (n.token >= 0) {
      out->push_back(t.added[size_t(n.token)].id);
      continue;
    }
    st.arena.assign(seg.substr(n.begin, n.end - n.begin));
    st.pieces.clear();
    st.pieces.push_back({0, st.arena.size(), origin && n.begin == 0});
    pre_tokenize(t, st);
    model_pieces(out, t, st, lazy);
  }
}

}  // namespace

void Encoder::encode(std::vector<int32_t>* out, std::string_view text, SpecialTokens special) {
  encode_impl(out, nullptr, text, special);
}

void Encoder::encode_with_offsets(std::vector<int32_t>* out, std::vector<ByteRange>* offsets,
                                  std::string_view text, SpecialTokens special) {
  offsets->resize(out->size(), ByteRange{0, 0});
  encode_impl(out, offsets, text, special);
}

void Encoder::encode_impl(std::vector<int32_t>* out, std::vector<ByteRange>* offsets,
                          std::string_view text, SpecialTokens special) {
  const Tokenizer::Impl& t = tokenizer_->impl();
  State& st = *state_;
  const int64_t bad = first_invalid_utf8(text);
  if (bad >= 0) {
    throw InputError("text is not valid UTF-8 at byte " + std::to_string(bad));
  }
  if (special == SpecialTokens::add)
    out->insert(out->end(), t.prefix_ids.begin(), t.prefix_ids.end());
  if (offsets) offsets->resize(out->size(), ByteRange{0, 0});
  const bool lazy = lazy_byte_level(t);
  std::vector<Segment> raw, norm;
  split_added(&raw, t, t.raw_trie, text);
  for (const Segment& r : raw) {
    const size_t first = out->size();
    if (r.token >= 0) {
      out->push_back(t.added[size_t(r.token)].id);
      if (offsets) offsets->push_back({r.begin, r.end});
      continue;
    }
    encode_text_segment(out, t, st, text.substr(r.begin, r.end - r.begin), r.begin == 0, lazy,
                        &norm);
    if (offsets)
      segment_offsets(offsets, t, st.matchers, *out, first, text.substr(r.begin, r.end - r.begin),
                      r.begin);
  }
  if (special == SpecialTokens::add)
    out->insert(out->end(), t.suffix_ids.begin(), t.suffix_ids.end());
  if (offsets) offsets->resize(out->size(), ByteRange{text.size(), text.size()});
}

namespace {

// Appends `prefix` + arena[p] to the arena as a new piece.
Piece prepended(Encoder::State& st, const Piece& p, std::string_view prefix) {
  const size_t b = st.arena.size();
  st.arena.append(prefix);
  st.arena.append(st.arena, p.begin, p.end - p.begin);
  return {b, st.arena.size(), p.origin};
}

void pre_tokenize(const Tokenizer::Impl& t, Encoder::State& st) {
  const size_t steps = t.pre_tokenizers.size();
  for (size_t k = 0; k < steps; ++k) {
    const PreTokenizerStep& step = t.pre_tokenizers[k];
    st.next.clear();
    for (Piece p : st.pieces) {
      switch (step.kind) {
        case PreTokenizerStep::Kind::byte_level: {
          if (step.add_prefix_space && (p.end == p.begin || st.arena[p.begin] != ' '))
            p = prepended(st, p, " ");
          const size_t first = st.next.size();
          if (step.use_regex) {
            find_matches(&st.matches, step.pattern,
                         std::string_view(st.arena).substr(p.begin, p.end - p.begin), st.matchers);
            cover(&st.ranges, st.matches, p.end - p.begin, false);
            emit(&st.next, p, st.ranges);
          } else {
            st.next.push_back(p);
          }
          if (k + 1 < steps) {  // a later step reads the mapped text
            for (size_t q = first; q < st.next.size(); ++q) {
              Piece& x = st.next[q];
              map_bytes(&st.mapped, std::string_view(st.arena).substr(x.begin, x.end - x.begin));
              x.begin = st.arena.size();
              st.arena += st.mapped;
              x.end = st.arena.size();
            }
          }
          break;
        }
        case PreTokenizerStep::Kind::split:
          find_matches(&st.matches, step.pattern,
                       std::string_view(st.arena).substr(p.begin, p.end - p.begin), st.matchers);
          cover(&st.ranges, st.matches, p.end - p.begin, step.invert);
          apply_behavior(&st.ranges, step.behavior);
          emit(&st.next, p, st.ranges);
          break;
        case PreTokenizerStep::Kind::metaspace: {
          std::string text = st.arena.substr(p.begin, p.end - p.begin);
          Matches m;
          for (size_t at = text.find(' '); at != std::string::npos; at = text.find(' ', at + 1))
            m.emplace_back(at, at + 1);
          if (!m.empty()) text = replace_all(text, m, step.replacement);
          const bool starts = text.compare(0, step.replacement.size(), step.replacement) == 0;
          if (!starts && (step.prepend == PrependScheme::always ||
                          (step.prepend == PrependScheme::first && p.origin))) {
            text.insert(0, step.replacement);
          }
          Piece q{st.arena.size(), 0, p.origin};
          st.arena += text;
          q.end = st.arena.size();
          if (!step.split) {
            st.next.push_back(q);
            break;
          }
          m.clear();
          for (size_t at = text.find(step.replacement); at != std::string::npos;
               at = text.find(step.replacement, at + step.replacement.size()))
            m.emplace_back(at, at + step.replacement.size());
          cover(&st.ranges, m, text.size(), false);
          apply_behavior(&st.ranges, SplitBehavior::merged_with_next);
          emit(&st.next, q, st.ranges);
          break;
        }
        case PreTokenizerStep::Kind::digits: {
          Matches m;
          const std::string_view text = std::string_view(st.arena).substr(p.begin, p.end - p.begin);
          for (size_t i = 0; i < text.size();) {
            const CodePoint c = decode_at(text, i);
            if (is_numeric(c.cp)) m.emplace_back(i, i + size_t(c.len));
            i += size_t(c.len);
          }
          cover(&st.ranges, m, text.size(), false);
          apply_behavior(&st.ranges, step.individual_digits ? SplitBehavior::isolated
                                                            : SplitBehavior::contiguous);
          emit(&st.next, p, st.ranges);
          break;
        }
      }
    }
    std::swap(st.pieces, st.next);
  }
}

}  // namespace

}  // namespace kktrain::text
