// Checks every buffer collective of the communicator (the all-to-all, allgather_u64 and split of
// expert parallelism: mpi_alltoall_check.cpp), the FSDP unit machinery on top of it
// (mpi_fsdp_check.cpp) and the optimizer's lost-update counts summed over ranks
// (mpi_lost_updates_check.cpp), against serial references that every rank computes from the same
// seeded data. ctest runs it under mpirun with 2, 3 and 4 ranks and once without a launcher (one
// rank: SingleCommunicator, where the collectives are copies and FSDP has no wire). Exits non-zero
// naming each mismatch; rank 0 prints "ok: N ranks" when every rank passed.
//
//   mpi_collectives_check [--max-count L] [--collectives auto|kktrain|mpi]
//                         [--ring-transport automatic|point_to_point]
//
// --max-count L makes the communicator cut every MPI call into pieces of at most L elements
// (MpiLimits::max_count, INT_MAX otherwise), as one of more than 2^31 elements is (and kktrain's
// ring into messages of at most L elements). --collectives picks who runs the reductions
// (distributed.collectives; auto by default, which is kktrain's ring on host memory).
// --ring-transport point_to_point sends the ring's chunks as messages even though every rank is
// on this node (MpiLimits::ring_transport; automatic takes the shared window here).
//
//   allgather_bytes     blocks of 0, 1, 2, 3, 7, 13, 255 and 4099 bytes: exact, no byte
//                       written past W blocks, send untouched, (W - 1) * bytes counted.
//   reduce_scatter f32  integer-valued floats (every order is exact: equality) and random floats
//                       (one of the binary-tree summation orders, and within Higham's bound
//                       gamma_{W-1} * sum |x_r| of the exact sum; at 2 ranks simply fl(a + b)).
//   reduce_scatter bf16 "rounded once per addition": each of the W - 1 pairwise additions widens
//                       its two bf16 operands to fp32, adds, and rounds that sum once to bf16
//                       (nearest even). At 2 ranks the result is bitwise rne(a + b) for every
//                       element; crafted pairs make truncation, ties-away and double rounding
//                       through a narrower intermediate give a different answer. At 3 and 4 ranks
//                       it is one of the rne(rne(x_i + x_j) + x_k)... trees, and generally NOT the
//                       exact sum rounded once, rne(a + b + c): crafted triples and a quadruple
//                       have no tree equal to that.
//   allreduce_sum       one of the summation trees, bitwise the same on every rank (replicas must
//                       not drift); 2 (W - 1) / W x bytes counted.
//   ring order          where kktrain's ring runs: reduce-scatters (fp32, bf16) and all-reduces
//                       bitwise equal to the documented order, block b summed along the ring from
//                       its owner's successor, ((x_{b+1} + x_{b+2}) + ...) + x_b; non-blocking
//                       reduce-scatters, several in flight and waited for in another order, give
//                       the blocking ones' bits; under auto on host memory the ring runs,
//                       through the shared window unless --ring-transport point_to_point; all
//                       of it again on a communicator with 2 slots (messages) of 1 KiB. Host
//                       scalars: sum within double's order bound and identical on every rank, max
//                       exact, all_agree false when any single rank says false, barrier.
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "core/bf16.hpp"
#include "parallel/communicator.hpp"
#include "tests/tools/mpi_check_common.hpp"

namespace kktrain::check {
void check_fsdp(Communicator& comm, Checker& ck);          // mpi_fsdp_check.cpp
void check_lost_updates(Communicator& comm, Checker& ck);  // mpi_lost_updates_check.cpp
void check_alltoall(Communicator& comm, Checker& ck);      // mpi_alltoall_check.cpp
}  // namespace kktrain::check

using namespace kktrain;
using namespace kktrain::check;

