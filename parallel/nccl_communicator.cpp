// NCCL communicator for CUDA builds (built only with -DKKTRAIN_ENABLE_NCCL=ON).
//
// Bootstraps a NCCL communicator over MPI (rank 0 creates the unique id and broadcasts it) and
// enqueues the buffer collectives on the stream of Kokkos' CUDA execution space, so they are
// ordered after the kernels that produced their inputs and before those that consume their
// outputs, and the host never waits for them (core/host_sync.hpp): every kernel, cuBLAS call and
// copy of a step runs on that stream, and the host reads results only through copies that wait.
// stats().seconds is therefore the host's time to enqueue, not the collectives' duration (an
// Nsight or rocprof timeline shows that). bf16 moves as ncclBfloat16 (kktrain's bf16 has the
// same 2-byte layout).
// Scalar host reductions, agreement and barriers go through MPI.
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <chrono>
#include <string>

#include "core/errors.hpp"
#include "core/kokkos_compat.hpp"
#include "core/strings.hpp"
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

// The stream Kokkos launches kernels on (the default stream of a build without Kokkos CUDA,
// where this communicator is only compiled, not used).
cudaStream_t kokkos_stream() {
#ifdef KOKKOS_ENABLE_CUDA
  return Kokkos::Cuda().cuda_stream();
#else
  return nullptr;
#endif
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
  std::string buffer_path() const override { return "device (NCCL)"; }

  void allgather_impl(const void* send, void* recv, std::size_t bytes) override {
    const double t0 = now_s();
    check_nccl(ncclAllGather(send, recv, bytes, ncclUint8, comm_, kokkos_stream()),
               "ncclAllGather");
    finish(t0, static_cast<double>(bytes) * (size_ - 1));
  }

  void reduce_scatter_impl(const void* send, void* recv, std::size_t count, DType dtype) override {
    const double t0 = now_s();
    const ncclDataType_t t = dtype == DType::bfloat16 ? ncclBfloat16 : ncclFloat32;
    if (dtype != DType::float32 && dtype != DType::bfloat16) {
      throw InternalError("reduce_scatter_sum: unsupported dtype");
    }
    check_nccl(ncclReduceScatter(send, recv, count, t, ncclSum, comm_, kokkos_stream()),
               "ncclReduceScatter");
    finish(t0, static_cast<double>(count * dtype_size(dtype)) * (size_ - 1));
  }

  void allreduce_impl(float* data, std::size_t n) override {
    const double t0 = now_s();
    check_nccl(ncclAllReduce(data, data, n, ncclFloat32, ncclSum, comm_, kokkos_stream()),
               "ncclAllReduce");
    finish(t0, 2.0 * static_cast<double>(n * sizeof(float)) * (size_ - 1) / size_);
  }

 private:
  void finish(double t0, double bytes) {
    stats_.seconds += now_s() - t0;
    stats_.bytes_sent += bytes;
    ++stats_.calls;
  }
  ncclComm_t comm_ = nullptr;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator() {
  return std::make_unique<NcclCommunicator>();
}

}  // namespace kktrain
