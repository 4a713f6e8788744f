// MPI implementation of the communicator, and process-level MPI setup.
//
// Buffer collectives are MPI's own: MPI_Allgather on bytes, MPI_Reduce_scatter_block with
// MPI_FLOAT/MPI_SUM, and for bf16 (which Open MPI has no type for) a 2-byte contiguous datatype
// with a commutative user op that widens both operands to fp32, adds, and rounds the sum once
// to bf16 (nearest even). Device buffers go to the library directly when MPI is CUDA-aware (or
// memory is host memory); otherwise they are staged through host copies.
#include <mpi.h>
#if defined(OPEN_MPI) && OPEN_MPI
#include <mpi-ext.h>
#endif

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/bf16.hpp"
#include "core/errors.hpp"
#include "core/kokkos_compat.hpp"
#include "parallel/communicator.hpp"
#include "parallel/mpi_world.hpp"
#ifdef KKTRAIN_HAVE_NCCL
#include "parallel/nccl_communicator.hpp"
#endif

namespace kktrain {

MpiWorld::MpiWorld() {
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
}

double MpiWorld::allreduce_sum_host(double v) {
  double out = 0.0;
  MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return out;
}

double MpiWorld::allreduce_max_host(double v) {
  double out = 0.0;
  MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

uint64_t MpiWorld::allreduce_sum_u64(uint64_t v) {
  uint64_t out = 0;
  MPI_Allreduce(&v, &out, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);  // unsigned: wraps mod 2^64
  return out;
}

bool MpiWorld::all_agree(bool ok) {
  int in = ok ? 1 : 0, out = 0;
  MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  return out != 0;
}

void MpiWorld::barrier() {
  MPI_Barrier(MPI_COMM_WORLD);
}

bool mpi_is_gpu_aware() {
#if defined(KOKKOS_ENABLE_CUDA) && defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() == 1;
#elif defined(KOKKOS_ENABLE_HIP) && defined(MPIX_ROCM_AWARE_SUPPORT) && MPIX_ROCM_AWARE_SUPPORT
  return MPIX_Query_rocm_support() == 1;
#else
  return false;  // cannot tell (or a host build): stage through host memory
#endif
}

void Communicator::allgather_bytes(const DBytesU& send, const DBytesU& recv) {
  const std::size_t bytes = send.extent(0);
  if (recv.extent(0) != bytes * static_cast<std::size_t>(size())) {
    throw InternalError("allgather_bytes: " + std::to_string(recv.extent(0)) +
                        " receive bytes for " + std::to_string(size()) + " ranks of " +
                        std::to_string(bytes));
  }
  allgather_impl(send.data(), recv.data(), bytes);
}

void Communicator::reduce_scatter_sum(const DBytesU& send, const DBytesU& recv, DType dtype) {
  const std::size_t esize = dtype_size(dtype);
  if (recv.extent(0) % esize != 0 ||
      send.extent(0) != recv.extent(0) * static_cast<std::size_t>(size())) {
    throw InternalError("reduce_scatter_sum: " + std::to_string(send.extent(0)) +
                        " send bytes and " + std::to_string(recv.extent(0)) + " receive bytes of " +
                        dtype_name(dtype) + " on " + std::to_string(size()) + " ranks");
  }
  reduce_scatter_impl(send.data(), recv.data(), recv.extent(0) / esize, dtype);
}

void Communicator::allreduce_sum(const DViewU<float>& data) {
  allreduce_impl(data.data(), data.extent(0));
}

void SingleCommunicator::allgather_impl(const void* send, void* recv, std::size_t bytes) {
  using Bytes = Kokkos::View<char*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  if (send != recv && bytes > 0) {
    Kokkos::deep_copy(Bytes(static_cast<char*>(recv), bytes),
                      Bytes(static_cast<char*>(const_cast<void*>(send)), bytes));
  }
}

void SingleCommunicator::reduce_scatter_impl(const void* send, void* recv, std::size_t count,
                                             DType dtype) {
  allgather_impl(send, recv, count * dtype_size(dtype));
}

namespace {

// inout[i] = bf16(float(in[i]) + float(inout[i])): one rounding per addition.
void bf16_sum_op(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float s = bf16::from_bits(a[i]).to_float() + bf16::from_bits(b[i]).to_float();
    b[i] = bf16_bits_from_float(s);
  }
}

// Host copies of device buffers around an MPI call, when the library cannot take device memory.
class Staging {
 public:
  explicit Staging(bool needed) : needed_(needed) {}
  // A pointer MPI can read for `bytes` bytes of device memory at p.
  const void* in(const void* p, std::size_t bytes) {
    if (!needed_) return p;
    in_.resize(bytes);
    copy(in_.data(), p, bytes, /*to_host=*/true);
    return in_.data();
  }
  // A pointer MPI can write `bytes` bytes into; finish() copies them to p.
  void* out(void* p, std::size_t bytes) {
    if (!needed_) return p;
    out_.resize(bytes);
    out_dst_ = p;
    return out_.data();
  }
  void finish() {
    if (needed_ && out_dst_) copy(out_dst_, out_.data(), out_.size(), /*to_host=*/false);
    out_dst_ = nullptr;
  }

 private:
  static void copy(void* dst, const void* src, std::size_t bytes, bool to_host) {
    using Dev = Kokkos::View<char*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
    using Host = Kokkos::View<char*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
    char* d = static_cast<char*>(dst);
    char* s = static_cast<char*>(const_cast<void*>(src));
    if (to_host) {
      Kokkos::deep_copy(Host(d, bytes), Dev(s, bytes));
    } else {
      Kokkos::deep_copy(Dev(d, bytes), Host(s, bytes));
    }
  }
  bool needed_;
  std::vector<char> in_, out_;
  void* out_dst_ = nullptr;
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

class MpiCommunicator final : public MpiWorld {
 public:
  MpiCommunicator() {
    MPI_Type_contiguous(2, MPI_BYTE, &bf16_type_);
    MPI_Type_commit(&bf16_type_);
    MPI_Op_create(bf16_sum_op, /*commute=*/1, &bf16_sum_);
    constexpr bool host_memory = Kokkos::SpaceAccessibility<HostSpace, MemSpace>::accessible;
    stage_ = !host_memory && !mpi_is_gpu_aware();
    path_ = host_memory ? "host" : stage_ ? "staged through host" : "device (GPU-aware MPI)";
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    MPI_Op_free(&bf16_sum_);
    MPI_Type_free(&bf16_type_);
  }
  std::string name() const override { return "mpi"; }
  std::string buffer_path() const override { return path_; }

  void allgather_impl(const void* send, void* recv, std::size_t bytes) override {
    const double t0 = begin();
    Staging st(stage_);
    const void* s = st.in(send, bytes);
    void* r = st.out(recv, bytes * size_);
    MPI_Allgather(s, count_of(bytes), MPI_BYTE, r, count_of(bytes), MPI_BYTE, MPI_COMM_WORLD);
    st.finish();
    end(t0, static_cast<double>(bytes) * (size_ - 1));
  }

  void reduce_scatter_impl(const void* send, void* recv, std::size_t count, DType dtype) override {
    const double t0 = begin();
    const std::size_t esize = dtype_size(dtype);
    // bf16 sums run in a user-defined MPI_Op, which reads its buffers on the host: a GPU-aware
    // MPI may hand it device pointers (whether it copies first depends on its collective
    // component), so bf16 is always staged when the buffers are not host memory.
    constexpr bool host_memory = Kokkos::SpaceAccessibility<HostSpace, MemSpace>::accessible;
    Staging st(stage_ || (dtype == DType::bfloat16 && !host_memory));
    const void* s = st.in(send, count * esize * size_);
    void* r = st.out(recv, count * esize);
    if (dtype == DType::float32) {
      MPI_Reduce_scatter_block(s, r, count_of(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    } else if (dtype == DType::bfloat16) {
      MPI_Reduce_scatter_block(s, r, count_of(count), bf16_type_, bf16_sum_, MPI_COMM_WORLD);
    } else {
      throw InternalError("reduce_scatter_sum: unsupported dtype");
    }
    st.finish();
    end(t0, static_cast<double>(count * esize) * (size_ - 1));
  }

  void allreduce_impl(float* data, std::size_t n) override {
    const double t0 = begin();
    Staging st(stage_);
    const void* s = st.in(data, n * sizeof(float));
    void* r = st.out(data, n * sizeof(float));
    // In place on host memory; staged buffers are separate, so pass them as send and receive.
    if (s == r) {
      MPI_Allreduce(MPI_IN_PLACE, r, count_of(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    } else {
      MPI_Allreduce(s, r, count_of(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    st.finish();
    end(t0, 2.0 * static_cast<double>(n * sizeof(float)) * (size_ - 1) / size_);
  }

 private:
  static int count_of(std::size_t n) {
    if (n > static_cast<std::size_t>(0x7fffffff)) {
      throw InternalError("MPI collective of " + std::to_string(n) + " elements exceeds INT_MAX");
    }
    return static_cast<int>(n);
  }
  // Kernels that produced the send buffers must be done before MPI reads them.
  double begin() {
    Kokkos::fence();
    return now_s();
  }
  void end(double t0, double bytes) {
    stats_.seconds += now_s() - t0;
    stats_.bytes_sent += bytes;
    ++stats_.calls;
  }
  MPI_Datatype bf16_type_ = MPI_DATATYPE_NULL;
  MPI_Op bf16_sum_ = MPI_OP_NULL;
  bool stage_ = false;
  std::string path_;
};

}  // namespace

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE",
                        "MPI_LOCALNRANKS", "SLURM_PROCID"}) {
    if (std::getenv(v) != nullptr) return true;
  }
  return false;
}

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  if (!launched_by_mpi()) return;
  int already = 0;
  MPI_Initialized(&already);
  if (!already) MPI_Init(argc, argv);
  active_ = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
}

MpiRuntime::~MpiRuntime() {
  if (!active_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

std::unique_ptr<Communicator> MpiRuntime::make_communicator() const {
  if (!active_ || size_ == 1) return std::make_unique<SingleCommunicator>();
#if defined(KKTRAIN_HAVE_NCCL) && defined(KOKKOS_ENABLE_CUDA)
  return make_nccl_communicator();
#else
  return std::make_unique<MpiCommunicator>();
#endif
}

}  // namespace kktrain
