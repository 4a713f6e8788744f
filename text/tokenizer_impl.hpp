// The inside of a loaded Tokenizer: the pipeline of tokenizer.json as flat lists of steps
// (Sequences are flattened when loaded), the BPE tables and the added tokens. Private to text/.
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

#include "text/regex.hpp"
#include "text/tokenizer.hpp"
#include "text/unicode.hpp"

namespace kktrain::text {

// A Split / Replace pattern: a literal string or a regular expression.
struct Pattern {
  std::string literal;           // when !regex
  std::unique_ptr<Regex> regex;  // when set
  int matcher = -1;              // index of the encoder's RegexMatcher for `regex`
};

struct NormalizerStep {
  enum class Kind { unicode, prepend, replace, strip } kind;
  NormalForm form = NormalForm::nfc;  // unicode
  std::string text;                   // prepend: what; replace: content
  Pattern pattern;                    // replace
  bool left = false, right = false;   // strip
};

enum class SplitBehavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };
enum class PrependScheme { always, first, never };

struct PreTokenizerStep {
  enum class Kind { byte_level, split, metaspace, digits } kind;
  bool add_prefix_space = false, use_regex = true;  // byte_level
  Pattern pattern;                                  // split (byte_level with use_regex: GPT-2's)
  SplitBehavior behavior = SplitBehavior::isolated;
  bool invert = false;
  std::string replacement;  // metaspace (one character, UTF-8)
  PrependScheme prepend = PrependScheme::always;
  bool split = true;               // metaspace
  bool individual_digits = false;  // digits
};

struct DecoderStep {
  enum class Kind { byte_level, metaspace, byte_fallback, fuse, strip, replace } kind;
  std::string replacement;  // metaspace
  PrependScheme prepend = PrependScheme::always;
  char32_t strip_char = U' ';
  int strip_start = 0, strip_stop = 0;
  Pattern pattern;  // replace
  std::string content;
};

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

  // Where a long piece may be cut without changing its BPE (see bpe_boundary): code points
  // that are tokens by themselves, and a bit per hashed (last code point of a merge's left
  // side, first code point of its right side). Empty when pieces are not cut (ignore_merges).
  std::vector<uint64_t> single_char_bits, merge_join_bits;

  std::vector<NormalizerStep> normalizers;
  std::vector<PreTokenizerStep> pre_tokenizers;
  std::vector<DecoderStep> decoders;
  bool has_decoder = false;
  // TemplateProcessing's single template: ids before and after the sequence.
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
    bool empty() const { return token.size() == 1; }
  };
  Trie raw_trie, normalized_trie;
  std::vector<const Regex*> regexes;  // every Regex, by matcher index

  int64_t vocab_size = 0;
};

// Loads files.json (and files.config) into *impl.
void load_tokenizer(Tokenizer::Impl* impl, const TokenizerFiles& files);
// Applies the normalizer steps to s.
std::string apply_normalizers(const Tokenizer::Impl& t, std::string s,
                              std::vector<RegexMatcher>& matchers);
// BPE of one piece (its characters in the vocabulary's alphabet), ids appended (bpe.cpp).
void bpe_piece(std::vector<int32_t>* out, const Tokenizer::Impl& t, std::string_view piece);
// Whether BPE can never merge across the boundary between code points a and b: both are
// tokens by themselves and no merge joins a left side ending in a to a right side starting
// with b. BPE of a piece cut at such boundaries equals BPE of the whole piece (no merge crosses
// a cut, and the merges on either side happen in the same order relative to each other).
bool bpe_boundary(const Tokenizer::Impl& t, char32_t a, char32_t b);
void build_boundaries(Tokenizer::Impl* t);
// The bytes token `id` stands for in the text it was encoded from: an added token its content, a
// byte-fallback token <0xXX> its byte, any other the decoder steps that map one token alone
// (ByteLevel, Metaspace's replacement as a space, Replace; not Fuse, Strip or the UTF-8 repair).
std::string token_source_bytes(const Tokenizer::Impl& t, int32_t id,
                               std::vector<RegexMatcher>& matchers);
// The byte ranges of ids [first, out.size()), the ids of `seg` (which starts at byte `at` of the
// text), appended to *offsets: each id's bytes (token_source_bytes) laid end to end from the
// segment's start. A leading space that is not in `seg` (a prefix space the pre-tokenizer or
// Metaspace added) is given to no byte. InputError when the ids' bytes do not spell `seg` (a
// normalizer changed the text): the ids cannot be mapped back to the text's bytes.
void segment_offsets(std::vector<ByteRange>* offsets, const Tokenizer::Impl& t,
                     std::vector<RegexMatcher>& matchers, const std::vector<int32_t>& out,
                     size_t first, std::string_view seg, size_t at);
// Decoder steps over token strings (in place), as the Rust library's decode_chain.
void apply_decoders(const Tokenizer::Impl& t, std::vector<std::string>* tokens);

}  // namespace kktrain::text