namespace {

constexpr int kCanary = 64;     // bytes past the receive region that must stay untouched
constexpr char kFill = '\x5a';  // their value

// Stats after one collective: (W - 1) * payload bytes, and one call (MPI) / none (single rank:
// SingleCommunicator does not count its copies; it sends nothing either way).
void check_stats(Communicator& comm, Checker& ck, const CommStats& before, double payload,
                 const std::string& what) {
  const int w = comm.size();
  const CommStats& s = comm.stats();
  const double want = payload * (w - 1);
  ck.expect(s.bytes_sent - before.bytes_sent == want, what + " stats bytes",
            "counted " + std::to_string(s.bytes_sent - before.bytes_sent) + ", want " +
                std::to_string(want));
  if (w > 1) ck.expect(s.calls - before.calls == 1, what + " stats calls", "not one call");
}

void check_allgather(Communicator& comm, Checker& ck) {
  const int r = comm.rank(), w = comm.size();
  for (std::size_t bytes : collective_sizes({0, 1, 2, 3, 7, 13, 255, 4099})) {
    const std::string what = "allgather_bytes(" + std::to_string(bytes) + " bytes)";
    auto byte_of = [](int rank, std::size_t i) {
      return static_cast<char>(draw(1, rank, i) & 0xff);
    };
    std::vector<char> send(bytes + kCanary, kFill);
    for (std::size_t i = 0; i < bytes; ++i) send[i] = byte_of(r, i);
    Kokkos::View<char*, MemSpace> dsend("send", send.size()), drecv("recv", w * bytes + kCanary);
    to_device(dsend.data(), send);
    to_device(drecv.data(), std::vector<char>(drecv.extent(0), kFill));
    const CommStats before = fresh_stats(comm);
    comm.allgather_bytes(DBytesU(dsend.data(), bytes), DBytesU(drecv.data(), w * bytes));
    check_stats(comm, ck, before, static_cast<double>(bytes), what);
    const auto recv = to_host(drecv.data(), drecv.extent(0));
    for (int k = 0; k < w; ++k) {
      for (std::size_t i = 0; i < bytes; ++i) {
        if (recv[k * bytes + i] != byte_of(k, i)) {
          ck.fail(what, "byte " + std::to_string(i) + " of rank " + std::to_string(k));
        }
      }
    }
    for (std::size_t i = w * bytes; i < recv.size(); ++i) {
      if (recv[i] != kFill) ck.fail(what + " overrun", "byte " + std::to_string(i) + " written");
    }
    ck.expect(to_host(dsend.data(), send.size()) == send, what + " send buffer modified");
  }
}

// Runs reduce_scatter_sum on `send` (W blocks of count elements of T, this rank's) and returns
// this rank's count results as floats; checks canary, send buffer and stats.
template <class T>
std::vector<float> run_reduce_scatter(Communicator& comm, Checker& ck,
                                      const std::vector<float>& send, std::size_t count,
                                      const std::string& what) {
  std::vector<T> hsend(send.size());
  for (std::size_t i = 0; i < send.size(); ++i) hsend[i] = from_f32<T>(send[i]);
  std::vector<T> canary(count + kCanary, from_f32<T>(-123.0f));
  DView<T> dsend("send", hsend.size()), drecv("recv", canary.size());
  to_device(dsend.data(), hsend);
  to_device(drecv.data(), canary);
  const CommStats before = fresh_stats(comm);
  comm.reduce_scatter_sum(DBytesU(reinterpret_cast<char*>(dsend.data()), hsend.size() * sizeof(T)),
                          DBytesU(reinterpret_cast<char*>(drecv.data()), count * sizeof(T)),
                          dtype_of<T>::value);
  check_stats(comm, ck, before, static_cast<double>(count * sizeof(T)), what);
  const auto recv = to_host(drecv.data(), canary.size());
  std::vector<float> out(count);
  for (std::size_t i = 0; i < count; ++i) out[i] = to_f32(recv[i]);
  for (std::size_t i = count; i < recv.size(); ++i) {
    if (to_f32(recv[i]) != -123.0f) ck.fail(what + " overrun", "element " + std::to_string(i));
  }
  const auto back = to_host(dsend.data(), hsend.size());
  bool same_send = true;
  for (std::size_t i = 0; i < back.size(); ++i)
    same_send = same_send && same(to_f32(back[i]), send[i]);
  ck.expect(same_send, what + " send buffer modified");
  return out;
}

// value(rank, block, i): what `rank` contributes to element i of block `block`. Every rank
// checks its own block; the contributions of all ranks are recomputed locally.
using Contribution = std::function<float(int rank, int block, std::size_t i)>;

std::vector<float> send_of(int rank, int w, std::size_t count, const Contribution& value) {
  std::vector<float> s(w * count);
  for (int b = 0; b < w; ++b)
    for (std::size_t i = 0; i < count; ++i) s[b * count + i] = value(rank, b, i);
  return s;
}

void check_reduce_scatter_f32(Communicator& comm, Checker& ck) {
  const int r = comm.rank(), w = comm.size();
  for (std::size_t count : collective_sizes({0, 1, 37, 5000, 70001})) {
    // Integers of magnitude < 2^21: any partial sum of at most 4 of them is below 2^24, exact.
    const std::string wi = "reduce_scatter f32 integers (count " + std::to_string(count) + ")";
    auto ival = [](int rank, int b, std::size_t i) {
      return static_cast<float>(static_cast<int64_t>(draw(2, rank, b * 100003 + i) % 4194303) -
                                2097151);
    };
    auto got = run_reduce_scatter<float>(comm, ck, send_of(r, w, count, ival), count, wi);
    for (std::size_t i = 0; i < count; ++i) {
      double exact = 0.0;
      for (int k = 0; k < w; ++k) exact += ival(k, r, i);
      if (got[i] != exact) {
        ck.fail(wi, "element " + std::to_string(i) + ": " + show(got[i]) +
                        " != " + std::to_string(exact));
      }
    }
    // Random floats: some binary tree of fp32 additions, and within the order-free bound.
    const std::string wr = "reduce_scatter f32 random (count " + std::to_string(count) + ")";
    auto fval = [](int rank, int b, std::size_t i) { return random_f32(3, rank, b * 100003 + i); };
    got = run_reduce_scatter<float>(comm, ck, send_of(r, w, count, fval), count, wr);
    for (std::size_t i = 0; i < count; ++i) {
      std::vector<float> x(w);
      double exact = 0.0, mag = 0.0;
      for (int k = 0; k < w; ++k) {
        x[k] = fval(k, r, i);
        exact += x[k];
        mag += std::fabs(x[k]);
      }
      const double bound = gamma_f32(w - 1) * mag + 1e-30;
      if (!(std::fabs(got[i] - exact) <= bound)) {
        ck.fail(wr + " bound", "element " + std::to_string(i) + ": " + show(got[i]) + " vs exact " +
                                   std::to_string(exact));
      }
      const auto trees = tree_sums(x, add_f32);
      if (!contains(trees, got[i])) {
        ck.fail(wr + " order", "element " + std::to_string(i) + ": " + show(got[i]) + " not in " +
                                   show_set(trees));
      }
      if (w == 2 && !same(got[i], x[0] + x[1])) ck.fail(wr + " 2-rank", std::to_string(i));
    }
  }
}

// Crafted bf16 cases: the operands (one per rank; missing ranks add +0, which is exact, and extra
// operands are for more ranks) and which wrong schemes the case must expose at 2 ranks.
struct Crafted {
  std::vector<float> x;
  bool beats_trunc, beats_half_away, beats_double;
  const char* why;
};

std::vector<Crafted> crafted_bf16() {
  const float u = std::ldexp(1.0f, -7);  // bf16 ulp of 1
  const float bmax = float_of(0x7f7f0000u), big_half = std::ldexp(1.0f, 119);
  return {
      {{1.0f, 0.75f * u}, true, false, false, "1 + 3/4 ulp: nearest rounds up, truncation down"},
      {{1.0f, 0.5f * u}, false, true, false, "tie on an even mantissa stays: 1"},
      {{1.0f + u, 0.5f * u}, true, false, false, "tie on an odd mantissa goes up to even"},
      {{1.0f, 0.5f * u + std::ldexp(1.0f, -15)},
       true,
       false,
       true,
       "just above a tie: an 11-bit intermediate makes it a tie, then even rounds down"},
      {{-1.0f, -0.5f * u}, false, true, false, "negative tie stays on -1"},
      {{-1.0f, -0.75f * u}, true, false, false, "negative, rounds away from zero"},
      {{256.0f, 1.0f}, false, true, false, "257: tie between 256 and 258, even is 256"},
      {{bmax, big_half}, true, false, false, "largest bf16 + half ulp: tie to even is inf"},
      {{bmax, bmax}, false, false, false, "overflow to inf"},
      {{INFINITY, -INFINITY}, false, false, false, "inf - inf is NaN"},
      {{std::ldexp(127.0f, -133), std::ldexp(1.0f, -133)},
       false,
       false,
       false,
       "largest subnormal + smallest subnormal = smallest normal (no flush to zero)"},
      {{1048576.0f, 1.0f}, false, false, false, "1 vanishes next to 2^20"},
      // 3 operands: every pairwise order gives 2, the once-rounded exact sum 2 + 2^-6.
      {{1.0f, 1.0f + u, 3.0f * std::ldexp(1.0f, -10)},
       false,
       false,
       false,
       "3 operands: all orders 2, rne(exact) 2.015625"},
      // 3 operands, order-dependent: trees {-3.46875, -3.4375}, rne(exact) -3.453125.
      {{-3.984375f, 0.9765625f, -0.439453125f},
       false,
       false,
       false,
       "3 operands: trees -3.46875 or -3.4375, rne(exact) -3.453125"},
      // 4 operands: trees {1.359375, 1.375, 1.390625}, rne(exact) 1.3671875.
      {{0.1416015625f, -3.171875f, 3.8125f, 0.58203125f},
       false,
       false,
       false,
       "4 operands: three tree results, none rne(exact) 1.3671875"},
  };
}

void check_reduce_scatter_bf16(Communicator& comm, Checker& ck) {
  const int r = comm.rank(), w = comm.size();
  std::vector<Crafted> cases;
  for (const auto& c : crafted_bf16())
    if (static_cast<int>(c.x.size()) <= std::max(w, 2)) cases.push_back(c);
  // The crafted data must say what it claims (the test checks itself before the library).
  for (const auto& c : cases) {
    double exact = 0.0;
    for (float v : c.x) {
      ck.expect(same(rne(v), v), "bf16 crafted data", std::string(c.why) + ": not bf16");
      exact += v;
    }
    if (c.x.size() == 2) {
      const float good = add_bf16(c.x[0], c.x[1]);
      ck.expect(same(good, round_bits(exact, 8, Mode::nearest_even)), "bf16 crafted data",
                std::string(c.why) + ": fp32 sum rounded is not the exact sum rounded");
      const float trunc = round_bits(exact, 8, Mode::truncate);
      const float away = round_bits(exact, 8, Mode::half_away);
      const float twice =
          round_bits(round_bits(exact, 11, Mode::nearest_even), 8, Mode::nearest_even);
      if (c.beats_trunc) ck.expect(!same(trunc, good), "bf16 crafted data", c.why);
      if (c.beats_half_away) ck.expect(!same(away, good), "bf16 crafted data", c.why);
      if (c.beats_double) ck.expect(!same(twice, good), "bf16 crafted data", c.why);
    } else {
      const float once = rne(static_cast<float>(exact));  // exact in double and in fp32 here
      ck.expect(!contains(tree_sums(c.x, add_bf16), once), "bf16 crafted data",
                std::string(c.why) + ": a tree equals the once-rounded sum");
    }
  }
  for (std::size_t count : collective_sizes({0, 1, 37, 5000, 70001})) {
    const std::string what = "reduce_scatter bf16 (count " + std::to_string(count) + ")";
    // Element i < cases of block b: case i with the operands rotated by b (every rank holds every
    // operand in some block); the rest random bf16 values.
    auto val = [&](int rank, int b, std::size_t i) -> float {
      if (i < cases.size()) {
        const auto& x = cases[i].x;
        const std::size_t k = static_cast<std::size_t>((rank + b) % w);
        return k < x.size() ? x[k] : 0.0f;
      }
      return random_bf16(4, rank, b * 100003 + i);
    };
    const auto got = run_reduce_scatter<bf16>(comm, ck, send_of(r, w, count, val), count, what);
    for (std::size_t i = 0; i < count; ++i) {
      std::vector<float> x(w);
      for (int k = 0; k < w; ++k) x[k] = val(k, r, i);
      const std::string where = i < cases.size() ? std::string(" [") + cases[i].why + "]" : "";
      if (w == 2) {
        // Bitwise: one addition, one rounding.
        const float want = rne(x[0] + x[1]);
        if (bits_of(got[i]) != bits_of(want)) {
          ck.fail(what + " 2-rank", "element " + std::to_string(i) + where + ": " + show(got[i]) +
                                        " != rne(a + b) " + show(want));
        }
      } else if (w > 2) {
        const auto trees = tree_sums(x, add_bf16);
        if (!contains(trees, got[i])) {
          ck.fail(what + " order", "element " + std::to_string(i) + where + ": " + show(got[i]) +
                                       " not in " + show_set(trees));
        }
        if (i < cases.size() && cases[i].x.size() > 2) {
          double exact = 0.0;
          for (float v : x) exact += v;
          ck.expect(!same(got[i], rne(static_cast<float>(exact))), what + " once-rounded",
                    "element " + std::to_string(i) + where + " equals rne(exact sum)");
        }
      } else if (!same(got[i], x[0])) {
        ck.fail(what + " 1-rank copy", "element " + std::to_string(i));
      }
    }
  }
}

// Every rank's copy of `v` (n values of T), gathered through the (already checked) all-gather.
template <class T>
std::vector<T> everyones(Communicator& comm, const T* v, std::size_t n) {
  Kokkos::View<char*, MemSpace> send("send", n * sizeof(T) + 1),
      recv("recv", comm.size() * n * sizeof(T) + 1);
  Kokkos::deep_copy(Kokkos::subview(send, std::make_pair(std::size_t(0), n * sizeof(T))),
                    HostU<char>(reinterpret_cast<char*>(const_cast<T*>(v)), n * sizeof(T)));
  comm.allgather_bytes(DBytesU(send.data(), n * sizeof(T)),
                       DBytesU(recv.data(), comm.size() * n * sizeof(T)));  // unmeasured
  const auto bytes = to_host(recv.data(), comm.size() * n * sizeof(T));
  std::vector<T> out(comm.size() * n);
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
  return out;
}

// allreduce_sum (in place, floats): integers exactly, random floats one of the summation trees
// (so within gamma_{W-1} sum |x_r|), and the same bits on every rank (replicas must not drift);
// ring volume 2 (W - 1) / W x bytes. Host scalars: sum within double's gamma_{W-1} and identical
// everywhere, max exact, all_agree false when any one rank says false, barrier returns.
void check_allreduce(Communicator& comm, Checker& ck) {
  const int r = comm.rank(), w = comm.size();
  for (std::size_t n : collective_sizes({0, 1, 37, 70001})) {
    for (bool integers : {true, false}) {
      const std::string what = std::string("allreduce_sum ") + (integers ? "integers" : "random") +
                               " (n " + std::to_string(n) + ")";
      auto val = [&](int rank, std::size_t i) {
        return integers
                   ? static_cast<float>(static_cast<int64_t>(draw(5, rank, i) % 4194303) - 2097151)
                   : random_f32(6, rank, i);
      };
      std::vector<float> h(n);
      for (std::size_t i = 0; i < n; ++i) h[i] = val(r, i);
      DView<float> d("allreduce", n);
      to_device(d.data(), h);
      const CommStats before = fresh_stats(comm);
      comm.allreduce_sum(d);
      const CommStats& s = comm.stats();
      const double want = 2.0 * n * sizeof(float) * (w - 1) / w;
      ck.expect(s.bytes_sent - before.bytes_sent == want, what + " stats bytes",
                "counted " + std::to_string(s.bytes_sent - before.bytes_sent));
      if (w > 1) ck.expect(s.calls - before.calls == 1, what + " stats calls");
      const auto got = to_host(d.data(), n);
      for (std::size_t i = 0; i < n; ++i) {
        std::vector<float> x(w);
        for (int k = 0; k < w; ++k) x[k] = val(k, i);
        const auto trees = tree_sums(x, add_f32);
        if (!contains(trees, got[i])) {
          ck.fail(what, "element " + std::to_string(i) + ": " + show(got[i]) + " not in " +
                            show_set(trees));
        }
      }
      const auto all = everyones(comm, got.data(), n);
      for (int k = 0; k < w; ++k) {
        for (std::size_t i = 0; i < n; ++i) {
          if (bits_of(all[k * n + i]) != bits_of(got[i])) {
            ck.fail(what + " consistency",
                    "element " + std::to_string(i) + " differs on rank " + std::to_string(k));
          }
        }
      }
    }
  }
  // Host scalars.
  auto dval = [](int rank) {
    return static_cast<double>(random_f32(7, rank, 0)) * (1.0 + std::ldexp(1.0, -30));
  };
  double exact = 0.0, mag = 0.0, mx = -INFINITY;
  for (int k = 0; k < w; ++k) {
    exact += dval(k);  // the double sum in rank order: itself one of the orders
    mag += std::fabs(dval(k));
    mx = std::max(mx, dval(k));
  }
  const double sum = comm.allreduce_sum_host(dval(r));
  // Both the library's order and this rank-order reference are within gamma_{W-1} of the exact.
  const double bound = 2.0 * gamma_k(w - 1, std::ldexp(1.0, -53)) * mag;
  ck.expect(std::fabs(sum - exact) <= bound, "allreduce_sum_host",
            std::to_string(sum) + " vs " + std::to_string(exact));
  for (double v : everyones(comm, &sum, 1)) {
    ck.expect(v == sum, "allreduce_sum_host consistency", "ranks disagree");
  }
  ck.expect(comm.allreduce_sum_host(0.5 + r) == 0.5 * w + w * (w - 1) / 2.0,
            "allreduce_sum_host exact");
  ck.expect(comm.allreduce_max_host(dval(r)) == mx, "allreduce_max_host");
  ck.expect(comm.allreduce_max_host(-1.0 - r) == -1.0, "allreduce_max_host negative");
  ck.expect(comm.all_agree(true), "all_agree(true)");
  for (int k = 0; k < w; ++k) {
    ck.expect(!comm.all_agree(r != k), "all_agree", "rank " + std::to_string(k) + " said false");
  }
  comm.barrier();
}

// The documented ring order for block b over the ranks' values x (x[k]: rank k's).
float ring_sum(const std::vector<float>& x, int b, float (*add)(float, float)) {
  const int w = static_cast<int>(x.size());
  float acc = x[(b + 1) % w];
  for (int j = 2; j <= w; ++j) acc = add(acc, x[(b + j) % w]);
  return acc;
}

// One reduce-scatter of the random data `val` of dtype T, started (non-blocking communicators
// start it and return a ticket), not yet waited for.
template <class T>
struct Started {
  DView<T> send, recv;
  int ticket = Communicator::kDone;
};

template <class T>
Started<T> start_reduce_scatter(Communicator& comm, std::size_t count,
                                const std::function<float(int, int, std::size_t)>& val) {
  const int w = comm.size();
  std::vector<T> h(w * count);
  for (int b = 0; b < w; ++b)
    for (std::size_t i = 0; i < count; ++i) h[b * count + i] = from_f32<T>(val(comm.rank(), b, i));
  Started<T> st{DView<T>("send", h.size()), DView<T>("recv", count)};
  to_device(st.send.data(), h);
  st.ticket = comm.reduce_scatter_start(
      DBytesU(reinterpret_cast<char*>(st.send.data()), h.size() * sizeof(T)),
      DBytesU(reinterpret_cast<char*>(st.recv.data()), count * sizeof(T)), dtype_of<T>::value);
  return st;
}

template <class T>
std::vector<float> result_of(const Started<T>& st) {
  const auto h = to_host(st.recv.data(), st.recv.extent(0));
  std::vector<float> out(h.size());
  for (std::size_t i = 0; i < h.size(); ++i) out[i] = to_f32(h[i]);
  return out;
}

void check_ring_order(Communicator& comm, Checker& ck, CollectiveImpl impl, RingTransport how,
                      const std::string& label) {
  const int r = comm.rank(), w = comm.size();
  const bool ring = comm.collectives_summary().find("kktrain ring") != std::string::npos;
  constexpr bool host_memory = Kokkos::SpaceAccessibility<HostSpace, MemSpace>::accessible;
  if (w > 1 && impl != CollectiveImpl::mpi && host_memory) {
    ck.expect(ring, "ring order" + label,
              "distributed.collectives " + std::string(collective_impl_name(impl)) +
                  " on host memory runs " + comm.collectives_summary());
    // every rank of an mpirun here is on this node: automatic takes the shared window
    const bool window =
        comm.collectives_summary().find("shared-memory window") != std::string::npos;
    ck.expect(window == (how == RingTransport::automatic), "ring transport" + label,
              "runs " + comm.collectives_summary());
  }
  if (w == 1 || !ring) return;
  auto f32 = [](int rank, int b, std::size_t i) { return random_f32(8, rank, b * 100003 + i); };
  auto b16 = [](int rank, int b, std::size_t i) { return random_bf16(9, rank, b * 100003 + i); };
  for (std::size_t count : collective_sizes({37, 5000, 70001})) {
    const std::string n = " (count " + std::to_string(count) + ")" + label;
    // Blocking, then three started together and waited for last to first.
    const bool was = comm.nonblocking();
    comm.set_nonblocking(false);
    const auto a = result_of(start_reduce_scatter<float>(comm, count, f32));
    const auto b = result_of(start_reduce_scatter<bf16>(comm, count, b16));
    comm.set_nonblocking(true);
    auto sa = start_reduce_scatter<float>(comm, count, f32);
    auto sb = start_reduce_scatter<bf16>(comm, count, b16);
    auto sc = start_reduce_scatter<float>(comm, count / 2 + 1, f32);
    comm.wait_collective(sc.ticket);
    comm.wait_collective(sa.ticket);
    comm.wait_collective(sb.ticket);
    comm.set_nonblocking(was);
    const auto na = result_of(sa), nb = result_of(sb);
    int bad_f32 = 0, bad_bf16 = 0, bad_nb = 0;
    for (std::size_t i = 0; i < count; ++i) {
      std::vector<float> x(w), y(w);
      for (int k = 0; k < w; ++k) {
        x[k] = f32(k, r, i);
        y[k] = b16(k, r, i);
      }
      bad_f32 += bits_of(a[i]) != bits_of(ring_sum(x, r, add_f32));
      bad_bf16 += bits_of(b[i]) != bits_of(ring_sum(y, r, add_bf16));
      bad_nb += bits_of(na[i]) != bits_of(a[i]) || bits_of(nb[i]) != bits_of(b[i]);
    }
    ck.expect(bad_f32 == 0, "ring order f32" + n, std::to_string(bad_f32) + " elements differ");
    ck.expect(bad_bf16 == 0, "ring order bf16" + n, std::to_string(bad_bf16) + " elements differ");
    ck.expect(bad_nb == 0, "ring non-blocking" + n,
              std::to_string(bad_nb) + " elements differ from the blocking reduce-scatter");
  }
  // All-reduce: block k of the near-equal split is summed in block k's ring order.
  const std::size_t len = collective_sizes({70001}).empty() ? 37 : 70001;
  std::vector<float> h(len);
  for (std::size_t i = 0; i < len; ++i) h[i] = f32(r, 0, i);
  DView<float> d("allreduce", len);
  to_device(d.data(), h);
  comm.allreduce_sum(d);
  const auto got = to_host(d.data(), len);
  int bad = 0;
  // Cut into pieces of at most max_count elements first (--max-count), each split into W blocks.
  const std::size_t piece = lowered_max_count() > 0 ? lowered_max_count() : len;
  for (std::size_t i = 0; i < len; ++i) {
    const std::size_t at = i / piece * piece, n = std::min(piece, len - at), e = i - at;
    // the block of element e: n % W blocks of n / W + 1 elements, then blocks of n / W
    const std::size_t base = n / w, extra = n % w, head = extra * (base + 1);
    const std::size_t k = e < head ? e / (base + 1) : extra + (e - head) / base;
    std::vector<float> x(w);
    for (int j = 0; j < w; ++j) x[j] = f32(j, 0, i);
    bad += bits_of(got[i]) != bits_of(ring_sum(x, static_cast<int>(k), add_f32));
  }
  ck.expect(bad == 0, "ring order allreduce" + label, std::to_string(bad) + " elements differ");
}

}  // namespace

