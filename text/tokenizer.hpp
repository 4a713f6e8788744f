// Hugging Face tokenizers (`tokenizer.json`, with `tokenizer_config.json` beside it) in C++: the
// same ids as the `tokenizers` library's `encode(text, add_special_tokens)` and its `decode`.
//
// Supported (anything else is one InputError naming the key and the file, never a fallback):
//   model           BPE: vocab, merges ("a b" strings or [a, b] pairs), ignore_merges,
//                   byte_fallback (<0xXX> tokens), unk_token, fuse_unk, dropout null or 0;
//                   continuing_subword_prefix and end_of_word_suffix null
//   normalizer      null, NFC, NFKC, NFD, NFKD, Prepend, Replace, Strip, Sequence
//   pre_tokenizer   null, ByteLevel (add_prefix_space, use_regex), Split (Regex or String;
//                   Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous; invert),
//                   Metaspace (replacement, prepend_scheme always/first/never, split), Digits,
//                   Sequence
//   post_processor  null, TemplateProcessing (single), ByteLevel, Sequence
//   decoder         null, ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, Sequence
//   added_tokens    split out of the raw text first (leftmost-longest; lstrip, rstrip,
//                   single_word; `normalized` ones are matched in the normalized text)
// Each normalizer, pre-tokenizer, decoder and post-processor is one small type (its load, its
// run: text/normalizers.hpp, pre_tokenizers.hpp, decoders.hpp, post_processors.hpp); the
// normalizers and pre-tokenizers carry where each byte came from (alignments) for
// encode_with_offsets.
// Regular expressions run on PCRE2 in UTF + UCP mode; normalization forms come from utf8proc.
//
// A Tokenizer is immutable once loaded and shared between threads; each thread encodes through
// its own Encoder (regex match data and a cache of pieces already split by BPE).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "text/tokenizer_files.hpp"

namespace kktrain::text {

// Whether encode adds the post-processor's special tokens (BOS of TemplateProcessing):
// Hugging Face's `add_special_tokens`.
enum class SpecialTokens { add, none };
// Whether decode leaves special tokens (added tokens marked `special`) out of the text.
enum class SkipSpecial { no, yes };

// What tokenizer_config.json says (all optional; an absent file leaves everything empty).
struct TokenizerConfig {
  std::string path;  // the file read, or empty
  // Special tokens by name as the file gives them (`bos_token`, `eos_token`, `unk_token`,
  // `pad_token`, ...; a token given as an object {"content": ...} is its content).
  std::map<std::string, std::string> special_tokens;
  std::optional<bool> add_bos_token, add_eos_token;
  std::string chat_template;  // `chat_template` (a string; a named list takes "default"), or ""
};

class Tokenizer {
 public:
  // Loads `path`: a tokenizer.json file, or a directory holding tokenizer.json (and optionally
  // tokenizer_config.json). InputError naming the file and the key for anything missing,
  // malformed or unsupported.
  static std::shared_ptr<const Tokenizer> load(const std::string& path);
  // Loads the files locate_tokenizer found (the same errors, naming `files.given`).
  static std::shared_ptr<const Tokenizer> load(const TokenizerFiles& files);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  const std::string& path() const;      // the tokenizer.json read
  const TokenizerFiles& files() const;  // its files (tokenizer_config.json, chat_template.jinja)
  const TokenizerConfig& config() const;
  // Largest id (model vocabulary or added token) + 1.
  int64_t vocab_size() const;
  // The id of a token string (model vocabulary or added token), if any.
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The token string of an id ("" for an id no token has).
  std::string_view id_to_token(int32_t id) const;
  bool is_special(int32_t id) const;
  // The id of tokenizer_config.json's `eos_token` / `bos_token`, if it names a token.
  std::optional<int32_t> eos_id() const;
  std::optional<int32_t> bos_id() const;

