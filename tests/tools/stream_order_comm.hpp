// A test communicator that runs the collectives of another (MPI, non-blocking) and checks that
// its caller orders its work as a GPU communication stream requires (the NCCL communicator's
// contract, parallel/communicator.hpp), on machines without a GPU.
//
// It plays a stream: every started collective and everything run on collective_space() after it
// is "communication-side work", numbered in issue order, that the compute side sees only after
// waiting (wait_collective) for a ticket issued at or after it: the collective's own ticket or a
// communication_done() mark. Outstanding work is what no such wait covers yet. It records a
// violation when a started collective's send buffer overlaps the send buffer of outstanding
// work (the compute side wrote bytes the communication side may still be reading), and
// outstanding() says what is still unordered (after FSDP's complete_reductions(), nothing may
// be: the optimizer reads those gradients). A blocking collective orders everything before it,
// as the NCCL communicator's does. Data moves through the wrapped communicator, so results are
// the real ones.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "parallel/communicator.hpp"

namespace kktrain::check {

class StreamOrderComm final : public Communicator {
 public:
  explicit StreamOrderComm(Communicator& inner) : inner_(inner) {}

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  int ranks_on_node() const override { return inner_.ranks_on_node(); }
  std::string name() const override { return "stream-order(" + inner_.name() + ")"; }

  const std::vector<std::string>& violations() const { return violations_; }
  // Communication-side work no compute-side wait covers yet.
  int64_t outstanding() const { return static_cast<int64_t>(pending_.size()); }

  std::unique_ptr<Communicator> split(int, int) override {
    throw InternalError("StreamOrderComm::split");
  }
  std::vector<uint64_t> allgather_u64(const std::vector<uint64_t>& v) override {
    return inner_.allgather_u64(v);
  }
  double allreduce_sum_host(double v) override { return inner_.allreduce_sum_host(v); }
  double allreduce_max_host(double v) override { return inner_.allreduce_max_host(v); }
  uint64_t allreduce_sum_u64(uint64_t v) override { return inner_.allreduce_sum_u64(v); }
  void allreduce_sum_u64(std::vector<uint64_t>& v) override { inner_.allreduce_sum_u64(v); }
  void allreduce_host(std::vector<double>& s, std::vector<double>& m) override {
    inner_.allreduce_host(s, m);
  }
  void broadcast_host(std::string& b, int root) override { inner_.broadcast_host(b, root); }
  bool all_agree(bool ok) override { return inner_.all_agree(ok); }
  int first_failing_rank(bool f, double s) override { return inner_.first_failing_rank(f, s); }
  [[noreturn]] void abort(int code) override {
    inner_.abort(code);
    std::_Exit(code);  // (a call through a reference is not known not to return)
  }
  void barrier() override { inner_.barrier(); }

 protected:
  // Blocking collectives: the compute side waits for them, and so for everything issued before.
  void allgather_impl(const void* send, void* recv, std::size_t bytes) override {
    counted([&] {
      inner_.allgather_bytes(DBytesU(static_cast<char*>(const_cast<void*>(send)), bytes),
                             DBytesU(static_cast<char*>(recv), bytes * size()));
    });
    pending_.clear();
  }
  void reduce_scatter_impl(const void* send, void* recv, std::size_t count, DType dtype) override {
    const std::size_t b = count * dtype_size(dtype);
    counted([&] {
      inner_.reduce_scatter_sum(DBytesU(static_cast<char*>(const_cast<void*>(send)), b * size()),
                                DBytesU(static_cast<char*>(recv), b), dtype);
    });
    pending_.clear();
  }
  void allreduce_impl(float* data, std::size_t n) override {
    counted([&] { inner_.allreduce_sum(DViewU<float>(data, n)); });
    pending_.clear();
  }
  void alltoallv_impl(const char* send, char* recv, const std::vector<uint64_t>& bytes) override {
    uint64_t out = 0, in = 0;
    for (int j = 0; j < size(); ++j) {
      out += bytes[rank() * size() + j];
      in += bytes[j * size() + rank()];
    }
    counted([&] {
      inner_.alltoallv_bytes(DBytesU(const_cast<char*>(send), out), DBytesU(recv, in), bytes);
    });
    pending_.clear();
  }

