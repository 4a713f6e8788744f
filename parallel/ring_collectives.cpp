// kktrain's ring reductions over point-to-point MPI (parallel/ring_collectives.hpp).
#include "parallel/ring_collectives.hpp"

#include <algorithm>
#include <cstring>

#include "core/bf16.hpp"
#include "core/errors.hpp"
#include "core/kokkos_compat.hpp"

namespace kktrain {

RingBlocks RingBlocks::equal(int w, std::size_t count) {
  RingBlocks b;
  for (int k = 0; k < w; ++k) {
    b.off.push_back(static_cast<std::size_t>(k) * count);
    b.len.push_back(count);
  }
  return b;
}

RingBlocks RingBlocks::split(int w, std::size_t n) {
  RingBlocks b;
  const std::size_t uw = static_cast<std::size_t>(w), base = n / uw, extra = n % uw;
  std::size_t at = 0;
  for (std::size_t k = 0; k < uw; ++k) {
    b.off.push_back(at);
    b.len.push_back(base + (k < extra ? 1 : 0));
    at += b.len.back();
  }
  return b;
}

namespace {

int mod(int a, int w) {
  return ((a % w) + w) % w;
}

// dst (n) = a (n) + b (n), elements of dtype: fp32 sums, or bf16 operands widened to fp32, added
// and rounded once to bf16 (nearest even). dst may be b.
void add_chunk(char* dst, const char* a, const char* b, std::size_t n, DType dtype) {
  using Host = Kokkos::DefaultHostExecutionSpace;
  const Host space;
  if (dtype == DType::float32) {
    const Kokkos::RangePolicy<Host> range(space, 0, n);
    float* d = reinterpret_cast<float*>(dst);
    const float* x = reinterpret_cast<const float*>(a);
    const float* y = reinterpret_cast<const float*>(b);
    Kokkos::parallel_for("kktrain_ring_add_f32", range, [=](std::size_t i) { d[i] = x[i] + y[i]; });
  } else {
    // Two bf16 values a 32-bit word (element 2j in the low half): each half is widened by a mask
    // or a shift in its own lane, so the loop runs in 32-bit lanes without widening or narrowing
    // shuffles (128K elements in cache: 9.2 us against 12.6 one element a lane). An odd last
    // element alone.
    const std::size_t words = n / 2;
    Kokkos::parallel_for(
        "kktrain_ring_add_bf16", Kokkos::RangePolicy<Host>(space, 0, words), [=](std::size_t j) {
          uint32_t p, q;
          std::memcpy(&p, a + 4 * j, 4);
          std::memcpy(&q, b + 4 * j, 4);
          const uint32_t hi =
              bf16_round_bits32(bits_float(p & 0xffff0000u) + bits_float(q & 0xffff0000u));
          const uint32_t lo = bf16_round_bits32(bits_float(p << 16) + bits_float(q << 16));
          const uint32_t r = hi | (lo >> 16);
          std::memcpy(dst + 4 * j, &r, 4);
        });
    if (n % 2 != 0) {
      uint16_t x, y;
      std::memcpy(&x, a + 2 * (n - 1), 2);
      std::memcpy(&y, b + 2 * (n - 1), 2);
      const uint16_t r =
          bf16_bits_from_float(bf16::from_bits(x).to_float() + bf16::from_bits(y).to_float());
      std::memcpy(dst + 2 * (n - 1), &r, 2);
    }
  }
  space.fence();  // an instance fence: the host sends dst next
}

}  // namespace

// One started reduction. Step s receives block rb(s) = r - s - 2 (requests recv[s % 2]) and
// sends block r - s - 1: the input's own block at step 0, else the partial sums step s - 1 left in
// tmp[(s - 1) % 2] (requests send[s % 3], posted chunk by chunk as step s - 1 sums them). Steps
// before the last receive into tmp[s % 2] and add their own block there; the last one receives
// straight into `out` and adds in place, unless `out` is the input's own block (an in-place
// all-reduce), which it receives into tmp like the others. A receive is posted just before its
// chunk is summed, so the library's copy of a chunk is still in cache
// when the sum reads it, and a rank's memory traffic is one read of the peer's chunk, one of its
// own and one write (no scratch at all on 2 ranks). Receiving into tmp[s % 2] waits first for
// step s - 1's send of that chunk, which read the same place.
struct RingReducer::Op {
  int id = 0, tag = 0;
  const char* in = nullptr;
  char* out = nullptr;
  RingBlocks b;
  std::size_t esize = 4;
  DType dtype = DType::float32;
  MPI_Datatype type = MPI_FLOAT;
  std::size_t chunk = 1;  // elements per message
  std::size_t scratch_bytes = 0;
  std::unique_ptr<char[]> tmp[2];  // partial sums received at even / odd steps
  bool direct = false;             // the last step receives into out
  std::vector<MPI_Request> recv[2], send[3];
  int w = 1, r = 0, prev = 0, next = 0;
  MPI_Comm comm = MPI_COMM_NULL;

