// The consolidated export (io/model_export.hpp): the tensor plan, the streaming loop, and the
// HDF5 sink (the safetensors sink: io/export_safetensors.cpp).
#include "io/model_export.hpp"

#include <algorithm>
#include <filesystem>
#include <map>
#include <vector>

#include "core/errors.hpp"
#include "core/log.hpp"
#include "core/strings.hpp"
#include "core/version.hpp"
#include "io/durable.hpp"
#include "io/elem_convert.hpp"
#include "io/export_sink.hpp"
#include "io/h5_rows.hpp"
#include "io/lora_merge.hpp"
#include "io/model_weights.hpp"

namespace kktrain {

namespace {

const char* const kArchI64[] = {"vocab_size",  "hidden_size",         "num_layers",
                                "num_heads",   "num_kv_heads",        "intermediate_size",
                                "max_seq_len", "tie_word_embeddings", "mtp_num_layers"};
const char* const kArchF64[] = {"rope_theta", "rms_norm_eps"};

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

// The tensors an export writes, in the source's order.
std::vector<ExportTensor> plan_tensors(const WeightSource& src, const ExportOptions& o) {
  std::vector<ExportTensor> out;
  int skipped_mtp = 0;
  for (const auto& n : src.names()) {
    if (o.format == ExportFormat::safetensors && starts_with(n, "mtp.")) {
      ++skipped_mtp;
      continue;
    }
    ExportTensor t;
    t.name = n;
    t.shape = *src.shape(n);
    const bool keep = src.tensor_attribute(n, "keep_in_fp32") == "1";
    t.dtype = o.dtype == DType::bfloat16 && !keep ? DType::bfloat16 : DType::float32;
    const std::string aliases = src.tensor_attribute(n, "aliases");
    if (!aliases.empty() && o.format == ExportFormat::hdf5) t.attrs["alias"] = aliases;
    out.push_back(t);
  }
  if (skipped_mtp > 0) {
    log::info("export: the multi-token-prediction head (" + std::to_string(skipped_mtp) +
              " tensors) is not written to the safetensors directory");
  }
  return out;
}

// The HDF5 export's root attributes: the checkpoint's architecture and step.
FileAttrs hdf5_root(const FileAttrs& in, const std::string& checkpoint, const ExportOptions& o,
                    bool adapters_kept) {
  FileAttrs out;
  out.str["format"] = "kktrain-export";
  out.i64["format_version"] = 1;
  out.str["kktrain_version"] = kKktrainVersion;
  out.str["storage_dtype"] = dtype_name(o.dtype);
  out.str["source_checkpoint"] = checkpoint;
  out.i64["step"] = i64_attr(in, "step", checkpoint);
  for (const char* k : kArchI64) out.i64[k] = i64_attr(in, k, checkpoint);
  for (const char* k : kArchF64) out.f64[k] = f64_attr(in, k, checkpoint);
  moe_to_attrs(moe_from_attrs(in), &out);
  softcap_to_attrs(softcap_from_attrs(in), &out);
  ModelConfig family;
  family_from_attrs(in, checkpoint, &family);
  family_to_attrs(family, &out);
  const auto rs = in.str.find("rope_scaling");
  if (rs != in.str.end() && !rs->second.empty()) out.str["rope_scaling"] = rs->second;
  if (adapters_kept) {
    out.i64["lora_dim"] = i64_attr(in, "lora_dim", checkpoint);
    out.f64["lora_alpha"] = f64_attr(in, "lora_alpha", checkpoint);
  }
  return out;
}

// Every tensor in pieces of rows, converted to its dtype, into the sink; then the commit.
int64_t stream_export(WeightSource& src, const std::vector<ExportTensor>& tensors,
                      ExportSink& sink) {
  sink.begin(tensors);
  for (std::size_t k = 0; k < tensors.size(); ++k) {
    const ExportTensor& t = tensors[k];
    const int64_t row_len = t.row_len();
    const int64_t piece_rows =
        std::max<int64_t>(1, kStreamPieceBytes / std::max<int64_t>(1, row_len * 4));
    src.stream_rows_f32(t.name, piece_rows, [&](int64_t b, int64_t n, const float* v) {
      const std::vector<char> bytes =
          narrow_from_f32(std::vector<float>(v, v + n * row_len), t.dtype);
      sink.write_rows(k, b, n, bytes.data());
    });
  }
  return sink.commit();
}

// ---- the HDF5 sink ---------------------------------------------------------------------------

class Hdf5Sink final : public ExportSink {
 public:
  Hdf5Sink(const std::string& out, const FileAttrs& root)
      : out_(out), tmp_(temporary_name(out)), root_(root) {}
  void begin(const std::vector<ExportTensor>& tensors) override {
    std::vector<DatasetSpec> specs;
    for (const auto& t : tensors) {
      specs.push_back(DatasetSpec{"/params/" + t.name,
                                  t.dtype == DType::bfloat16 ? h5::Elem::bf16 : h5::Elem::f32,
                                  t.shape, t.attrs});
    }
    w_ = std::make_unique<RowWriter>(tmp_, specs, root_, one_);
  }
  void write_rows(std::size_t k, int64_t row_begin, int64_t rows, const char* bytes) override {
    w_->write_rows(k, row_begin, rows, bytes);
  }
  int64_t commit() override {
    w_->finish();
    const int64_t bytes = w_->bytes_written();
    w_.reset();
    commit_file(tmp_, out_);
    return bytes;
  }
  void discard() noexcept override {
    w_.reset();
    std::error_code ec;
    std::filesystem::remove(tmp_, ec);
  }

