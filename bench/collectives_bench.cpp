// The buffer collectives of kktrain's communicator, kktrain's own (set_collectives(kktrain))
// against the MPI library's (set_collectives(mpi)) in one run, with MPI_Allgather as the reference
// bandwidth (issue 35). Run under mpirun with 2 or more ranks:
//
//   mpirun -np 2 build/bench/collectives_bench [--min-bytes 1KiB] [--max-bytes 256MiB]
//          [--step 4] [--rounds 5] [--warmup 2] [--iters 0] [--target-ms 100] [--threads 1]
//          [--ring-chunk-bytes 1MiB] [--ring-transport automatic|point_to_point]
//          [--ring-slot-bytes 256KiB] [--ring-slots 4] [--json FILE]
//
// Operations, per size b (bytes per rank): all-gather (b sent, W b received; always MPI's),
// reduce-scatter fp32 and bf16 (W b sent, b received), all-reduce fp32 (b in place), and the
// non-blocking fp32 reduce-scatter (set_nonblocking(true): reduce_scatter_start +
// wait_collective). Each measurement is a batch of calls after a barrier, each call timed alone;
// calls per batch are calibrated so a batch lasts about --target-ms (or --iters each). The two
// settings alternate in --rounds rounds (which goes first alternates too); a row gives the median
// over rounds of the slowest rank's median time per call (--json adds the mean per call, from
// each batch's total, and the fastest round). Bandwidth counts the payload bytes a ring
// algorithm sends per rank, as parallel/communicator.hpp's stats do: (W - 1) b for all-gather and
// reduce-scatter, 2 (W - 1) / W b for all-reduce.
//
// After each operation's timed calls, one call per setting on fresh integer-valued inputs (every
// summation order is exact) is checked element by element against the sum computed here; a
// mismatch ends the run with exit status 1. This is a spot check, not the tests
// (tests/tools/mpi_collectives_check.cpp).
#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.hpp"
#include "core/bf16.hpp"
#include "core/json_text.hpp"
#include "core/kokkos_compat.hpp"
#include "parallel/communicator.hpp"
#include "parallel/threads.hpp"

using namespace kktrain;
using bench::median;
using bench::now;

