// The consolidated export (io/model_export.hpp).
#include "io/model_export.hpp"

#include <algorithm>
#include <filesystem>
#include <map>
#include <vector>

#include "core/bf16.hpp"
#include "core/errors.hpp"
#include "core/strings.hpp"
#include "core/version.hpp"
#include "io/durable.hpp"
#include "io/elem_convert.hpp"
#include "io/h5_rows.hpp"
#include "io/model_weights.hpp"

namespace kktrain {

namespace {

const char* const kArchI64[] = {"vocab_size",  "hidden_size",         "num_layers",
                                "num_heads",   "num_kv_heads",        "intermediate_size",
                                "max_seq_len", "tie_word_embeddings", "mtp_num_layers"};
const char* const kArchF64[] = {"rope_theta", "rms_norm_eps"};

// "<module>.lora_A.weight" -> "<module>.weight" (empty when not an adapter).
std::string adapter_base(const std::string& name, const char* which) {
  const std::string tail = std::string(".lora_") + which + ".weight";
  if (!ends_with(name, tail)) return "";
  return name.substr(0, name.size() - tail.size()) + ".weight";
}

// The LoRA factors of one base weight, read whole (they are small: r rows or r columns).
struct LoraPair {
  std::vector<float> a, b;  // A (r, in), B (out, r)
  int64_t r = 0;
};

// Rows [row_begin, row_begin + rows) of W (out, in) += scale * B A, each sum in double, rounded
// once to fp32.
void merge_rows(float* w, const LoraPair& l, int64_t row_begin, int64_t rows, int64_t in,
                double scale) {
  for (int64_t o = 0; o < rows; ++o) {
    const float* b = l.b.data() + (row_begin + o) * l.r;
    for (int64_t i = 0; i < in; ++i) {
      double acc = 0.0;
      for (int64_t k = 0; k < l.r; ++k) acc += static_cast<double>(b[k]) * l.a[k * in + i];
      w[o * in + i] = static_cast<float>(static_cast<double>(w[o * in + i]) + scale * acc);
    }
  }
}

int64_t i64_attr(const FileAttrs& a, const std::string& name, const std::string& file) {
  const auto it = a.i64.find(name);
  if (it == a.i64.end()) {
    throw InputError("export: '" + file + "' has no integer attribute '" + name + "'");
  }
  return it->second;
}

double f64_attr(const FileAttrs& a, const std::string& name, const std::string& file) {
  const auto it = a.f64.find(name);
  if (it == a.f64.end()) {
    throw InputError("export: '" + file + "' has no numeric attribute '" + name + "'");
  }
  return it->second;
}

// Writes the export into `tmp` (already a temporary name); returns the tensor bytes.
int64_t write_export(WeightSource& src, const std::string& checkpoint, const std::string& tmp,
                     DType dtype, LoraExport lora) {
  const FileAttrs& in = src.attributes();
  const std::vector<std::string> names = src.names();
  const bool has_lora = in.i64.count("lora_dim") > 0;
  const bool merge = lora == LoraExport::merged && has_lora;
  double scale = 0.0;
  if (merge) scale = f64_attr(in, "lora_alpha", checkpoint) / i64_attr(in, "lora_dim", checkpoint);

  std::vector<DatasetSpec> specs;
  std::vector<std::string> sources;
  for (const auto& n : names) {
    const bool adapter = !adapter_base(n, "A").empty() || !adapter_base(n, "B").empty();
    if (adapter && merge) continue;
    const bool keep = src.tensor_attribute(n, "keep_in_fp32") == "1";
    DatasetSpec s;
    s.path = "/params/" + n;
    s.elem = dtype == DType::bfloat16 && !keep ? h5::Elem::bf16 : h5::Elem::f32;
    s.shape = *src.shape(n);
    const std::string aliases = src.tensor_attribute(n, "aliases");
    if (!aliases.empty()) s.attrs["alias"] = aliases;
    specs.push_back(s);
    sources.push_back(n);
  }
  FileAttrs out;
  out.str["format"] = "kktrain-export";
  out.i64["format_version"] = 1;
  out.str["kktrain_version"] = kKktrainVersion;
  out.str["storage_dtype"] = dtype_name(dtype);
  out.str["source_checkpoint"] = checkpoint;
  out.i64["step"] = i64_attr(in, "step", checkpoint);
  for (const char* k : kArchI64) out.i64[k] = i64_attr(in, k, checkpoint);
  for (const char* k : kArchF64) out.f64[k] = f64_attr(in, k, checkpoint);
  if (has_lora && !merge) {
    out.i64["lora_dim"] = i64_attr(in, "lora_dim", checkpoint);
    out.f64["lora_alpha"] = f64_attr(in, "lora_alpha", checkpoint);
  }

  SingleCommunicator one;
  RowWriter w(tmp, specs, out, one);
  for (std::size_t k = 0; k < specs.size(); ++k) {
    const std::string& n = sources[k];
    const std::vector<int64_t>& shape = specs[k].shape;
    const int64_t rows = shape.empty() ? 1 : shape[0];
    int64_t numel = 1;
    for (auto d : shape) numel *= d;
    const int64_t row_len = rows > 0 ? numel / rows : 0;
    // The adapters of this weight, when merging (read whole: r x in and out x r).
    LoraPair pair;
    const std::string stem = n.size() > 7 ? n.substr(0, n.size() - 7) : n;  // without ".weight"
    const bool merged_here =
        merge && std::count(names.begin(), names.end(), stem + ".lora_A.weight") > 0;
    if (merged_here) {
      const std::string an = stem + ".lora_A.weight", bn = stem + ".lora_B.weight";
      pair.r = (*src.shape(an))[0];
      pair.a = src.read_rows_f32(an, 0, pair.r);
      pair.b = src.read_rows_f32(bn, 0, (*src.shape(bn))[0]);
    }
    const int64_t piece_rows =
        std::max<int64_t>(1, kStreamPieceBytes / std::max<int64_t>(1, row_len * 4));
    src.stream_rows_f32(n, piece_rows, [&](int64_t b, int64_t count, const float* v) {
      std::vector<float> values(v, v + count * row_len);
      if (merged_here) merge_rows(values.data(), pair, b, count, row_len, scale);
      const DType d = specs[k].elem == h5::Elem::bf16 ? DType::bfloat16 : DType::float32;
      const std::vector<char> bytes = narrow_from_f32(values, d);
      w.write_rows(k, b, count, bytes.data());
    });
  }
  w.finish();
  return w.bytes_written();
}

}  // namespace

int64_t export_checkpoint(const std::string& checkpoint, const std::string& out, DType dtype,
                          LoraExport lora) {
  std::error_code ec;
  if (std::filesystem::equivalent(checkpoint, out, ec)) {
    throw UsageError("export: --out '" + out + "' is the checkpoint itself");
  }
  SingleCommunicator one;
  const auto src = open_weights(checkpoint, "export", one);
  if (src->kind() != "kktrain checkpoint") {
    throw InputError("export: '" + checkpoint + "' is not a kktrain training checkpoint");
  }
  const std::string tmp = temporary_name(out);
  try {
    const int64_t bytes = write_export(*src, checkpoint, tmp, dtype, lora);
    commit_file(tmp, out);
    return bytes;
  } catch (const Error& e) {
    std::filesystem::remove(tmp, ec);
    // A write failed (exit 1): say which export, not just its temporary name.
    if (e.exit_code() == 1) throw RuntimeFailure("export to '" + out + "' failed: " + e.what());
    throw;
  } catch (...) {
    std::filesystem::remove(tmp, ec);
    throw;
  }
}

}  // namespace kktrain
