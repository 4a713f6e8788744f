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
//
// Started collectives (reduce_scatter_start / allgather_start with set_nonblocking(true), which
// FSDP uses to prefetch and to overlap reduce-scatters) run on a stream of their own: an event
// recorded on the compute stream orders them after the kernels that packed their input, and
// wait_collective() makes the compute stream wait for an event recorded after them, so the
// kernels after it see the result; the host waits for neither, and the compute stream runs the
// next unit's kernels while the collective moves. Work that consumes a collective's result can
// also run on the communication stream itself (collective_space(): a Kokkos::Cuda instance on
// that stream, made once), so the compute stream does not wait for the collective at all until
// communication_done()'s event (FSDP stores reduce-scattered shards there; the optimizer waits).
// Scalar host reductions, agreement and barriers go through MPI.
// The all-to-all of blocks is one
// NCCL group of a send and a receive per rank (ncclSend / ncclRecv, counts in size_t: no pieces);
// split() splits both the NCCL communicator (ncclCommSplit) and the MPI one beside it.
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "core/kokkos_compat.hpp"
#include "core/strings.hpp"
#include "parallel/communicator.hpp"
#include "parallel/mpi_world.hpp"
#include "parallel/nccl_communicator.hpp"

namespace kktrain {

namespace {

void check_cuda(cudaError_t r, const char* what) {
  if (r != cudaSuccess) {
    throw RuntimeFailure(std::string("CUDA ") + what + " failed: " + cudaGetErrorString(r));
  }
}

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
  explicit NcclCommunicator(const MpiLimits& limits) : MpiWorld(MPI_COMM_WORLD, limits) {
    ncclUniqueId id;
    if (rank_ == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, comm_);
    check_nccl(ncclCommInitRank(&nccl_, size_, id, rank_), "ncclCommInitRank");
  }
  // A split: the MPI and NCCL communicators of the same ranks.
  NcclCommunicator(MPI_Comm mpi, ncclComm_t nccl, const MpiLimits& limits)
      : MpiWorld(mpi, limits), nccl_(nccl) {}
  ~NcclCommunicator() override {
    comm_space_ = ExecSpace();  // release the instance while its stream exists
    for (auto& st : started_) cudaEventDestroy(st.done);
    if (ready_) cudaEventDestroy(ready_);
    if (comm_stream_) cudaStreamDestroy(comm_stream_);
    ncclCommDestroy(nccl_);
  }
  std::string name() const override { return "nccl"; }
  std::string buffer_path() const override { return "device (NCCL)"; }
  std::unique_ptr<Communicator> split(int color, int key) override {
    ncclComm_t sub = nullptr;
    check_nccl(ncclCommSplit(nccl_, color, key, &sub, nullptr), "ncclCommSplit");
    return std::make_unique<NcclCommunicator>(split_comm(color, key), sub, limits_);
  }

  // Every collective is enqueued on one stream: the compute stream, or, once started collectives
  // are in use (set_nonblocking), the communication stream (one stream per communicator keeps
  // NCCL's issue order); a collective that completes "at once" then makes the compute stream wait
  // for it (`run` below).
  void alltoallv_impl(const char* send, char* recv, const std::vector<uint64_t>& bytes) override {
    double sent = 0.0;
    run(
        [&](cudaStream_t s) {
          std::size_t out = 0, in = 0;
          check_nccl(ncclGroupStart(), "ncclGroupStart");
          for (int j = 0; j < size_; ++j) {
            const std::size_t b_out = bytes[rank_ * size_ + j], b_in = bytes[j * size_ + rank_];
            if (b_out > 0)
              check_nccl(ncclSend(send + out, b_out, ncclUint8, j, nccl_, s), "ncclSend");
            if (b_in > 0) check_nccl(ncclRecv(recv + in, b_in, ncclUint8, j, nccl_, s), "ncclRecv");
            out += b_out;
            in += b_in;
            if (j != rank_) sent += static_cast<double>(b_out);
          }
          check_nccl(ncclGroupEnd(), "ncclGroupEnd");
        },
        [&] { return sent; });
    stats_.alltoall_bytes_sent += sent;
  }

  void allgather_impl(const void* send, void* recv, std::size_t bytes) override {
    run([&](cudaStream_t s) { enqueue_allgather(send, recv, bytes, s); },
        [&] { return static_cast<double>(bytes) * (size_ - 1); });
  }

  void reduce_scatter_impl(const void* send, void* recv, std::size_t count, DType dtype) override {
    run([&](cudaStream_t s) { enqueue_reduce_scatter(send, recv, count, dtype, s); },
        [&] { return static_cast<double>(count * dtype_size(dtype)) * (size_ - 1); });
  }

  void allreduce_impl(float* data, std::size_t n) override {
    run(
        [&](cudaStream_t s) {
          check_nccl(ncclAllReduce(data, data, n, ncclFloat32, ncclSum, nccl_, s), "ncclAllReduce");
        },
        [&] { return 2.0 * static_cast<double>(n * sizeof(float)) * (size_ - 1) / size_; });
  }

  int reduce_scatter_start_impl(const void* send, void* recv, std::size_t count,
                                DType dtype) override {
    if (!nonblocking_) return Communicator::reduce_scatter_start_impl(send, recv, count, dtype);
    const double t0 = now_s();
    enqueue_reduce_scatter(send, recv, count, dtype, begin_started());
    return end_started(t0, static_cast<double>(count * dtype_size(dtype)) * (size_ - 1));
  }