namespace {

const char* const kUsage =
    "usage: mpirun -np W collectives_bench [--min-bytes 1KiB] [--max-bytes 256MiB] [--step 4]\n"
    "         [--rounds 5] [--warmup 2] [--iters 0 (calibrated)] [--target-ms 100] [--threads 1]\n"
    "         [--ring-chunk-bytes 1MiB] [--ring-transport automatic|point_to_point]\n"
    "         [--ring-slot-bytes 256KiB] [--ring-slots 4] [--json FILE]\n"
    "kktrain's collectives against MPI's, bytes per rank from --min-bytes to --max-bytes\n"
    "(bench/README.md).\n";

constexpr long kMaxIters = 1L << 20;  // calls per batch at most

struct Options {
  std::size_t min_bytes = 1024;
  std::size_t max_bytes = std::size_t{256} << 20;
  std::size_t step = 4;  // each size is `step` times the one before
  int rounds = 5;
  int warmup = 2;  // calls per setting before calibrating
  long iters = 0;  // calls per measurement; 0: calibrated to target_ms
  double target_ms = 100.0;
  int threads = 1;  // Kokkos host threads (OpenMP builds)
  std::size_t ring_chunk_bytes = MpiLimits().ring_chunk_bytes;  // kktrain's message size
  RingTransport ring_transport = RingTransport::automatic;      // kktrain's ring: window or not
  std::size_t ring_slot_bytes = MpiLimits().ring_slot_bytes;    // its window's slots
  int ring_slots = MpiLimits().ring_slots;
  std::string json;
};

enum class Op {
  allgather,
  reduce_scatter_f32,
  reduce_scatter_bf16,
  allreduce_f32,
  reduce_scatter_nb
};
const Op kOps[] = {Op::allgather, Op::reduce_scatter_f32, Op::reduce_scatter_bf16,
                   Op::allreduce_f32, Op::reduce_scatter_nb};

const char* op_name(Op op) {
  static const char* const names[] = {"allgather", "reduce_scatter_f32", "reduce_scatter_bf16",
                                      "allreduce_f32", "reduce_scatter_start_f32"};
  return names[static_cast<int>(op)];
}

bool is_reduce_scatter(Op op) {
  return op == Op::reduce_scatter_f32 || op == Op::reduce_scatter_bf16 ||
         op == Op::reduce_scatter_nb;
}

// The options of argv[1..], checked; throws std::invalid_argument naming the bad one.
Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    if (i + 1 >= argc) throw std::invalid_argument(k + " needs a value");
    const std::string v = argv[i + 1];
    try {
      if (k == "--min-bytes")
        o.min_bytes = bench::parse_bytes(v);
      else if (k == "--max-bytes")
        o.max_bytes = bench::parse_bytes(v);
      else if (k == "--step")
        o.step = static_cast<std::size_t>(bench::parse_count(v));
      else if (k == "--rounds")
        o.rounds = static_cast<int>(bench::parse_count(v));
      else if (k == "--warmup")
        o.warmup = static_cast<int>(bench::parse_count(v));
      else if (k == "--iters")
        o.iters = bench::parse_count(v);
      else if (k == "--target-ms")
        o.target_ms = bench::whole_number(v);
      else if (k == "--threads")
        o.threads = static_cast<int>(bench::parse_count(v));
      else if (k == "--ring-chunk-bytes")
        o.ring_chunk_bytes = bench::parse_bytes(v);
      else if (k == "--ring-transport" && (v == "automatic" || v == "point_to_point"))
        o.ring_transport =
            v == "automatic" ? RingTransport::automatic : RingTransport::point_to_point;
      else if (k == "--ring-transport")
        throw std::invalid_argument("automatic or point_to_point");
      else if (k == "--ring-slot-bytes")
        o.ring_slot_bytes = bench::parse_bytes(v);
      else if (k == "--ring-slots")
        o.ring_slots = static_cast<int>(bench::parse_count(v));
      else if (k == "--json")
        o.json = v;
      else
        throw std::invalid_argument("unknown option");
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(k + " " + v + ": " + e.what());
    }
  }
  if (o.min_bytes < 4 || o.min_bytes % 4 != 0 || o.max_bytes < o.min_bytes) {
    throw std::invalid_argument("sizes: --min-bytes a multiple of 4, --max-bytes >= --min-bytes");
  }
  if (o.step < 2 || o.rounds < 1 || o.warmup < 0 || o.iters < 0 || o.iters > kMaxIters ||
      !(o.target_ms > 0.0) || o.threads < 1 || o.ring_slots < 2 || o.ring_slot_bytes < 4 ||
      o.ring_chunk_bytes < 4) {
    throw std::invalid_argument(
        "--step >= 2, --rounds >= 1, --warmup >= 0, --iters 0 to 1048576, "
        "--target-ms > 0, --threads >= 1, --ring-slots >= 2, ring bytes >= 4");
  }
  return o;
}

// One size's buffers: `big` (W b bytes: reduce-scatter send, all-gather receive) and `small`
// (b bytes: reduce-scatter receive, all-gather send, all-reduce data).
struct Buffers {
  std::size_t b = 0;
  int w = 0;
  DView<char> big, small;
  Buffers(std::size_t bytes, int ranks)
      : b(bytes), w(ranks), big("big", bytes * ranks), small("small", bytes) {}
};

DBytesU bytes_view(const DView<char>& v) {
  return DBytesU(v.data(), v.extent(0));
}

// What `rank` contributes at element j: an integer below `modulus`. fp32 uses 2048 (any sum of
// up to 8192 ranks is exact); bf16 uses 256 / W, so every partial sum is an integer below 256,
// exact in bf16's 8-bit significand whatever the order and rounding.
KOKKOS_INLINE_FUNCTION float input_value(int rank, int64_t j, int64_t modulus) {
  return static_cast<float>((j * 13 + rank * 101) % modulus);
}

int64_t bf16_modulus(int w) {
  return std::max<int64_t>(1, 256 / w);
}

// Fills n elements of T at p with rank's input values.
template <class T>
void fill(char* p, int64_t n, int rank, int64_t modulus) {
  T* out = reinterpret_cast<T*>(p);
  Kokkos::parallel_for(
      "collectives_bench_fill", RangePolicy(0, n),
      KOKKOS_LAMBDA(int64_t j) { out[j] = from_f32<T>(input_value(rank, j, modulus)); });
  Kokkos::fence();
}

