// Rounding-point invariants: every tensor the precision rules (model/kernels.hpp,
// model/transformer.hpp, docs/precision.md) say is bf16 holds only bf16-representable values
// where it leaves its boundary, seen through ForwardOptions::probe (core/tensor_probe.hpp):
//  - bf16 compute (fp32 and bf16 storage), LM head in one chunk and in chunks of 3 rows: the
//    gradient w.r.t. the head's input (into the final norm), main head and MTP head,
//  - bf16 storage and compute on one rank (bf16 residual stream): each layer's output and the
//    final norm's output (the hidden states),
//  - and, so the check is seen to discriminate, fp32 compute: that gradient is not all bf16.
// A dropped rounding makes kktrain more accurate and so passes the parity tolerances; it fails
// here.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/kokkos_compat.hpp"
#include "core/tensor_probe.hpp"
#include "model/transformer.hpp"
#include "tests/unit/dtype_types.hpp"
#include "tests/unit/model_test_util.hpp"

namespace kktrain {
namespace {

using testing_util::precision;

// Per boundary name: how many times it was seen, elements seen, and how many of them are not
// bf16-representable (low 16 bits of the fp32 pattern set), with the first such value.
struct Seen {
  int calls = 0;
  int64_t elements = 0, not_bf16 = 0;
  float first_bad = 0.0f;
};

class Bf16Probe : public TensorProbe {
 public:
  std::map<std::string, Seen> seen_;
  void seen(const char* name, const float* data, int64_t n) override {
    Kokkos::View<const float*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> d(data, n);
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), d);
    Seen& s = seen_[name];
    ++s.calls;
    s.elements += n;
    for (int64_t i = 0; i < n; ++i) {
      uint32_t u;
      std::memcpy(&u, &h(i), sizeof(u));
      if ((u & 0xffffu) != 0 && s.not_bf16++ == 0) s.first_bad = h(i);
    }
  }
};

ModelConfig tiny_model(int64_t chunk) {
  ModelConfig m;
  m.vocab_size = 37;
  m.hidden_size = 16;
  m.num_layers = 2;
  m.num_heads = 4;
  m.num_kv_heads = 2;
  m.intermediate_size = 24;
  m.max_seq_len = 16;
  m.init_std = 0.3;
  m.seed = 5;
  m.mtp_num_layers = 1;
  m.loss_chunk_tokens = chunk;
  return m;
}

// One forward with prepare_backward (the head's gradient is computed there) and hidden states,
// B = 2, T = 7 (N = 14 rows).
std::map<std::string, Seen> probe_forward(DType storage, DType compute, int64_t chunk) {
  Transformer m(tiny_model(chunk), precision(storage, compute));
  m.init_weights();
  std::mt19937 rng(3);
  std::vector<int32_t> ids(14), targets(14);
  for (auto& x : ids) x = static_cast<int32_t>(rng() % 37);
  for (auto& x : targets) x = static_cast<int32_t>(rng() % 37);
  Bf16Probe probe;
  ForwardOptions fo;
  fo.prepare_backward = true;
  fo.output_hidden_states = true;
  fo.probe = &probe;
  m.forward(ids.data(), targets.data(), 2, 7, fo);
  m.backward();
  return probe.seen_;
}

void expect_bf16(const std::map<std::string, Seen>& seen, const std::string& name, int calls,
                 const std::string& where) {
  ASSERT_TRUE(seen.count(name)) << name << " never seen; " << where;
  const Seen& s = seen.at(name);
  EXPECT_EQ(s.calls, calls) << name << "; " << where;
  EXPECT_EQ(s.elements, calls * 14 * 16) << name << "; " << where;
  EXPECT_EQ(s.not_bf16, 0) << name << ": " << s.not_bf16 << " of " << s.elements
                           << " elements are not bf16-representable (first " << s.first_bad << "); "
                           << where;
}

std::string where(DType storage, DType compute, int64_t chunk) {
  return std::string("storage ") + dtype_name(storage) + ", compute " + dtype_name(compute) +
         ", loss_chunk_tokens " + std::to_string(chunk);
}

// 14 rows: one chunk (the default 1024), chunks of 3 (four full and a partial one). Typed over
// the storage dtype (float, bf16).
template <class TS>
class RoundingPointsStorage : public ::testing::Test {};
TYPED_TEST_SUITE(RoundingPointsStorage, testing_util::Dtypes);

TYPED_TEST(RoundingPointsStorage, HeadInputGradientIsBf16WithBf16Compute) {
  const DType storage = dtype_of<TypeParam>::value;
  for (const int64_t chunk : {int64_t{1024}, int64_t{3}}) {
    const auto seen = probe_forward(storage, DType::bfloat16, chunk);
    expect_bf16(seen, "head.dxf", 1, where(storage, DType::bfloat16, chunk));
    expect_bf16(seen, "mtp.dxf", 1, where(storage, DType::bfloat16, chunk));
  }
}

TEST(RoundingPoints, Bf16StreamBlockOutputsAndHiddenStatesAreBf16) {
  for (const int64_t chunk : {int64_t{1024}, int64_t{3}}) {
    const auto seen = probe_forward(DType::bfloat16, DType::bfloat16, chunk);
    expect_bf16(seen, "block.out", 2, where(DType::bfloat16, DType::bfloat16, chunk));
    expect_bf16(seen, "head.hidden", 1, where(DType::bfloat16, DType::bfloat16, chunk));
  }
}

// The check above can see a value that is not bf16: in fp32 compute the same gradient and the
// fp32 stream's layer outputs are not rounded, and most of their elements are not bf16.
TEST(RoundingPoints, Fp32ComputeValuesAreNotAllBf16) {
  const auto seen = probe_forward(DType::float32, DType::float32, 3);
  for (const char* name : {"head.dxf", "mtp.dxf", "block.out", "head.hidden"}) {
    ASSERT_TRUE(seen.count(name)) << name;
    EXPECT_GT(seen.at(name).not_bf16, seen.at(name).elements / 2) << name;
  }
}

}  // namespace
}  // namespace kktrain