// Host vectors: a u64 vector sum (mod 2^64, every element) and a broadcast of bytes from the last
// rank (the file index RowReader shares), both in several pieces under a lowered count limit.
void check_host_vectors(Communicator& comm, Checker& ck) {
  const int w = comm.size(), r = comm.rank();
  std::vector<uint64_t> v(11);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = ~uint64_t(0) - i + static_cast<uint64_t>(r);
  comm.allreduce_sum_u64(v);
  bool ok = true;
  for (std::size_t i = 0; i < v.size(); ++i) {
    uint64_t want = 0;
    for (int k = 0; k < w; ++k) want += ~uint64_t(0) - i + static_cast<uint64_t>(k);
    ok = ok && v[i] == want;
  }
  ck.expect(ok, "allreduce_sum_u64 vector", "a sum differs");
  std::string bytes = r == w - 1 ? std::string("index of 23 bytes\0\x01\xff!!", 23) : "other";
  comm.broadcast_host(bytes, w - 1);
  ck.expect(bytes == std::string("index of 23 bytes\0\x01\xff!!", 23), "broadcast_host",
            "received " + std::to_string(bytes.size()) + " bytes, not rank " +
                std::to_string(w - 1) + "'s 23");
}

// `flag VALUE`, taken out of argv (the rest goes to MPI and Kokkos): the value, "" when absent,
// nullptr when the flag has no value.
const char* take_flag(int* argc, char** argv, const char* flag) {
  for (int i = 1; i < *argc; ++i) {
    if (std::strcmp(argv[i], flag) != 0) continue;
    if (i + 1 >= *argc) return nullptr;
    const char* v = argv[i + 1];
    for (int j = i; j + 2 <= *argc; ++j) argv[j] = argv[j + 2];
    *argc -= 2;
    return v;
  }
  return "";
}

