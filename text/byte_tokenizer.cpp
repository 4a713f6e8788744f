// kktrain's byte-level vocabulary as a Hugging Face tokenizer (text/byte_tokenizer.hpp).
#include "text/byte_tokenizer.hpp"

#include <nlohmann/json.hpp>

#include "text/unicode.hpp"

namespace kktrain {

namespace {

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

std::string byte_tokenizer_json() {
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  for (int b = 0; b < 256; ++b) vocab[text::byte_to_unicode(static_cast<unsigned char>(b))] = b;
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
