// MPI implementation of the communicator, and process-level MPI setup.
//
// All-gathers and all-to-alls are MPI's own (MPI_Allgather, MPI_Alltoallv on bytes).
// Reduce-scatters and all-reduces are kktrain's ring over point-to-point MPI
// (parallel/ring_collectives.hpp) under that header's rule for distributed.collectives: auto, or
// forced either way; MPI's are MPI_Reduce_scatter_block / MPI_Allreduce with MPI_FLOAT/MPI_SUM, and
// for bf16 (which Open MPI has no type for) a 2-byte contiguous datatype with a commutative user op
// that widens both operands to fp32, adds, and rounds the sum once to bf16 (nearest even). Device
// buffers go to the library directly when MPI is CUDA-aware (or memory is host memory); otherwise
// they are staged through host copies (always for the ring, which adds on the host).
// The library's collectives are started non-blocking (MPI_Iallgather, ...) and completed through
// parallel/peer_wait.hpp, so that a waiting rank sleeps instead of spinning and a rank that stops
// answering ends the job after distributed.stuck_peer_wait_s.
#include <mpi.h>
#if defined(OPEN_MPI) && OPEN_MPI
#include <mpi-ext.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "core/bf16.hpp"
#include "core/errors.hpp"
#include "core/host_sync.hpp"
#include "core/kokkos_compat.hpp"
#include "core/log.hpp"
#include "core/strings.hpp"
#include "parallel/communicator.hpp"
#include "parallel/mpi_world.hpp"
#include "parallel/peer_wait.hpp"
#include "parallel/ring_collectives.hpp"
#ifdef KKTRAIN_HAVE_NCCL
#include "parallel/nccl_communicator.hpp"
#endif

namespace kktrain {

MpiWorld::MpiWorld(MPI_Comm comm, const MpiLimits& limits) : limits_(limits), comm_(comm) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  MPI_Comm node;  // the ranks that share this node's memory
  MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node);
  MPI_Comm_size(node, &ranks_on_node_);
  MPI_Comm_free(&node);
  MPI_Comm_dup(comm_, &agree_comm_);
}

MpiWorld::~MpiWorld() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  MPI_Comm_free(&agree_comm_);
  if (comm_ != MPI_COMM_WORLD) MPI_Comm_free(&comm_);
}

MPI_Comm MpiWorld::split_comm(int color, int key) const {
  MPI_Comm out = MPI_COMM_NULL;
  MPI_Comm_split(comm_, color, key, &out);
  return out;
}

std::vector<uint64_t> MpiWorld::allgather_u64(const std::vector<uint64_t>& v) {
  count_host_sync();
  std::vector<uint64_t> out(v.size() * static_cast<std::size_t>(size_));
  if (v.size() <= max_count()) {
    const int n = static_cast<int>(v.size());
    MPI_Request r;
    MPI_Iallgather(v.data(), n, MPI_UINT64_T, out.data(), n, MPI_UINT64_T, comm_, &r);
    wait_one(&r, "an all-gather");
    return out;
  }
  // More values than an int counts: pieces, each gathered into a staging block per rank.
  std::vector<uint64_t> piece;
  for (std::size_t off = 0; off < v.size(); off += max_count()) {
    const std::size_t n = std::min(v.size() - off, max_count());
    piece.resize(n * static_cast<std::size_t>(size_));
    MPI_Request r;
    MPI_Iallgather(v.data() + off, static_cast<int>(n), MPI_UINT64_T, piece.data(),
                   static_cast<int>(n), MPI_UINT64_T, comm_, &r);
    wait_one(&r, "an all-gather");
    for (int r = 0; r < size_; ++r) {
      std::copy(piece.begin() + r * n, piece.begin() + (r + 1) * n,
                out.begin() + r * v.size() + off);
    }
  }
  return out;
}

double MpiWorld::allreduce_sum_host(double v) {
  count_host_sync();
  double out = 0.0;
  MPI_Request r;
  MPI_Iallreduce(&v, &out, 1, MPI_DOUBLE, MPI_SUM, comm_, &r);
  wait_one(&r, "an all-reduce");
  return out;
}