// Fresh inputs of `op` for this rank (the all-reduce works in place, so its inputs grow).
void fill_inputs(Op op, Buffers& buf, int rank) {
  const int64_t wb = static_cast<int64_t>(buf.b) * buf.w;
  switch (op) {
    case Op::allgather:
    case Op::allreduce_f32:
      fill<float>(buf.small.data(), buf.b / 4, rank, 2048);
      break;
    case Op::reduce_scatter_f32:
    case Op::reduce_scatter_nb:
      fill<float>(buf.big.data(), wb / 4, rank, 2048);
      break;
    case Op::reduce_scatter_bf16:
      fill<bf16>(buf.big.data(), wb / 2, rank, bf16_modulus(buf.w));
  }
}

// Applies a setting: who runs the reductions, and non-blocking starts for the non-blocking op.
void apply(Communicator& comm, Op op, CollectiveImpl impl) {
  comm.set_collectives(impl);
  comm.set_nonblocking(op == Op::reduce_scatter_nb);
}

// One call of `op` on the buffers, under the setting applied.
void call_once(Communicator& comm, Op op, Buffers& buf) {
  switch (op) {
    case Op::allgather:
      comm.allgather_bytes(bytes_view(buf.small), bytes_view(buf.big));
      break;
    case Op::reduce_scatter_f32:
      comm.reduce_scatter_sum(bytes_view(buf.big), bytes_view(buf.small), DType::float32);
      break;
    case Op::reduce_scatter_bf16:
      comm.reduce_scatter_sum(bytes_view(buf.big), bytes_view(buf.small), DType::bfloat16);
      break;
    case Op::allreduce_f32:
      comm.allreduce_sum(DViewU<float>(reinterpret_cast<float*>(buf.small.data()), buf.b / 4));
      break;
    case Op::reduce_scatter_nb:
      comm.wait_collective(
          comm.reduce_scatter_start(bytes_view(buf.big), bytes_view(buf.small), DType::float32));
      break;
  }
}

// A batch of calls: the median and the mean seconds per call, each the slowest rank's.
struct Batch {
  double median_s = 0, mean_s = 0;
};

// `iters` calls started after a barrier, each timed alone (a call that another process delayed
// moves the mean, hardly the median).
Batch time_batch(Communicator& comm, Op op, Buffers& buf, long iters) {
  std::vector<double> calls(static_cast<std::size_t>(iters));
  comm.barrier();
  const double t0 = now();
  for (double& c : calls) {
    const double start = now();
    call_once(comm, op, buf);
    Kokkos::fence();
    c = now() - start;
  }
  std::vector<double> sums, maxes{median(calls), (now() - t0) / static_cast<double>(iters)};
  comm.allreduce_host(sums, maxes);
  return Batch{maxes[0], maxes[1]};
}

// Calls per measurement under the setting applied, after o.warmup calls: o.iters when given,
// otherwise enough for a batch of about o.target_ms (batches of 1, 8, 64, ... calls until one
// lasts 20 ms; the first batch is the last warm-up call). The same on every rank (the times are
// the slowest rank's).
long calibrate(Communicator& comm, Op op, Buffers& buf, const Options& o) {
  const int untimed = o.iters > 0 ? o.warmup : o.warmup - 1;
  for (int i = 0; i < untimed; ++i) call_once(comm, op, buf);
  if (o.iters > 0) return o.iters;
  long n = 1;
  double t = time_batch(comm, op, buf, n).mean_s;
  while (t * static_cast<double>(n) < 0.02 && n < kMaxIters) {
    n = std::min(n * 8, kMaxIters);
    t = time_batch(comm, op, buf, n).mean_s;
  }
  const double want = o.target_ms * 1e-3 / std::max(t, 1e-9);
  return std::max(1L, std::min(kMaxIters, std::lround(want)));
}

// The element this rank must hold after `op` at index i of its result (float32 results: n = b / 4
// elements; all-gather: W n; bf16: b / 2): the sum of the inputs, or rank k's for all-gather.
float expected(Op op, const Buffers& buf, int rank, int64_t i) {
  const int64_t n = static_cast<int64_t>(buf.b / (op == Op::reduce_scatter_bf16 ? 2 : 4));
  if (op == Op::allgather) return input_value(static_cast<int>(i / n), i % n, 2048);
  const int64_t j = op == Op::allreduce_f32 ? i : rank * n + i;
  const int64_t modulus = op == Op::reduce_scatter_bf16 ? bf16_modulus(buf.w) : 2048;
  float sum = 0.0f;
  for (int q = 0; q < buf.w; ++q) sum += input_value(q, j, modulus);
  return sum;
}

