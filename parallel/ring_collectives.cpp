// kktrain's ring reductions over point-to-point MPI (parallel/ring_collectives.hpp).
#include "parallel/ring_collectives.hpp"

#include <algorithm>
#include <cstring>
#include <exception>

#include "core/bf16.hpp"
#include "core/errors.hpp"
#include "core/kokkos_compat.hpp"
#include "parallel/peer_wait.hpp"

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

// The shared window's signals: "slot filled" to the successor, "slot read" to the predecessor
// (tags above the message ring's 1..30000).
constexpr int kSlotReady = 32001, kSlotCredit = 32002;

// Every wait goes through parallel/peer_wait.hpp: a short spin, then sleeps; a peer that stops
// answering for distributed.stuck_peer_wait_s ends the job.
constexpr const char* kWhat = "a ring reduction";

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
    // shuffles (faster than one element a lane). Each sum is rounded as bf16_round_bits32 does,
    // the NaN test as s != s and the low half's mask left to the shift: the same bits in fewer
    // operations a lane (the timings: bench/README.md, "The ring's bf16 additions").
    // An odd last element alone.
    const std::size_t words = n / 2;
    Kokkos::parallel_for(
        "kktrain_ring_add_bf16", Kokkos::RangePolicy<Host>(space, 0, words), [=](std::size_t j) {
          uint32_t p, q;
          std::memcpy(&p, a + 4 * j, 4);
          std::memcpy(&q, b + 4 * j, 4);
          auto round = [](float s) {  // nearest even; a NaN kept, made quiet; low half not cleared
            const uint32_t u = float_bits(s);
            return s != s ? u | 0x00400000u : u + 0x7fffu + ((u >> 16) & 1u);
          };
          const uint32_t hi = round(bits_float(p & 0xffff0000u) + bits_float(q & 0xffff0000u));
          const uint32_t lo = round(bits_float(p << 16) + bits_float(q << 16));
          const uint32_t r = (hi & 0xffff0000u) | (lo >> 16);
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

  // Receives posted ahead of the chunk being summed: none measured faster than one ahead (the
  // library then copies a chunk only when it is needed, right before its sum; bench/README.md,
  // "Collectives: kktrain's own against MPI's").
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
      wait_one(&before[c], kWhat);
    }
    MPI_Irecv(target(s) + c * chunk * esize, static_cast<int>(elements(len, c)), type, prev, tag,
              comm, &recv[s % 2][c]);
  }
  // Step s: the sizes of its request arrays, the first receives.
  void begin_step(int s) {
    std::vector<MPI_Request>& before = send[(s + 2) % 3];  // step s - 1's sends
    // those past this step's chunks, which no receive below waits for
    for (std::size_t c = chunks(b.len[rb(s)]); s > 0 && c < before.size(); ++c) {
      wait_one(&before[c], kWhat);
    }
    recv[s % 2].assign(chunks(b.len[rb(s)]), MPI_REQUEST_NULL);
    // != rather than <: with kLookahead 0, nvcc flags `c < 0` as a pointless comparison
    for (std::size_t c = 0; c != kLookahead; ++c) post_recv(s, c);
  }
};

RingReducer::RingReducer(MPI_Comm comm, const MpiLimits& limits)
    : chunk_bytes_(limits.ring_chunk_bytes),
      max_count_(limits.max_count),
      slot_bytes_(limits.ring_slot_bytes),
      slots_(limits.ring_slots) {
  MPI_Comm_dup(comm, &comm_);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  if (size_ > 1 && limits.ring_transport == RingTransport::automatic) {
    MPI_Comm node;  // every rank sees the same answer: all of comm_ on one node, or not
    MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node);
    int on_node = 0;
    MPI_Comm_size(node, &on_node);
    MPI_Comm_free(&node);
    if (on_node == size_) open_window();
  }
}

void RingReducer::open_window() {
  if (slots_ < 2 || slot_bytes_ < 4) {
    throw InternalError("ring reduction: a shared window needs 2 or more slots of 4 bytes or more");
  }
  MPI_Info info;  // each rank's slots in its own pages (placed by the rank that reads them)
  MPI_Info_create(&info);
  MPI_Info_set(info, "alloc_shared_noncontig", "true");
  char* base = nullptr;
  MPI_Win_allocate_shared(static_cast<MPI_Aint>(slot_bytes_ * static_cast<std::size_t>(slots_)), 1,
                          info, comm_, &base, &win_);
  MPI_Info_free(&info);
  inbox_ = base;
  MPI_Aint bytes = 0;
  int disp = 0;
  MPI_Win_shared_query(win_, mod(rank_ + 1, size_), &bytes, &disp, &outbox_);
  MPI_Win_lock_all(MPI_MODE_NOCHECK, win_);  // one passive epoch: MPI_Win_sync orders the slots
}

