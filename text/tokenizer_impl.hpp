// The inside of a loaded Tokenizer: the pipeline of tokenizer.json as flat lists of components
// (one small type each: text/normalizers.hpp, pre_tokenizers.hpp, decoders.hpp,
// post_processors.hpp; Sequences are flattened when loaded), the BPE tables and the added
// tokens. Private to text/.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "text/decoders.hpp"
#include "text/normalizers.hpp"
#include "text/post_processors.hpp"
#include "text/pre_tokenizers.hpp"
#include "text/regex.hpp"
#include "text/tokenizer.hpp"
#include "text/unicode.hpp"

namespace kktrain::text {

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false, lstrip = false, rstrip = false, single_word = false, normalized = false;
  std::string match;  // what is searched for: content, or its normalized form when `normalized`
};

struct Tokenizer::Impl {
  TokenizerFiles files;
  std::string path;  // files.json
  TokenizerConfig config;

  // Strings (vocabulary and added tokens) live in `arena`; maps hold views into it.
  std::deque<std::string> arena;
  std::unordered_map<std::string_view, int32_t> vocab;  // the model's vocabulary
  std::vector<std::string_view> id_to_token;            // model and added tokens by id
  std::vector<uint8_t> special;                         // by id: 1 for special added tokens
  // Merges: (left id << 32 | right id) -> (rank << 32 | merged id).
  std::unordered_map<uint64_t, uint64_t> merges;
  bool ignore_merges = false, byte_fallback = false, fuse_unk = false;
  std::optional<int32_t> unk_id;
  std::array<int32_t, 256> byte_ids{};  // <0xXX> token ids (byte_fallback), -1 if absent
  // By id: 1 when the token's string is the text it covers (0 for byte-fallback and unk tokens):
  // such tokens of a piece lie end to end over it (encode_with_offsets).
  std::vector<uint8_t> spells;

  // Where a long piece may be cut without changing its BPE (see bpe_boundary): code points
  // that are tokens by themselves, and a bit per hashed (last code point of a merge's left
  // side, first code point of its right side). Empty when pieces are not cut (ignore_merges).
  std::vector<uint64_t> single_char_bits, merge_join_bits;

  std::vector<std::unique_ptr<Normalizer>> normalizers;
  std::vector<std::unique_ptr<PreTokenizer>> pre_tokenizers;
  // The last pre-tokenizer is ByteLevel: its pieces stay raw bytes in the arena and are mapped to
  // the byte-level alphabet only when BPE'd (a cache miss).
  bool lazy_byte_level = false;
  std::vector<std::unique_ptr<Decoder>> decoders;
  bool has_decoder = false;
  std::vector<std::unique_ptr<PostProcessor>> post_processors;
  // What the post-processors put before and after the sequence (gathered when loaded).
  std::vector<int32_t> prefix_ids, suffix_ids;

  std::vector<AddedToken> added;  // sorted by id
  // Added tokens matched in the raw text / in the normalized text (indices into `added`).
  std::vector<int> raw_tokens, normalized_tokens;
  // A byte trie per group: node 0 is the root; edges[(node << 8) | byte] = child node;
  // token[node] = index in `added` of the token ending there, or -1.
  struct Trie {
    std::unordered_map<uint64_t, int32_t> edges;
    std::vector<int32_t> token{-1};
    std::array<bool, 256> first{};  // bytes that begin some token
    int first_bytes = 0;            // how many bytes do
    char one_first = 0;             // the byte, when first_bytes is 1 (found by memchr)
    bool empty() const { return token.size() == 1; }
  };
  Trie raw_trie, normalized_trie;
  Regexes regexes;  // every Regex, by matcher index

  int64_t vocab_size = 0;
};

// Loads files.json (and files.config) into *impl.
void load_tokenizer(Tokenizer::Impl* impl, const TokenizerFiles& files);
// Runs the normalizers over *s.
void normalize_text(const Tokenizer::Impl& t, NormalizedString* s,
                    std::vector<RegexMatcher>& matchers);
// BPE of one piece (its characters in the vocabulary's alphabet), ids appended (bpe.cpp).
void bpe_piece(std::vector<int32_t>* out, const Tokenizer::Impl& t, std::string_view piece);
// Whether BPE can never merge across the boundary between code points a and b: both are
// tokens by themselves and no merge joins a left side ending in a to a right side starting
// with b. BPE of a piece cut at such boundaries equals BPE of the whole piece (no merge crosses
// a cut, and the merges on either side happen in the same order relative to each other).
bool bpe_boundary(const Tokenizer::Impl& t, char32_t a, char32_t b);
void build_boundaries(Tokenizer::Impl* t);
// Where each of the ids of `piece` ends in it: the ids BPE gave it (a prefix of ids[0, n); the
// piece's characters in the vocabulary's alphabet) are matched to the symbols bpe_piece starts
// from (a character, a byte of byte fallback, an unknown character or a fused run of them), each
// token taking as many as its string spells. Appends one end (a byte offset in `piece`) per id
// and returns how many ids the piece has.
size_t bpe_token_ends(const Tokenizer::Impl& t, std::string_view piece, const int32_t* ids,
                      size_t n, std::vector<size_t>* ends);

}  // namespace kktrain::text
