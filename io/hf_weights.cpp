// Model weights from a Hugging Face directory (io/hf_weights.hpp).
#include "io/hf_weights.hpp"

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/errors.hpp"
#include "core/strings.hpp"
#include "io/hf_config.hpp"
#include "io/model_weights.hpp"
#include "io/safetensors.hpp"
#include "parallel/agree.hpp"

namespace kktrain {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

// Buffers older conversions saved beside the weights; the model computes them itself.
bool is_rotary_buffer(const std::string& name) {
  return ends_with(name, ".rotary_emb.inv_freq");
}

// What rank 0 read: config.json, the index (empty for a single file) and each weight file's
// header bytes and size. Every rank builds the same HfWeights from it.
struct Listing {
  std::string dir, config, index;
  std::vector<std::string> paths, headers;
  std::vector<int64_t> sizes;

  std::string serialize() const { return json{dir, config, index, paths, headers, sizes}.dump(); }
  static Listing deserialize(const std::string& s) {
    const json j = json::parse(s);
    Listing l;
    l.dir = j[0].get<std::string>();
    l.config = j[1].get<std::string>();
    l.index = j[2].get<std::string>();
    l.paths = j[3].get<std::vector<std::string>>();
    l.headers = j[4].get<std::vector<std::string>>();
    l.sizes = j[5].get<std::vector<int64_t>>();
    return l;
  }
};

// The index's weight_map (name -> file name), and the files it names in name order.
std::map<std::string, std::string> weight_map(const std::string& index_path,
                                              const std::string& text,
                                              std::vector<std::string>* files) {
  refuse_duplicate_keys(index_path, text);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw InputError("'" + index_path + "': not valid JSON (" + std::string(e.what()) + ")");
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
    throw InputError("'" + index_path + "': no weight_map object");
  }
  std::map<std::string, std::string> map;
  for (const auto& [name, f] : j["weight_map"].items()) {
    const std::string file = f.is_string() ? f.get<std::string>() : "";
    if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..") {
      throw InputError("'" + index_path + "': weight_map[\"" + printable_name(name) +
                       "\"] = " + f.dump() + " is not the name of a file in the directory");
    }
    map[name] = file;
    if (std::find(files->begin(), files->end(), file) == files->end()) files->push_back(file);
  }
  if (map.empty()) throw InputError("'" + index_path + "': weight_map is empty");
  std::sort(files->begin(), files->end());
  return map;
}

Listing read_listing(const std::string& dir) {
  const fs::path d(dir);
  Listing l;
  l.dir = dir;
  l.config = read_small_file((d / "config.json").string());
  std::vector<std::string> files;
  std::error_code ec;
  if (fs::exists(d / kSingleFile, ec)) {
    files.push_back(kSingleFile);
  } else if (fs::exists(d / kIndexFile, ec)) {
    l.index = read_small_file((d / kIndexFile).string());
    weight_map((d / kIndexFile).string(), l.index, &files);
  } else {
    throw InputError("'" + dir + "' holds config.json but neither " + kSingleFile + " nor " +
                     kIndexFile +
                     (fs::exists(d / "pytorch_model.bin", ec)
                          ? " (pytorch_model.bin is not read: save the model as safetensors)"
                          : ""));
  }
  for (const auto& f : files) {
    l.paths.push_back((d / f).string());
    l.sizes.push_back(0);
    l.headers.push_back(read_safetensors_header_bytes(l.paths.back(), &l.sizes.back()));
    parse_safetensors_header(l.paths.back(), l.headers.back(), l.sizes.back());  // valid UTF-8
  }
  return l;
}

class HfWeights final : public WeightSource {
 public:
  // Every check (config.json, index, headers, their agreement) happens here; rank 0 runs it
  // first, the others repeat it on the same bytes.
  explicit HfWeights(const Listing& l) : dir_(l.dir) {
    const HfArchitecture a = parse_hf_config((fs::path(l.dir) / "config.json").string(), l.config);
    set_attributes(a);
    std::map<std::string, std::string> map;
    std::vector<std::string> files;
    const std::string index_path = (fs::path(l.dir) / kIndexFile).string();
    if (!l.index.empty()) map = weight_map(index_path, l.index, &files);
    std::map<std::string, std::string> seen;  // tensor -> file
    for (std::size_t k = 0; k < l.paths.size(); ++k) {
      StFile f = parse_safetensors_header(l.paths[k], l.headers[k], l.sizes[k]);
      const std::string base = fs::path(l.paths[k]).filename().string();
      for (const StTensor& t : f.tensors) {
        if (!l.index.empty()) {
          const auto it = map.find(t.name);
          if (it == map.end() || it->second != base) {
            throw InputError("'" + l.paths[k] + "': tensor '" + printable_name(t.name) + "' is " +
                             (it == map.end() ? "not in " + index_path + "'s weight_map"
                                              : "mapped to " + it->second + " by " + index_path));
          }
        }
        if (!seen.emplace(t.name, l.paths[k]).second) {
          throw InputError("'" + l.dir + "': tensor '" + printable_name(t.name) + "' is in both " +
                           seen[t.name] + " and " + l.paths[k]);
        }
        if (is_rotary_buffer(t.name)) continue;
        st_dtype_to_dtype(t.dtype, "'" + l.paths[k] + "': tensor '" + printable_name(t.name) + "'");
        std::string name = t.name;
        if (a.multimodal) {
          const auto text = language_model_name(t.name);
          if (!text) {
            ++skipped_;
            continue;
          }
          name = *text;
          if (where_.count(name)) {
            throw InputError("'" + l.dir + "': tensor '" + printable_name(name) +
                             "' is in the files under two names");
          }
        }
        where_[name] = {files_.size(), names_.size()};
        original_[name] = t.name;
        names_.push_back(name);
      }
      files_.push_back(std::move(f));
    }
    for (const auto& [name, file] : map) {
      if (!seen.count(name)) {
        throw InputError("'" + index_path + "': weight_map names tensor '" + printable_name(name) +
                         "' in " + file + ", which does not hold it");
      }
    }
    if (names_.empty()) throw InputError("'" + l.dir + "': the weight files hold no tensors");
    if (a.multimodal) attrs_.i64["unread_vision_tensors"] = skipped_;
  }