  // Receives posted ahead of the chunk being summed. Measured on 2 ranks (1 MiB messages): one
  // ahead took 4.7 / 21.7 ms for 16 / 64 MiB per rank, none 3.8 / 18.6 ms (the library then
  // copies a chunk only when it is needed, right before its sum).
  static constexpr std::size_t kLookahead = 0;
  int rb(int s) const { return mod(r - s - 2, w); }
  bool last(int s) const { return s + 2 == w; }
  // Where step s receives (and sums).
  char* target(int s) const { return last(s) && direct ? out : tmp[s % 2].get(); }
  std::size_t chunks(std::size_t len) const { return (len + chunk - 1) / chunk; }
  std::size_t elements(std::size_t len, std::size_t c) const {
    return std::min(chunk, len - c * chunk);
  }
  // Posts step s's receive of chunk c (if the block has one), once step s - 1's send of it left.
  void post_recv(int s, std::size_t c) {
    const std::size_t len = b.len[rb(s)];
    if (c >= chunks(len)) return;
    std::vector<MPI_Request>& before = send[(s + 2) % 3];  // step s - 1's sends
    // (out is no send's source: the last step of a direct reduction waits for nothing)
    if (s > 0 && !(last(s) && direct) && c < before.size()) {
      MPI_Wait(&before[c], MPI_STATUS_IGNORE);
    }
    MPI_Irecv(target(s) + c * chunk * esize, static_cast<int>(elements(len, c)), type, prev, tag,
              comm, &recv[s % 2][c]);
  }
  // Step s: the sizes of its request arrays, the first receives.
  void begin_step(int s) {
    std::vector<MPI_Request>& before = send[(s + 2) % 3];  // step s - 1's sends
    // those past this step's chunks, which no receive below waits for
    for (std::size_t c = chunks(b.len[rb(s)]); s > 0 && c < before.size(); ++c) {
      MPI_Wait(&before[c], MPI_STATUS_IGNORE);
    }
    recv[s % 2].assign(chunks(b.len[rb(s)]), MPI_REQUEST_NULL);
    for (std::size_t c = 0; c < kLookahead; ++c) post_recv(s, c);
  }
};

RingReducer::RingReducer(MPI_Comm comm, std::size_t chunk_bytes, std::size_t max_count)
    : chunk_bytes_(chunk_bytes), max_count_(max_count) {
  MPI_Comm_dup(comm, &comm_);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

RingReducer::~RingReducer() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

std::unique_ptr<char[]> RingReducer::take(std::size_t bytes) {
  for (std::size_t i = 0; i < pool_.size(); ++i) {
    if (pool_[i].first >= bytes) {
      std::unique_ptr<char[]> p = std::move(pool_[i].second);
      pool_.erase(pool_.begin() + static_cast<std::ptrdiff_t>(i));
      return p;
    }
  }
  return std::unique_ptr<char[]>(new char[std::max<std::size_t>(bytes, 1)]);  // never zeroed
}

std::size_t RingReducer::chunk_elements(std::size_t esize) const {
  return std::max<std::size_t>(1, std::min(max_count_, chunk_bytes_ / esize));
}

int RingReducer::start(const void* in, void* out, const RingBlocks& blocks, DType dtype) {
  if (dtype != DType::float32 && dtype != DType::bfloat16) {
    throw InternalError("ring reduction: unsupported dtype " + std::string(dtype_name(dtype)));
  }
  const int id = next_id_++;
  const std::size_t es = dtype_size(dtype);
  if (size_ == 1) {
    if (out != static_cast<const char*>(in) + blocks.off[0] * es) {
      std::memcpy(out, static_cast<const char*>(in) + blocks.off[0] * es, blocks.len[0] * es);
    }
    return id;
  }
  auto op = std::make_unique<Op>();
  Op& o = *op;
  o.id = id;
  o.tag = 1 + id % 30000;  // distinct among the few reductions in flight
  o.in = static_cast<const char*>(in);
  o.out = static_cast<char*>(out);
  o.b = blocks;
  o.esize = es;
  o.dtype = dtype;
  o.type = dtype == DType::float32 ? MPI_FLOAT : MPI_UINT16_T;
  o.chunk = chunk_elements(es);
  o.w = size_;
  o.r = rank_;
  o.prev = mod(rank_ - 1, size_);
  o.next = mod(rank_ + 1, size_);
  o.comm = comm_;
  o.scratch_bytes = *std::max_element(blocks.len.begin(), blocks.len.end()) * es;
  o.direct = o.out != o.in + blocks.off[rank_] * es;
  // scratch for the steps that receive into it: all but the last, and the last unless direct
  const int scratch_steps = size_ - 1 - (o.direct ? 1 : 0);
  for (int k = 0; k < std::min(2, scratch_steps); ++k) o.tmp[k] = take(o.scratch_bytes);
  // Step 0: send block r - 1 as it is, all of it at once; its first receives.
  const int sb = mod(rank_ - 1, size_);
  const std::size_t slen = blocks.len[sb];
  o.send[0].assign(o.chunks(slen), MPI_REQUEST_NULL);
  for (std::size_t c = 0; c < o.send[0].size(); ++c) {
    MPI_Isend(o.in + (blocks.off[sb] + c * o.chunk) * es, static_cast<int>(o.elements(slen, c)),
              o.type, o.next, o.tag, comm_, &o.send[0][c]);
  }
  o.begin_step(0);
  ops_.push_back(std::move(op));
  return id;
}

void RingReducer::run(Op& op) {
  const std::size_t es = op.esize;
  for (int s = 0; s + 1 < op.w; ++s) {
    if (s > 0) op.begin_step(s);
    const bool last = op.last(s);
    const int rb = op.rb(s);
    const std::size_t len = op.b.len[rb];
    char* partial = op.target(s);         // what the predecessor sent
    char* dst = last ? op.out : partial;  // the sum: the next step sends it, or the result
    const char* own = op.in + op.b.off[rb] * es;
    // Step s + 1's sends; the array held step s - 2's, all complete (step s - 1 waited for them).
    std::vector<MPI_Request>& onward = op.send[(s + 1) % 3];
    if (!last) onward.assign(op.chunks(len), MPI_REQUEST_NULL);
    for (std::size_t c = 0; c < op.chunks(len); ++c) {
      const std::size_t at = c * op.chunk * es, n = op.elements(len, c);
      op.post_recv(s, c + Op::kLookahead);
      MPI_Wait(&op.recv[s % 2][c], MPI_STATUS_IGNORE);
      add_chunk(dst + at, partial + at, own + at, n, op.dtype);
      if (!last) {
        MPI_Isend(dst + at, static_cast<int>(n), op.type, op.next, op.tag, op.comm, &onward[c]);
      }
    }
  }
  for (auto& sends : op.send) {
    MPI_Waitall(static_cast<int>(sends.size()), sends.data(), MPI_STATUSES_IGNORE);
  }
}

void RingReducer::finish(int id) {
  while (!ops_.empty() && ops_.front()->id <= id) {
    Op& op = *ops_.front();
    run(op);
    for (auto& t : op.tmp) {
      if (t) pool_.emplace_back(op.scratch_bytes, std::move(t));
    }
    ops_.pop_front();
  }
}

}  // namespace kktrain
