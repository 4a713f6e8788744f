// kktrain's byte-level vocabulary as a Hugging Face tokenizer (io/byte_tokenizer.hpp).
#include "io/byte_tokenizer.hpp"

#include <nlohmann/json.hpp>

namespace kktrain {

namespace {

bool maps_to_itself(unsigned b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  } else {  // bytes_to_unicode stays below U+0144
    s += char(0xE0 | (cp >> 12));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

// ByteLevel without a prefix space or the GPT-2 regex (a pre-tokenizer or a decoder).
nlohmann::ordered_json byte_level() {
  nlohmann::ordered_json j;
  j["type"] = "ByteLevel";
  j["add_prefix_space"] = false;
  j["trim_offsets"] = false;
  j["use_regex"] = false;
  return j;
}

}  // namespace

std::string byte_level_char(unsigned char b) {
  if (maps_to_itself(b)) return utf8(b);
  uint32_t rank = 0;  // bytes below b that do not map to themselves
  for (unsigned k = 0; k < b; ++k) rank += maps_to_itself(k) ? 0 : 1;
  return utf8(0x100 + rank);
}

std::string byte_tokenizer_json() {
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level_char(static_cast<unsigned char>(b))] = b;
  nlohmann::ordered_json model;
  model["type"] = "BPE";
  model["dropout"] = nullptr;
  model["unk_token"] = nullptr;
  model["continuing_subword_prefix"] = nullptr;
  model["end_of_word_suffix"] = nullptr;
  model["fuse_unk"] = false;
  model["byte_fallback"] = false;
  model["ignore_merges"] = false;
  model["vocab"] = vocab;
  model["merges"] = nlohmann::ordered_json::array();
  nlohmann::ordered_json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = nlohmann::ordered_json::array();
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = byte_level();
  j["post_processor"] = nullptr;
  j["decoder"] = byte_level();
  j["model"] = model;
  return j.dump(2) + "\n";
}

std::string byte_tokenizer_config_json(int64_t model_max_length) {
  nlohmann::ordered_json j;
  j["tokenizer_class"] = "PreTrainedTokenizerFast";
  j["model_max_length"] = model_max_length;
  j["add_bos_token"] = false;
  j["add_eos_token"] = false;
  j["clean_up_tokenization_spaces"] = false;
  j["added_tokens_decoder"] = nlohmann::ordered_json::object();
  return j.dump(2) + "\n";
}

}  // namespace kktrain
