// Communicators: the only way ranks talk to each other.
//
// The trainer is written against this interface; a single-rank run uses SingleCommunicator (no
// MPI calls at all), `mpirun` runs use the MPI communicator (MPI's own collectives), and GPU
// builds the NCCL one. Buffers are Views of the default memory space (device memory on GPU
// builds), their sizes checked against each other; scalar helpers (*_host) work on host values.
//
// Every buffer collective between ranks is counted: stats() gives the payload bytes this rank sent
// and the seconds spent inside collectives. Payload bytes are those of a bandwidth-optimal (ring)
// algorithm: an all-gather of b bytes per rank or a reduce-scatter of W blocks of b bytes sends
// (W - 1) * b bytes from each rank, whatever algorithm the library picks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/collective_impl.hpp"
#include "core/dtype.hpp"
#include "core/kokkos_compat.hpp"

namespace kktrain {

struct CommStats {
  double bytes_sent = 0.0;  // payload bytes sent by this rank (ring-algorithm volume)
  double seconds = 0.0;     // wall time inside buffer collectives
  int64_t calls = 0;
  double alltoall_bytes_sent = 0.0;  // of bytes_sent: by alltoallv_bytes, to other ranks
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Ranks of this job on this node (sharing its memory), this one included.
  virtual int ranks_on_node() const { return 1; }
  virtual std::string name() const = 0;
  // How buffers reach the library: "host", "device (CUDA-aware MPI)", "staged through host".
  virtual std::string buffer_path() const { return "host"; }

  // All-gather: every rank sends send (b bytes); recv (size() * b bytes) holds rank r's at r * b.
  void allgather_bytes(const DBytesU& send, const DBytesU& recv);
  // Reduce-scatter: send holds size() consecutive blocks of count elements of `dtype` (count =
  // recv's elements); recv = the sum over ranks of their block rank(). float32 sums in fp32;
  // bfloat16 moves 2-byte values and each addition is done in fp32 and rounded once to bf16
  // (nearest even).
  void reduce_scatter_sum(const DBytesU& send, const DBytesU& recv, DType dtype);
  // In-place sum across ranks.
  void allreduce_sum(const DViewU<float>& data);
  // All-to-all of blocks of any sizes. `bytes` (size() x size(), the same on every rank):
  // bytes[i * size() + j] is what rank i sends rank j. send holds this rank's blocks for ranks
  // 0, 1, ... back to back; recv receives them from ranks 0, 1, ... back to back (rank i's block
  // for this rank at the sum of bytes[i' * size() + rank()] over i' < i). Blocks of any size (MPI
  // implementations cut calls into pieces whose counts fit an int).
  void alltoallv_bytes(const DBytesU& send, const DBytesU& recv,
                       const std::vector<uint64_t>& bytes);

  // A communicator over some of this one's ranks: those that pass the same color form one,
  // ranked by key (MPI_Comm_split's semantics). Collective over this communicator. Buffer
  // collectives on it are counted in its own stats().
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
  // Every rank's host values, rank-major: out[r * v.size() + i] is rank r's v[i] (every rank
  // passes as many values).
  virtual std::vector<uint64_t> allgather_u64(const std::vector<uint64_t>& v) = 0;

