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
  const Kokkos::RangePolicy<Host> range(space, 0, n);
  if (dtype == DType::float32) {
    float* d = reinterpret_cast<float*>(dst);
    const float* x = reinterpret_cast<const float*>(a);
    const float* y = reinterpret_cast<const float*>(b);
    Kokkos::parallel_for("kktrain_ring_add_f32", range, [=](std::size_t i) { d[i] = x[i] + y[i]; });
  } else {
    uint16_t* d = reinterpret_cast<uint16_t*>(dst);
    const uint16_t* x = reinterpret_cast<const uint16_t*>(a);
    const uint16_t* y = reinterpret_cast<const uint16_t*>(b);
    Kokkos::parallel_for("kktrain_ring_add_bf16", range, [=](std::size_t i) {
      d[i] =
          bf16_bits_from_float(bf16::from_bits(x[i]).to_float() + bf16::from_bits(y[i]).to_float());
    });
  }
  space.fence();  // an instance fence: the host sends dst next
}

}  // namespace

// One started reduction: its buffers, and the requests of the step in flight and the next one
// (indexed by step parity, one per chunk of the step's block).
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
  std::vector<MPI_Request> recv[2], send[2];
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
  const int w = size_, r = rank_;
  const std::size_t es = dtype_size(dtype);
  if (w == 1) {
    if (out != static_cast<const char*>(in) + blocks.off[0] * es) {
      std::memcpy(out, static_cast<const char*>(in) + blocks.off[0] * es, blocks.len[0] * es);
    }
    return id;
  }
  auto op = std::make_unique<Op>();
  op->id = id;
  op->tag = 1 + id % 30000;  // distinct among the few reductions in flight
  op->in = static_cast<const char*>(in);
  op->out = static_cast<char*>(out);
  op->b = blocks;
  op->esize = es;
  op->dtype = dtype;
  op->type = dtype == DType::float32 ? MPI_FLOAT : MPI_UINT16_T;
  op->chunk = chunk_elements(es);
  const std::size_t ch = op->chunk;
  op->scratch_bytes = *std::max_element(blocks.len.begin(), blocks.len.end()) * es;
  op->tmp[0] = take(op->scratch_bytes);
  if (w > 2) op->tmp[1] = take(op->scratch_bytes);
  // Step 0: receive the predecessor's block r - 2, send block r - 1 as it is.
  const int prev = mod(r - 1, w), next = mod(r + 1, w);
  const std::size_t rlen = blocks.len[mod(r - 2, w)], slen = blocks.len[mod(r - 1, w)];
  op->recv[0].assign((rlen + ch - 1) / ch, MPI_REQUEST_NULL);
  op->send[0].assign((slen + ch - 1) / ch, MPI_REQUEST_NULL);
  for (std::size_t c = 0; c < op->recv[0].size(); ++c) {
    const std::size_t n = std::min(ch, rlen - c * ch);
    MPI_Irecv(op->tmp[0].get() + c * ch * es, static_cast<int>(n), op->type, prev, op->tag, comm_,
              &op->recv[0][c]);
  }
  const char* src = op->in + blocks.off[mod(r - 1, w)] * es;
  for (std::size_t c = 0; c < op->send[0].size(); ++c) {
    const std::size_t n = std::min(ch, slen - c * ch);
    MPI_Isend(src + c * ch * es, static_cast<int>(n), op->type, next, op->tag, comm_,
              &op->send[0][c]);
  }
  ops_.push_back(std::move(op));
  return id;
}

void RingReducer::run(Op& op) {
  const int w = size_, r = rank_, prev = mod(r - 1, w), next = mod(r + 1, w);
  const std::size_t es = op.esize, ch = op.chunk;
  auto chunks = [&](std::size_t len) { return (len + ch - 1) / ch; };
  for (int s = 0; s + 1 < w; ++s) {
    const int p = s % 2, q = 1 - p;
    const bool last = s + 2 == w;
    const int rb = mod(r - s - 2, w);  // the block received at step s
    const std::size_t len = op.b.len[rb];
    char* partial = op.tmp[p].get();
    char* dst = last ? op.out : partial;  // the sum: the next step sends it, or the result
    const char* own = op.in + op.b.off[rb] * es;
    // Step s + 1 sends block rb (this step's sums) and receives block rb - 1 into tmp[q].
    const std::size_t next_len = last ? 0 : op.b.len[mod(r - s - 3, w)];
    if (!last) {
      op.send[q].assign(chunks(len), MPI_REQUEST_NULL);
      op.recv[q].assign(chunks(next_len), MPI_REQUEST_NULL);
    }
    auto post_next_recv = [&](std::size_t c) {
      // tmp[q] was step s's send buffer (or `in` at step 0): that chunk must have left first.
      if (c < op.send[p].size()) MPI_Wait(&op.send[p][c], MPI_STATUS_IGNORE);
      const std::size_t n = std::min(ch, next_len - c * ch);
      MPI_Irecv(op.tmp[q].get() + c * ch * es, static_cast<int>(n), op.type, prev, op.tag, comm_,
                &op.recv[q][c]);
    };
    for (std::size_t c = 0; c < chunks(len); ++c) {
      const std::size_t at = c * ch * es, n = std::min(ch, len - c * ch);
      MPI_Wait(&op.recv[p][c], MPI_STATUS_IGNORE);
      add_chunk(dst + at, partial + at, own + at, n, op.dtype);
      if (last) continue;
      MPI_Isend(dst + at, static_cast<int>(n), op.type, next, op.tag, comm_, &op.send[q][c]);
      if (c < op.recv[q].size()) post_next_recv(c);
    }
    for (std::size_t c = chunks(len); c < op.recv[q].size() && !last; ++c) post_next_recv(c);
    MPI_Waitall(static_cast<int>(op.send[p].size()), op.send[p].data(), MPI_STATUSES_IGNORE);
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
