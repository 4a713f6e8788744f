// core/dtype.hpp: dtype spellings, names, sizes and the dtype -> scalar type dispatch.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "core/dtype.hpp"
#include "core/errors.hpp"

namespace kktrain {
namespace {

struct Spelling {
  const char* text;
  DType dtype;
};

const Spelling kSpellings[] = {
    {"float32", DType::float32},   {"fp32", DType::float32},  {"torch.float32", DType::float32},
    {"bfloat16", DType::bfloat16}, {"bf16", DType::bfloat16}, {"torch.bfloat16", DType::bfloat16},
    {"float16", DType::float16},   {"half", DType::float16},  {"torch.float16", DType::float16},
};

TEST(DType, EverySpellingParses) {
  for (const auto& s : kSpellings) {
    SCOPED_TRACE(s.text);
    // Start from a different dtype so a parser that leaves *out alone would be caught.
    DType d = s.dtype == DType::float32 ? DType::bfloat16 : DType::float32;
    ASSERT_TRUE(parse_dtype(s.text, &d));
    EXPECT_EQ(d, s.dtype);
  }
}

TEST(DType, RejectsOtherSpellingsAndLeavesOutputAlone) {
  const std::vector<std::string> bad = {
      "Float32", "FP32",   "fp16 ", " fp32", "",       "auto",   "null",  "torch.float64",
      "float64", "double", "fp16",  "bf 16", "torch.", "bfloat", "float", "torch.half"};
  for (const auto& s : bad) {
    SCOPED_TRACE("'" + s + "'");
    DType d = DType::bfloat16;
    EXPECT_FALSE(parse_dtype(s, &d));
    EXPECT_EQ(d, DType::bfloat16);
  }
}

TEST(DType, SpellingsListMatchesTheParser) {
  // The help/error text must list exactly what the parser accepts.
  std::stringstream ss(dtype_spellings());
  std::vector<std::string> listed;
  for (std::string item; std::getline(ss, item, ',');) {
    if (!item.empty() && item[0] == ' ') item.erase(0, 1);
    listed.push_back(item);
  }
  ASSERT_EQ(listed.size(), sizeof(kSpellings) / sizeof(kSpellings[0]));
  for (std::size_t i = 0; i < listed.size(); ++i) {
    DType d;
    EXPECT_TRUE(parse_dtype(listed[i], &d)) << "listed but not accepted: '" << listed[i] << "'";
    EXPECT_EQ(listed[i], kSpellings[i].text);
  }
}

TEST(DType, NamesAndSizes) {
  EXPECT_STREQ(dtype_name(DType::float32), "float32");
  EXPECT_STREQ(dtype_name(DType::bfloat16), "bfloat16");
  EXPECT_STREQ(dtype_name(DType::float16), "float16");
  EXPECT_EQ(dtype_size(DType::float32), 4u);
  EXPECT_EQ(dtype_size(DType::bfloat16), 2u);
  EXPECT_EQ(dtype_size(DType::float16), 2u);
  // Canonical names parse back to the same dtype.
  for (DType d : {DType::float32, DType::bfloat16, DType::float16}) {
    DType back = d == DType::float32 ? DType::float16 : DType::float32;
    ASSERT_TRUE(parse_dtype(dtype_name(d), &back));
    EXPECT_EQ(back, d);
  }
}

TEST(DType, DtypeOfMatchesScalarSize) {
  EXPECT_EQ(dtype_of<float>::value, DType::float32);
  EXPECT_EQ(dtype_of<bf16>::value, DType::bfloat16);
  EXPECT_EQ(dtype_size(dtype_of<float>::value), sizeof(float));
  EXPECT_EQ(dtype_size(dtype_of<bf16>::value), sizeof(bf16));
}

TEST(DType, DispatchYieldsTheScalarType) {
  auto kind = [](auto tag) -> int {
    using T = decltype(tag);
    if (std::is_same<T, float>::value) return 32;
    if (std::is_same<T, bf16>::value) return 16;
    return -1;
  };
  EXPECT_EQ(dispatch_dtype(DType::float32, kind), 32);
  EXPECT_EQ(dispatch_dtype(DType::bfloat16, kind), 16);
  // The dispatched type's dtype_of round-trips.
  auto back = [](auto tag) { return dtype_of<decltype(tag)>::value; };
  EXPECT_EQ(dispatch_dtype(DType::float32, back), DType::float32);
  EXPECT_EQ(dispatch_dtype(DType::bfloat16, back), DType::bfloat16);
  // void-returning callables work too.
  std::size_t seen = 0;
  dispatch_dtype(DType::bfloat16, [&](auto tag) { seen = sizeof(tag); });
  EXPECT_EQ(seen, 2u);
}

TEST(DType, DispatchThrowsForFloat16) {
  bool called = false;
  auto f = [&](auto) {
    called = true;
    return 0;
  };
  EXPECT_THROW(dispatch_dtype(DType::float16, f), InternalError);
  EXPECT_FALSE(called);
  try {
    dispatch_dtype(DType::float16, f);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("float16"), std::string::npos) << e.what();
    EXPECT_EQ(e.exit_code(), 1);
  }
}

}  // namespace
}  // namespace kktrain