RingReducer::~RingReducer() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  // A rank unwinding from a failure leaves both to the job's end: freeing a window waits for every
  // rank, and the others may be waiting in a reduction this rank never joins.
  if (finalized || std::uncaught_exceptions() > 0) return;
  if (win_ != MPI_WIN_NULL) {
    // the successor's credits for the last slots written (sent once it read them)
    for (; credited_ < written_; ++credited_) receive_signal(mod(rank_ + 1, size_), kSlotCredit);
    MPI_Win_unlock_all(win_);
    MPI_Win_free(&win_);
  }
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void RingReducer::receive_signal(int from, int tag) {
  MPI_Request r;
  MPI_Irecv(nullptr, 0, MPI_BYTE, from, tag, comm_, &r);
  wait_one(&r, kWhat);
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
  const std::size_t bytes = shared() ? slot_bytes_ : chunk_bytes_;
  return std::max<std::size_t>(1, std::min(max_count_, bytes / esize));
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
  if (shared()) {  // everything happens in finish()
    ops_.push_back(std::move(op));
    return id;
  }
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
      wait_one(&op.recv[s % 2][c], kWhat);
      add_chunk(dst + at, partial + at, own + at, n, op.dtype);
      if (!last) {
        MPI_Isend(dst + at, static_cast<int>(n), op.type, op.next, op.tag, op.comm, &onward[c]);
      }
    }
  }
  for (auto& sends : op.send) wait_all(static_cast<int>(sends.size()), sends.data(), kWhat);
}

// Through the shared window, chunk by chunk: for chunk c, this rank first writes block r - 1's
// chunk c into its successor's next slot, then for each step s takes its predecessor's chunk c of
// block rb(s) from its own next slot, adds its own block's chunk and writes the sum into the
// successor's next slot (the step that sends it on) or into `out` (the last step). Slots are used
// in turn, counted over every reduction: the k-th slot written waits for the credit of the
// (k - slots)-th one, which an earlier reduction may have sent. Every rank runs
// the same order, so a slot's writer and reader agree on what it holds. The window is a
// unified-memory window in one passive epoch: MPI_Win_sync between a slot's stores and the
// message that publishes them, and between a message and the loads or stores it allows.
void RingReducer::run_shared(Op& op) {
  const std::size_t es = op.esize, slots = static_cast<std::size_t>(slots_);
  std::vector<MPI_Request> signals;  // this reduction's ready and credit messages
  signals.reserve(2 * op.chunks(op.b.len[0]) * static_cast<std::size_t>(op.w) + 2);
  auto slot_out = [&]() -> char* {  // the successor's next slot, once its reader is done with it
    if (written_ >= credited_ + slots) {
      receive_signal(op.next, kSlotCredit);
      ++credited_;
      MPI_Win_sync(win_);
    }
    return outbox_ + (written_ % slots) * slot_bytes_;
  };
  auto publish = [&]() {
    MPI_Win_sync(win_);
    signals.emplace_back();
    MPI_Isend(nullptr, 0, MPI_BYTE, op.next, kSlotReady, comm_, &signals.back());
    ++written_;
  };
  auto slot_in = [&]() -> const char* {  // this rank's next slot, once its writer filled it
    receive_signal(op.prev, kSlotReady);
    MPI_Win_sync(win_);
    return inbox_ + (read_ % slots) * slot_bytes_;
  };
  auto release = [&]() {
    MPI_Win_sync(win_);
    signals.emplace_back();
    MPI_Isend(nullptr, 0, MPI_BYTE, op.prev, kSlotCredit, comm_, &signals.back());
    ++read_;
  };
  std::size_t chunks = 0;
  for (std::size_t len : op.b.len) chunks = std::max(chunks, op.chunks(len));
  const int sb = mod(op.r - 1, op.w);  // the block this rank sends as it is
  for (std::size_t c = 0; c < chunks; ++c) {
    const std::size_t at = c * op.chunk;
    if (c < op.chunks(op.b.len[sb])) {
      std::memcpy(slot_out(), op.in + (op.b.off[sb] + at) * es, op.elements(op.b.len[sb], c) * es);
      publish();
    }
    for (int s = 0; s + 1 < op.w; ++s) {
      const int rb = op.rb(s);
      const std::size_t len = op.b.len[rb];
      if (c >= op.chunks(len)) continue;  // the writer skipped it too: the same block
      const char* partial = slot_in();
      char* dst = op.last(s) ? op.out + at * es : slot_out();
      add_chunk(dst, partial, op.in + (op.b.off[rb] + at) * es, op.elements(len, c), op.dtype);
      release();
      if (!op.last(s)) publish();
    }
  }
  wait_all(static_cast<int>(signals.size()), signals.data(), kWhat);
}

void RingReducer::finish(int id) {
  while (!ops_.empty() && ops_.front()->id <= id) {
    Op& op = *ops_.front();
    if (shared()) {
      run_shared(op);
      ops_.pop_front();
      continue;
    }
    run(op);
    for (auto& t : op.tmp) {
      if (t) pool_.emplace_back(op.scratch_bytes, std::move(t));
    }
    ops_.pop_front();
  }
}

}  // namespace kktrain