  // reduce_scatter_sum, started now and completed by wait_collective(ticket): send and recv stay
  // untouched until then. The MPI communicator with set_nonblocking(true) starts an
  // MPI_Ireduce_scatter_block where it can (host memory, counts that fit an int); otherwise, and
  // elsewhere, the collective completes before the call returns (NCCL: enqueued on the stream)
  // and the ticket is kDone.
  static constexpr int kDone = -1;
  int reduce_scatter_start(const DBytesU& send, const DBytesU& recv, DType dtype);
  // allgather_bytes the same way (MPI_Iallgather).
  int allgather_start(const DBytesU& send, const DBytesU& recv);
  // Makes the default execution-space instance's later work (and the host's reads of host
  // memory) follow the collective.
  void wait_collective(int ticket);
  // Where work that consumes a started collective's result runs without anything else waiting
  // for it: completes the collective as far as the host must (MPI: MPI_Wait) and returns the
  // execution-space instance ordered after it. NCCL: the communication stream's instance (work
  // there runs beside the compute stream's; communication_done() orders the two); elsewhere, and
  // for kDone, the default instance.
  ExecSpace collective_space(int ticket);
  // A ticket for the work queued on the communication instance so far (NCCL: an event recorded
  // on its stream); wait_collective(ticket) makes the default instance's later work follow it.
  // kDone where that instance is the default one.
  int communication_done();
  // Non-blocking reductions for reduce_scatter_start (distributed.nonblocking_collectives).
  void set_nonblocking(bool on) { nonblocking_ = on; }
  bool nonblocking() const { return nonblocking_; }
  // Who runs the buffer reductions (reduce-scatter, all-reduce) of the MPI communicator
  // (distributed.collectives; parallel/ring_collectives.hpp): kktrain's own over point-to-point
  // MPI, the MPI library's collectives, or `automatic` (the documented rule there). Splits
  // inherit it. The single-rank and NCCL communicators ignore it.
  void set_collectives(CollectiveImpl c) { collectives_ = c; }
  CollectiveImpl collectives() const { return collectives_; }
  // One line saying what runs the buffer collectives, for the training log and the benches.
  virtual std::string collectives_summary() const {
    return name() + " collectives on " + buffer_path() + " buffers";
  }

  // In-place sum of one double on the host (scalars: losses, norms).
  virtual double allreduce_sum_host(double v) = 0;
  // Maximum of one double on the host.
  virtual double allreduce_max_host(double v) = 0;
  // Sum modulo 2^64 of one unsigned 64-bit value on the host (checksums).
  virtual uint64_t allreduce_sum_u64(uint64_t v) = 0;
  // The same for every element of a host vector, in place (one collective).
  virtual void allreduce_sum_u64(std::vector<uint64_t>& v) = 0;
  // In place: every element of `sums` summed and every element of `maxes` maximized over ranks,
  // the two reductions started together and waited for together (one host synchronization).
  virtual void allreduce_host(std::vector<double>& sums, std::vector<double>& maxes) = 0;
  // Rank `root`'s bytes, on every rank (host; e.g. a file's index read by one rank).
  virtual void broadcast_host(std::string& bytes, int root) = 0;
  // Logical AND of a host flag across ranks (agreement on errors and non-finite steps).
  virtual bool all_agree(bool ok) = 0;
  // The lowest rank that passes failed = true, or size() when none does. A failing rank waits at
  // most `failed_wait_s` seconds for the others to join and returns -1 when they have not (they
  // are stuck in some other collective: the caller ends the job with abort()).
  virtual int first_failing_rank(bool failed, double failed_wait_s) = 0;
  // Ends every rank of the job at once with `exit_code` (the last resort of parallel/agree.hpp).
  [[noreturn]] virtual void abort(int exit_code) = 0;
  virtual void barrier() = 0;

  const CommStats& stats() const { return stats_; }
  void reset_stats() { stats_ = CommStats(); }

