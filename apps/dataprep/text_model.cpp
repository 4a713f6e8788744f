// How a model reads and writes text (apps/dataprep/text_model.hpp).
#include "apps/dataprep/text_model.hpp"

#include <yaml-cpp/yaml.h>

#include <filesystem>

#include "core/errors.hpp"
#include "core/files.hpp"
#include "core/log.hpp"
#include "io/data.hpp"
#include "io/h5_rows.hpp"
#include "io/hf_config.hpp"
#include "io/model_weights.hpp"
#include "io/token_file.hpp"
#include "parallel/communicator.hpp"
#include "text/byte_tokenizer.hpp"

namespace kktrain {

namespace fs = std::filesystem;

namespace {

// A tokenizer's companions an export copies from beside its tokenizer.json.
const char* const kCompanions[] = {"tokenizer_config.json", "special_tokens_map.json",
                                   "chat_template.jinja", "tokenizer.model"};

// True when `file` holds exactly kktrain's byte-level tokenizer.json.
bool is_byte_tokenizer(const std::string& file) {
  const std::string own = byte_tokenizer_json();
  std::error_code ec;
  const auto size = fs::file_size(file, ec);
  if (ec || size != own.size()) return false;
  std::string text;
  return !read_regular_file(&text, file) && text == own;
}

std::string vocabulary_text(int64_t v) {
  return "a vocabulary of " + std::to_string(v) + " tokens";
}

// data.path's files read as text (data.format text, or auto picking text), or the embedded
// corpus ("" in the list).
std::vector<std::string> text_inputs(const DataConfig& d) {
  if (d.paths.empty()) return {""};
  if (d.format == DataFormat::jsonl) return data_files(d);
  if (d.format != DataFormat::automatic && d.format != DataFormat::text) return {};
  std::vector<std::string> out;
  for (const auto& f : data_files(d)) {
    if (d.format == DataFormat::text || TokenFile(f, "auto").format() == "text") out.push_back(f);
  }
  return out;
}

std::string input_text(const std::vector<std::string>& files, const DataConfig& d) {
  if (files[0].empty()) return "the embedded default corpus (data.path unset) is byte-level text";
  std::string t = "data.path '" + files[0] + "'";
  if (files.size() > 1) t += " (and " + std::to_string(files.size() - 1) + " more)";
  return t + " is text (data.format: " + data_format_name(d.format) + ")";
}

// What a recorded config's data section trained on: text (data.format text; auto with the
// embedded corpus or a file of a text name, io/token_file.hpp) or token files.
TrainedOn recorded_data(const YAML::Node& data) {
  if (!data || !data.IsMap()) return TrainedOn::unknown;
  const std::string format =
      data["format"] && data["format"].IsScalar() ? data["format"].as<std::string>() : "auto";
  if (format != "auto") return format == "text" ? TrainedOn::text : TrainedOn::tokens;
  const YAML::Node path = data["path"];
  if (!path || path.IsNull()) return TrainedOn::text;  // the embedded corpus
  std::vector<std::string> paths;
  if (path.IsScalar()) paths.push_back(path.as<std::string>());
  if (path.IsSequence()) {
    for (const auto& p : path) {
      if (p.IsScalar()) paths.push_back(p.as<std::string>());
    }
  }
  for (const auto& p : paths) {
    const std::string ext = fs::path(p).extension().string();
    const bool ids =
        ext == ".bin" || ext == ".u16" || ext == ".uint16" || ext == ".u32" || ext == ".uint32";
    if (!ids) return TrainedOn::text;
  }
  return paths.empty() ? TrainedOn::unknown : TrainedOn::tokens;
}

// What a run's own data trains on (as recorded_data says of the config the run records): token
// files (data.format uint16, uint32, llmc; auto with only token files) or text.
TrainedOn run_data(const DataConfig& d) {
  switch (d.format) {
    case DataFormat::uint16:
    case DataFormat::uint32:
    case DataFormat::llmc:
      return TrainedOn::tokens;
    case DataFormat::automatic:
      return text_inputs(d).empty() ? TrainedOn::tokens : TrainedOn::text;
    default:
      return TrainedOn::text;
  }
}

}  // namespace

ModelText model_text(const TextSources& s) {
  ModelText t;
  t.model = s.model;
  t.vocab_size = s.vocab_size;
  const bool hf = s.init_from && is_hf_directory(*s.init_from);
  if (s.tokenizer) {
    t.tokenizer = text::locate_tokenizer(*s.tokenizer);
    t.from = s.tokenizer_key + " '" + *s.tokenizer + "'";
  } else if (hf) {
    text::TokenizerFiles f = text::locate_tokenizer(*s.init_from);
    if (f.present()) {
      t.from = "the model's tokenizer.json '" + f.json + "'";
      t.tokenizer = std::move(f);
    }
  }
  if (t.tokenizer) {
    t.vocab = is_byte_tokenizer(t.tokenizer->json) ? TextVocab::bytes : TextVocab::tokenizer;
  } else {
    t.vocab = TextVocab::bytes;
    if (hf && s.vocab_size != 256) {
      t.vocab = TextVocab::unknown;
      t.why = "no tokenizer.json in it";
    } else if (!hf && s.trained_on == TrainedOn::tokens) {
      t.vocab = TextVocab::unknown;
      t.why = "it was trained on token files, not on text";
    }
  }
  return t;
}

ModelText model_text(const ModelConfig& m, TrainedOn trained_on) {
  TextSources s;
  s.trained_on = trained_on;
  s.tokenizer = m.tokenizer;
  s.tokenizer_key = "model.tokenizer";
  s.init_from = m.init_from;
  s.model = m.init_from ? "model.init_from '" + *m.init_from + "'" : "the model";
  s.vocab_size = m.vocab_size;
  return model_text(s);
}

ModelText model_file_text(const std::string& path, const FileAttrs& attrs, int64_t vocab_size,
                          const std::string& tokenizer) {
  TextSources s;
  s.model = "'" + path + "'";
  s.vocab_size = vocab_size;
  if (!tokenizer.empty()) {
    s.tokenizer = tokenizer;
    s.tokenizer_key = "--tokenizer";
  }
  if (is_hf_directory(path)) {
    s.init_from = path;
    return model_text(s);
  }
  // A kktrain checkpoint records its run's config: its model.tokenizer and model.init_from.
  const auto it = attrs.str.find("config");
  if (it != attrs.str.end()) {
    try {
      const YAML::Node root = YAML::Load(it->second);
      s.trained_on = recorded_data(root["data"]);
      const YAML::Node model = root["model"];
      if (!s.tokenizer && model["tokenizer"] && model["tokenizer"].IsScalar()) {
        s.tokenizer = model["tokenizer"].as<std::string>();
        s.tokenizer_key = "the checkpoint's model.tokenizer";
      }
      if (model["init_from"] && model["init_from"].IsScalar()) {
        s.init_from = model["init_from"].as<std::string>();
        s.model += " (trained from '" + *s.init_from + "')";
      }
    } catch (const YAML::Exception&) {
      // A config that does not read back names no tokenizer.
    }
  }
  if (s.tokenizer && tokenizer.empty()) {
    std::error_code ec;
    if (!text::locate_tokenizer(*s.tokenizer).present()) {
      log::warn(s.model + ": its tokenizer '" + *s.tokenizer + "' is no longer there");
      s.tokenizer.reset();
    }
  }
  return model_text(s);
}

std::shared_ptr<const text::Tokenizer> load_model_tokenizer(const ModelText& t) {
  auto tok = text::Tokenizer::load(*t.tokenizer);
  if (tok->vocab_size() > t.vocab_size) {
    throw InputError(t.from + ": '" + t.tokenizer->json + "' has " +
                     vocabulary_text(tok->vocab_size()) + ", more than the vocab_size " +
                     std::to_string(t.vocab_size) + " of " + t.model +
                     " (a tokenizer of another model?)");
  }
  return tok;
}

ModelText run_text(const Config& cfg) {
  ModelText t = model_text(cfg.model, run_data(cfg.data));
  const auto& from = cfg.model.init_from;
  if (t.vocab != TextVocab::bytes || !from || cfg.model.tokenizer || is_hf_directory(*from)) {
    return t;
  }
  if (text_inputs(cfg.data).empty()) return t;  // only text asks what the file's run read
  SingleCommunicator one;
  const auto src = open_weights(*from, "model.init_from", one);
  ModelText f = model_file_text(*from, src->attributes(), cfg.model.vocab_size, "");
  f.model = "model.init_from " + f.model;
  return f;
}

TextTokens check_text_data(const Config& cfg, const ModelText& t) {
  const std::vector<std::string> text = text_inputs(cfg.data);
  if (t.vocab == TextVocab::bytes) {
    if (cfg.data.format == DataFormat::jsonl) {
      throw InputError("data.format: jsonl reads documents through the model's tokenizer, and " +
                       t.model +
                       " has none (it reads text as bytes): set model.tokenizer: PATH, or "
                       "data.format: text to train on the files' bytes");
    }
    return {};  // text is bytes, as it always was
  }
  if (t.vocab == TextVocab::tokenizer && (!text.empty() || cfg.model.tokenizer)) {
    load_model_tokenizer(t);
  }
  if (text.empty()) return {};
  const std::string input = input_text(text, cfg.data);
  if (t.vocab == TextVocab::unknown) {
    throw InputError(input + ", but " + t.model + " has " + vocabulary_text(t.vocab_size) +
                     " that is not kktrain's byte-level one and no tokenizer (" + t.why +
                     "): the text's bytes would be trained on as token ids; set model.tokenizer: "
                     "PATH (a tokenizer.json), or train on token files (kktrain tokenize)");
  }
  if (text[0].empty()) {
    throw InputError(input + ", and " + t.model + " reads text through " + t.from + " (" +
                     t.tokenizer->json +
                     "): set data.path to text (data.format: text or jsonl) or "
                     "token files");
  }
  const auto files = data_files(cfg.data);
  if (files.size() != text.size()) {
    throw InputError("data.path mixes text files and token files ('" + text[0] + "' is text); " +
                     t.model + " reads text through " + t.from +
                     ": give one kind (kktrain tokenize makes token files of text)");
  }
  for (const auto& f : files) {
    const bool jsonl = fs::path(f).extension() == ".jsonl";
    if (cfg.data.format == DataFormat::jsonl && !jsonl) {
      throw InputError("data.format: jsonl, but data.path '" + f +
                       "' does not end in .jsonl (one JSON document a line): name it .jsonl, or "
                       "set data.format: text (the file is one document)");
    }
    if (cfg.data.format == DataFormat::text && jsonl) {
      throw InputError("data.format: text, but data.path '" + f +
                       "' ends in .jsonl: set data.format: jsonl (one document a line, the "
                       "string at data.jsonl_key) or auto");
    }
  }
  return {files, *t.tokenizer, cfg.data.jsonl_key};
}

std::vector<ExportFile> tokenizer_export_files(const ModelText& t, int64_t max_seq_len) {
  std::vector<ExportFile> files;
  if (t.vocab == TextVocab::unknown) return files;
  if (!t.tokenizer) {
    if (t.vocab_size < 256) return files;  // not byte-level text
    files.push_back({"tokenizer.json", byte_tokenizer_json()});
    files.push_back({"tokenizer_config.json", byte_tokenizer_config_json(max_seq_len)});
    return files;
  }
  files.push_back({"tokenizer.json", read_small_file(t.tokenizer->json)});
  for (const char* name : kCompanions) {
    const std::string p = t.tokenizer->beside(name);
    std::error_code ec;
    if (fs::exists(p, ec)) files.push_back({name, read_small_file(p)});
  }
  return files;
}

std::function<std::vector<ExportFile>(const FileAttrs&, const ModelConfig&)> export_text_files(
    const ModelText& run) {
  return [run](const FileAttrs&, const ModelConfig& m) {
    auto files = tokenizer_export_files(run, m.max_seq_len);
    if (files.empty()) {
      log::info("export: " + run.model + " has no tokenizer" +
                (run.why.empty() ? "" : " (" + run.why + ")") + "; the export holds none");
    }
    return files;
  };
}

std::function<std::vector<ExportFile>(const FileAttrs&, const ModelConfig&)> export_text_files(
    const std::string& checkpoint) {
  return [checkpoint](const FileAttrs& attrs, const ModelConfig& m) {
    const ModelText t = model_file_text(checkpoint, attrs, m.vocab_size, "");
    auto files = tokenizer_export_files(t, m.max_seq_len);
    if (files.empty()) {
      log::info("export: " + t.model + " has no tokenizer" +
                (t.why.empty() ? "" : " (" + t.why + ")") + "; the export holds none");
    }
    return files;
  };
}

}  // namespace kktrain
