// The encode pipeline, as the Rust `tokenizers` library runs it for one sequence:
//   1. split out added tokens matched in the raw text (leftmost-longest; lstrip, rstrip,
//      single_word), 2. normalize each other segment, 3. split out added tokens matched in the
//   normalized text, 4. pre-tokenize each remaining segment into pieces, 5. BPE each piece,
//   6. the post-processor's special tokens around the sequence.
// With offsets, steps 2 and 4 also carry each byte's range of the original text (the components'
// alignments) and each token gets the range of the piece bytes its BPE symbols cover.
// (Encoder; the Tokenizer itself is text/tokenizer.cpp; the components text/normalizers.hpp and
// text/pre_tokenizers.hpp.)
#include <algorithm>
#include <cstring>
#include <deque>
#include <queue>

#include "core/errors.hpp"
#include "core/fan_out.hpp"
#include "text/piece_cache.hpp"
#include "text/tokenizer_impl.hpp"

namespace kktrain::text {

void normalize_text(const Tokenizer::Impl& t, NormalizedString* s,
                    std::vector<RegexMatcher>& matchers) {
  for (const auto& n : t.normalizers) n->run(s, matchers);
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
  PreTokenizedString pt;     // the segment being pre-tokenized, and what steps made of it
  std::string mapped;        // a piece in the byte-level alphabet (lazy_byte_level)
  std::vector<size_t> ends;  // piece_offsets' scratch
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
  // When every token begins with the same byte, memchr finds where one may begin.
  const bool one_first = trie.first_bytes == 1;
  const char first = trie.one_first;
  size_t start = 0, i = 0;
  while (i < s.size()) {
    if (!trie.first[uint8_t(s[i])]) {  // on to the next byte that may begin a token
      if (one_first) {
        const void* f = std::memchr(s.data() + i, first, s.size() - i);
        i = f ? size_t(static_cast<const char*>(f) - s.data()) : s.size();
      } else {
        do ++i;
        while (i < s.size() && !trie.first[uint8_t(s[i])]);
      }
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
    if (best < 0 || is_continuation(uint8_t(s[i]))) {
      ++i;
      continue;
    }
    const AddedToken& a = t.added[size_t(best)];
    size_t b = i, e = best_end;
    if (a.single_word) {
      bool word_before = false, word_after = false;
      if (b > 0) {
        const size_t k = char_start(s, b - 1);
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
        const size_t k = char_start(s, b - 1, start);
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

constexpr size_t kLongPieceBytes = 256;  // longer pieces are not cached
constexpr size_t kLongPieces = size_t(1) << 15;

void map_bytes(std::string* out, std::string_view raw) {
  out->clear();
  for (const char c : raw) *out += byte_to_unicode(uint8_t(c));
}

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
  for (const Piece& p : st.pt.pieces) {
    std::string_view v = st.pt.view(p);
    while (v.size() > target && !t.merge_join_bits.empty() && !lazy) {
      size_t i = next_char_start(v, target);  // the first boundary at or after `target`
      const size_t k = char_start(v, i - 1);
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

// model_piece over st.pt.pieces, appended in order; on the helpers' threads too for a long segment.
void model_pieces(std::vector<int32_t>* out, const Tokenizer::Impl& t, Encoder::State& st,
                  bool lazy) {
  size_t total = 0;
  for (const Piece& p : st.pt.pieces) total += p.end - p.begin;
  if (st.helpers.empty() || total < st.parallel_bytes) {
    for (const Piece& p : st.pt.pieces) {
      if (p.end > p.begin) model_piece(out, t, st, st.pt.view(p), lazy);
    }
    return;
  }
  const auto parts = piece_parts(t, st, lazy, total, st.helpers.size() + 1);
  std::vector<std::vector<int32_t>> ids(parts.size());
  // Worker w encodes with its own state (this thread's for w = 0, a helper's otherwise): the
  // caches are per thread, the ids of a part the same whichever state encodes it.
  fan_out(parts.size(), int(parts.size()), [&](int w, size_t k) {
    Encoder::State& s = w == 0 ? st : *st.helpers[size_t(w) - 1];
    for (const std::string_view u : parts[k]) model_piece(&ids[k], t, s, u, lazy);
  });
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

// Where each of the ids of a piece of `size` bytes ends in it when they all spell their text
// (no byte-fallback or unk token): their strings laid end to end (with lazy, one piece byte a
// character of the byte-level alphabet). Appends the ends and returns how many ids, or 0 (and
// appends nothing) when some id does not spell its text or they do not end at the piece's end.
size_t spelled_ends(const Tokenizer::Impl& t, size_t size, bool lazy, const int32_t* ids, size_t n,
                    std::vector<size_t>* ends) {
  const size_t before = ends->size();
  size_t end = 0, k = 0;
  for (; k < n && end < size; ++k) {
    if (!t.spells[size_t(ids[k])]) break;
    const std::string_view s = t.id_to_token[size_t(ids[k])];
    if (lazy) {
      for (const char c : s) end += (uint8_t(c) & 0xC0) != 0x80;
    } else {
      end += s.size();
    }
    ends->push_back(end);
  }
  if (end == size) return k;
  ends->resize(before);
  return 0;
}

// The bytes of the original text that the ids of st.pt.pieces (ids from out[first]) came from,
// appended to *offsets: each token's piece bytes (spelled_ends, else bpe_token_ends) through the
// arena's alignment.
void piece_offsets(std::vector<ByteRange>* offsets, const Tokenizer::Impl& t, Encoder::State& st,
                   bool lazy, const std::vector<int32_t>& out, size_t first) {
  const std::vector<ByteRange>& align = st.pt.align;
  size_t k = first;
  for (const Piece& p : st.pt.pieces) {
    if (p.end == p.begin) continue;
    const std::string_view piece = st.pt.view(p);
    st.ends.clear();
    size_t used = spelled_ends(t, piece.size(), lazy, out.data() + k, out.size() - k, &st.ends);
    if (used == 0) {
      if (lazy) map_bytes(&st.mapped, piece);
      const std::string_view text = lazy ? std::string_view(st.mapped) : piece;
      used = bpe_token_ends(t, text, out.data() + k, out.size() - k, &st.ends);
      size_t raw = 0, mapped = 0;  // with lazy: one piece byte a character of the alphabet
      for (size_t& e : st.ends) {
        if (!lazy) break;
        while (mapped < e) mapped += size_t(utf8_len(uint8_t(text[mapped]))), ++raw;
        e = raw;
      }
    }
    k += used;
    size_t prev = 0;
    for (const size_t e : st.ends) {
      const ByteRange* a = align.data() + p.begin + prev;
      const size_t at = p.begin + prev < p.end ? a->begin : a[-1].end;  // a token of no byte
      offsets->push_back(e > prev ? covering(a, e - prev) : ByteRange{at, at});
      prev = e;
    }
  }
}

// Appends the ids of `seg`, a stretch of raw text between added tokens that starts at byte `at`
// of the text (`origin`: at 0), and with offsets, the bytes each came from.
void encode_text_segment(std::vector<int32_t>* out, std::vector<ByteRange>* offsets,
                         const Tokenizer::Impl& t, Encoder::State& st, std::string_view seg,
                         size_t at, bool lazy, std::vector<Segment>* norm) {
  const bool track = offsets != nullptr;
  const bool copy = track || !t.normalizers.empty();
  NormalizedString n(copy ? seg : std::string_view(), at,
                     track ? Alignment::tracked : Alignment::untracked);
  if (copy) {
    normalize_text(t, &n, st.matchers);
    seg = n.text;
  }
  if (seg.empty()) return;
  split_added(norm, t, t.normalized_trie, seg);
  st.pt.tracked = track;
  for (const Segment& s : *norm) {
    if (s.token >= 0) {
      out->push_back(t.added[size_t(s.token)].id);
      if (track) offsets->push_back(covering(n.align.data() + s.begin, s.end - s.begin));
      continue;
    }
    st.pt.reset(seg.substr(s.begin, s.end - s.begin), track ? n.align.data() + s.begin : nullptr,
                at == 0 && s.begin == 0);
    pre_tokenize(t.pre_tokenizers, &st.pt, st.matchers);
    const size_t first = out->size();
    model_pieces(out, t, st, lazy);
    if (track) piece_offsets(offsets, t, st, lazy, *out, first);
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
  const bool lazy = t.lazy_byte_level;
  std::vector<Segment> raw, norm;
  split_added(&raw, t, t.raw_trie, text);
  for (const Segment& r : raw) {
    if (r.token >= 0) {
      out->push_back(t.added[size_t(r.token)].id);
      if (offsets) offsets->push_back({r.begin, r.end});
      continue;
    }
    encode_text_segment(out, offsets, t, st, text.substr(r.begin, r.end - r.begin), r.begin, lazy,
                        &norm);
  }
  if (special == SpecialTokens::add)
    out->insert(out->end(), t.suffix_ids.begin(), t.suffix_ids.end());
  if (offsets) offsets->resize(out->size(), ByteRange{text.size(), text.size()});
}

}  // namespace kktrain::text