  // Opens every weight file (after the checks; collective step of the caller).
  void open() {
    for (const StFile& f : files_) readers_.push_back(std::make_unique<StReader>(f));
  }

  const std::string& path() const override { return dir_; }
  std::string kind() const override { return "Hugging Face model directory"; }
  std::vector<std::string> names() const override { return names_; }
  std::optional<std::vector<int64_t>> shape(const std::string& name) const override {
    const StTensor* t = find(name);
    if (!t) return std::nullopt;
    return t->shape;
  }
  DType stored_dtype(const std::string& name) const override {
    return st_dtype_to_dtype(at(name).dtype, "'" + dir_ + "': tensor '" + name + "'");
  }
  std::vector<float> read_rows_f32(const std::string& name, int64_t row_begin,
                                   int64_t rows) override {
    const StTensor& t = at(name);
    return readers_.at(where_.at(name).first)->read_rows_f32(t, row_begin, rows);
  }
  void stream_rows_f32(const std::string& name, int64_t piece_rows,
                       const std::function<void(int64_t, int64_t, const float*)>& take) override {
    const StTensor& t = at(name);
    const StReader& r = *readers_.at(where_.at(name).first);
    const int64_t total = t.rows();
    for (int64_t b = 0; b < total || b == 0; b += piece_rows) {
      const int64_t n = std::min(piece_rows, total - b);
      const std::vector<float> v = r.read_rows_f32(t, b, n);
      take(b, n, v.data());
      if (n <= 0) break;
    }
  }
  const FileAttrs& attributes() const override { return attrs_; }
  std::string tensor_attribute(const std::string&, const std::string&) const override { return ""; }

 private:
  const StTensor* find(const std::string& name) const {
    const auto it = where_.find(name);
    if (it == where_.end()) return nullptr;
    return files_[it->second.first].find(original_.at(name));
  }
  // A Gemma3ForConditionalGeneration tensor's name in its language model (transformers 4 writes
  // language_model.model.X and language_model.lm_head.X, transformers 5 model.language_model.X
  // and lm_head.X); none for the vision tower's and the projector's.
  static std::optional<std::string> language_model_name(const std::string& n) {
    auto starts = [&](const char* p) { return n.rfind(p, 0) == 0; };
    for (const char* p : {"vision_tower.", "multi_modal_projector.", "model.vision_tower.",
                          "model.multi_modal_projector."}) {
      if (starts(p)) return std::nullopt;
    }
    if (starts("language_model.model.")) return "model." + n.substr(21);
    if (starts("model.language_model.")) return "model." + n.substr(21);
    if (starts("language_model.lm_head.")) return n.substr(15);
    return n;
  }
  const std::string& checked(const std::string& name) const {
    if (!find(name)) throw InputError("'" + dir_ + "' has no tensor '" + name + "'");
    return name;
  }
  const StTensor& at(const std::string& name) const { return *find(checked(name)); }

  // The architecture under kktrain's attribute names (those of its own files).
  void set_attributes(const HfArchitecture& a) {
    const ModelConfig& m = a.model;
    attrs_.str["format"] = "huggingface";
    attrs_.str["architecture"] = a.architecture;
    if (a.torch_dtype) attrs_.str["storage_dtype"] = dtype_name(*a.torch_dtype);
    attrs_.str["rope_scaling"] = rope_scaling_json(m.rope_scaling);
    attrs_.i64 = {{"vocab_size", m.vocab_size},
                  {"hidden_size", m.hidden_size},
                  {"num_layers", m.num_layers},
                  {"num_heads", m.num_heads},
                  {"num_kv_heads", m.num_kv_heads},
                  {"intermediate_size", m.intermediate_size},
                  {"max_seq_len", m.max_seq_len},
                  {"tie_word_embeddings", m.tie_word_embeddings ? 1 : 0},
                  {"mtp_num_layers", 0}};
    attrs_.f64 = {{"rope_theta", m.rope_theta}, {"rms_norm_eps", m.rms_norm_eps}};
    moe_to_attrs(m.moe, &attrs_);
    softcap_to_attrs(m.final_logit_softcapping, &attrs_);
    family_to_attrs(m, &attrs_);
  }

  std::string dir_;
  std::vector<StFile> files_;
  std::vector<std::unique_ptr<StReader>> readers_;
  std::map<std::string, std::pair<std::size_t, std::size_t>> where_;  // name -> (file, order)
  std::vector<std::string> names_;
  std::map<std::string, std::string> original_;  // name -> the file's name for it
  int64_t skipped_ = 0;                          // the vision tower's tensors (multimodal)
  FileAttrs attrs_;
};

}  // namespace

std::unique_ptr<WeightSource> open_hf_weights(const std::string& dir, Communicator& comm) {
  std::string blob;
  std::unique_ptr<HfWeights> w;
  collectively(comm, [&] {
    if (comm.rank() != 0) return;
    blob = read_listing(dir).serialize();
    w = std::make_unique<HfWeights>(Listing::deserialize(blob));
  });
  comm.broadcast_host(blob, 0);
  if (!w) w = std::make_unique<HfWeights>(Listing::deserialize(blob));
  collectively(comm, [&] { w->open(); });
  return w;
}

}  // namespace kktrain
