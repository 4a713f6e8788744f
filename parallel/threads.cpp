// Thread discipline (see threads.hpp): the planning rule, its inputs from the process, and
// carrying the plan out in OpenBLAS (core/blas_threads: looked up at run time, so any BLAS links)
// and Kokkos (the initialization thread count, spelled differently before and after Kokkos 3.7).
#include "parallel/threads.hpp"

#include <sched.h>
#include <unistd.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <vector>

#include "core/blas_threads.hpp"

namespace kktrain {

namespace {

std::string plural(int n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

// A positive decimal integer filling `text` from `*pos` up to a non-digit; 0 when there is none.
int read_positive(const std::string& text, std::size_t* pos) {
  long v = 0;
  std::size_t i = *pos;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
    v = v * 10 + (text[i] - '0');
    if (v > INT_MAX) return 0;
    ++i;
  }
  if (i == *pos) return 0;
  *pos = i;
  return static_cast<int>(v);
}

// SLURM_TASKS_PER_NODE: comma-separated counts, each optionally repeated "N(xR)"; the entry of
// node `node` (0-based), or 0 when the text does not parse or has no such node.
int slurm_tasks_on_node(const std::string& text, int node) {
  std::size_t pos = 0;
  int seen = 0;
  while (pos < text.size()) {
    const int n = read_positive(text, &pos);
    if (n == 0) return 0;
    int repeat = 1;
    if (text.compare(pos, 2, "(x") == 0) {
      pos += 2;
      repeat = read_positive(text, &pos);
      if (repeat == 0 || pos >= text.size() || text[pos] != ')') return 0;
      ++pos;
    }
    if (node < seen + repeat) return n;
    seen += repeat;
    if (pos < text.size()) {
      if (text[pos] != ',') return 0;
      ++pos;
    }
  }
  return 0;
}

const char* real_env(const char* name) {
  return std::getenv(name);
}

// CPUs in this process's affinity mask; 0 when it cannot be read. The mask grows past
// cpu_set_t's 1024 CPUs on machines that have more.
int affinity_cpu_count() {
  for (int n = 1024; n <= (1 << 20); n *= 2) {
    cpu_set_t* set = CPU_ALLOC(n);
    if (set == nullptr) return 0;
    const std::size_t size = CPU_ALLOC_SIZE(n);
    CPU_ZERO_S(size, set);
    const int rc = sched_getaffinity(0, size, set);
    const int err = errno;
    const int count = rc == 0 ? CPU_COUNT_S(size, set) : 0;
    CPU_FREE(set);
    if (rc == 0 || err != EINVAL) return count;
  }
  return 0;
}

}  // namespace

int parse_thread_count(const char* text) {
  if (text == nullptr) return 0;
  const std::string s(text);
  std::size_t pos = 0;
  while (pos < s.size() && (s[pos] == ' ' || s[pos] == '\t')) ++pos;
  const int n = read_positive(s, &pos);
  while (pos < s.size() && (s[pos] == ' ' || s[pos] == '\t')) ++pos;
  // Nothing may follow but the rest of an OpenMP nested list ("4,2": 4 at the outer level).
  if (pos < s.size() && s[pos] != ',') return 0;
  return n;
}

int local_ranks_from_env(const EnvLookup& env, std::string* from) {
  for (const char* var :
       {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"}) {
    const int n = parse_thread_count(env(var));
    if (n > 0) {
      if (from) *from = var;
      return n;
    }
  }
  if (const char* tasks = env("SLURM_TASKS_PER_NODE")) {
    const int n = slurm_tasks_on_node(tasks, parse_thread_count(env("SLURM_NODEID")));
    if (n > 0) {
      if (from) *from = "SLURM_TASKS_PER_NODE";
      return n;
    }
  }
  if (from) from->clear();
  return 1;
}

ThreadPlan plan_threads(const ThreadInputs& in) {
  ThreadPlan p;
  const int online = in.online_cpus > 0 ? in.online_cpus : std::max(in.affinity_cpus, 1);
  const int allowed = in.affinity_cpus > 0 ? std::min(in.affinity_cpus, online) : online;
  const int ranks = std::max(in.local_ranks, 1);
  p.allowed_cpus = allowed;
  p.bound = allowed < online;
  p.per_process = p.bound ? allowed : std::max(1, allowed / ranks);

  if (p.bound) {
    p.reason = plural(p.per_process, "thread", "threads") + " per process (bound to " +
               plural(allowed, "CPU", "CPUs") + " of " + std::to_string(online) + ")";
  } else {
    p.reason = plural(p.per_process, "thread", "threads") + " per process (" +
               plural(allowed, "CPU", "CPUs") + " allowed, " + plural(ranks, "rank", "ranks") +
               " on this node)";
  }

  // The user's settings win: OpenBLAS itself reads OPENBLAS_NUM_THREADS, then OMP_NUM_THREADS;
  // Kokkos reads KOKKOS_NUM_THREADS (and an OpenMP backend OMP_NUM_THREADS).
  std::vector<std::string> asked;
  const auto pick = [&](int first, const char* first_name, int& out) {
    out = p.per_process;
    std::string name;
    if (first > 0) {
      out = first;
      name = first_name + std::string("=") + std::to_string(first);
    } else if (in.omp_num_threads > 0) {
      out = in.omp_num_threads;
      name = "OMP_NUM_THREADS=" + std::to_string(in.omp_num_threads);
    }
    if (!name.empty() && std::find(asked.begin(), asked.end(), name) == asked.end()) {
      asked.push_back(name);
    }
  };
  pick(in.openblas_num_threads, "OPENBLAS_NUM_THREADS", p.blas_threads);
  p.blas_user_set = in.openblas_num_threads > 0 || in.omp_num_threads > 0;
  pick(in.kokkos_num_threads, "KOKKOS_NUM_THREADS", p.kokkos_threads);
  if (!asked.empty()) {
    p.reason += ", overridden by";
    for (std::size_t i = 0; i < asked.size(); ++i) p.reason += (i ? ", " : " ") + asked[i];
  }
  // Kokkos and the BLAS take turns (a product runs inside no Kokkos kernel): the larger count.
  const int busy = std::max(p.blas_threads, in.kokkos_host_parallel ? p.kokkos_threads : 1);
  p.threads_on_cpus = p.bound ? busy : busy * ranks;
  p.oversubscribed = p.threads_on_cpus > allowed;
  p.oversubscribed_by_user = p.oversubscribed && busy > p.per_process;
  if (p.oversubscribed_by_user && in.local_ranks > 1) {
    // Several ranks on the node: the settings are clamped to the share. Threads beyond it starve
    // the other ranks and every other process even when they wait by sleeping (bench/README.md,
    // "Threads per process").
    p.clamped_from = busy;
    p.kokkos_threads = std::min(p.kokkos_threads, p.per_process);
    p.blas_threads = std::min(p.blas_threads, p.per_process);
    const int now = std::max(p.blas_threads, in.kokkos_host_parallel ? p.kokkos_threads : 1);
    p.threads_on_cpus = p.bound ? now : now * ranks;
    p.oversubscribed = p.threads_on_cpus > allowed;
    p.oversubscribed_by_user = false;
    p.reason += "; clamped to " + plural(p.per_process, "thread", "threads") + " per rank";
  }
  if (p.oversubscribed && !p.oversubscribed_by_user) {
    p.reason += "; " + plural(ranks, "rank", "ranks") + " on " + plural(allowed, "CPU", "CPUs") +
                ": waits yield the CPU";
  }
  return p;
}

ThreadInputs read_thread_inputs(const EnvLookup& env) {
  ThreadInputs in;
  in.affinity_cpus = affinity_cpu_count();
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  in.online_cpus = online > 0 && online < INT_MAX ? static_cast<int>(online) : 0;
  in.local_ranks = local_ranks_from_env(env, &in.local_ranks_from);
  in.omp_num_threads = parse_thread_count(env("OMP_NUM_THREADS"));
  in.openblas_num_threads = parse_thread_count(env("OPENBLAS_NUM_THREADS"));
  in.kokkos_num_threads = parse_thread_count(env("KOKKOS_NUM_THREADS"));
#if defined(KOKKOS_ENABLE_OPENMP) || defined(KOKKOS_ENABLE_THREADS)
  in.kokkos_host_parallel = true;
#endif
  return in;
}

ThreadInputs read_thread_inputs() {
  return read_thread_inputs(real_env);
}

std::vector<std::pair<std::string, std::string>> yield_settings(const ThreadPlan& plan,
                                                                const EnvLookup& env) {
  std::vector<std::pair<std::string, std::string>> out;
  if (!plan.oversubscribed) return out;
  for (const auto& [name, value] :
       {std::pair<const char*, const char*>{"OMP_WAIT_POLICY", "passive"},
        {"OPENBLAS_THREAD_TIMEOUT", "4"},
        {"OMPI_MCA_mpi_yield_when_idle", "1"}}) {
    if (env(name) == nullptr) out.emplace_back(name, value);
  }
  return out;
}

void restart_to_yield_if_oversubscribed(char** argv) {
  // Restarted once at most: the marker stops a second restart if a setting does not hold.
  constexpr const char* kMarker = "KKTRAIN_RESTARTED_TO_YIELD";
  if (std::getenv(kMarker) != nullptr) return;
  const auto settings = yield_settings(plan_threads(read_thread_inputs()), real_env);
  if (settings.empty()) return;
  for (const auto& [name, value] : settings) setenv(name.c_str(), value.c_str(), 0);
  setenv(kMarker, "1", 1);
  std::fflush(nullptr);
  execv("/proc/self/exe", argv);
  // execv failed (no /proc): go on; MPI still reads its setting at MPI_Init.
}

std::string oversubscription_warning(const ThreadPlan& plan, const ThreadInputs& in) {
  if (plan.clamped_from > 0) {
    return "the thread settings ask for " + std::to_string(plan.clamped_from) +
           " compute threads per rank, more than the " + plural(plan.per_process, "CPU", "CPUs") +
           " each of the " + std::to_string(std::max(in.local_ranks, 1)) +
           " ranks on this node may use: running " + std::to_string(plan.per_process) +
           " per rank (more would starve the other ranks and processes on the node)";
  }
  if (!plan.oversubscribed_by_user) return "";
  const int ranks = plan.bound ? 1 : std::max(in.local_ranks, 1);
  std::string w = std::to_string(plan.threads_on_cpus) + " compute threads (" +
                  plural(ranks, "rank", "ranks") + " x " +
                  std::to_string(plan.threads_on_cpus / ranks) + ") share " +
                  plural(plan.allowed_cpus, "CPU", "CPUs") +
                  " as the thread settings ask: threads wait by sleeping instead of spinning (";
  bool first = true;
  for (const char* name :
       {"OMP_WAIT_POLICY", "OPENBLAS_THREAD_TIMEOUT", "OMPI_MCA_mpi_yield_when_idle"}) {
    const char* v = std::getenv(name);
    w += (first ? "" : ", ") + std::string(name) + "=" + (v ? v : "unset");
    first = false;
  }
  return w + "); unset OMP_NUM_THREADS, OPENBLAS_NUM_THREADS and KOKKOS_NUM_THREADS for " +
         std::to_string(plan.per_process) + " per process";
}

std::string apply_blas_threads(const ThreadPlan& plan) {
  // A BLAS without openblas_set_num_threads (reference BLAS, MKL, BLIS) is reported, not fatal.
  const std::string lib = blas_threads_library();
  if (lib.empty()) return "BLAS threads not settable (no openblas_set_num_threads)";
  set_blas_thread_limit(plan.blas_threads, !plan.blas_user_set);
  const int now = blas_threads_in_use();
  const std::string n = std::to_string(now > 0 ? now : blas_thread_limit());
  if (plan.blas_user_set || blas_thread_limit() == 1) return lib + " " + n;
  return lib + " up to " + n + " (1 per " + std::to_string(kBlasWorkPerThread >> 20) +
         "M multiply-adds of a product)";
}

// Kokkos 3.7 replaced InitArguments (removed in 4.0) by InitializationSettings. Host-parallel
// backends take the planned count; other builds initialize as Kokkos::ScopeGuard would (Serial
// runs one thread; a GPU build keeps its environment device setup). Kokkos sees only the program
// name: kktrain's own arguments (`--prompt --help`, a file named `--kokkos-threads=2`) are never
// parsed as Kokkos options.
KokkosSession::KokkosSession(const char* program, int threads) {
  threads = std::max(threads, 1);
  std::string name = program != nullptr ? program : "kktrain";
  char* kokkos_argv[] = {name.data(), nullptr};
  int kokkos_argc = 1;
#if defined(KOKKOS_ENABLE_OPENMP) || defined(KOKKOS_ENABLE_THREADS)
#if KOKKOS_VERSION >= 30700
  (void)kokkos_argc;
  (void)kokkos_argv;
  // kktrain reports its own thread plan; Kokkos' advice (OMP_PROC_BIND, oversubscription when
  // the user asked for more threads than cores) would add lines to every run's stderr.
  Kokkos::initialize(
      Kokkos::InitializationSettings().set_num_threads(threads).set_disable_warnings(true));
#elif defined(KOKKOS_ENABLE_CUDA) || defined(KOKKOS_ENABLE_HIP)
  (void)threads;
  Kokkos::initialize(kokkos_argc, kokkos_argv);
#else
  (void)kokkos_argc;
  (void)kokkos_argv;
  Kokkos::InitArguments args;
  args.num_threads = threads;
  Kokkos::initialize(args);
#endif
#else
  (void)threads;
  Kokkos::initialize(kokkos_argc, kokkos_argv);
#endif
}

KokkosSession::~KokkosSession() {
  Kokkos::finalize();
}

std::string KokkosSession::describe() const {
  using Host = Kokkos::DefaultHostExecutionSpace;
  using Device = Kokkos::DefaultExecutionSpace;
  std::string host = Host::name();
#if defined(KOKKOS_ENABLE_SERIAL)
  const bool serial_host = std::is_same<Host, Kokkos::Serial>::value;
#else
  const bool serial_host = false;
#endif
  if (!serial_host) host += " " + std::to_string(Host().concurrency());
  if (std::is_same<Host, Device>::value) return "Kokkos " + host;
  return std::string("Kokkos ") + Device::name() + " (host " + host + ")";
}

std::string thread_summary(const ThreadPlan& plan, const std::string& blas,
                           const std::string& kokkos) {
  return "threads: " + plan.reason + "; " + blas + ", " + kokkos;
}

}  // namespace kktrain
