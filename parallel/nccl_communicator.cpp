// NCCL communicator for CUDA builds (built only with -DKKTRAIN_ENABLE_NCCL=ON).
//
// Bootstraps a NCCL communicator over MPI (rank 0 creates the unique id and broadcasts it) and
// reduces device buffers on the current CUDA stream. Scalar host reductions go through MPI.
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <string>

#include "core/errors.hpp"
#include "parallel/communicator.hpp"
#include "parallel/mpi_world.hpp"
#include "parallel/nccl_communicator.hpp"

namespace kktrain {

namespace {

void check_nccl(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) {
    throw RuntimeFailure(std::string("NCCL ") + what + " failed: " + ncclGetErrorString(r));
  }
}

void check_cuda(cudaError_t r, const char* what) {
  if (r != cudaSuccess) {
    throw RuntimeFailure(std::string("CUDA ") + what + " failed: " + cudaGetErrorString(r));
  }
}

class NcclCommunicator final : public MpiWorld {
 public:
  NcclCommunicator() {
    ncclUniqueId id;
    if (rank_ == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    check_nccl(ncclCommInitRank(&comm_, size_, id, rank_), "ncclCommInitRank");
  }
  ~NcclCommunicator() override { ncclCommDestroy(comm_); }
  std::string name() const override { return "nccl"; }
  void allreduce_sum(float* data, std::size_t n) override {
    check_nccl(ncclAllReduce(data, data, n, ncclFloat32, ncclSum, comm_, nullptr), "ncclAllReduce");
    check_cuda(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize");
  }

 private:
  ncclComm_t comm_ = nullptr;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator() {
  return std::make_unique<NcclCommunicator>();
}

}  // namespace kktrain