 private:
  std::string out_, tmp_;
  FileAttrs root_;
  SingleCommunicator one_;
  std::unique_ptr<RowWriter> w_;
};

}  // namespace

int64_t ExportTensor::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::unique_ptr<ExportSink> make_hdf5_sink(const std::string& out, const FileAttrs& root) {
  return std::make_unique<Hdf5Sink>(out, root);
}

int64_t export_checkpoint(const std::string& checkpoint, const std::string& out,
                          const ExportOptions& o) {
  std::error_code ec;
  if (std::filesystem::equivalent(checkpoint, out, ec)) {
    throw UsageError("export: --out '" + out + "' is the checkpoint itself");
  }
  SingleCommunicator one;
  std::unique_ptr<WeightSource> src = open_weights(checkpoint, "export", one);
  if (src->kind() != "kktrain checkpoint") {
    throw InputError("export: '" + checkpoint + "' is not a kktrain training checkpoint");
  }
  const FileAttrs in = src->attributes();
  const bool has_lora = in.i64.count("lora_dim") > 0;
  if (has_lora && o.lora == LoraExport::separate && o.format == ExportFormat::safetensors) {
    throw UsageError(
        "export: --lora separate writes kktrain's HDF5 export only; a safetensors "
        "directory gets the adapters merged (--lora merged)");
  }
  if (o.lora == LoraExport::merged) src = with_lora_merged(std::move(src));
  if (o.check_source) src = o.check_source(std::move(src));
  const std::vector<ExportTensor> tensors = plan_tensors(*src, o);
  // Temporaries of earlier exports to `out` that were killed (up to a whole export's size each):
  // removed before this one needs the space.
  const std::string removed = removed_temporaries_text(remove_stale_temporaries(out));
  if (!removed.empty()) log::info("export: " + removed);
  std::unique_ptr<ExportSink> sink =
      o.format == ExportFormat::hdf5
          ? make_hdf5_sink(out,
                           hdf5_root(in, checkpoint, o, has_lora && o.lora == LoraExport::separate))
          : make_safetensors_sink(out, architecture_of(*src), o.dtype, o.max_shard_bytes,
                                  o.extra_files ? o.extra_files(in, architecture_of(*src))
                                                : std::vector<ExportFile>{});
  try {
    return stream_export(*src, tensors, *sink);
  } catch (const Error& e) {
    sink->discard();
    // A write failed (exit 1): say which export, not just its temporary name.
    if (e.exit_code() == 1) throw RuntimeFailure("export to '" + out + "' failed: " + e.what());
    throw;
  } catch (...) {
    sink->discard();
    throw;
  }
}

std::optional<LoraExport> parse_lora_export(const std::string& name) {
  if (name == "merged") return LoraExport::merged;
  if (name == "separate") return LoraExport::separate;
  return std::nullopt;
}

}  // namespace kktrain
