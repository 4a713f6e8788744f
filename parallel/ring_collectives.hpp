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
// Transport (MpiLimits::ring_transport). When every rank of the communicator shares this node, a
// chunk travels through an MPI shared-memory window (MPI_Win_allocate_shared): each rank's window
// holds a few slots (MpiLimits::ring_slots of ring_slot_bytes) that its predecessor writes, the
// raw chunk or its sum stored straight into the slot, and the rank adds from the slot into its own
// next slot or `out`; empty point-to-point messages say "slot filled" (ready) and "slot read"
// (credit). Chunks run in order (chunk c of every step before chunk c + 1), so two or more slots
// never deadlock. Why: Open
// MPI's single-copy path (CMA) between two ranks of one node takes about as long as a rank's own
// memory copy and add together, a transfer the window does not make, and the reduce-scatter
// through the window measured faster (bench/README.md, "Through a shared-memory window"). Otherwise
// (ranks on several nodes, or point_to_point) each chunk is an MPI_Isend / MPI_Irecv pair. The
// summation order is the same either way, and so are the bits. Every wait (a chunk, a signal, a
// send) goes through parallel/peer_wait.hpp: a short spin, then sleeps; a peer that stops answering
// for distributed.stuck_peer_wait_s ends the job.
//
// Non-blocking use: start() posts the first step's transfers and returns (through a window it
// posts nothing: the whole reduction runs in finish()); finish() runs the rest.
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
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "core/dtype.hpp"
#include "parallel/communicator.hpp"

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
  // Over a duplicate of `comm` (its own message space; collective over comm): messages of
  // limits.ring_chunk_bytes, or a shared window per limits.ring_transport; chunks of at most
  // limits.max_count elements either way.
  RingReducer(MPI_Comm comm, const MpiLimits& limits);
  ~RingReducer();
  RingReducer(const RingReducer&) = delete;
  RingReducer& operator=(const RingReducer&) = delete;

  // Starts the reduction of this rank's blocks of `in` (fp32 or bf16) into out (len[rank]
  // elements; may be in + off[rank] itself); in and out stay untouched by the caller until
  // finish(). Returns its id.
  int start(const void* in, void* out, const RingBlocks& blocks, DType dtype);
  // Completes reduction `id` and every one started before it.
  void finish(int id);
  // Elements per message (or slot) for elements of esize bytes.
  std::size_t chunk_elements(std::size_t esize) const;
  // Whether chunks travel through a shared window.
  bool shared() const { return win_ != MPI_WIN_NULL; }

 private:
  struct Op;
  void run(Op& op);                                 // the steps not done yet, to the end
  void run_shared(Op& op);                          // the whole reduction through the window
  void open_window();                               // collective over comm_
  void receive_signal(int from, int tag);           // an empty message (parallel/peer_wait.hpp)
  std::unique_ptr<char[]> take(std::size_t bytes);  // a scratch block from the pool
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  std::size_t chunk_bytes_, max_count_;
  MPI_Win win_ = MPI_WIN_NULL;  // the shared window, when chunks travel through one
  std::size_t slot_bytes_ = 0;
  int slots_ = 0;
  char* inbox_ = nullptr;                           // this rank's slots: its predecessor fills them
  char* outbox_ = nullptr;                          // its successor's slots
  uint64_t written_ = 0, credited_ = 0, read_ = 0;  // slots filled, their credits, slots read
  int next_id_ = 0;
  std::deque<std::unique_ptr<Op>> ops_;  // started, not finished, in start order
  std::vector<std::pair<std::size_t, std::unique_ptr<char[]>>> pool_;  // idle scratch blocks
};

}  // namespace kktrain
