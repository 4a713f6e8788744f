// The data movements of FSDP units (parallel/fsdp.hpp), each one launch over a unit's
// parameters (a TensorTable of FsdpTensor) on the execution-space instance it is given: the
// compute instance, or for the reduce-scatter's unpack the instance its collective completes on
// (Communicator::collective_space: NCCL's communication stream). Index arithmetic maps between
// the full (rows, row_len) tensor and its rank-major padded blocks. Used by parallel/fsdp.cpp
// only; the comment above each says what src, dst and n count for it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/bf16.hpp"
#include "core/kokkos_compat.hpp"
#include "core/launch.hpp"
#include "parallel/fsdp.hpp"

namespace kktrain {
namespace fsdp_kernels {

// Pack: block + dst bytes (shard_rows * row_len) W = shard S at src (elements) of the flat
// storage, n local elements, zero padding past the local rows.
template <class S, class W>
void pack_shards_kernel(const ExecSpace& space, char* block, const S* storage,
                        const TensorTable<FsdpTensor>& t) {
  const DView<FsdpTensor> e = t.entries;
  for_tensor_blocks(
      space, "fsdp_pack_shards", t.blocks,
      KOKKOS_LAMBDA(const int64_t k, const int64_t lo, const int64_t hi) {
        const FsdpTensor f = e(k);
        W* wire = reinterpret_cast<W*>(block + f.dst);
        const S* shard = storage + f.src;
        for (int64_t i = lo; i < hi; ++i) store_as(wire, i, i < f.n ? load_f32(shard, i) : 0.0f);
      });
}

// Unpack: out + dst bytes (rows * row_len) O = the rank-major blocks of recv (block_bytes apart,
// the parameter's shard at byte src in each). Rank r's shard is the full tensor's elements
// [r * per_rank, (r + 1) * per_rank) (per_rank = shard_rows * row_len, whole rows), so a range of
// elements is one contiguous copy per rank it spans: one division per rank, not per element.
template <class W, class O>
void unpack_weights_kernel(const ExecSpace& space, char* out, const char* recv,
                           std::size_t block_bytes, const TensorTable<FsdpTensor>& t) {
  const DView<FsdpTensor> e = t.entries;
  for_tensor_blocks(
      space, "fsdp_unpack_weights", t.blocks,
      KOKKOS_LAMBDA(const int64_t k, const int64_t lo, const int64_t hi) {
        const FsdpTensor f = e(k);
        O* full = reinterpret_cast<O*>(out + f.dst);
        const int64_t per_rank = f.shard_rows * f.row_len;
        for (int64_t r = lo / per_rank, a = lo; a < hi; ++r) {
          const int64_t b = (r + 1) * per_rank < hi ? (r + 1) * per_rank : hi;
          const W* src = reinterpret_cast<const W*>(recv + r * block_bytes + f.src);
          const int64_t base = r * per_rank;
          for (int64_t i = a; i < b; ++i) store_as(full, i, load_f32(src, i - base));
          a = b;
        }
      });
}

// One rank's compute copies: out + dst bytes (n) O = rnd(storage S at src elements (n)).
template <class S, class O>
void cast_weights_kernel(const ExecSpace& space, char* out, const S* storage,
                         const TensorTable<FsdpTensor>& t) {
  const DView<FsdpTensor> e = t.entries;
  for_tensor_blocks(
      space, "fsdp_cast_weights", t.blocks,
      KOKKOS_LAMBDA(const int64_t k, const int64_t lo, const int64_t hi) {
        const FsdpTensor f = e(k);
        O* d = reinterpret_cast<O*>(out + f.dst);
        const S* src = storage + f.src;
        const bool round = f.round != 0;
        for (int64_t i = lo; i < hi; ++i) {
          const float x = load_f32(src, i);
          store_as(d, i, round ? round_to_bf16(x) : x);
        }
      });
}

// The gradient of a compute-dtype tensor is rounded to that dtype.
KOKKOS_INLINE_FUNCTION float compute_grad(float g, bool round) {
  return round ? round_to_bf16(g) : g;
}

// Accumulate: acc (n) R = [acc +] rnd(grads at src (n)): the reduce-dtype accumulators of a
// micro-batch that does not synchronize.
template <class R>
void accumulate_kernel(const ExecSpace& space, const float* grads, bool first,
                       const TensorTable<FsdpTensor>& t) {
  const DView<FsdpTensor> e = t.entries;
  for_tensor_blocks(
      space, "fsdp_accumulate", t.blocks,
      KOKKOS_LAMBDA(const int64_t k, const int64_t lo, const int64_t hi) {
        const FsdpTensor f = e(k);
        R* acc = static_cast<R*>(f.acc);
        const float* g = grads + f.src;
        const bool round = f.round != 0;
        for (int64_t i = lo; i < hi; ++i) {
          const float x = compute_grad(g[i], round);
          store_as(acc, i, first ? x : load_f32(acc, i) + x);
        }
      });
}

// Reduce-scatter pack: send holds W blocks of red_count R; the parameter's rows of rank r go to
// block r at element dst, padded rows are zero. Values: rnd(grads at src) [+ acc] in R. Element i
// of the padded (W * per_rank) range is element i of the full tensor (rank r's rows are rows
// r * shard_rows.. in order), real while i < rows * row_len; it goes to block r = i / per_rank at
// i - r * per_rank: one division per rank a range spans.
template <class R>
void reduce_pack_kernel(const ExecSpace& space, R* send, const float* grads, int64_t red_count,
                        bool with_acc, const TensorTable<FsdpTensor>& t) {
  const DView<FsdpTensor> e = t.entries;
  for_tensor_blocks(
      space, "fsdp_reduce_pack", t.blocks,
      KOKKOS_LAMBDA(const int64_t k, const int64_t lo, const int64_t hi) {
        const FsdpTensor f = e(k);
        const int64_t per_rank = f.shard_rows * f.row_len, real = f.rows * f.row_len;
        const float* g = grads + f.src;
        const R* acc = static_cast<const R*>(f.acc);
        const bool round = f.round != 0;
        for (int64_t r = lo / per_rank, a = lo; a < hi; ++r) {
          const int64_t b = (r + 1) * per_rank < hi ? (r + 1) * per_rank : hi;
          const int64_t at = r * red_count + f.dst - r * per_rank;  // send[at + i]: element i
          const int64_t c = b < real ? b : (a > real ? a : real);   // [a, c) real, [c, b) padding
          if (with_acc) {
            for (int64_t i = a; i < c; ++i)
              store_as(send, at + i, compute_grad(g[i], round) + load_f32(acc, i));
          } else {
            for (int64_t i = a; i < c; ++i) store_as(send, at + i, compute_grad(g[i], round));
          }
          for (int64_t i = c; i < b; ++i) store_as(send, at + i, 0.0f);
          a = b;
        }
      });
}

// Reduce-scatter unpack: the received shard (n) R at src, summed over micro-batches in the fp32
// shard accumulator acc (n) when the step reduces every micro-batch (the first sets it); the
// last micro-batch stores (sum / world) into the shard gradient at dst (elements) of the flat
// storage-dtype gradient G. acc may be the fp32 shard gradient itself; with first and last both
// set (one reduction a step) it is not touched.
template <class R, class G>
void reduce_unpack_kernel(const ExecSpace& space, G* grad, const R* recv, float world, bool first,
                          bool last, const TensorTable<FsdpTensor>& t) {
  const DView<FsdpTensor> e = t.entries;
  for_tensor_blocks(
      space, "fsdp_reduce_unpack", t.blocks,
      KOKKOS_LAMBDA(const int64_t k, const int64_t lo, const int64_t hi) {
        const FsdpTensor f = e(k);
        float* acc = static_cast<float*>(f.acc);
        for (int64_t i = lo; i < hi; ++i) {
          const float x = load_f32(recv + f.src, i);
          const float sum = first ? x : acc[i] + x;
          if (last) {
            store_as(grad + f.dst, i, sum / world);
          } else {
            acc[i] = sum;
          }
        }
      });
}

}  // namespace fsdp_kernels
}  // namespace kktrain