double MpiWorld::allreduce_max_host(double v) {
  count_host_sync();
  double out = 0.0;
  MPI_Request r;
  MPI_Iallreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, comm_, &r);
  wait_one(&r, "an all-reduce");
  return out;
}

uint64_t MpiWorld::allreduce_sum_u64(uint64_t v) {
  count_host_sync();
  uint64_t out = 0;
  MPI_Request r;
  MPI_Iallreduce(&v, &out, 1, MPI_UINT64_T, MPI_SUM, comm_, &r);  // unsigned: wraps mod 2^64
  wait_one(&r, "an all-reduce");
  return out;
}

void MpiWorld::allreduce_sum_u64(std::vector<uint64_t>& v) {
  count_host_sync();
  for (std::size_t off = 0; off < v.size(); off += max_count()) {
    const int n = static_cast<int>(std::min(v.size() - off, max_count()));
    MPI_Request r;
    MPI_Iallreduce(MPI_IN_PLACE, v.data() + off, n, MPI_UINT64_T, MPI_SUM, comm_, &r);
    wait_one(&r, "an all-reduce");
  }
}

void MpiWorld::allreduce_host(std::vector<double>& sums, std::vector<double>& maxes) {
  count_host_sync();
  MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  // A handful of scalars: far below MPI's int counts.
  if (!sums.empty()) {
    MPI_Iallreduce(MPI_IN_PLACE, sums.data(), static_cast<int>(sums.size()), MPI_DOUBLE, MPI_SUM,
                   comm_, &req[0]);
  }
  if (!maxes.empty()) {
    MPI_Iallreduce(MPI_IN_PLACE, maxes.data(), static_cast<int>(maxes.size()), MPI_DOUBLE, MPI_MAX,
                   comm_, &req[1]);
  }
  wait_all(2, req, "an all-reduce");
}

void MpiWorld::broadcast_host(std::string& bytes, int root) {
  count_host_sync();
  uint64_t n = bytes.size();
  MPI_Request r;
  MPI_Ibcast(&n, 1, MPI_UINT64_T, root, comm_, &r);
  wait_one(&r, "a broadcast");
  bytes.resize(static_cast<std::size_t>(n));
  for (std::size_t off = 0; off < n; off += max_count()) {
    const int c = static_cast<int>(std::min(static_cast<std::size_t>(n) - off, max_count()));
    MPI_Ibcast(&bytes[off], c, MPI_BYTE, root, comm_, &r);
    wait_one(&r, "a broadcast");
  }
}

bool MpiWorld::all_agree(bool ok) {
  count_host_sync();
  int in = ok ? 1 : 0, out = 0;
  MPI_Request r;
  MPI_Iallreduce(&in, &out, 1, MPI_INT, MPI_LAND, comm_, &r);
  wait_one(&r, "an all-reduce");
  return out != 0;
}

int MpiWorld::first_failing_rank(bool failed, double failed_wait_s) {
  count_host_sync();
  // Non-blocking, so that a failing rank can give up when the others never arrive. Tested often
  // at first (agreements usually complete at once), then with sleeps that yield the CPU. Ranks
  // that did not fail end the job after distributed.stuck_peer_wait_s only for a rank known to
  // be stopped: the step agreed on may be one rank's long work alone (rank 0 rendering or
  // tokenizing the data, writing an export), which answers no one until it is done.
  int in = failed ? rank_ : size_, out = size_;
  MPI_Request req;
  MPI_Iallreduce(&in, &out, 1, MPI_INT, MPI_MIN, agree_comm_, &req);
  if (!failed) {
    wait_one(&req, "an agreement on errors", SilentPeer::ends_job_if_stopped);
    return out;
  }
  const double t0 = now_s();
  int done = 0;
  for (int polls = 0;; ++polls) {
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (done) return out;
    if (now_s() - t0 > failed_wait_s) return -1;  // the request is abandoned: we abort
    if (polls > 1000) answer_peer_pings();        // the others may ask whether this rank answers
    if (polls > 1000)
      std::this_thread::sleep_for(std::chrono::microseconds(polls > 5000 ? 1000 : 50));
  }
}

