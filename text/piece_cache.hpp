// A cache of BPE results for short pieces, one per encoder: a direct-mapped table of 64-byte
// entries (the piece's bytes and its ids inline), so a hit costs one cache line. A piece too
// long for an entry, or with too many ids, is not cached; a collision replaces the entry.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

namespace kktrain::text {

class PieceCache {
 public:
  static constexpr size_t kKeyBytes = 22, kIds = 7;
  explicit PieceCache(size_t entries_log2 = 16) : mask_((size_t(1) << entries_log2) - 1) {
    table_.resize(mask_ + 1);
  }
  static bool cacheable(std::string_view piece) { return piece.size() <= kKeyBytes; }
  // Appends the cached ids of `piece` to *out and returns true, or returns false.
  bool find(std::vector<int32_t>* out, std::string_view piece, uint64_t hash) const {
    const Entry& e = table_[hash & mask_];
    if (e.hash != hash || e.len != piece.size() ||
        !(words(e.key, piece.size()) == words(piece.data(), piece.size())))
      return false;
    out->insert(out->end(), e.ids, e.ids + e.n);
    return true;
  }
  void put(std::string_view piece, uint64_t hash, const int32_t* ids, size_t n) {
    if (!cacheable(piece) || n > kIds) return;
    Entry& e = table_[hash & mask_];
    e.hash = hash;
    e.len = uint8_t(piece.size());
    std::memcpy(e.key, piece.data(), piece.size());
    e.n = uint8_t(n);
    std::memcpy(e.ids, ids, n * sizeof(int32_t));
  }
  // The piece's words (below) and length folded through 64 x 64 -> 128-bit products, then mixed
  // so that the low bits (the entry) depend on every bit.
  static uint64_t hash(std::string_view s) {
    const Words w = words(s.data(), s.size());
    uint64_t h = fold(w.a ^ 0x9E3779B97F4A7C15ULL, w.b ^ 0xD6E8FEB86659FD93ULL) ^
                 fold(w.c ^ 0x8ebc6af09c88c6e3ULL, uint64_t(s.size()) ^ 0x589965cc75374cc3ULL);
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ULL;
    return h ^ (h >> 32);
  }

 private:
  // A piece of n <= kKeyBytes bytes as at most three words that together hold every byte (loads
  // that overlap when n is not a multiple of their size): pieces of the same length are equal
  // exactly when their words are.
  struct Words {
    uint64_t a, b, c;
    bool operator==(const Words& o) const { return a == o.a && b == o.b && c == o.c; }
  };
  static uint64_t load64(const char* p) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
  }
  static uint64_t load32(const char* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
  }
  static Words words(const char* p, size_t n) {
    if (n >= 8) return {load64(p), load64(p + n - 8), n > 16 ? load64(p + 8) : 0};
    if (n >= 4) return {load32(p), load32(p + n - 4), 0};
    if (n == 0) return {0, 0, 0};
    return {uint64_t(uint8_t(p[0])) | uint64_t(uint8_t(p[n / 2])) << 8 |
                uint64_t(uint8_t(p[n - 1])) << 16,
            0, 0};
  }
  static uint64_t fold(uint64_t a, uint64_t b) {
    const unsigned __int128 r = static_cast<unsigned __int128>(a) * b;
    return uint64_t(r) ^ uint64_t(r >> 64);
  }

  struct alignas(64) Entry {
    uint64_t hash = 0;
    uint8_t len = 0xFF, n = 0;  // len 0xFF: empty
    char key[kKeyBytes];
    int32_t ids[kIds];
  };
  static_assert(sizeof(Entry) == 64, "one cache line an entry");
  size_t mask_;
  std::vector<Entry> table_;
};

}  // namespace kktrain::text