// The first element of this rank's result that differs from expected(), as a message; "" when
// every element matches.
template <class T>
std::string first_mismatch(Op op, const Buffers& buf, int rank) {
  const DView<char>& out = op == Op::allgather ? buf.big : buf.small;
  const auto host = Kokkos::create_mirror_view_and_copy(HostSpace(), out);
  const T* v = reinterpret_cast<const T*>(host.data());
  const int64_t n = static_cast<int64_t>(out.extent(0) / sizeof(T));
  for (int64_t i = 0; i < n; ++i) {
    const float got = to_f32(v[i]), want = expected(op, buf, rank, i);
    if (got != want) {
      return "element " + std::to_string(i) + " is " + std::to_string(got) + ", want " +
             std::to_string(want);
    }
  }
  return "";
}

// One call of `op` under `impl` on fresh inputs, checked on every rank; false (after this rank
// prints what differs) when any rank's result is wrong.
bool spot_check(Communicator& comm, Op op, CollectiveImpl impl, Buffers& buf) {
  fill_inputs(op, buf, comm.rank());
  apply(comm, op, impl);
  call_once(comm, op, buf);
  Kokkos::fence();
  const std::string bad = op == Op::reduce_scatter_bf16
                              ? first_mismatch<bf16>(op, buf, comm.rank())
                              : first_mismatch<float>(op, buf, comm.rank());
  if (!bad.empty()) {
    std::fprintf(stderr, "collectives_bench: rank %d: %s (%s, %zu bytes per rank): %s\n",
                 comm.rank(), op_name(op), collective_impl_name(impl), buf.b, bad.c_str());
  }
  return comm.all_agree(bad.empty());
}

// One setting's times at one size: medians over the rounds of each batch's median and mean time
// per call, and the fastest batch median.
struct Timing {
  double median_s = 0, mean_s = 0, best_s = 0;  // 0: not measured
  long iters = 0;                               // calls per batch
};

// One row of the table.
struct Row {
  Op op = Op::allgather;
  std::size_t bytes = 0;  // per rank
  double volume = 0;      // ring payload bytes sent per rank per call
  Timing kktrain, mpi;
  double allgather_gbps = 0;  // MPI_Allgather's at this size (reduce-scatter rows)
};

double gbps(double volume, double seconds) {
  return seconds > 0 ? volume / seconds * 1e-9 : 0.0;
}

double ring_volume(Op op, std::size_t b, int w) {
  const double bytes = static_cast<double>(b);
  return op == Op::allreduce_f32 ? 2.0 * (w - 1) / w * bytes : (w - 1) * bytes;
}

// The Timing of batches measured in rounds.
Timing summarize(const std::vector<Batch>& batches, long iters) {
  std::vector<double> medians, means;
  for (const Batch& b : batches) {
    medians.push_back(b.median_s);
    means.push_back(b.mean_s);
  }
  return Timing{median(medians), median(means), *std::min_element(medians.begin(), medians.end()),
                iters};
}

// Measures `op` at buf's size: calibration per setting, then the settings alternating in rounds
// (which goes first alternates too; all-gather: MPI's only).
Row measure(Communicator& comm, Op op, Buffers& buf, const Options& o) {
  Row row;
  row.op = op;
  row.bytes = buf.b;
  row.volume = ring_volume(op, buf.b, buf.w);
  std::vector<CollectiveImpl> impls{CollectiveImpl::kktrain, CollectiveImpl::mpi};
  if (op == Op::allgather) impls = {CollectiveImpl::mpi};
  fill_inputs(op, buf, comm.rank());
  std::vector<long> iters;
  for (CollectiveImpl impl : impls) {
    apply(comm, op, impl);
    iters.push_back(calibrate(comm, op, buf, o));
  }
  std::vector<std::vector<Batch>> batches(impls.size());
  for (int r = 0; r < o.rounds; ++r) {
    for (std::size_t k = 0; k < impls.size(); ++k) {
      const std::size_t s = r % 2 == 0 ? k : impls.size() - 1 - k;
      apply(comm, op, impls[s]);
      batches[s].push_back(time_batch(comm, op, buf, iters[s]));
    }
  }
  for (std::size_t s = 0; s < impls.size(); ++s) {
    (impls[s] == CollectiveImpl::kktrain ? row.kktrain : row.mpi) = summarize(batches[s], iters[s]);
  }
  return row;
}

std::string size_text(std::size_t b) {
  if (b >= (std::size_t{1} << 20) && b % (std::size_t{1} << 20) == 0)
    return std::to_string(b >> 20) + " MiB";
  if (b >= 1024 && b % 1024 == 0) return std::to_string(b >> 10) + " KiB";
  return std::to_string(b) + " B";
}