  int allgather_start_impl(const void* send, void* recv, std::size_t bytes) override {
    if (!nonblocking_) return Communicator::allgather_start_impl(send, recv, bytes);
    const double t0 = now_s();
    enqueue_allgather(send, recv, bytes, begin_started());
    return end_started(t0, static_cast<double>(bytes) * (size_ - 1));
  }

  // The compute stream waits for the collective; the host does not.
  void wait_impl(int ticket) override {
    Started& st = started_.at(static_cast<std::size_t>(ticket));
    check_cuda(cudaStreamWaitEvent(kokkos_stream(), st.done, 0), "cudaStreamWaitEvent");
    st.in_use = false;
  }

  // Work queued on the communication stream follows the collective already.
  ExecSpace collective_space_impl(int ticket) override {
    started_.at(static_cast<std::size_t>(ticket)).in_use = false;
    return comm_space_;
  }

  int communication_done_impl() override {
    if (!comm_stream_) return kDone;
    return record_on_comm();
  }

 private:
  void enqueue_allgather(const void* send, void* recv, std::size_t bytes, cudaStream_t s) {
    check_nccl(ncclAllGather(send, recv, bytes, ncclUint8, nccl_, s), "ncclAllGather");
  }
  void enqueue_reduce_scatter(const void* send, void* recv, std::size_t count, DType dtype,
                              cudaStream_t s) {
    if (dtype != DType::float32 && dtype != DType::bfloat16) {
      throw InternalError("reduce_scatter_sum: unsupported dtype");
    }
    const ncclDataType_t t = dtype == DType::bfloat16 ? ncclBfloat16 : ncclFloat32;
    check_nccl(ncclReduceScatter(send, recv, count, t, ncclSum, nccl_, s), "ncclReduceScatter");
  }
  // A collective that completes at once: on the compute stream, or on the communication stream
  // with the compute stream waiting for it. bytes() is read after enqueue(s).
  template <class Enqueue, class Bytes>
  void run(const Enqueue& enqueue, const Bytes& bytes) {
    const double t0 = now_s();
    if (!nonblocking_) {
      enqueue(kokkos_stream());
      finish(t0, bytes());
      return;
    }
    enqueue(begin_started());
    wait_impl(end_started(t0, bytes()));
  }
  // The communication stream, created at first use, after the kernels the compute stream has
  // queued (event `ready_`).
  cudaStream_t begin_started() {
    if (!comm_stream_) {
      check_cuda(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking),
                 "cudaStreamCreateWithFlags");
      check_cuda(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "cudaEventCreate");
#ifdef KOKKOS_ENABLE_CUDA
      comm_space_ = Kokkos::Cuda(comm_stream_);
#endif
    }
    check_cuda(cudaEventRecord(ready_, kokkos_stream()), "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(comm_stream_, ready_, 0), "cudaStreamWaitEvent");
    return comm_stream_;
  }
  // Records the collective's completion event; returns its ticket.
  int end_started(double t0, double bytes) {
    const int ticket = record_on_comm();
    finish(t0, bytes);
    return ticket;
  }
  // Records an event after the work queued on the communication stream, in a free slot;
  // returns the slot (a ticket).
  int record_on_comm() {
    std::size_t i = 0;
    while (i < started_.size() && started_[i].in_use) ++i;
    if (i == started_.size()) {
      Started st;
      check_cuda(cudaEventCreateWithFlags(&st.done, cudaEventDisableTiming), "cudaEventCreate");
      started_.push_back(st);
    }
    check_cuda(cudaEventRecord(started_[i].done, comm_stream_), "cudaEventRecord");
    started_[i].in_use = true;
    return static_cast<int>(i);
  }
  void finish(double t0, double bytes) {
    stats_.seconds += now_s() - t0;
    stats_.bytes_sent += bytes;
    ++stats_.calls;
  }
  struct Started {
    cudaEvent_t done = nullptr;
    bool in_use = false;
  };
  ncclComm_t nccl_ = nullptr;
  cudaStream_t comm_stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;
  ExecSpace comm_space_;  // CUDA builds: the instance on comm_stream_ once it exists
  std::vector<Started> started_;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const MpiLimits& limits) {
  return std::make_unique<NcclCommunicator>(limits);
}

int ranks_on_busiest_gpu() {
  constexpr int kBusIdBytes = 32;  // "0000:00:00.0" and room to spare
  char bus_id[kBusIdBytes] = {};
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  check_cuda(cudaDeviceGetPCIBusId(bus_id, kBusIdBytes - 1, device), "cudaDeviceGetPCIBusId");
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int node_ranks = 1;
  MPI_Comm_size(node, &node_ranks);
  std::vector<char> all(static_cast<std::size_t>(node_ranks) * kBusIdBytes);
  MPI_Allgather(bus_id, kBusIdBytes, MPI_CHAR, all.data(), kBusIdBytes, MPI_CHAR, node);
  MPI_Comm_free(&node);
  int most = 0;
  for (int i = 0; i < node_ranks; ++i) {
    int same = 0;
    for (int j = 0; j < node_ranks; ++j) {
      same += std::string(&all[i * kBusIdBytes]) == std::string(&all[j * kBusIdBytes]);
    }
    most = std::max(most, same);
  }
  MPI_Allreduce(MPI_IN_PLACE, &most, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return most;
}

}  // namespace kktrain
