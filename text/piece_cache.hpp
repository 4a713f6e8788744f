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
    if (e.hash != hash || e.len != piece.size() || std::memcmp(e.key, piece.data(), piece.size()))
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
  // FNV-1a over the bytes, then a final mix (pieces are short).
  static uint64_t hash(std::string_view s) {
    uint64_t h = 1469598103934665603ULL;
    for (const char c : s) h = (h ^ uint8_t(c)) * 1099511628211ULL;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ULL;
    return h ^ (h >> 32);
  }

 private:
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
