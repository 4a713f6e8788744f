// Model weights checked for non-finite values as they are read (io/finite_weights.hpp).
#include "io/finite_weights.hpp"

#include <cmath>
#include <utility>

#include "core/bf16.hpp"
#include "core/errors.hpp"
#include "core/strings.hpp"

namespace kktrain {

NonFinite count_nonfinite(const float* v, int64_t n, DType dest) {
  NonFinite c;
  const bool to_bf16 = dest == DType::bfloat16;
  for (int64_t k = 0; k < n; ++k) {
    const float x = v[k];
    if (std::isnan(x)) {
      ++c.nan;
    } else if (std::isinf(x)) {
      ++c.inf;
    } else if (to_bf16 && std::isinf(round_to_bf16(x))) {
      ++c.overflow;
    }
  }
  return c;
}

std::string nonfinite_refusal(const std::string& what, const WeightSource& src,
                              const std::string& name, const NonFinite& bad,
                              const std::string& rows, DType dest) {
  if (bad.total() == 0) return "";
  std::string parts;
  auto add = [&](int64_t count, const std::string& text) {
    if (count == 0) return;
    parts += (parts.empty() ? "" : ", ") + std::to_string(count) + " " + text;
  };
  add(bad.nan, "NaN");
  add(bad.inf, "infinite");
  add(bad.overflow, std::string("beyond ") + dtype_name(dest) +
                        "'s range (infinite once stored as " + dtype_name(dest) + ")");
  return what + ": '" + src.path() + "': tensor " + printable_name(name) + " holds " +
         std::to_string(bad.total()) + " non-finite value" + (bad.total() == 1 ? "" : "s") +
         (rows.empty() ? "" : " in " + rows) + ": " + parts +
         "; a model with them computes NaN: refusing to " + (what == "export" ? "export" : "load") +
         " it";
}

namespace {

class FiniteChecked final : public WeightSourceOver {
 public:
  FiniteChecked(std::unique_ptr<WeightSource> src, std::string what,
                std::function<DType(const std::string&)> dest)
      : WeightSourceOver(std::move(src)), what_(std::move(what)), dest_(std::move(dest)) {}
  std::vector<float> read_rows_f32(const std::string& name, int64_t row_begin,
                                   int64_t rows) override {
    std::vector<float> v = src_->read_rows_f32(name, row_begin, rows);
    const DType d = dest_(name);
    const NonFinite bad = count_nonfinite(v.data(), static_cast<int64_t>(v.size()), d);
    if (bad.total() > 0) {
      const auto s = shape(name);
      const int64_t all = !s || s->empty() ? 1 : (*s)[0];
      const std::string which =
          row_begin == 0 && rows == all
              ? ""
              : "rows " + std::to_string(row_begin) + " to " + std::to_string(row_begin + rows - 1);
      throw InputError(nonfinite_refusal(what_, *src_, name, bad, which, d));
    }
    return v;
  }
  void stream_rows_f32(const std::string& name, int64_t piece_rows,
                       const std::function<void(int64_t, int64_t, const float*)>& take) override {
    const DType d = dest_(name);
    const auto s = shape(name);
    int64_t row_len = 1;
    if (s) {
      for (std::size_t k = 1; k < s->size(); ++k) row_len *= (*s)[k];
    }
    NonFinite bad;
    src_->stream_rows_f32(name, piece_rows, [&](int64_t b, int64_t n, const float* v) {
      const NonFinite c = count_nonfinite(v, n * row_len, d);
      bad.nan += c.nan;
      bad.inf += c.inf;
      bad.overflow += c.overflow;
      take(b, n, v);
    });
    if (bad.total() > 0) throw InputError(nonfinite_refusal(what_, *src_, name, bad, "", d));
  }

 private:
  std::string what_;
  std::function<DType(const std::string&)> dest_;
};

}  // namespace

std::unique_ptr<WeightSource> with_finite_check(std::unique_ptr<WeightSource> src,
                                                const std::string& what,
                                                std::function<DType(const std::string&)> dest) {
  return std::make_unique<FiniteChecked>(std::move(src), what, std::move(dest));
}

}  // namespace kktrain
