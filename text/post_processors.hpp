// The post-processors of tokenizer.json, one type each (as huggingface/tokenizers'
// processors/*.rs): TemplateProcessing (its single template) and ByteLevel (offsets only: the ids
// are unchanged); a Sequence is flattened into its steps when loaded. Each reads its step
// (from_json: InputError naming the key and the file) and gives the special tokens it puts
// around a sequence. Private to text/.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "text/tokenizer_json.hpp"

namespace kktrain::text {

// An id a post-processor adds, as the file writes it and where: the loader checks that it is a
// token once every token is known.
struct EmittedId {
  int64_t id;  // -1 for any value outside int64
  std::string text;
  Where where;
};

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Appends the ids it puts before and after a sequence.
  virtual void special_ids(std::vector<int32_t>* prefix, std::vector<int32_t>* suffix) const = 0;
  // The step of type `type` at w (not a Sequence), or nullptr when kktrain does not read it;
  // the ids it emits are appended to *emitted.
  static std::unique_ptr<PostProcessor> from_json(const std::string& type, const Json& j,
                                                  const Where& w, std::vector<EmittedId>* emitted);
  static constexpr const char* kSupported = "TemplateProcessing, ByteLevel, Sequence";
};

// TemplateProcessing: the single template's special tokens before and after sequence A.
class TemplateProcessing final : public PostProcessor {
 public:
  static std::unique_ptr<TemplateProcessing> from_json(const Json& j, const Where& w,
                                                       std::vector<EmittedId>* emitted);
  void special_ids(std::vector<int32_t>* prefix, std::vector<int32_t>* suffix) const override;

 private:
  std::vector<int32_t> prefix_, suffix_;
};

// ByteLevel: adjusts offsets in the Rust library (trim_offsets); no ids.
class ByteLevelProcessor final : public PostProcessor {
 public:
  void special_ids(std::vector<int32_t>*, std::vector<int32_t>*) const override {}
};

}  // namespace kktrain::text
