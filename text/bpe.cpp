// BPE of one pre-tokenized piece, as the Rust library's BPE::merge_word + Word::merge_all:
// each character becomes its vocabulary token, or its <0xXX> byte tokens (byte_fallback), or
// unk (a run of them one unk with fuse_unk); then the pair of lowest merge rank is merged,
// leftmost first, until no pair of adjacent symbols has a merge.
#include <queue>

#include "core/errors.hpp"
#include "text/tokenizer_impl.hpp"

namespace kktrain::text {

namespace {

struct Symbol {
  int32_t id;
  int prev, next;
  bool alive;
};

struct Candidate {
  uint32_t rank;
  int pos;
  int32_t merged;
  bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

std::string hex_cp(char32_t cp) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "U+%04X", unsigned(cp));
  return buf;
}

}  // namespace

void bpe_piece(std::vector<int32_t>* out, const Tokenizer::Impl& t, std::string_view piece) {
  std::vector<Symbol> sym;
  sym.reserve(piece.size());
  int32_t pending_unk = -1;  // a run of unknown characters not yet added (-1: none)
  auto add = [&](int32_t id) { sym.push_back({id, int(sym.size()) - 1, -1, true}); };
  for (size_t i = 0; i < piece.size();) {
    const CodePoint c = decode_at(piece, i);
    const std::string_view lookup = piece.substr(i, size_t(c.len));
    i += size_t(c.len);
    const auto it = t.vocab.find(lookup);
    if (it != t.vocab.end()) {
      if (pending_unk >= 0) add(pending_unk), pending_unk = -1;
      add(it->second);
      continue;
    }
    if (t.byte_fallback) {
      bool all = true;
      for (const char b : lookup) all = all && t.byte_ids[uint8_t(b)] >= 0;
      if (all) {
        if (pending_unk >= 0) add(pending_unk), pending_unk = -1;
        for (const char b : lookup) add(t.byte_ids[uint8_t(b)]);
        continue;
      }
    }
    if (!t.unk_id) {
      throw InputError("character " + hex_cp(c.cp) + " has no token in '" + t.path +
                       "' and the model has no unk_token");
    }
    if (pending_unk >= 0 && !t.fuse_unk) add(pending_unk);
    pending_unk = *t.unk_id;
  }
  if (pending_unk >= 0) add(pending_unk);
  const int n = int(sym.size());
  for (int k = 0; k + 1 < n; ++k) sym[size_t(k)].next = k + 1;

  if (n > 1) {
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
    auto consider = [&](int pos) {
      const int nx = sym[size_t(pos)].next;
      if (nx < 0) return;
      const uint64_t pair =
          (uint64_t(uint32_t(sym[size_t(pos)].id)) << 32) | uint32_t(sym[size_t(nx)].id);
      const auto m = t.merges.find(pair);
      if (m != t.merges.end())
        queue.push({uint32_t(m->second >> 32), pos, int32_t(uint32_t(m->second))});
    };
    for (int k = 0; k + 1 < n; ++k) consider(k);
    while (!queue.empty()) {
      const Candidate c = queue.top();
      queue.pop();
      Symbol& s = sym[size_t(c.pos)];
      if (!s.alive || s.next < 0) continue;
      Symbol& r = sym[size_t(s.next)];
      const uint64_t pair = (uint64_t(uint32_t(s.id)) << 32) | uint32_t(r.id);
      const auto m = t.merges.find(pair);
      if (m == t.merges.end() || int32_t(uint32_t(m->second)) != c.merged ||
          uint32_t(m->second >> 32) != c.rank)
        continue;  // stale: one side changed since it was queued
      s.id = c.merged;
      r.alive = false;
      s.next = r.next;
      if (r.next >= 0) sym[size_t(r.next)].prev = c.pos;
      if (s.prev >= 0) consider(s.prev);
      consider(c.pos);
    }
  }
  for (int k = 0; k < n; k = sym[size_t(k)].next) {
    out->push_back(sym[size_t(k)].id);
    if (sym[size_t(k)].next < 0) break;
  }
}