// A number with `digits` decimals, or "-" for an unmeasured (0) value.
std::string num(double v, int digits) {
  if (!(v > 0)) return "-";
  char s[64];
  std::snprintf(s, sizeof s, "%.*f", digits, v);
  return s;
}

void print_table_head() {
  std::printf("| %-24s | %10s | %10s | %10s | %8s | %8s | %7s | %7s | %7s |\n", "op", "bytes/rank",
              "kktrain ms", "mpi ms", "kk GB/s", "mpi GB/s", "kk/mpi", "kk/ag", "mpi/ag");
  std::printf(
      "|--------------------------|-----------:|-----------:|-----------:|---------:|"
      "---------:|--------:|--------:|--------:|\n");
}

void print_row(const Row& r) {
  const double kk = gbps(r.volume, r.kktrain.median_s), mpi = gbps(r.volume, r.mpi.median_s);
  const double ag = r.allgather_gbps;
  std::printf("| %-24s | %10s | %10s | %10s | %8s | %8s | %7s | %7s | %7s |\n", op_name(r.op),
              size_text(r.bytes).c_str(), num(r.kktrain.median_s * 1e3, 4).c_str(),
              num(r.mpi.median_s * 1e3, 4).c_str(), num(kk, 3).c_str(), num(mpi, 3).c_str(),
              num(mpi > 0 ? kk / mpi : 0, 2).c_str(), num(ag > 0 ? kk / ag : 0, 2).c_str(),
              num(ag > 0 ? mpi / ag : 0, 2).c_str());
  std::fflush(stdout);
}

// A JSON number, or null for an unmeasured (0) value.
Json json_num(double v) {
  return v > 0 ? Json(v) : Json(nullptr);
}

Json timing_json(const Timing& t) {
  Json j;
  j["median_s"] = json_num(t.median_s);
  j["mean_s"] = json_num(t.mean_s);
  j["best_s"] = json_num(t.best_s);
  j["iters"] = json_num(static_cast<double>(t.iters));
  return j;
}

// A row: the table's columns (times: the medians of per-call medians) and each setting's Timing.
Json row_json(const Row& r) {
  const double kk = gbps(r.volume, r.kktrain.median_s), mpi = gbps(r.volume, r.mpi.median_s);
  const double ag = r.allgather_gbps;
  Json j;
  j["op"] = op_name(r.op);
  j["bytes_per_rank"] = r.bytes;
  j["ring_bytes_sent"] = r.volume;
  j["kktrain_s"] = json_num(r.kktrain.median_s);
  j["mpi_s"] = json_num(r.mpi.median_s);
  j["kktrain_gbps"] = json_num(kk);
  j["mpi_gbps"] = json_num(mpi);
  j["kktrain_over_mpi"] = json_num(mpi > 0 ? kk / mpi : 0);
  j["kktrain_over_allgather"] = json_num(ag > 0 ? kk / ag : 0);
  j["mpi_over_allgather"] = json_num(ag > 0 ? mpi / ag : 0);
  j["kktrain"] = timing_json(r.kktrain);
  j["mpi"] = timing_json(r.mpi);
  return j;
}

// The "model name" of /proc/cpuinfo's first processor, or "unknown".
std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const std::size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  }
  return "unknown";
}

// The summary of each setting (kktrain's and MPI's), leaving the communicator at `automatic`.
std::pair<std::string, std::string> summaries(Communicator& comm) {
  comm.set_collectives(CollectiveImpl::kktrain);
  const std::string kk = comm.collectives_summary();
  comm.set_collectives(CollectiveImpl::mpi);
  const std::string mpi = comm.collectives_summary();
  comm.set_collectives(CollectiveImpl::automatic);
  return {kk, mpi};
}

// Every size, every op: the rows (rank 0 prints each as it comes); false when a spot check
// failed.
bool run_sizes(Communicator& comm, const Options& o, std::vector<Row>& rows) {
  for (std::size_t b = o.min_bytes; b <= o.max_bytes; b *= o.step) {
    Buffers buf(b, comm.size());  // one size's buffers at a time
    double allgather_gbps = 0;
    for (Op op : kOps) {
      Row row = measure(comm, op, buf, o);
      if (op == Op::allgather) allgather_gbps = gbps(row.volume, row.mpi.median_s);
      if (is_reduce_scatter(op)) row.allgather_gbps = allgather_gbps;
      if (comm.rank() == 0) print_row(row);
      rows.push_back(row);
      for (CollectiveImpl impl : {CollectiveImpl::kktrain, CollectiveImpl::mpi}) {
        if (op == Op::allgather && impl == CollectiveImpl::kktrain) continue;
        if (!spot_check(comm, op, impl, buf)) return false;
      }
    }
    if (b > o.max_bytes / o.step) break;  // the next size would pass the end (or overflow)
  }
  return true;
}