void MpiWorld::abort(int exit_code) {
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);  // MPI_Abort does not return; this keeps [[noreturn]] honest
}

void MpiWorld::barrier() {
  count_host_sync();
  MPI_Request r;
  MPI_Ibarrier(comm_, &r);
  wait_one(&r, "a barrier");
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

int Communicator::reduce_scatter_start(const DBytesU& send, const DBytesU& recv, DType dtype) {
  const std::size_t esize = dtype_size(dtype);
  if (recv.extent(0) % esize != 0 ||
      send.extent(0) != recv.extent(0) * static_cast<std::size_t>(size())) {
    throw InternalError("reduce_scatter_start: " + std::to_string(send.extent(0)) +
                        " send bytes and " + std::to_string(recv.extent(0)) + " receive bytes of " +
                        dtype_name(dtype) + " on " + std::to_string(size()) + " ranks");
  }
  return reduce_scatter_start_impl(send.data(), recv.data(), recv.extent(0) / esize, dtype);
}

int Communicator::allgather_start(const DBytesU& send, const DBytesU& recv) {
  const std::size_t bytes = send.extent(0);
  if (recv.extent(0) != bytes * static_cast<std::size_t>(size())) {
    throw InternalError("allgather_start: " + std::to_string(recv.extent(0)) +
                        " receive bytes for " + std::to_string(size()) + " ranks of " +
                        std::to_string(bytes));
  }
  return allgather_start_impl(send.data(), recv.data(), bytes);
}

void Communicator::wait_collective(int ticket) {
  if (ticket != kDone) wait_impl(ticket);
}

ExecSpace Communicator::collective_space(int ticket) {
  return ticket == kDone ? ExecSpace() : collective_space_impl(ticket);
}

int Communicator::communication_done() {
  return communication_done_impl();
}

void Communicator::allreduce_sum(const DViewU<float>& data) {
  allreduce_impl(data.data(), data.extent(0));
}

void Communicator::alltoallv_bytes(const DBytesU& send, const DBytesU& recv,
                                   const std::vector<uint64_t>& bytes) {
  const std::size_t w = static_cast<std::size_t>(size()), me = static_cast<std::size_t>(rank());
  if (bytes.size() != w * w) {
    throw InternalError("alltoallv_bytes: a matrix of " + std::to_string(bytes.size()) +
                        " block sizes for " + std::to_string(w) + " ranks");
  }
  uint64_t out = 0, in = 0;
  for (std::size_t j = 0; j < w; ++j) {
    out += bytes[me * w + j];
    in += bytes[j * w + me];
  }
  if (out > send.extent(0) || in > recv.extent(0)) {
    throw InternalError("alltoallv_bytes: sends " + std::to_string(out) + " bytes from " +
                        std::to_string(send.extent(0)) + ", receives " + std::to_string(in) +
                        " into " + std::to_string(recv.extent(0)));
  }
  alltoallv_impl(send.data(), recv.data(), bytes);
}

void SingleCommunicator::abort(int exit_code) {
  std::_Exit(exit_code);
}

void SingleCommunicator::allgather_impl(const void* send, void* recv, std::size_t bytes) {
  using Bytes = Kokkos::View<char*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  if (send != recv && bytes > 0) {
    Kokkos::deep_copy(Bytes(static_cast<char*>(recv), bytes),
                      Bytes(static_cast<char*>(const_cast<void*>(send)), bytes));
  }
}

void SingleCommunicator::alltoallv_impl(const char* send, char* recv,
                                        const std::vector<uint64_t>& bytes) {
  allgather_impl(send, recv, static_cast<std::size_t>(bytes[0]));
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

// A host buffer that only grows, never zero-filled (MPI writes or a copy fills what is used).
class HostBuffer {
 public:
  char* reserve(std::size_t bytes) {
    if (bytes > size_) {
      data_.reset(new char[bytes]);
      size_ = bytes;
    }
    return data_.get();
  }

 private:
  std::unique_ptr<char[]> data_;
  std::size_t size_ = 0;
};

// Host copies of device buffers around an MPI call, when the library cannot take device memory,
// in the communicator's persistent buffers (no allocation per call once they have grown).
class Staging {
 public:
  Staging(bool needed, HostBuffer& in, HostBuffer& out) : needed_(needed), in_(in), out_(out) {}
  // A pointer MPI can read for `bytes` bytes of device memory at p.
  const void* in(const void* p, std::size_t bytes) {
    if (!needed_) return p;
    char* h = in_.reserve(bytes);
    copy(h, p, bytes, /*to_host=*/true);
    return h;
  }
  // A pointer MPI can write `bytes` bytes into; finish() copies them to p.
  void* out(void* p, std::size_t bytes) {
    if (!needed_) return p;
    out_host_ = out_.reserve(bytes);
    out_bytes_ = bytes;
    out_dst_ = p;
    return out_host_;
  }
  bool staged() const { return needed_; }
  void finish() {
    if (needed_ && out_dst_) copy(out_dst_, out_host_, out_bytes_, /*to_host=*/false);
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
  HostBuffer& in_;
  HostBuffer& out_;
  char* out_host_ = nullptr;
  std::size_t out_bytes_ = 0;
  void* out_dst_ = nullptr;
};

// The blocks of one all-to-all as this rank sees them, from the byte matrix every rank shares:
// what it sends to each rank and receives from each (offsets in its send and receive buffers),
// and how many rounds every rank runs. One round (one MPI_Alltoallv) when every rank's send and
// receive totals fit an int (then so does each of its counts and displacements); otherwise
// rounds of at most `piece` bytes per block, so that each round's packed buffers fit an int.
// Every rank derives the same round count from the same matrix, so all call MPI_Alltoallv
// equally often.
struct AlltoallPlan {
  struct Block {
    std::size_t offset = 0, bytes = 0;
  };
  std::vector<Block> send, recv;
  std::size_t send_total = 0, recv_total = 0, piece = 0, rounds = 1;

  AlltoallPlan(const std::vector<uint64_t>& m, int w, int me, std::size_t limit)
      : send(w), recv(w) {
    std::size_t largest_total = 0, largest_block = 0;
    for (int i = 0; i < w; ++i) {
      std::size_t row = 0, col = 0;
      for (int j = 0; j < w; ++j) {
        row += m[i * w + j];
        col += m[j * w + i];
        largest_block = std::max<std::size_t>(largest_block, m[i * w + j]);
      }
      largest_total = std::max(largest_total, std::max(row, col));
    }
    for (int j = 0; j < w; ++j) {
      send[j] = Block{send_total, static_cast<std::size_t>(m[me * w + j])};
      send_total += send[j].bytes;
      recv[j] = Block{recv_total, static_cast<std::size_t>(m[j * w + me])};
      recv_total += recv[j].bytes;
    }
    piece = std::max<std::size_t>(1, limit / static_cast<std::size_t>(w));
    if (largest_total > limit) rounds = (largest_block + piece - 1) / piece;
    if (largest_total <= limit) piece = largest_block;  // one round: whole blocks
  }
  // Bytes of each block in round k (whole blocks when there is one round).
  std::vector<int> counts(const std::vector<Block>& b, std::size_t k) const {
    std::vector<int> c(b.size());
    for (std::size_t j = 0; j < b.size(); ++j) {
      if (rounds == 1) {
        c[j] = static_cast<int>(b[j].bytes);
      } else {
        const std::size_t lo = std::min(b[j].bytes, k * piece);
        c[j] = static_cast<int>(std::min(b[j].bytes, lo + piece) - lo);
      }
    }
    return c;
  }
  // Offsets of the blocks: in the whole buffer (one round), or packed back to back.
  std::vector<int> displs(const std::vector<Block>& b, std::size_t k) const {
    std::vector<int> d(b.size());
    const std::vector<int> c = counts(b, k);
    std::size_t at = 0;
    for (std::size_t j = 0; j < b.size(); ++j) {
      d[j] = static_cast<int>(rounds == 1 ? b[j].offset : at);
      at += static_cast<std::size_t>(c[j]);
    }
    return d;
  }
};

class MpiCommunicator final : public MpiWorld {
 public:
  explicit MpiCommunicator(MPI_Comm comm, const MpiLimits& limits)
      : MpiWorld(comm, limits), ring_(comm_, limits) {
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
  std::string collectives_summary() const override {
    if (!ring()) return "MPI collectives on " + path_ + " buffers";
    const std::string how =
        ring_.shared() ? "through a shared-memory window (" + std::to_string(limits_.ring_slots) +
                             " slots of " + std::to_string(limits_.ring_slot_bytes >> 10) +
                             " KiB a rank, MPI point-to-point signals"
                       : "over MPI point-to-point (" +
                             std::to_string(limits_.ring_chunk_bytes >> 10) + " KiB messages";
    return "kktrain ring reduce-scatter and all-reduce " + how +
           ", sums on the host), MPI all-gather and all-to-all, on " + path_ + " buffers";
  }
  std::unique_ptr<Communicator> split(int color, int key) override {
    auto c = std::make_unique<MpiCommunicator>(split_comm(color, key), limits_);
    c->set_collectives(collectives_);
    return c;
  }

  void allgather_impl(const void* send, void* recv, std::size_t bytes) override {
    const double t0 = begin();
    Staging st(stage_, stage_in_, stage_out_);
    const char* s = static_cast<const char*>(st.in(send, bytes));
    char* r = static_cast<char*>(st.out(recv, bytes * size_));
    // MPI counts are int: pieces of at most max_count() bytes, each received into every rank's
    // block at the piece's offset through a datatype whose extent is one whole block.
    if (bytes <= max_count()) {
      const int n = static_cast<int>(bytes);
      MPI_Request q;
      MPI_Iallgather(s, n, MPI_BYTE, r, n, MPI_BYTE, comm_, &q);
      wait_one(&q, "an all-gather");
    }
    for (std::size_t off = 0; bytes > max_count() && off < bytes; off += max_count()) {
      const int n = static_cast<int>(std::min(bytes - off, max_count()));
      MPI_Datatype piece, strided;
      MPI_Type_contiguous(n, MPI_BYTE, &piece);
      MPI_Type_create_resized(piece, 0, static_cast<MPI_Aint>(bytes), &strided);
      MPI_Type_commit(&strided);
      MPI_Request q;
      MPI_Iallgather(s + off, n, MPI_BYTE, r + off, 1, strided, comm_, &q);
      wait_one(&q, "an all-gather");
      MPI_Type_free(&strided);
      MPI_Type_free(&piece);
    }
    st.finish();
    end(t0, static_cast<double>(bytes) * (size_ - 1));
  }

  void reduce_scatter_impl(const void* send, void* recv, std::size_t count, DType dtype) override {
    const double t0 = begin();
    const std::size_t esize = dtype_size(dtype);
    if (ring()) {  // kktrain's ring adds on the host: device buffers are staged
      Staging st(!kHostMemory, stage_in_, stage_out_);
      const void* s = st.in(send, count * esize * size_);
      void* r = st.out(recv, count * esize);
      ring_.finish(ring_.start(s, r, RingBlocks::equal(size_, count), dtype));
      st.finish();
      end(t0, static_cast<double>(count * esize) * (size_ - 1));
      return;
    }
    // bf16 sums run in a user-defined MPI_Op, which reads its buffers on the host: a GPU-aware
    // MPI may hand it device pointers (whether it copies first depends on its collective
    // component), so bf16 is always staged when the buffers are not host memory.
    constexpr bool host_memory = Kokkos::SpaceAccessibility<HostSpace, MemSpace>::accessible;
    Staging st(stage_ || (dtype == DType::bfloat16 && !host_memory), stage_in_, stage_out_);
    const char* s = static_cast<const char*>(st.in(send, count * esize * size_));
    char* r = static_cast<char*>(st.out(recv, count * esize));
    if (dtype != DType::float32 && dtype != DType::bfloat16) {
      throw InternalError("reduce_scatter_sum: unsupported dtype");
    }
    const MPI_Datatype type = dtype == DType::float32 ? MPI_FLOAT : bf16_type_;
    const MPI_Op op = dtype == DType::float32 ? MPI_SUM : bf16_sum_;
    if (count <= max_count()) {
      MPI_Request q;
      MPI_Ireduce_scatter_block(s, r, static_cast<int>(count), type, op, comm_, &q);
      wait_one(&q, "a reduce-scatter");
    } else {
      // More than an int of elements per rank: pieces of max_count() elements, each gathered
      // from the W blocks into one contiguous send buffer (a reduction needs contiguous data).
      const bool host = host_memory || st.staged();
      for (std::size_t off = 0; off < count; off += max_count()) {
        const std::size_t n = std::min(count - off, max_count()), piece_bytes = n * esize;
        char* piece =
            host ? host_piece_.reserve(piece_bytes * size_) : grow(piece_, piece_bytes * size_);
        for (int k = 0; k < size_; ++k) {
          copy_bytes(piece + k * piece_bytes, s + (k * count + off) * esize, piece_bytes, host);
        }
        MPI_Request q;
        MPI_Ireduce_scatter_block(piece, r + off * esize, static_cast<int>(n), type, op, comm_, &q);
        wait_one(&q, "a reduce-scatter");
      }
    }
    st.finish();
    end(t0, static_cast<double>(count * esize) * (size_ - 1));
  }

  int reduce_scatter_start_impl(const void* send, void* recv, std::size_t count,
                                DType dtype) override {
    constexpr bool host_memory = kHostMemory;
    if (nonblocking_ && host_memory && ring()) {  // started on the ring, completed by the wait
      const double t0 = begin();
      Pending p;
      p.bytes = static_cast<double>(count * dtype_size(dtype)) * (size_ - 1);
      p.ring = ring_.start(send, recv, RingBlocks::equal(size_, count), dtype);
      stats_.seconds += now_s() - t0;
      return keep(p);
    }
    const bool direct = host_memory || (!stage_ && dtype == DType::float32);
    if (!nonblocking_ || !direct || count > max_count() || ring() ||
        (dtype != DType::float32 && dtype != DType::bfloat16)) {
      reduce_scatter_impl(send, recv, count, dtype);
      return kDone;
    }
    const double t0 = begin();
    Pending p;
    p.bytes = static_cast<double>(count * dtype_size(dtype)) * (size_ - 1);
    MPI_Ireduce_scatter_block(send, recv, static_cast<int>(count),
                              dtype == DType::float32 ? MPI_FLOAT : bf16_type_,
                              dtype == DType::float32 ? MPI_SUM : bf16_sum_, comm_, &p.request);
    stats_.seconds += now_s() - t0;
    return keep(p);
  }

  int allgather_start_impl(const void* send, void* recv, std::size_t bytes) override {
    constexpr bool host_memory = Kokkos::SpaceAccessibility<HostSpace, MemSpace>::accessible;
    if (!nonblocking_ || !(host_memory || !stage_) || bytes > max_count()) {
      allgather_impl(send, recv, bytes);
      return kDone;
    }
    const double t0 = begin();
    Pending p;
    p.bytes = static_cast<double>(bytes) * (size_ - 1);
    const int n = static_cast<int>(bytes);
    MPI_Iallgather(send, n, MPI_BYTE, recv, n, MPI_BYTE, comm_, &p.request);
    stats_.seconds += now_s() - t0;
    return keep(p);
  }

  void wait_impl(int ticket) override {
    Pending& p = pending_.at(static_cast<std::size_t>(ticket));
    const double t0 = now_s();
    if (p.ring >= 0) {
      ring_.finish(p.ring);
    } else {
      wait_one(&p.request, "a non-blocking collective");
    }
    p.busy = false;
    end(t0, p.bytes);
  }

  void alltoallv_impl(const char* send, char* recv, const std::vector<uint64_t>& bytes) override {
    const double t0 = begin();
    const AlltoallPlan p(bytes, size_, rank_, max_count());
    Staging st(stage_, stage_in_, stage_out_);
    const char* s = static_cast<const char*>(st.in(send, p.send_total));
    char* r = static_cast<char*>(st.out(recv, p.recv_total));
    if (p.rounds == 1) {  // every count and displacement of every rank fits an int
      const std::vector<int> sc = p.counts(p.send, 0), sd = p.displs(p.send, 0);
      const std::vector<int> rc = p.counts(p.recv, 0), rd = p.displs(p.recv, 0);
      MPI_Request q;
      MPI_Ialltoallv(s, sc.data(), sd.data(), MPI_BYTE, r, rc.data(), rd.data(), MPI_BYTE, comm_,
                     &q);
      wait_one(&q, "an all-to-all");
    } else {
      // Round k moves bytes [k * piece, (k + 1) * piece) of every block, packed back to back in
      // one send and one receive buffer of at most size() pieces (their offsets fit an int).
      constexpr bool host_memory = Kokkos::SpaceAccessibility<HostSpace, MemSpace>::accessible;
      const bool host = host_memory || st.staged();
      std::vector<char> hs, hr;
      Kokkos::View<char*, MemSpace> ds, dr;
      char* ps = host ? (hs.resize(p.piece * size_), hs.data()) : grow(ds, p.piece * size_);
      char* pr = host ? (hr.resize(p.piece * size_), hr.data()) : grow(dr, p.piece * size_);
      for (std::size_t k = 0; k < p.rounds; ++k) {
        const std::vector<int> sc = p.counts(p.send, k), rc = p.counts(p.recv, k);
        const std::vector<int> sd = p.displs(p.send, k), rd = p.displs(p.recv, k);
        for (int j = 0; j < size_; ++j) {
          copy_bytes(ps + sd[j], s + p.send[j].offset + k * p.piece, sc[j], host);
        }
        MPI_Request q;
        MPI_Ialltoallv(ps, sc.data(), sd.data(), MPI_BYTE, pr, rc.data(), rd.data(), MPI_BYTE,
                       comm_, &q);
        wait_one(&q, "an all-to-all");
        for (int i = 0; i < size_; ++i) {
          copy_bytes(r + p.recv[i].offset + k * p.piece, pr + rd[i], rc[i], host);
        }
      }
    }
    st.finish();
    const double sent = static_cast<double>(p.send_total - p.send[rank_].bytes);
    end(t0, sent);
    stats_.alltoall_bytes_sent += sent;
  }

  void allreduce_impl(float* data, std::size_t n) override {
    const double t0 = begin();
    if (ring()) {
      ring_allreduce(data, n);
      end(t0, 2.0 * static_cast<double>(n * sizeof(float)) * (size_ - 1) / size_);
      return;
    }
    Staging st(stage_, stage_in_, stage_out_);
    const void* s = st.in(data, n * sizeof(float));
    void* r = st.out(data, n * sizeof(float));
    // In place on host memory; staged buffers are separate, so pass them as send and receive.
    // Pieces of at most max_count() elements (MPI counts are int).
    const float* sf = static_cast<const float*>(s);
    float* rf = static_cast<float*>(r);
    for (std::size_t off = 0; off < n; off += max_count()) {
      const int c = static_cast<int>(std::min(n - off, max_count()));
      MPI_Request q;
      MPI_Iallreduce(s == r ? MPI_IN_PLACE : sf + off, rf + off, c, MPI_FLOAT, MPI_SUM, comm_, &q);
      wait_one(&q, "an all-reduce");
    }
    st.finish();
    end(t0, 2.0 * static_cast<double>(n * sizeof(float)) * (size_ - 1) / size_);
  }

 private:
  static constexpr bool kHostMemory = Kokkos::SpaceAccessibility<HostSpace, MemSpace>::accessible;
  // Whether kktrain's ring runs the reductions (parallel/ring_collectives.hpp's rule): forced,
  // or under auto wherever the buffers are (or are staged to) host memory.
  bool ring() const {
    if (collectives_ == CollectiveImpl::mpi) return false;
    return collectives_ == CollectiveImpl::kktrain || kHostMemory || stage_;
  }
  // The all-reduce as the ring's reduce-scatter over W near-equal blocks into this rank's block,
  // then MPI_Allgatherv in place, in pieces of at most max_count() elements (so that every count
  // and displacement fits an int). Every rank ends with the same bits: each block was summed once,
  // by its owner, and copied to the others.
  void ring_allreduce(float* data, std::size_t n) {
    Staging st(!kHostMemory, stage_in_, stage_out_);
    const char* s = static_cast<const char*>(st.in(data, n * sizeof(float)));
    char* r = static_cast<char*>(st.out(data, n * sizeof(float)));
    std::vector<int> counts(size_), displs(size_);
    for (std::size_t off = 0; off < n; off += max_count()) {
      const std::size_t piece = std::min(n - off, max_count());
      const RingBlocks b = RingBlocks::split(size_, piece);
      const std::size_t at = off * sizeof(float);
      ring_.finish(ring_.start(s + at, r + at + b.off[rank_] * sizeof(float), b, DType::float32));
      for (int k = 0; k < size_; ++k) {
        counts[k] = static_cast<int>(b.len[k]);
        displs[k] = static_cast<int>(b.off[k]);
      }
      MPI_Request q;
      MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, r + at, counts.data(), displs.data(),
                      MPI_FLOAT, comm_, &q);
      wait_one(&q, "an all-gather");
    }
    st.finish();
  }
  static char* grow(Kokkos::View<char*, MemSpace>& v, std::size_t bytes) {
    if (v.extent(0) < bytes) v = Kokkos::View<char*, MemSpace>("mpi_piece", bytes);
    return v.data();
  }
  static void copy_bytes(char* dst, const char* src, std::size_t bytes, bool host) {
    if (host) {
      std::memcpy(dst, src, bytes);
    } else {
      using Dev = Kokkos::View<char*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
      Kokkos::deep_copy(Dev(dst, bytes), Dev(const_cast<char*>(src), bytes));
    }
  }
  // Kernels that produced the send buffers must be done before MPI reads them.
  double begin() {
    collective_fence();
    return now_s();
  }
  // Blocking MPI: the host waited for the collective (one wait per collective).
  void end(double t0, double bytes) {
    count_collective_wait();
    stats_.seconds += now_s() - t0;
    stats_.bytes_sent += bytes;
    ++stats_.calls;
  }
  MPI_Datatype bf16_type_ = MPI_DATATYPE_NULL;
  MPI_Op bf16_sum_ = MPI_OP_NULL;
  bool stage_ = false;
  // Started non-blocking collectives (reduce_scatter_start, allgather_start); a free slot is not
  // busy.
  struct Pending {
    MPI_Request request = MPI_REQUEST_NULL;
    int ring = -1;  // a ring reduction's id (ring_), or -1: MPI's request
    double bytes = 0.0;
    bool busy = true;
  };
  std::vector<Pending> pending_;
  // A started collective's slot: a free one, or a new one (a handful are in flight at most).
  int keep(const Pending& p) {
    for (std::size_t i = 0; i < pending_.size(); ++i) {
      if (!pending_[i].busy) {
        pending_[i] = p;
        return static_cast<int>(i);
      }
    }
    pending_.push_back(p);
    return static_cast<int>(pending_.size() - 1);
  }
  // Persistent buffers: staging copies, and reductions of more than an int of elements.
  HostBuffer stage_in_, stage_out_, host_piece_;
  Kokkos::View<char*, MemSpace> piece_;
  std::string path_;
  RingReducer ring_;
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
  open_peer_liveness();
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
}

MpiRuntime::~MpiRuntime() {
  if (!active_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

std::unique_ptr<Communicator> MpiRuntime::make_communicator(const MpiLimits& limits) const {
  if (!active_ || size_ == 1) return std::make_unique<SingleCommunicator>();
#if defined(KKTRAIN_HAVE_NCCL) && defined(KOKKOS_ENABLE_CUDA)
  const int sharing = ranks_on_busiest_gpu();
  if (sharing > 1) {
    log::warn_about_launch(std::to_string(sharing) +
                           " ranks run on one GPU of a node and NCCL needs a GPU per rank: "
                           "collectives go through MPI instead (staged through host memory "
                           "unless MPI is GPU-aware); launch at most one rank per GPU for NCCL");
    return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, limits);
  }
  return make_nccl_communicator(limits);
#else
  return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, limits);
#endif
}

}  // namespace kktrain