 protected:
  // The collectives on raw pointers into the default memory space, sizes already checked.
  virtual void allgather_impl(const void* send, void* recv, std::size_t bytes) = 0;
  virtual void reduce_scatter_impl(const void* send, void* recv, std::size_t count,
                                   DType dtype) = 0;
  virtual void allreduce_impl(float* data, std::size_t n) = 0;
  // Defaults: the blocking collective, kDone; nothing to wait for.
  virtual int reduce_scatter_start_impl(const void* send, void* recv, std::size_t count,
                                        DType dtype) {
    reduce_scatter_impl(send, recv, count, dtype);
    return kDone;
  }
  virtual int allgather_start_impl(const void* send, void* recv, std::size_t bytes) {
    allgather_impl(send, recv, bytes);
    return kDone;
  }
  virtual void wait_impl(int /*ticket*/) {}
  // Defaults: the host waits for the collective; its results are ordered before the default
  // instance's later work.
  virtual ExecSpace collective_space_impl(int ticket) {
    wait_impl(ticket);
    return ExecSpace();
  }
  virtual int communication_done_impl() { return kDone; }
  // bytes checked to be size() x size() and to fit send and recv.
  virtual void alltoallv_impl(const char* send, char* recv, const std::vector<uint64_t>& bytes) = 0;
  CommStats stats_;
  bool nonblocking_ = false;
  CollectiveImpl collectives_ = CollectiveImpl::automatic;
};

class SingleCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "single"; }
  double allreduce_sum_host(double v) override { return v; }
  double allreduce_max_host(double v) override { return v; }
  uint64_t allreduce_sum_u64(uint64_t v) override { return v; }
  void allreduce_sum_u64(std::vector<uint64_t>&) override {}
  void allreduce_host(std::vector<double>&, std::vector<double>&) override {}
  void broadcast_host(std::string&, int) override {}
  bool all_agree(bool ok) override { return ok; }
  int first_failing_rank(bool failed, double) override { return failed ? 0 : 1; }
  [[noreturn]] void abort(int exit_code) override;
  void barrier() override {}
  std::unique_ptr<Communicator> split(int, int) override {
    return std::make_unique<SingleCommunicator>();
  }
  std::vector<uint64_t> allgather_u64(const std::vector<uint64_t>& v) override { return v; }

 protected:
  void allgather_impl(const void* send, void* recv, std::size_t bytes) override;
  void reduce_scatter_impl(const void* send, void* recv, std::size_t count, DType dtype) override;
  void allreduce_impl(float*, std::size_t) override {}
  void alltoallv_impl(const char* send, char* recv, const std::vector<uint64_t>& bytes) override;
};

// How kktrain's ring reductions move their chunks between ranks (MpiLimits::ring_transport).
enum class RingTransport {
  automatic,       // a shared window when every rank shares this node, else point_to_point
  point_to_point,  // MPI_Isend / MPI_Irecv of each chunk; the library copies it
};

// Limits of the MPI and NCCL communicators, fixed when one is made (splits inherit them).
struct MpiLimits {
  // The largest count one MPI call takes: INT_MAX (Open MPI 4.1 has no MPI-4 large-count calls);
  // larger collectives run in pieces. Tests lower it (e.g. 5) so that small ones split the same
  // way.
  std::size_t max_count = 0x7fffffff;
  // Bytes per message of kktrain's ring reductions (parallel/ring_collectives.hpp): a chunk is
  // summed while it is in cache. Tests lower it so that small reductions run in many chunks.
  std::size_t ring_chunk_bytes = std::size_t{1} << 20;
  // How the ring's chunks travel (parallel/ring_collectives.hpp): automatic takes a shared-memory
  // window when every rank of the communicator is on one node, point-to-point messages otherwise;
  // tests force point_to_point to check that path on one node.
  RingTransport ring_transport = RingTransport::automatic;
  // Through a shared window: each rank's window holds ring_slots slots of ring_slot_bytes that its
  // predecessor fills. 256 KiB slots were the fastest of 64 KiB, 256 KiB and 1 MiB, and 2 or 4
  // slots within the noise of each other (bench/README.md, "Through a shared-memory window"). At
  // least 2 slots (fewer could deadlock the ring).
  std::size_t ring_slot_bytes = std::size_t{256} << 10;
  int ring_slots = 4;
};

// True when this process was started by an MPI launcher (mpirun/srun/mpiexec).
bool launched_by_mpi();

// Owns MPI initialization for the process: initializes MPI only when launched by an MPI launcher
// (so plain single-rank commands never touch MPI), finalizes on destruction.
class MpiRuntime {
 public:
  MpiRuntime(int* argc, char*** argv);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;
  bool active() const { return active_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  // The communicator for this process: single-rank without a launcher or with one rank; with
  // several ranks NCCL when the build has it and Kokkos runs on CUDA, otherwise MPI; `limits`
  // (production defaults unless a test lowers them) for the multi-rank ones.
  std::unique_ptr<Communicator> make_communicator(const MpiLimits& limits = {}) const;

 private:
  bool active_ = false;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace kktrain
