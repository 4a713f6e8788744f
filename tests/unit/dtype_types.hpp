// Type lists for GoogleTest typed tests over the scalar types kktrain computes and stores in:
//   TYPED_TEST_SUITE(Suite, testing_util::Dtypes)      one instance per dtype (float, bf16),
//   TYPED_TEST_SUITE(Suite, testing_util::DtypePairs)  one per pair of dtypes (a product's
//                                                      operands and result, a model's storage
//                                                      and compute): DtypePair<First, Second>.
// In a test, dtype_of<TypeParam>::value (core/dtype.hpp) is the DType of a scalar type and
// rounding_of<TypeParam>() (core/bf16.hpp) its Rounding. gtest names the instances Suite/0.Test,
// Suite/1.Test, ...; ctest (gtest_discover_tests) by their types: Suite.Test<float>,
// Suite.Test<kktrain::bf16>, Suite.Test<kktrain::DtypePair<float, kktrain::bf16>>.
#pragma once

#include <gtest/gtest.h>

#include "core/bf16.hpp"
#include "core/dtype.hpp"

namespace kktrain {

// Two dtypes of one test, as types: First and Second, with their DTypes (in kktrain, not
// testing_util: the name is part of every ctest name of its instances).
template <class First, class Second>
struct DtypePair {
  using first = First;
  using second = Second;
  static constexpr DType first_dtype = dtype_of<First>::value;
  static constexpr DType second_dtype = dtype_of<Second>::value;
};

namespace testing_util {

using Dtypes = ::testing::Types<float, bf16>;
// In the order of two nested loops over {float32, bfloat16}: the first dtype outermost.
using DtypePairs = ::testing::Types<DtypePair<float, float>, DtypePair<float, bf16>,
                                    DtypePair<bf16, float>, DtypePair<bf16, bf16>>;

}  // namespace testing_util
}  // namespace kktrain
