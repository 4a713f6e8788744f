// Thread discipline: every process uses the cores it was given and no more.
//
// OpenBLAS (pthreads) starts one thread per online core in every process, and a host-parallel
// Kokkos backend (OpenMP, Threads) does the same. With several ranks on a node, or any other busy
// process, that oversubscribes the cores and throughput collapses (bench/README.md, "Threads per
// process"). So each computing command plans its thread counts once at startup:
//
//   - the launcher bound this rank (affinity mask narrower than the online CPUs): use the mask;
//   - otherwise share the allowed CPUs among this node's ranks: max(1, allowed / local ranks);
//   - the user's OMP_NUM_THREADS / OPENBLAS_NUM_THREADS / KOKKOS_NUM_THREADS win when set, up to
//     a rank's share when several ranks are on the node (clamped, with a warning); a single
//     process may oversubscribe its CPUs when asked (its waits then sleep: below).
//
// plan_threads() is the pure rule (unit-tested); read_thread_inputs() gathers its inputs from
// the process, and apply_blas_threads() / KokkosSession carry the plan out.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace kktrain {

struct ThreadInputs {
  int affinity_cpus = 0;  // CPUs in this process's affinity mask (sched_getaffinity); 0: unknown
  int online_cpus = 0;    // CPUs online on the node; 0: unknown
  int local_ranks = 1;    // ranks of this job on this node (launcher environment); 1 without one
  std::string local_ranks_from;  // the variable local_ranks came from ("" without a launcher)
  // The user's explicit requests; 0 when unset (or not a positive integer).
  int omp_num_threads = 0;       // OMP_NUM_THREADS (first entry of a nested list)
  int openblas_num_threads = 0;  // OPENBLAS_NUM_THREADS
  int kokkos_num_threads = 0;    // KOKKOS_NUM_THREADS
  // Kokkos runs host threads (OpenMP, Threads backends); the Serial backend computes on one.
  bool kokkos_host_parallel = false;
};

struct ThreadPlan {
  int allowed_cpus = 1;        // CPUs this process may run on
  bool bound = false;          // the launcher narrowed the affinity mask
  int per_process = 1;         // the planned share before user overrides
  int kokkos_threads = 1;      // for a host-parallel Kokkos backend (the Serial backend runs 1)
  int blas_threads = 1;        // for the BLAS library (its limit: small products take fewer)
  bool blas_user_set = false;  // OPENBLAS_NUM_THREADS / OMP_NUM_THREADS chose blas_threads
  std::string reason;          // e.g. "1 per process (2 CPUs allowed, 2 ranks on this node)"
  // Compute threads of every process sharing these CPUs (this one's times the local ranks when
  // unbound) and whether they outnumber the CPUs: the user's thread settings, or more ranks on
  // the node than CPUs, can make them.
  int threads_on_cpus = 1;
  bool oversubscribed = false;
  bool oversubscribed_by_user = false;  // the planned share would not oversubscribe
  // Several ranks on the node and the user's settings asked for more threads than a rank's
  // share: the settings were clamped to the share (this many threads asked; 0: not clamped).
  int clamped_from = 0;
};

// The rule above. Never returns 0 threads, and never more than the allowed CPUs unless the user
// asked for them through the environment in a process alone on its node.
ThreadPlan plan_threads(const ThreadInputs& in);

// "4" -> 4, "4,2" (OpenMP nested list) -> 4; anything else (unset, empty, 0, junk) -> 0.
int parse_thread_count(const char* text);

// Ranks of this job on this node from a launcher's environment: OMPI_COMM_WORLD_LOCAL_SIZE
// (Open MPI), MPI_LOCALNRANKS (MPICH/Hydra), SLURM_NTASKS_PER_NODE, SLURM_TASKS_PER_NODE
// ("2(x3),1" with SLURM_NODEID picking this node's entry). Returns 1 (and from = "") without one.
using EnvLookup = std::function<const char*(const char*)>;
int local_ranks_from_env(const EnvLookup& env, std::string* from);

// The inputs of this process: its affinity mask, the online CPUs and the environment.
ThreadInputs read_thread_inputs(const EnvLookup& env);
ThreadInputs read_thread_inputs();

// Sets the BLAS thread limit when the BLAS offers a way to (OpenBLAS' openblas_set_num_threads,
// found at run time, no link-time dependency; core/blas_threads.hpp). Products then take the
// threads their size is worth up to the limit, unless the user chose the count: then every
// product gets it. Returns what happened for the startup line: "OpenBLAS 1", "OpenBLAS up to 2
// (1 per 64M multiply-adds of a product)", or "BLAS threads not settable (no ...)".
std::string apply_blas_threads(const ThreadPlan& plan);

// Oversubscribed cores: a thread that waits by spinning (OpenMP workers between parallel regions,
// OpenBLAS workers between products, an MPI rank polling for a collective) takes a core another
// rank's compute thread, or any other process, needs (a test driver beside 2 ranks x 2 OpenMP
// threads polled seconds late: bench/README.md, "Threads per process"). These variables make
// every one of them wait by
// sleeping; each is read when its library initializes, so they must be in the environment before
// the process starts (OpenMP and OpenBLAS read theirs while the program is loaded):
//   OMP_WAIT_POLICY=passive         libgomp (Kokkos' OpenMP backend, oneDNN) sleeps at once
//   OPENBLAS_THREAD_TIMEOUT=4       OpenBLAS workers sleep after 2^4 cycles instead of 2^28
//   OMPI_MCA_mpi_yield_when_idle=1  Open MPI yields the CPU while it polls
// A variable the user set is left as it is. Returns the ones to set (name, value).
std::vector<std::pair<std::string, std::string>> yield_settings(const ThreadPlan& plan,
                                                                const EnvLookup& env);

// When the plan oversubscribes the cores and some yield settings are missing: puts them in the
// environment and starts this program again in place (execv of /proc/self/exe with the same
// arguments; the process keeps its id, so a launcher such as mpirun still knows it). Must run
// before MPI and Kokkos are initialized. Returns only when nothing needed doing or execv failed.
void restart_to_yield_if_oversubscribed(char** argv);

// The warning a run whose thread settings oversubscribe the cores prints once: clamped (several
// ranks), or waiting by sleeping (one process); "" otherwise (more ranks than CPUs with one
// thread each is said in the startup line).
std::string oversubscription_warning(const ThreadPlan& plan, const ThreadInputs& in);

// Owns Kokkos for the process (like Kokkos::ScopeGuard): initialized with `threads` threads on
// host-parallel backends (OpenMP, Threads); the Serial backend runs one thread whatever the plan.
// Kokkos is given the program name only, never the command's arguments.
class KokkosSession {
 public:
  KokkosSession(const char* program, int threads);
  ~KokkosSession();
  KokkosSession(const KokkosSession&) = delete;
  KokkosSession& operator=(const KokkosSession&) = delete;
  // The execution spaces and the host thread count, e.g. "Kokkos Serial", "Kokkos OpenMP 2",
  // "Kokkos Cuda (host OpenMP 2)".
  std::string describe() const;
};

// The startup line: "threads: <reason>; <blas>, <kokkos>".
std::string thread_summary(const ThreadPlan& plan, const std::string& blas,
                           const std::string& kokkos);

}  // namespace kktrain
