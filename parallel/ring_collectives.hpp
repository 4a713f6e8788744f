// kktrain's own reductions over point-to-point MPI: the reduce-scatter (fp32 and bf16 wires) and
// the all-reduce of the MPI communicator when distributed.collectives picks them (the default).
//
// Why: Open MPI 4.1's MPI_Reduce_scatter_block runs at a tenth of its all-gather's bandwidth on
// shared memory, whatever algorithm it is told to use; NCCL, Gloo and Horovod run their own rings
// over point-to-point transfers, and so does kktrain.
//
// Algorithm: a ring over W ranks, rank r sending to r + 1 and receiving from r - 1. The input is
// W blocks (block k: len[k] elements at in + off[k]); in W - 1 steps each rank receives its
// predecessor's partial sum of one block, adds its own block to it and passes it on, so that
// after step W - 2 rank r holds the sum of block r, written to `out`. Every step moves one block
// in messages of at most `chunk` elements (MpiLimits::ring_chunk_bytes, and never more than
// MpiLimits::max_count): a chunk is summed as soon as it arrives, while it is still in cache, and
// sent on at once, so the next step's transfer of it overlaps this step's later chunks.
//
// Summation order, fixed by the rank count alone (never by message arrival): block b is summed
// along the ring starting after its owner, ((x_{b+1} + x_{b+2}) + ...) + x_b (indices mod W), so
// the same run gives the same bits twice and resume stays bitwise. fp32 blocks add in fp32; bf16
// blocks travel as bf16 and each addition widens both operands to fp32, adds, and rounds the sum
// once to bf16 (nearest even), as the communicator documents. The additions run on the host
// execution space (Kokkos parallel_for over the chunk): the buffers are host memory (device
// buffers are staged through host memory by the caller).
//
// Non-blocking use: start() posts the first step's transfers and returns; finish() runs the rest.
// Reductions complete in the order they were started (finish(id) completes every earlier one
// first), so ranks that start the same reductions in the same order never wait on each other in
// different orders. Each started reduction keeps two scratch blocks until it finishes.
//
// Rule for distributed.collectives: auto (parallel/mpi_communicator.cpp): the ring runs every
// reduce-scatter and all-reduce whose buffers are host memory (CPU builds, and staged buffers);
// device buffers that a GPU-aware MPI takes directly go to the library. The all-gathers and
// all-to-alls stay the library's (it runs them at memory speed).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <deque>
#include <memory>
#include <vector>

#include "core/dtype.hpp"

namespace kktrain {

// The W blocks of one reduction, in elements: block k of the input is len[k] elements at
// in + off[k].
struct RingBlocks {
  std::vector<std::size_t> off, len;
  // W blocks of `count` elements back to back (a reduce-scatter's send buffer).
  static RingBlocks equal(int w, std::size_t count);
  // n elements cut into W near-equal blocks in order, the first n % W one element longer (an
  // all-reduce's buffer).
  static RingBlocks split(int w, std::size_t n);
};

class RingReducer {
 public:
  // Over a duplicate of `comm` (its own message space; collective over comm), messages of
  // chunk_bytes, and of at most max_count elements.
  RingReducer(MPI_Comm comm, std::size_t chunk_bytes, std::size_t max_count);
  ~RingReducer();
  RingReducer(const RingReducer&) = delete;
  RingReducer& operator=(const RingReducer&) = delete;

  // Starts the reduction of this rank's blocks of `in` (fp32 or bf16) into out (len[rank]
  // elements; may be in + off[rank] itself); in and out stay untouched by the caller until
  // finish(). Returns its id.
  int start(const void* in, void* out, const RingBlocks& blocks, DType dtype);
  // Completes reduction `id` and every one started before it.
  void finish(int id);
  // Elements per message for elements of esize bytes.
  std::size_t chunk_elements(std::size_t esize) const;

 private:
  struct Op;
  void run(Op& op);                                 // the steps not done yet, to the end
  std::unique_ptr<char[]> take(std::size_t bytes);  // a scratch block from the pool
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  std::size_t chunk_bytes_, max_count_;
  int next_id_ = 0;
  std::deque<std::unique_ptr<Op>> ops_;  // started, not finished, in start order
  std::vector<std::pair<std::size_t, std::unique_ptr<char[]>>> pool_;  // idle scratch blocks
};

}  // namespace kktrain
