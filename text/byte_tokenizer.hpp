// kktrain's byte-level vocabulary (token id = byte value, io/data.hpp byte_tokenize) described as
// a Hugging Face tokenizer, so that a safetensors export of a byte-level model is self-describing:
//
//   tokenizer.json         model BPE whose vocab maps the 256 ByteLevel characters (GPT-2's
//                          bytes_to_unicode) to ids = byte values, no merges; pre_tokenizer
//                          ByteLevel {add_prefix_space false, trim_offsets false, use_regex
//                          false}; decoder ByteLevel; no normalizer, post-processor or added
//                          tokens. Encoding text gives its UTF-8 bytes as ids; decoding gives the
//                          text back.
//   tokenizer_config.json  PreTrainedTokenizerFast, no BOS/EOS added, model_max_length.
//
// Ids 256 and up of a model with a larger vocabulary are unused: the tokenizer has no token for
// them (docs/huggingface.md).
#pragma once

#include <cstdint>
#include <string>

namespace kktrain {

// tokenizer.json of kktrain's byte-level vocabulary (the same text every time).
std::string byte_tokenizer_json();
// tokenizer_config.json beside it; model_max_length is the model's max_seq_len.
std::string byte_tokenizer_config_json(int64_t model_max_length);

}  // namespace kktrain
