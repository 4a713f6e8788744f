// Launch shapes shared by every module: row-wise kernels (for_rows) and many tensors in one
// launch (for_tensor_blocks, the multi-tensor pattern of fused optimizers), each with one shape
// for GPUs (one thread per element, consecutive threads on consecutive elements) and one for CPUs
// (one call per row or block, whose inner loop the compiler vectorizes). Each has a reducing
// variant (for_rows_reduce, for_tensor_blocks_reduce) with the same shapes, for a kernel that also
// sums something over what it did.
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/kokkos_compat.hpp"

namespace kktrain {

// True when kernels run where the host can reach their memory (Serial, OpenMP, Threads).
constexpr bool kHostKernels = Kokkos::SpaceAccessibility<HostSpace, MemSpace>::accessible;

// Every element of a (rows, cols) index space, the shape of every row-wise kernel: f(r, c0, c1)
// handles columns [c0, c1) of row r, doing its per-row work (index decoding, row pointers) once
// per call. GPU builds call it once per element (c1 = c0 + 1): one thread per element,
// consecutive threads on consecutive columns, so loads and stores of a row coalesce. CPU builds
// call it once per row (c0 = 0, c1 = cols): the column loop is a plain inner loop the compiler
// vectorizes. f is a KOKKOS_LAMBDA.
template <class F>
void for_rows_impl(std::true_type /*host*/, const ExecSpace& space, const char* name, int64_t rows,
                   int64_t cols, const F& f) {
  Kokkos::parallel_for(
      name, RangePolicy(space, 0, rows),
      KOKKOS_LAMBDA(const int64_t r) { f(r, int64_t(0), cols); });
}
template <class F>
void for_rows_impl(std::false_type /*device*/, const ExecSpace& space, const char* name,
                   int64_t rows, int64_t cols, const F& f) {
  if (cols == 0) return;
  Kokkos::parallel_for(
      name, RangePolicy(space, 0, rows * cols), KOKKOS_LAMBDA(const int64_t i) {
        const int64_t c = i % cols;
        f(i / cols, c, c + 1);
      });
}
// On the execution-space instance `space` (a stream of its own on GPUs: the communication
// side's kernels, parallel/fsdp_kernels.hpp; the compute kernels, ops/kernels.hpp), ordered after
// the work queued on it before.
template <class F>
void for_rows(const ExecSpace& space, const char* name, int64_t rows, int64_t cols, const F& f) {
  for_rows_impl(std::integral_constant<bool, kHostKernels>(), space, name, rows, cols, f);
}

// Where a reduction's sum goes: a host value (the launch waits for the device to fill it) or a
// rank-0 View in device memory (filled in the execution space's order, no wait).
template <class Result>
struct ReduceInto {
  using value_type = Result;
  static Kokkos::Sum<Result> sum(Result& r) { return Kokkos::Sum<Result>(r); }
  static void zero(Result& r) { r = Kokkos::reduction_identity<Result>::sum(); }
};
template <class Value>
struct ReduceInto<const Kokkos::View<Value, MemSpace>> {
  using value_type = Value;
  static Kokkos::Sum<Value, MemSpace> sum(const Kokkos::View<Value, MemSpace>& r) {
    return Kokkos::Sum<Value, MemSpace>(r);
  }
  static void zero(const Kokkos::View<Value, MemSpace>& r) {
    Kokkos::parallel_for(
        "reduce_into_zero", RangePolicy(0, 1),
        KOKKOS_LAMBDA(const int64_t) { r() = Kokkos::reduction_identity<Value>::sum(); });
  }
};
template <class Value>
struct ReduceInto<Kokkos::View<Value, MemSpace>> : ReduceInto<const Kokkos::View<Value, MemSpace>> {
};

// for_rows with a sum: f(r, c0, c1, acc) adds what it computes for its columns into acc, and
// total receives the sum over the whole index space. Value is a struct with += and a
// Kokkos::reduction_identity<Value>::sum() (its zero); total is a Value or a device
// Kokkos::View<Value, MemSpace> (ReduceInto); the launch shape is for_rows's.
template <class F, class Result>
void for_rows_reduce_impl(std::true_type /*host*/, const char* name, int64_t rows, int64_t cols,
                          const F& f, Result& total) {
  using Value = typename ReduceInto<Result>::value_type;
  Kokkos::parallel_reduce(
      name, RangePolicy(0, rows),
      KOKKOS_LAMBDA(const int64_t r, Value& acc) { f(r, int64_t(0), cols, acc); },
      ReduceInto<Result>::sum(total));
}
template <class F, class Result>
void for_rows_reduce_impl(std::false_type /*device*/, const char* name, int64_t rows, int64_t cols,
                          const F& f, Result& total) {
  using Value = typename ReduceInto<Result>::value_type;
  Kokkos::parallel_reduce(
      name, RangePolicy(0, rows * cols),
      KOKKOS_LAMBDA(const int64_t i, Value& acc) {
        const int64_t c = i % cols;
        f(i / cols, c, c + 1, acc);
      },
      ReduceInto<Result>::sum(total));
}
template <class F, class Result>
void for_rows_reduce(const char* name, int64_t rows, int64_t cols, const F& f, Result& total) {
  if (rows == 0 || cols == 0) {
    ReduceInto<Result>::zero(total);
    return;
  }
  for_rows_reduce_impl(std::integral_constant<bool, kHostKernels>(), name, rows, cols, f, total);
}

// ---- many tensors in one launch ----------------------------------------------------------------

// A piece of one tensor: elements [begin, end) of tensor `tensor` (an index into the caller's own
// per-tensor table).
struct TensorBlock {
  int64_t tensor;
  int64_t begin, end;
};

// The element ranges of a list of tensors cut into blocks of at most block_len elements (even,
// so a block starts at an even element of its tensor), as a device table built once on the host.
// One launch covers every block: a kernel over all of an optimizer's parameters, or over all of a
// unit's weights, is one launch however many tensors there are.
class TensorBlocks {
 public:
  TensorBlocks() = default;
  // sizes: element count of each tensor (0 allowed: no block). block_len 0: the backend's default.
  explicit TensorBlocks(const std::vector<int64_t>& sizes, int64_t block_len = 0);
  int64_t count() const { return count_; }
  int64_t block_len() const { return block_len_; }
  const DView<TensorBlock>& table() const { return table_; }
  // CPUs: 16384 elements (a block's arrays fit in L2, enough blocks for every thread); GPUs: 2048
  // (the last, partial block of a tensor leaves few threads idle).
  static int64_t default_block_len() { return kHostKernels ? 16384 : 2048; }