  // Started only with set_nonblocking(true) (completed at once otherwise, as NCCL's).
  int reduce_scatter_start_impl(const void* send, void* recv, std::size_t count,
                                DType dtype) override {
    if (!nonblocking_) return Communicator::reduce_scatter_start_impl(send, recv, count, dtype);
    const std::size_t b = count * dtype_size(dtype);
    return start(send, b * size(), [&] {
      return inner_.reduce_scatter_start(
          DBytesU(static_cast<char*>(const_cast<void*>(send)), b * size()),
          DBytesU(static_cast<char*>(recv), b), dtype);
    });
  }
  int allgather_start_impl(const void* send, void* recv, std::size_t bytes) override {
    if (!nonblocking_) return Communicator::allgather_start_impl(send, recv, bytes);
    return start(send, bytes, [&] {
      return inner_.allgather_start(DBytesU(static_cast<char*>(const_cast<void*>(send)), bytes),
                                    DBytesU(static_cast<char*>(recv), bytes * size()));
    });
  }
  void wait_impl(int ticket) override {
    Ticket& t = tickets_.at(static_cast<std::size_t>(ticket));
    if (t.used) violations_.push_back("ticket " + std::to_string(ticket) + " used twice");
    t.used = true;
    if (t.inner != kDone) counted([&] { inner_.wait_collective(t.inner); });
    const int64_t upto = t.seq;
    pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                  [&](const Work& w) { return w.seq <= upto; }),
                   pending_.end());
  }
  ExecSpace collective_space_impl(int ticket) override {
    Ticket& t = tickets_.at(static_cast<std::size_t>(ticket));
    if (t.used) violations_.push_back("ticket " + std::to_string(ticket) + " used twice");
    t.used = true;
    if (t.inner != kDone) counted([&] { inner_.collective_space(t.inner); });
    // The caller's work on the returned instance (reads of the receive buffer, stores) is
    // communication-side work too.
    pending_.push_back(Work{++seq_, nullptr, 0});
    return ExecSpace();
  }
  int communication_done_impl() override { return issue(kDone); }

 private:
  struct Work {
    int64_t seq;
    const char* send;  // the bytes it reads that the compute side writes (null: none)
    std::size_t bytes;
  };
  struct Ticket {
    int inner;    // the wrapped communicator's ticket, or kDone for a mark
    int64_t seq;  // waiting for it orders the work up to this one
    bool used;
  };
  template <class F>
  void counted(const F& f) {
    const CommStats b = inner_.stats();
    f();
    const CommStats& a = inner_.stats();
    stats_.bytes_sent += a.bytes_sent - b.bytes_sent;
    stats_.seconds += a.seconds - b.seconds;
    stats_.calls += a.calls - b.calls;
    stats_.alltoall_bytes_sent += a.alltoall_bytes_sent - b.alltoall_bytes_sent;
  }
  template <class F>
  int start(const void* send, std::size_t bytes, const F& f) {
    const char* s = static_cast<const char*>(send);
    for (const Work& w : pending_) {
      if (w.send != nullptr && s < w.send + w.bytes && w.send < s + bytes) {
        violations_.push_back(
            "a collective's send buffer was written while communication-side "
            "work " +
            std::to_string(w.seq) + " may still read it");
      }
    }
    int inner = kDone;
    counted([&] { inner = f(); });
    pending_.push_back(Work{++seq_, s, bytes});
    return issue(inner);
  }
  int issue(int inner) {
    tickets_.push_back(Ticket{inner, seq_, false});
    return static_cast<int>(tickets_.size() - 1);
  }

  Communicator& inner_;
  std::vector<Work> pending_;
  std::vector<Ticket> tickets_;
  std::vector<std::string> violations_;
  int64_t seq_ = 0;
};

}  // namespace kktrain::check
