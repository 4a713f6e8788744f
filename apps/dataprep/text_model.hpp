// How a model reads and writes text (docs/huggingface.md, "Text and tokenizers"): through its
// tokenizer, or as kktrain's byte-level vocabulary (token id = byte value), or not at all.
//
// The tokenizer of a model is, in order: model.tokenizer (or generate's --tokenizer); the
// tokenizer.json of model.init_from when that is a Hugging Face directory; for a model file
// given to generate or export, the same keys of the config its checkpoint records. A
// tokenizer.json that is kktrain's own byte-level one (text/byte_tokenizer.hpp, what its exports
// write) is the byte-level vocabulary.
//
// Without a tokenizer, a model is byte-level unless it comes from a Hugging Face directory
// whose vocabulary is not 256 tokens (what kktrain's byte-level exports held before they wrote
// a tokenizer.json), or it is a checkpoint whose run trained on token files (ids of some
// tokenizer kktrain does not know): text for such a model is refused, never taken as bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "apps/dataprep/text_data.hpp"
#include "core/config.hpp"
#include "io/model_export.hpp"
#include "text/tokenizer.hpp"

namespace kktrain {

struct FileAttrs;

enum class TextVocab {
  bytes,      // kktrain's byte-level vocabulary: token id = byte value
  tokenizer,  // a Hugging Face tokenizer (tokenizer.json)
  unknown,    // neither (no tokenizer, and a vocabulary that is not the byte one)
};

struct ModelText {
  TextVocab vocab = TextVocab::bytes;
  std::optional<text::TokenizerFiles> tokenizer;  // its files, found once (none: no tokenizer)
  std::string from;   // where it was found: "model.tokenizer", "model.init_from's tokenizer.json"
  std::string model;  // the model, for messages: "model.init_from 'DIR'"
  std::string why;    // TextVocab::unknown: why ("no tokenizer.json in it")
  int64_t vocab_size = 0;
};

// What the run that made a checkpoint trained on (its recorded data.path and data.format).
enum class TrainedOn { unknown, text, tokens };

// Where a model's tokenizer may be named (a training config's model section, or the config a
// checkpoint records).
struct TextSources {
  std::optional<std::string> tokenizer;  // model.tokenizer / --tokenizer
  std::string tokenizer_key;             // its name for messages ("model.tokenizer")
  std::optional<std::string> init_from;  // model.init_from, or the model file itself
  std::string model;                     // the model for messages
  int64_t vocab_size = 0;
  TrainedOn trained_on = TrainedOn::unknown;  // a checkpoint's run
};

// The text vocabulary the sources give (reads at most a tokenizer.json's size and, when it is
// as long as kktrain's byte-level one, its bytes).
ModelText model_text(const TextSources& s);
// model_text of a training config's model section, for a run whose data is `trained_on`.
ModelText model_text(const ModelConfig& m, TrainedOn trained_on);
// model_text of a model file opened by generate or export: `path` as given, `attrs` its root
// attributes (a kktrain checkpoint records its run's config), `tokenizer` an override ("": none).
ModelText model_file_text(const std::string& path, const FileAttrs& attrs, int64_t vocab_size,
                          const std::string& tokenizer);

// Loads t's tokenizer (TextVocab::tokenizer) and checks that its vocabulary fits the model's:
// InputError naming the tokenizer, both sizes and the model otherwise.
std::shared_ptr<const text::Tokenizer> load_model_tokenizer(const ModelText& t);

// The text vocabulary of a training run's model: model_text(cfg.model) for the run's data (token
// files: a model without a tokenizer is then not byte-level either), and when that is
// byte-level because model.init_from is a kktrain file, and the run reads text, that file's
// (model_file_text of its attributes: a checkpoint of a run trained from a Hugging Face
// directory, or on token files, is not byte-level).
ModelText run_text(const Config& cfg);

// Before a run reads its data (train, grads): text data (data.format text or jsonl, or auto
// picking text, and the embedded corpus) for a model of TextVocab::unknown is one InputError
// naming the data file and the model; for a model with a tokenizer (loaded and checked here, also
// whenever model.tokenizer names one) the text files it reads through it
// (apps/dataprep/text_data.hpp), after refusing the embedded corpus, a mix of text and token files
// and an extension that contradicts data.format. data.format: jsonl for a byte-level model is
// refused.
TextTokens check_text_data(const Config& cfg, const ModelText& t);

// The tokenizer files a safetensors export of model `t` holds: those beside its tokenizer.json
// (tokenizer.json, tokenizer_config.json, special_tokens_map.json, chat_template.jinja,
// tokenizer.model), or kktrain's byte-level tokenizer.json and tokenizer_config.json for a
// byte-level model of vocabulary >= 256 without one; none for TextVocab::unknown.
std::vector<ExportFile> tokenizer_export_files(const ModelText& t, int64_t max_seq_len);

// ExportOptions::extra_files for kktrain's exports: tokenizer_export_files of the checkpoint's
// model (model_file_text of its attributes).
std::function<std::vector<ExportFile>(const FileAttrs&, const ModelConfig&)> export_text_files(
    const std::string& checkpoint);
// ... of a training run's own final export: tokenizer_export_files of the run's text, found at its
// start (run_text), not looked up again from the checkpoint's recorded config.
std::function<std::vector<ExportFile>(const FileAttrs&, const ModelConfig&)> export_text_files(
    const ModelText& run);

}  // namespace kktrain