// --max-count L, --collectives X and --ring-transport T; false for a bad value.
bool take_options(int* argc, char** argv, CollectiveImpl* impl, RingTransport* how) {
  const char* l = take_flag(argc, argv, "--max-count");
  const char* c = take_flag(argc, argv, "--collectives");
  const char* t = take_flag(argc, argv, "--ring-transport");
  if (l == nullptr || c == nullptr || t == nullptr) return false;
  const std::string ts = t;
  if (ts == "point_to_point")
    *how = RingTransport::point_to_point;
  else if (!ts.empty() && ts != "automatic")
    return false;
  if (*l != '\0') {
    if (std::atoll(l) <= 0) return false;
    lowered_max_count() = static_cast<std::size_t>(std::atoll(l));
  }
  const std::string cs = c;
  if (cs.empty() || cs == "auto") return true;
  if (cs != "kktrain" && cs != "mpi") return false;
  *impl = cs == "kktrain" ? CollectiveImpl::kktrain : CollectiveImpl::mpi;
  return true;
}

int main(int argc, char** argv) {
  CollectiveImpl impl = CollectiveImpl::automatic;
  RingTransport how = RingTransport::automatic;
  if (!take_options(&argc, argv, &impl, &how)) {
    std::fprintf(stderr,
                 "usage: mpi_collectives_check [--max-count L] [--collectives auto|kktrain|mpi]"
                 " [--ring-transport automatic|point_to_point]  (L >= 1)\n");
    return 2;
  }
  MpiRuntime mpi(&argc, &argv);
  int failures = 0, rank = 0, world = 1;
  {
    Kokkos::ScopeGuard kokkos(argc, argv);
    MpiLimits limits;
    if (lowered_max_count() > 0) limits.max_count = lowered_max_count();
    limits.ring_transport = how;
    auto comm = mpi.make_communicator(limits);
    comm->set_collectives(impl);
    rank = comm->rank();
    world = comm->size();
    Checker ck(rank, world);
    try {
      ck.expect(mpi.active() == launched_by_mpi(), "runtime", "MPI active iff launched");
      ck.expect(world == mpi.size() && rank == mpi.rank(), "runtime", "communicator != runtime");
      ck.expect(world > 1 ? comm->name() != "single" : comm->name() == "single", "runtime",
                "communicator kind " + comm->name());
      check_allgather(*comm, ck);
      check_reduce_scatter_f32(*comm, ck);
      check_reduce_scatter_bf16(*comm, ck);
      check_allreduce(*comm, ck);
      check_ring_order(*comm, ck, impl, how, "");
      {  // many chunks a block: 2 slots (or messages) of 1 KiB, reused hundreds of times
        MpiLimits small = limits;
        small.ring_slots = 2;
        small.ring_slot_bytes = small.ring_chunk_bytes = 1024;
        auto tiny = mpi.make_communicator(small);
        tiny->set_collectives(impl);
        check_ring_order(*tiny, ck, impl, how, " [1 KiB chunks]");
      }
      check_host_vectors(*comm, ck);
      check_alltoall(*comm, ck);
      // With MPI calls cut into pieces (--max-count) the collectives above are what splits;
      // the FSDP and optimizer checks on top of them would only repeat them slowly.
      if (lowered_max_count() == 0) {
        check_fsdp(*comm, ck);
        check_lost_updates(*comm, ck);
      }
    } catch (const std::exception& e) {
      // The other ranks may be inside a collective: end the job rather than hang it.
      std::fprintf(stderr, "rank %d/%d: unexpected exception: %s\n", rank, world, e.what());
      if (mpi.active()) MPI_Abort(MPI_COMM_WORLD, 3);
      return 3;
    }
    ck.summary();
    failures = ck.failures();
    const bool all_ok = comm->all_agree(failures == 0);
    if (rank == 0 && all_ok) std::printf("ok: %d ranks\n", world);
    if (!all_ok && failures == 0) failures = -1;  // another rank failed
  }
  return failures == 0 ? 0 : 1;
}
