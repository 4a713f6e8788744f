// LoRA adapters merged into their base weights as they are read (io/lora_merge.hpp).
#include "io/lora_merge.hpp"

#include <algorithm>

#include "core/errors.hpp"
#include "core/strings.hpp"

namespace kktrain {

std::string lora_adapter_base(const std::string& name, const char* which) {
  const std::string tail = std::string(".lora_") + which + ".weight";
  if (!ends_with(name, tail)) return "";
  return name.substr(0, name.size() - tail.size()) + ".weight";
}

namespace {

// The LoRA factors of one base weight, read whole.
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

class MergedLora final : public WeightSourceOver {
 public:
  MergedLora(std::unique_ptr<WeightSource> src, double scale)
      : WeightSourceOver(std::move(src)), scale_(scale) {
    for (const auto& n : src_->names()) {
      if (lora_adapter_base(n, "A").empty() && lora_adapter_base(n, "B").empty()) {
        names_.push_back(n);
      }
    }
  }
  std::vector<std::string> names() const override { return names_; }
  std::vector<float> read_rows_f32(const std::string& name, int64_t row_begin,
                                   int64_t rows) override {
    std::vector<float> v = src_->read_rows_f32(name, row_begin, rows);
    LoraPair p;
    if (adapters(name, &p)) merge_rows(v.data(), p, row_begin, rows, row_len(name), scale_);
    return v;
  }
  void stream_rows_f32(const std::string& name, int64_t piece_rows,
                       const std::function<void(int64_t, int64_t, const float*)>& take) override {
    LoraPair p;
    const bool merge = adapters(name, &p);
    const int64_t in = row_len(name);
    src_->stream_rows_f32(name, piece_rows, [&](int64_t b, int64_t n, const float* v) {
      if (!merge) return take(b, n, v);
      std::vector<float> w(v, v + n * in);
      merge_rows(w.data(), p, b, n, in, scale_);
      take(b, n, w.data());
    });
  }

 private:
  int64_t row_len(const std::string& name) const {
    const auto s = *src_->shape(name);
    int64_t n = 1;
    for (std::size_t k = 1; k < s.size(); ++k) n *= s[k];
    return n;
  }
  // Reads a whole tensor in one process (pieces, checksum checked).
  std::vector<float> whole(const std::string& name) {
    std::vector<float> out;
    src_->stream_rows_f32(name, int64_t(1) << 40, [&](int64_t, int64_t, const float* v) {
      const auto s = *src_->shape(name);
      int64_t n = 1;
      for (auto d : s) n *= d;
      out.assign(v, v + n);
    });
    return out;
  }
  bool adapters(const std::string& name, LoraPair* p) {
    if (!ends_with(name, ".weight")) return false;
    const std::string stem = name.substr(0, name.size() - 7);
    const std::string an = stem + ".lora_A.weight", bn = stem + ".lora_B.weight";
    if (!src_->shape(an) || !src_->shape(bn)) return false;
    p->r = (*src_->shape(an))[0];
    p->a = whole(an);
    p->b = whole(bn);
    return true;
  }

  double scale_;
  std::vector<std::string> names_;
};

}  // namespace

std::unique_ptr<WeightSource> with_lora_merged(std::unique_ptr<WeightSource> src) {
  const FileAttrs& a = src->attributes();
  const auto dim = a.i64.find("lora_dim");
  if (dim == a.i64.end()) return src;
  const auto alpha = a.f64.find("lora_alpha");
  if (alpha == a.f64.end() || dim->second <= 0) {
    throw InputError("'" + src->path() + "' has lora_dim but no lora_alpha attribute");
  }
  const double scale = alpha->second / static_cast<double>(dim->second);
  return std::make_unique<MergedLora>(std::move(src), scale);
}

}  // namespace kktrain