 private:
  DView<TensorBlock> table_;
  int64_t count_ = 0, block_len_ = 0;
};

// A launch's per-tensor table (Entry: the caller's offsets and flags, one per tensor) and its
// blocks, both in device memory, built once on the host.
template <class Entry>
struct TensorTable {
  DView<Entry> entries;
  TensorBlocks blocks;
  TensorTable() = default;
  // entries[t] covers sizes[t] elements.
  TensorTable(const std::vector<Entry>& e, const std::vector<int64_t>& sizes, int64_t block_len = 0)
      : entries("tensor_table", e.size()), blocks(sizes, block_len) {
    Kokkos::deep_copy(entries, HViewU<const Entry>(e.data(), e.size()));
  }
};

// f(tensor, lo, hi) for every element range of every block: elements [lo, hi) of `tensor`, with
// the for_rows launch shape (GPUs: one element per call; CPUs: a whole block per call), on
// `space` or the default instance.
template <class F>
void for_tensor_blocks(const ExecSpace& space, const char* name, const TensorBlocks& blocks,
                       const F& f) {
  const DView<TensorBlock> t = blocks.table();
  for_rows(
      space, name, blocks.count(), blocks.block_len(),
      KOKKOS_LAMBDA(const int64_t b, const int64_t c0, const int64_t c1) {
        const TensorBlock k = t(b);
        const int64_t lo = k.begin + c0;
        const int64_t hi = k.begin + c1 < k.end ? k.begin + c1 : k.end;
        if (lo < hi) f(k.tensor, lo, hi);
      });
}
template <class F>
void for_tensor_blocks(const char* name, const TensorBlocks& blocks, const F& f) {
  for_tensor_blocks(ExecSpace(), name, blocks, f);
}

// for_tensor_blocks with a sum (for_rows_reduce): f(tensor, lo, hi, acc) adds into acc what it
// computes for its elements; total receives the sum over every block. The multi-tensor update
// and a count over what it did, in one launch.
template <class F, class Result>
void for_tensor_blocks_reduce(const char* name, const TensorBlocks& blocks, const F& f,
                              Result& total) {
  using Value = typename ReduceInto<Result>::value_type;
  const DView<TensorBlock> t = blocks.table();
  for_rows_reduce(
      name, blocks.count(), blocks.block_len(),
      KOKKOS_LAMBDA(const int64_t b, const int64_t c0, const int64_t c1, Value& acc) {
        const TensorBlock k = t(b);
        const int64_t lo = k.begin + c0;
        const int64_t hi = k.begin + c1 < k.end ? k.begin + c1 : k.end;
        if (lo < hi) f(k.tensor, lo, hi, acc);
      },
      total);
}

}  // namespace kktrain