size_t bpe_token_ends(const Tokenizer::Impl& t, std::string_view piece, const int32_t* ids,
                      size_t n, std::vector<size_t>* ends) {
  if (n == 0 || piece.empty()) return 0;
  if (t.ignore_merges && t.vocab.count(piece)) {  // the piece is one token (compute_piece)
    ends->push_back(piece.size());
    return 1;
  }
  // bpe_piece's first symbols: (bytes of the token's string, where it ends in the piece).
  std::vector<std::pair<size_t, size_t>> sym;
  bool unk_pending = false;  // the last symbol is an unk that a fused run may extend
  const size_t unk_len = t.unk_id ? t.id_to_token[size_t(*t.unk_id)].size() : 0;
  for (size_t i = 0; i < piece.size();) {
    const CodePoint c = decode_at(piece, i);
    const std::string_view lookup = piece.substr(i, size_t(c.len));
    i += size_t(c.len);
    if (t.vocab.count(lookup)) {
      sym.emplace_back(lookup.size(), i);
      unk_pending = false;
      continue;
    }
    if (t.byte_fallback) {
      bool all = true;
      for (const char b : lookup) all = all && t.byte_ids[uint8_t(b)] >= 0;
      if (all) {
        for (size_t k = 0; k < lookup.size(); ++k)
          sym.emplace_back(t.id_to_token[size_t(t.byte_ids[uint8_t(lookup[k])])].size(),
                           i - lookup.size() + k + 1);
        unk_pending = false;
        continue;
      }
    }
    if (unk_pending && t.fuse_unk) {
      sym.back().second = i;
    } else {
      sym.emplace_back(unk_len, i);
    }
    unk_pending = true;
  }
  size_t s = 0, k = 0;
  for (; k < n && s < sym.size(); ++k) {  // each id takes the symbols its string spells
    const size_t want = t.id_to_token[size_t(ids[k])].size();
    size_t got = 0;
    while (s < sym.size() && (got < want || got == 0)) got += sym[s++].first;
    ends->push_back(sym[s - 1].second);
  }
  return k;
}

namespace {
constexpr unsigned kJoinBits = 22;  // 4 Mi bits: 512 KiB
uint64_t join_hash(char32_t a, char32_t b) {
  uint64_t h = (uint64_t(a) << 21 | uint64_t(b)) * 0x9E3779B97F4A7C15ULL;
  return h >> (64 - kJoinBits);
}
bool has_bit(const std::vector<uint64_t>& bits, uint64_t i) {
  return (bits[i >> 6] >> (i & 63)) & 1;
}
void set_bit(std::vector<uint64_t>* bits, uint64_t i) {
  (*bits)[i >> 6] |= uint64_t(1) << (i & 63);
}
}  // namespace

void build_boundaries(Tokenizer::Impl* t) {
  t->single_char_bits.clear();
  t->merge_join_bits.clear();
  if (t->ignore_merges) return;
  t->single_char_bits.assign((0x110000 + 63) / 64, 0);
  t->merge_join_bits.assign((size_t(1) << kJoinBits) / 64, 0);
  for (const auto& [tok, id] : t->vocab) {
    if (!tok.empty() && size_t(utf8_len(uint8_t(tok[0]))) == tok.size())
      set_bit(&t->single_char_bits, decode_at(tok, 0).cp);
  }
  for (const auto& [pair, rank_id] : t->merges) {
    const std::string_view a = t->id_to_token[size_t(pair >> 32)];
    const std::string_view b = t->id_to_token[size_t(uint32_t(pair))];
    const size_t k = char_start(a, a.size() - 1);
    set_bit(&t->merge_join_bits, join_hash(decode_at(a, k).cp, decode_at(b, 0).cp));
  }
}

bool bpe_boundary(const Tokenizer::Impl& t, char32_t a, char32_t b) {
  return !t.merge_join_bits.empty() && has_bit(t.single_char_bits, a) &&
         has_bit(t.single_char_bits, b) && !has_bit(t.merge_join_bits, join_hash(a, b));
}

}  // namespace kktrain::text
