// Communicators: the only way ranks talk to each other.
//
// The trainer is written against this interface; a single-rank run uses SingleCommunicator (no
// MPI calls at all), `mpirun` runs use MpiCommunicator, and GPU builds can add the NCCL one.
// Buffers are device pointers of length n; reductions are sums unless named otherwise.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace kktrain {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;
  // In-place sum across ranks of n floats.
  virtual void allreduce_sum(float* data, std::size_t n) = 0;
  // In-place sum of one double on the host (scalars: losses, norms).
  virtual double allreduce_sum_host(double v) = 0;
  // Logical AND of a host flag across ranks (agreement on errors and non-finite steps).
  virtual bool all_agree(bool ok) = 0;
  virtual void barrier() = 0;
};

class SingleCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "single"; }
  void allreduce_sum(float*, std::size_t) override {}
  double allreduce_sum_host(double v) override { return v; }
  bool all_agree(bool ok) override { return ok; }
  void barrier() override {}
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
  // The communicator for this process: MPI when active with more than one rank, else single.
  std::unique_ptr<Communicator> make_communicator() const;

 private:
  bool active_ = false;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace kktrain
