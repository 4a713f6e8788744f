// Host-side collectives over an MPI communicator (MPI_COMM_WORLD, or a split of it), shared by
// the MPI and NCCL communicators (NCCL moves device buffers; scalars, agreement and barriers
// still go through MPI).
#pragma once

#include <mpi.h>

#include <cstddef>

#include "parallel/communicator.hpp"

namespace kktrain {

class MpiWorld : public Communicator {
 public:
  // Over `comm` (MPI_COMM_WORLD, or a communicator split() made, which this object frees).
  explicit MpiWorld(MPI_Comm comm = MPI_COMM_WORLD, const MpiLimits& limits = {});
  ~MpiWorld() override;
  MpiWorld(const MpiWorld&) = delete;
  MpiWorld& operator=(const MpiWorld&) = delete;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int ranks_on_node() const override { return ranks_on_node_; }
  double allreduce_sum_host(double v) override;
  double allreduce_max_host(double v) override;
  uint64_t allreduce_sum_u64(uint64_t v) override;
  void allreduce_sum_u64(std::vector<uint64_t>& v) override;
  void allreduce_host(std::vector<double>& sums, std::vector<double>& maxes) override;
  void broadcast_host(std::string& bytes, int root) override;
  bool all_agree(bool ok) override;
  int first_failing_rank(bool failed, double failed_wait_s) override;
  [[noreturn]] void abort(int exit_code) override;  // the whole job (MPI_COMM_WORLD)
  void barrier() override;
  std::vector<uint64_t> allgather_u64(const std::vector<uint64_t>& v) override;

 protected:
  // The largest count one MPI call takes (MpiLimits::max_count).
  std::size_t max_count() const { return limits_.max_count; }
  // The communicator split() makes (comm_ split by color and key; MPI_COMM_NULL is not returned:
  // every rank passes a color).
  MPI_Comm split_comm(int color, int key) const;
  MpiLimits limits_;
  MPI_Comm comm_ = MPI_COMM_WORLD;
  // A duplicate of comm_ for first_failing_rank alone: a failing rank's agreement then never
  // matches a collective the other ranks are inside on comm_ (Open MPI matches non-blocking
  // collectives of any kind by their order on a communicator: an agreement meeting a started
  // reduce-scatter truncated and crashed), so it waits its bounded time and aborts the job.
  MPI_Comm agree_comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  int ranks_on_node_ = 1;
};

// Whether the MPI library accepts this build's device pointers, as far as it tells (Open MPI's
// MPIX_Query_cuda_support in CUDA builds, MPIX_Query_rocm_support in HIP builds); false when it
// cannot say or the build has no GPU (collectives then stage device buffers through host memory).
bool mpi_is_gpu_aware();

}  // namespace kktrain
