// The consolidated export (apps/model_export.hpp).
#include "apps/model_export.hpp"

#include <filesystem>
#include <map>
#include <vector>

#include "apps/checkpointing.hpp"
#include "core/bf16.hpp"
#include "core/errors.hpp"
#include "core/strings.hpp"
#include "io/checkpoint.hpp"

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

// W (out, in) += scale * B (out, r) A (r, in), each sum in double, rounded once to fp32.
void merge_lora(std::vector<float>& w, const std::vector<float>& a, const std::vector<float>& b,
                int64_t out, int64_t in, int64_t r, double scale) {
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) {
      double acc = 0.0;
      for (int64_t k = 0; k < r; ++k) acc += static_cast<double>(b[o * r + k]) * a[k * in + i];
      w[o * in + i] = static_cast<float>(static_cast<double>(w[o * in + i]) + scale * acc);
    }
  }
}

}  // namespace

int64_t export_checkpoint(const std::string& checkpoint, const std::string& out, DType dtype,
                          LoraExport lora) {
  std::error_code ec;
  if (std::filesystem::equivalent(checkpoint, out, ec)) {
    throw UsageError("export: --out '" + out + "' is the checkpoint itself");
  }
  SingleCommunicator one;
  ShardReader r(checkpoint, one);
  const h5::File& f = r.file();
  if (!f.has_attr("/", "format") || f.read_attr_str("/", "format") != "kktrain-checkpoint") {
    throw InputError("export: '" + checkpoint + "' is not a kktrain training checkpoint");
  }
  const FullRead read = [&](const std::string& ds) {
    const auto shape = f.shape(ds);
    int64_t n = 1;
    for (auto d : shape) n *= d;
    const int64_t rows = shape.empty() ? 1 : shape[0];
    return r.read_rows(ds, 0, rows, rows > 0 ? n / rows : 0);
  };
  const auto names = f.list("/params");
  std::map<std::string, std::vector<float>> values;
  for (const auto& n : names) values[n] = parameter_master(f, n, read);
  const bool has_lora = f.has_attr("/", "lora_dim");
  if (lora == LoraExport::merged && has_lora) {
    const double scale = f.read_attr_f64("/", "lora_alpha") / f.read_attr_i64("/", "lora_dim");
    for (const auto& n : names) {
      const std::string base = adapter_base(n, "A");
      if (base.empty()) continue;
      const std::string bname = base.substr(0, base.size() - 7) + ".lora_B.weight";
      const auto ws = f.shape("/params/" + base), as = f.shape("/params/" + n);
      merge_lora(values[base], values[n], values[bname], ws[0], ws[1], as[0], scale);
    }
  }
  h5::File o = h5::File::create(out);
  int64_t bytes = 0;
  for (const auto& n : names) {
    const bool adapter = !adapter_base(n, "A").empty() || !adapter_base(n, "B").empty();
    if (adapter && lora == LoraExport::merged) continue;
    const std::string ds = "/params/" + n;
    const bool keep = f.has_attr(ds, "keep_in_fp32") && f.read_attr_str(ds, "keep_in_fp32") == "1";
    const std::vector<float>& v = values[n];
    const auto shape = f.shape(ds);
    if (dtype == DType::bfloat16 && !keep) {
      std::vector<uint16_t> b(v.size());
      for (std::size_t k = 0; k < v.size(); ++k) b[k] = bf16_bits_from_float(v[k]);
      write_host_dataset(o, ds, h5::Elem::bf16, shape, b.data());
      bytes += static_cast<int64_t>(b.size() * 2);
    } else {
      write_host_dataset(o, ds, h5::Elem::f32, shape, v.data());
      bytes += static_cast<int64_t>(v.size() * 4);
    }
    if (f.has_attr(ds, "aliases")) o.attr_str(ds, "alias", f.read_attr_str(ds, "aliases"));
  }
  o.attr_str("/", "format", "kktrain-export");
  o.attr_i64("/", "format_version", 1);
  o.attr_str("/", "kktrain_version", kKktrainVersion);
  o.attr_str("/", "storage_dtype", dtype_name(dtype));
  o.attr_str("/", "source_checkpoint", checkpoint);
  o.attr_i64("/", "step", f.read_attr_i64("/", "step"));
  for (const char* k : kArchI64) o.attr_i64("/", k, f.read_attr_i64("/", k));
  for (const char* k : kArchF64) o.attr_f64("/", k, f.read_attr_f64("/", k));
  if (has_lora && lora == LoraExport::separate) {
    o.attr_i64("/", "lora_dim", f.read_attr_i64("/", "lora_dim"));
    o.attr_f64("/", "lora_alpha", f.read_attr_f64("/", "lora_alpha"));
  }
  o.close();
  return bytes;
}

}  // namespace kktrain
