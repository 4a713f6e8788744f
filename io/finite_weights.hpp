// A model file's weights checked as they are read: every value finite, and still finite once
// rounded to the dtype it is stored in (an fp32 value beyond bfloat16's range, |v| >= 2^128 *
// (1 - 2^-9), rounds to infinity). What model.init_from, `kktrain generate` and the export read.
//
// A NaN or an infinity in a model's weights is never meant: the model's outputs would be NaN
// from the first token. Such a tensor is refused with one line naming the file, the tensor and
// how many of its values are bad (InputError, exit 2), before any of it is used: init_from stops
// before training, generate before answering, an export is discarded.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/dtype.hpp"
#include "io/model_weights.hpp"

namespace kktrain {

// The values among v[0, n) that are not finite, or become infinite rounded to `dest`.
struct NonFinite {
  int64_t nan = 0, inf = 0, overflow = 0;  // overflow: finite fp32, infinite in dest
  int64_t total() const { return nan + inf + overflow; }
};
NonFinite count_nonfinite(const float* v, int64_t n, DType dest);

// The refusal of tensor `name` of `src` holding `bad` ("" when bad.total() == 0); `rows` says
// which rows were read ("" for the whole tensor). `what` names the reader ("generate").
std::string nonfinite_refusal(const std::string& what, const WeightSource& src,
                              const std::string& name, const NonFinite& bad,
                              const std::string& rows, DType dest);

// `src` with every read checked (above): read_rows_f32 refuses a tensor whose rows read hold a
// bad value (on several ranks: each rank checks the rows it reads; callers agree on the outcome);
// stream_rows_f32 counts over the whole tensor and refuses after its last piece. `dest(name)` is
// the dtype the reader stores the tensor in.
std::unique_ptr<WeightSource> with_finite_check(std::unique_ptr<WeightSource> src,
                                                const std::string& what,
                                                std::function<DType(const std::string&)> dest);

}  // namespace kktrain
