// NCCL communicator for CUDA builds (built only with -DKKTRAIN_ENABLE_NCCL=ON).
//
// Bootstraps a NCCL communicator over MPI (rank 0 creates the unique id and broadcasts it) and
// runs the buffer collectives on the stream of Kokkos' CUDA execution space, so they are ordered
// after the kernels that produced their inputs and before those that consume their outputs
// without a device-wide synchronization; the call returns after the stream has finished the
// collective, because callers read results on the host (losses) or hand buffers to kernels on
// other instances. bf16 moves as ncclBfloat16 (kktrain's bf16 has the same 2-byte layout).
// Scalar host reductions, agreement and barriers go through MPI. The all-to-all of blocks is one
// NCCL group of a send and a receive per rank (ncclSend / ncclRecv, counts in size_t: no pieces);
// split() splits both the NCCL communicator (ncclCommSplit) and the MPI one beside it.
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

void check_cuda(cudaError_t r, const char* what) {
  if (r != cudaSuccess) {
    throw RuntimeFailure(std::string("CUDA ") + what + " failed: " + cudaGetErrorString(r));
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
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, comm_);
    check_nccl(ncclCommInitRank(&nccl_, size_, id, rank_), "ncclCommInitRank");
  }
  // A split: the MPI and NCCL communicators of the same ranks.
  NcclCommunicator(MPI_Comm mpi, ncclComm_t nccl) : MpiWorld(mpi), nccl_(nccl) {}
  ~NcclCommunicator() override { ncclCommDestroy(nccl_); }
  std::string name() const override { return "nccl"; }
  std::string buffer_path() const override { return "device (NCCL)"; }
  std::unique_ptr<Communicator> split(int color, int key) override {
    ncclComm_t sub = nullptr;
    check_nccl(ncclCommSplit(nccl_, color, key, &sub, nullptr), "ncclCommSplit");
    return std::make_unique<NcclCommunicator>(split_comm(color, key), sub);
  }

  void alltoallv_impl(const char* send, char* recv, const std::vector<uint64_t>& bytes) override {
    const double t0 = now_s();
    std::size_t out = 0, in = 0;
    double sent = 0.0;
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    for (int j = 0; j < size_; ++j) {
      const std::size_t b_out = bytes[rank_ * size_ + j], b_in = bytes[j * size_ + rank_];
      if (b_out > 0) {
        check_nccl(ncclSend(send + out, b_out, ncclUint8, j, nccl_, kokkos_stream()), "ncclSend");
      }
      if (b_in > 0) {
        check_nccl(ncclRecv(recv + in, b_in, ncclUint8, j, nccl_, kokkos_stream()), "ncclRecv");
      }
      out += b_out;
      in += b_in;
      if (j != rank_) sent += static_cast<double>(b_out);
    }
    check_nccl(ncclGroupEnd(), "ncclGroupEnd");
    finish(t0, sent);
    stats_.alltoall_bytes_sent += sent;
  }

  void allgather_impl(const void* send, void* recv, std::size_t bytes) override {
    const double t0 = now_s();
    check_nccl(ncclAllGather(send, recv, bytes, ncclUint8, nccl_, kokkos_stream()),
               "ncclAllGather");
    finish(t0, static_cast<double>(bytes) * (size_ - 1));
  }

  void reduce_scatter_impl(const void* send, void* recv, std::size_t count, DType dtype) override {
    const double t0 = now_s();
    const ncclDataType_t t = dtype == DType::bfloat16 ? ncclBfloat16 : ncclFloat32;
    if (dtype != DType::float32 && dtype != DType::bfloat16) {
      throw InternalError("reduce_scatter_sum: unsupported dtype");
    }
    check_nccl(ncclReduceScatter(send, recv, count, t, ncclSum, nccl_, kokkos_stream()),
               "ncclReduceScatter");
    finish(t0, static_cast<double>(count * dtype_size(dtype)) * (size_ - 1));
  }

  void allreduce_impl(float* data, std::size_t n) override {
    const double t0 = now_s();
    check_nccl(ncclAllReduce(data, data, n, ncclFloat32, ncclSum, nccl_, kokkos_stream()),
               "ncclAllReduce");
    finish(t0, 2.0 * static_cast<double>(n * sizeof(float)) * (size_ - 1) / size_);
  }

 private:
  void finish(double t0, double bytes) {
    check_cuda(cudaStreamSynchronize(kokkos_stream()), "cudaStreamSynchronize");
    stats_.seconds += now_s() - t0;
    stats_.bytes_sent += bytes;
    ++stats_.calls;
  }
  ncclComm_t nccl_ = nullptr;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator() {
  return std::make_unique<NcclCommunicator>();
}

}  // namespace kktrain