  // The text of ids through the decoder, as Hugging Face's decode(ids, skip_special_tokens)
  // without clean_up_tokenization_spaces; invalid UTF-8 the decoder produces becomes U+FFFD.
  // InputError for an id outside [0, vocab_size()).
  std::string decode(const int32_t* ids, int64_t n, SkipSpecial skip = SkipSpecial::no) const;
  std::string decode(const std::vector<int32_t>& ids, SkipSpecial skip = SkipSpecial::no) const {
    return decode(ids.data(), int64_t(ids.size()), skip);
  }

  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  Tokenizer();
  std::unique_ptr<Impl> impl_;
};

// Bytes [begin, end) of a text.
struct ByteRange {
  size_t begin = 0, end = 0;
};

// One thread's encoder (not shared between threads).
class Encoder {
 public:
  explicit Encoder(std::shared_ptr<const Tokenizer> tokenizer);
  ~Encoder();
  Encoder(Encoder&&) noexcept;
  Encoder& operator=(Encoder&&) noexcept;

  // Appends to *out the ids of `text`, as Hugging Face's encode(text, add_special_tokens).
  // `text` must be valid UTF-8: InputError giving the byte offset otherwise (see
  // first_invalid_utf8 to check a file first and name it).
  void encode(std::vector<int32_t>* out, std::string_view text, SpecialTokens special);
  std::vector<int32_t> encode(std::string_view text, SpecialTokens special) {
    std::vector<int32_t> ids;
    encode(&ids, text, special);
    return ids;
  }
  // As encode (the same ids), also appending to *offsets (kept as long as *out) the bytes
  // [begin, end) of `text` each id came from, carried through the normalizer and the
  // pre-tokenizer as the Rust library's alignments (its encode(...).offsets, in bytes): an added
  // token its match (with the whitespace lstrip/rstrip took), a model token the original bytes of
  // the piece bytes its BPE symbols cover (a byte-fallback token its one byte, an unk its
  // characters). Where no normalizer changes the text, the ranges of one stretch between added
  // tokens lie end to end. What a normalizer replaced has the range of the replaced text (Replace:
  // the match's last character; NFC / NFKC: the whole run of characters it composed or
  // decomposed), what it removed (Strip) belongs to no token, and what Prepend, Metaspace or a
  // ByteLevel prefix space put in front covers no byte (an empty range where it stands); begins
  // and ends never decrease. The post-processor's special tokens cover none ([0, 0) before,
  // [n, n) after).
  void encode_with_offsets(std::vector<int32_t>* out, std::vector<ByteRange>* offsets,
                           std::string_view text, SpecialTokens special);
  const Tokenizer& tokenizer() const { return *tokenizer_; }

  // Encodes the pieces of a long text on `threads` threads (this one and threads - 1 more, each
  // with its own caches): a segment whose pieces hold at least `min_bytes` bytes is cut into
  // `threads` parts of about equal size, at piece boundaries or inside a long piece where BPE
  // cannot merge across, and the parts' ids are joined in order, so the ids are the same for
  // any thread count. Splitting into pieces stays on the calling thread.
  void set_piece_threads(int threads, size_t min_bytes = size_t(1) << 20);

  struct State;  // private to text/

 private:
  void encode_impl(std::vector<int32_t>* out, std::vector<ByteRange>* offsets,
                   std::string_view text, SpecialTokens special);
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::unique_ptr<State> state_;
};

// Text as ids arrive (generation): push returns the text that is complete so far and not yet
// returned; a character whose bytes are still arriving is held until it is complete.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer) : tok_(tokenizer) {}
  std::string push(int32_t id);
  std::string finish();  // whatever is held, U+FFFD for an incomplete character

 private:
  const Tokenizer& tok_;
  std::vector<int32_t> ids_;
  size_t emitted_ = 0;  // bytes of decode(ids_) already returned
};

// The byte offset of the first byte of `s` that does not belong to a well-formed UTF-8
// sequence (overlong forms, surrogates and code points past U+10FFFF are ill-formed), or -1.
int64_t first_invalid_utf8(std::string_view s);

}  // namespace kktrain::text
