// Launch shapes at sizes past 2^32 (core/launch.hpp, core/kokkos_compat.hpp): a 7B model's
// optimizer launch covers ~7e9 elements, more than a 32-bit index reaches. The policies are 64-bit
// by a static_assert; these tests run launches whose index space really is larger than 2^32 and
// check that the last index is reached and that every element of a tensor larger than 2^32 is
// covered exactly once by the block table. Also the reducing variant of the block launch
// (for_tensor_blocks_reduce) with a struct as its value.
#include <gtest/gtest.h>

#include <cstdint>

#include "core/kokkos_compat.hpp"
#include "core/launch.hpp"

namespace kktrain {
namespace {

constexpr int64_t kPast32 = (int64_t(1) << 32) + 3;  // 4294967299 indices

// (Kernels live in free functions: CUDA's extended lambdas cannot sit in a test body.)
int64_t largest_index(int64_t n) {
  int64_t largest = -1;
  Kokkos::parallel_reduce(
      "max_index", RangePolicy(0, n),
      KOKKOS_LAMBDA(const int64_t i, int64_t& m) { m = i > m ? i : m; },
      Kokkos::Max<int64_t>(largest));
  return largest;
}

using Pair = Kokkos::View<int64_t[2], MemSpace>;

// Per tensor t: the elements its blocks cover and the largest element index reached.
void cover(const TensorBlocks& blocks, const Pair& covered, const Pair& last) {
  for_tensor_blocks(
      "cover", blocks, KOKKOS_LAMBDA(const int64_t t, const int64_t lo, const int64_t hi) {
        Kokkos::atomic_add(&covered(t), hi - lo);
        Kokkos::atomic_fetch_max(&last(t), hi - 1);
      });
}

TEST(Launch, RangePolicyReachesIndicesPast32Bits) {
  // A reduction over the whole range: the largest index seen.
  EXPECT_EQ(largest_index(kPast32), kPast32 - 1);
}

TEST(Launch, TensorBlocksCoverATensorPast32BitsExactlyOnce) {
  // One tensor of 2^32 + 3 elements and a small one after it: the summed lengths of the blocks
  // each tensor receives (one for_tensor_blocks launch) equal the tensors' sizes, and the largest
  // element index reached is the last one.
  const std::vector<int64_t> sizes = {kPast32, 5};
  const TensorBlocks blocks(sizes, int64_t(1) << 22);
  Pair covered("covered"), last("last");
  cover(blocks, covered, last);
  auto c = Kokkos::create_mirror_view_and_copy(HostSpace(), covered);
  auto l = Kokkos::create_mirror_view_and_copy(HostSpace(), last);
  EXPECT_EQ(c(0), kPast32);
  EXPECT_EQ(c(1), 5);
  EXPECT_EQ(l(0), kPast32 - 1);
  EXPECT_EQ(l(1), 4);
}

// A two-field sum for for_tensor_blocks_reduce: elements seen and the sum of their indices.
struct Seen {
  int64_t elements = 0, index_sum = 0;
  KOKKOS_INLINE_FUNCTION Seen& operator+=(const Seen& o) {
    elements += o.elements;
    index_sum += o.index_sum;
    return *this;
  }
#if KOKKOS_VERSION < 40000  // Kokkos 3.x joins reduction values through volatile references
  KOKKOS_INLINE_FUNCTION void operator+=(const volatile Seen& o) volatile {
    elements += o.elements;
    index_sum += o.index_sum;
  }
#endif
};

}  // namespace
}  // namespace kktrain

namespace Kokkos {
template <>
struct reduction_identity<kktrain::Seen> {
  KOKKOS_FORCEINLINE_FUNCTION static kktrain::Seen sum() { return kktrain::Seen(); }
};
}  // namespace Kokkos

namespace kktrain {
namespace {

// Every element once, with its index in its tensor plus 1000 x the tensor; `into` is overwritten.
void seen(const TensorBlocks& blocks, Seen& into) {
  for_tensor_blocks_reduce(
      "seen", blocks,
      KOKKOS_LAMBDA(const int64_t t, const int64_t lo, const int64_t hi, Seen& acc) {
        for (int64_t i = lo; i < hi; ++i) {
          acc.elements += 1;
          acc.index_sum += 1000 * t + i;
        }
      },
      into);
}

TEST(Launch, TensorBlocksReduceSumsEveryElementOnce) {
  // Tensors of 0, 7, 33 and 5 elements in blocks of 6 (partial blocks, an empty tensor).
  const std::vector<int64_t> sizes = {0, 7, 33, 5};
  const TensorBlocks blocks(sizes, 6);
  Seen total;
  total.elements = -1;  // overwritten, not added to
  seen(blocks, total);
  int64_t want = 0;
  for (std::size_t t = 0; t < sizes.size(); ++t)
    for (int64_t i = 0; i < sizes[t]; ++i) want += 1000 * static_cast<int64_t>(t) + i;
  EXPECT_EQ(total.elements, 45);
  EXPECT_EQ(total.index_sum, want);
  // No blocks at all: the zero.
  Seen none;
  none.elements = 7;
  seen(TensorBlocks(std::vector<int64_t>{0, 0}, 6), none);
  EXPECT_EQ(none.elements, 0);
}

}  // namespace
}  // namespace kktrain