// The run's header: ranks, what runs the collectives under each setting, CPU, threads.
Json header_json(Communicator& comm, const Options& o, const std::string& threads) {
  const auto names = summaries(comm);
  const char* yield = std::getenv("OMPI_MCA_mpi_yield_when_idle");
  Json head;
  head["ranks"] = comm.size();
  head["collectives_kktrain"] = names.first;
  head["collectives_mpi"] = names.second;
  head["cpu"] = cpu_model();
  head["cpus"] = static_cast<int>(std::thread::hardware_concurrency());
  head["mpi_yield_when_idle"] = yield != nullptr ? yield : "unset";
  head["threads"] = threads;
  head["rounds"] = o.rounds;
  head["target_ms"] = o.target_ms;
  return head;
}

void print_header(const Json& h) {
  const auto text = [&](const char* key) { return h[key].get<std::string>(); };
  std::printf(
      "collectives_bench: %d ranks; kktrain setting: %s; mpi setting: %s; cpu: %s (%d CPUs); "
      "threads: %s per rank; mpi_yield_when_idle: %s; median of %d rounds\n",
      h["ranks"].get<int>(), text("collectives_kktrain").c_str(), text("collectives_mpi").c_str(),
      text("cpu").c_str(), h["cpus"].get<int>(), text("threads").c_str(),
      text("mpi_yield_when_idle").c_str(), h["rounds"].get<int>());
  print_table_head();
}

// Rank 0 prints the header and the rows and writes --json (opened first, so that a path it
// cannot write ends the run before the measurements). 0, or 1 on wrong results or a failed write.
int run(Communicator& comm, const Options& o, const std::string& threads) {
  Json head = header_json(comm, o, threads);
  std::ofstream out;
  if (comm.rank() == 0 && !o.json.empty()) out.open(o.json);
  if (!comm.all_agree(o.json.empty() || comm.rank() != 0 || out.is_open())) {
    if (comm.rank() == 0)
      std::fprintf(stderr, "collectives_bench: error: cannot write %s\n", o.json.c_str());
    return 1;
  }
  if (comm.rank() == 0) print_header(head);
  std::vector<Row> rows;
  if (!run_sizes(comm, o, rows)) {
    if (comm.rank() == 0) std::fprintf(stderr, "collectives_bench: error: wrong results\n");
    return 1;
  }
  if (!out.is_open()) return 0;
  head["rows"] = Json::array();
  for (const Row& r : rows) head["rows"].push_back(row_json(r));
  out << json_text(head) << "\n";
  if (!out.flush()) {
    std::fprintf(stderr, "collectives_bench: error: cannot write %s\n", o.json.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // As kktrain does: ranks that outnumber the cores wait by yielding (parallel/threads.hpp).
  restart_to_yield_if_oversubscribed(argv);
  MpiRuntime mpi(&argc, &argv);
  if (argc == 2 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h")) {
    if (mpi.rank() == 0) std::printf("%s", kUsage);
    return 0;
  }
  Options o;
  try {
    o = parse_options(argc, argv);
  } catch (const std::invalid_argument& e) {
    if (mpi.rank() == 0) std::fprintf(stderr, "collectives_bench: error: %s\n", e.what());
    return 2;
  }
  if (mpi.size() < 2) {
    std::fprintf(stderr,
                 "collectives_bench: error: needs 2 or more ranks "
                 "(mpirun -np 2 collectives_bench)\n");
    return 2;
  }
  KokkosSession kokkos(argv[0], o.threads);
  MpiLimits limits;
  limits.ring_chunk_bytes = o.ring_chunk_bytes;
  limits.ring_transport = o.ring_transport;
  limits.ring_slot_bytes = o.ring_slot_bytes;
  limits.ring_slots = o.ring_slots;
  auto comm = mpi.make_communicator(limits);
  try {
    return run(*comm, o, kokkos.describe());
  } catch (const std::exception& e) {
    // The other ranks may be inside a collective: end the job rather than hang it.
    std::fprintf(stderr, "collectives_bench: error: rank %d: %s\n", comm->rank(), e.what());
    comm->abort(1);
  }
}
