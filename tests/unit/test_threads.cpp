// The per-process thread plan (parallel/threads.hpp): a launcher-bound mask is used as is, an
// unbound one is shared among the node's ranks, the user's environment wins, and the plan never
// says 0 threads nor more than the allowed CPUs unless the user asked. Also the parsing of the
// launchers' and the user's environment variables, the BLAS threads a product is worth
// (core/blas_threads.hpp), and carrying the plan out on this machine's BLAS.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <array>
#include <map>
#include <string>

#include "core/blas_threads.hpp"
#include "parallel/threads.hpp"

namespace kktrain {
namespace {

ThreadInputs inputs(int affinity, int online, int ranks = 1) {
  ThreadInputs in;
  in.affinity_cpus = affinity;
  in.online_cpus = online;
  in.local_ranks = ranks;
  return in;
}

// An environment of our own for the parsers (no setenv: tests must not leak into each other).
struct FakeEnv {
  std::map<std::string, std::string> vars;
  EnvLookup lookup() const {
    return [this](const char* name) -> const char* {
      auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  }
};

TEST(ThreadPlan, UnboundSingleProcessUsesEveryAllowedCpu) {
  const ThreadPlan p = plan_threads(inputs(2, 2));
  EXPECT_FALSE(p.bound);
  EXPECT_EQ(p.allowed_cpus, 2);
  EXPECT_EQ(p.per_process, 2);
  EXPECT_EQ(p.blas_threads, 2);
  EXPECT_EQ(p.kokkos_threads, 2);
  EXPECT_EQ(p.reason, "2 threads per process (2 CPUs allowed, 1 rank on this node)");
}

TEST(ThreadPlan, UnboundMaskIsSharedAmongLocalRanks) {
  EXPECT_EQ(plan_threads(inputs(2, 2, 2)).per_process, 1);
  EXPECT_EQ(plan_threads(inputs(64, 64, 4)).per_process, 16);
  EXPECT_EQ(plan_threads(inputs(64, 64, 3)).per_process, 21);  // rounds down: never oversubscribe
  const ThreadPlan p = plan_threads(inputs(2, 2, 2));
  EXPECT_EQ(p.blas_threads, 1);
  EXPECT_EQ(p.kokkos_threads, 1);
  EXPECT_EQ(p.reason, "1 thread per process (2 CPUs allowed, 2 ranks on this node)");
}

TEST(ThreadPlan, MoreRanksThanCpusStillGetOneThread) {
  for (int ranks : {3, 4, 17, 1000}) {
    const ThreadPlan p = plan_threads(inputs(2, 2, ranks));
    EXPECT_EQ(p.per_process, 1) << ranks;
    EXPECT_EQ(p.blas_threads, 1) << ranks;
    EXPECT_EQ(p.kokkos_threads, 1) << ranks;
    // More ranks than CPUs is oversubscribed whatever the threads: waits must yield.
    EXPECT_TRUE(p.oversubscribed) << ranks;
    EXPECT_FALSE(p.oversubscribed_by_user) << ranks;
    EXPECT_EQ(p.threads_on_cpus, ranks);
    EXPECT_NE(p.reason.find(std::to_string(ranks) + " ranks on 2 CPUs: waits yield the CPU"),
              std::string::npos)
        << p.reason;
  }
  EXPECT_FALSE(plan_threads(inputs(2, 2, 2)).oversubscribed);
}

TEST(ThreadPlan, OversubscriptionCountsTheThreadsThatRunAtOnce) {
  // One process: OMP_NUM_THREADS=4 on 2 CPUs runs 4 threads, which wait by sleeping.
  ThreadInputs in = inputs(2, 2, 1);
  in.omp_num_threads = 4;
  in.kokkos_host_parallel = true;
  ThreadPlan p = plan_threads(in);
  EXPECT_TRUE(p.oversubscribed);
  EXPECT_TRUE(p.oversubscribed_by_user);
  EXPECT_EQ(p.threads_on_cpus, 4);
  // The Serial backend computes on one thread; OpenBLAS still takes 4.
  in.kokkos_host_parallel = false;
  EXPECT_EQ(plan_threads(in).threads_on_cpus, 4);
  in.omp_num_threads = 0;
  in.kokkos_num_threads = 4;  // Kokkos threads of a Serial build never run
  EXPECT_FALSE(plan_threads(in).oversubscribed);
  in.kokkos_host_parallel = true;
  EXPECT_TRUE(plan_threads(in).oversubscribed_by_user);
  // 2 ranks x OMP_NUM_THREADS=2 on 2 CPUs (the OpenMP test suite's setting), unbound and bound
  // by mpirun to 1 CPU each: clamped to 1 thread per rank, nothing oversubscribed.
  for (const ThreadInputs& two : {inputs(2, 2, 2), inputs(1, 2, 2)}) {
    in = two;
    in.omp_num_threads = 2;
    in.kokkos_host_parallel = true;
    p = plan_threads(in);
    EXPECT_EQ(p.clamped_from, 2);
    EXPECT_EQ(p.kokkos_threads, 1);
    EXPECT_EQ(p.blas_threads, 1);
    EXPECT_FALSE(p.oversubscribed);
    EXPECT_FALSE(p.oversubscribed_by_user);
  }
}

TEST(ThreadPlan, OversubscribedRunsWaitBySleeping) {
  ThreadInputs in = inputs(2, 2, 1);
  in.omp_num_threads = 4;
  const ThreadPlan p = plan_threads(in);
  FakeEnv env;
  using Settings = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(yield_settings(p, env.lookup()), (Settings{{"OMP_WAIT_POLICY", "passive"},
                                                       {"OPENBLAS_THREAD_TIMEOUT", "4"},
                                                       {"OMPI_MCA_mpi_yield_when_idle", "1"}}));
  env.vars["OMP_WAIT_POLICY"] = "active";  // the user's choice stays
  EXPECT_EQ(yield_settings(p, env.lookup()),
            (Settings{{"OPENBLAS_THREAD_TIMEOUT", "4"}, {"OMPI_MCA_mpi_yield_when_idle", "1"}}));
  EXPECT_TRUE(yield_settings(plan_threads(inputs(2, 2, 2)), env.lookup()).empty());
  const std::string w = oversubscription_warning(p, in);
  EXPECT_NE(w.find("4 compute threads (1 rank x 4) share 2 CPUs"), std::string::npos) << w;
  EXPECT_NE(w.find("for 2 per process"), std::string::npos) << w;
  EXPECT_EQ(oversubscription_warning(plan_threads(inputs(2, 2, 3)), inputs(2, 2, 3)), "");
  // Several ranks: clamped, and the warning says so.
  in = inputs(1, 2, 2);
  in.omp_num_threads = 2;
  const std::string c = oversubscription_warning(plan_threads(in), in);
  EXPECT_NE(c.find("ask for 2 compute threads per rank, more than the 1 CPU each of the 2 ranks"),
            std::string::npos)
      << c;
  EXPECT_TRUE(yield_settings(plan_threads(in), FakeEnv().lookup()).empty());  // nothing to yield
}

TEST(ThreadPlan, BoundMaskIsUsedAsIsWhateverTheRankCount) {
  // mpirun --bind-to core on 2 cores: each rank's mask holds 1 CPU.
  ThreadPlan p = plan_threads(inputs(1, 2, 2));
  EXPECT_TRUE(p.bound);
  EXPECT_EQ(p.per_process, 1);
  EXPECT_EQ(p.reason, "1 thread per process (bound to 1 CPU of 2)");
  // --bind-to socket / --map-by ppr:1:socket:pe=8: the launcher already divided the node.
  p = plan_threads(inputs(8, 64, 8));
  EXPECT_TRUE(p.bound);
  EXPECT_EQ(p.per_process, 8);
  EXPECT_EQ(p.blas_threads, 8);
  EXPECT_EQ(p.reason, "8 threads per process (bound to 8 CPUs of 64)");
  // taskset -c 0-3 without a launcher.
  EXPECT_EQ(plan_threads(inputs(4, 16)).per_process, 4);
}

TEST(ThreadPlan, UnknownCountsFallBackSafely) {
  EXPECT_EQ(plan_threads(inputs(0, 8)).per_process, 8);  // no affinity: the online CPUs
  EXPECT_FALSE(plan_threads(inputs(0, 8)).bound);
  EXPECT_EQ(plan_threads(inputs(6, 0)).per_process, 6);  // no online count: the mask
  EXPECT_FALSE(plan_threads(inputs(6, 0)).bound);
  const ThreadPlan p = plan_threads(inputs(0, 0, 0));  // nothing known at all
  EXPECT_EQ(p.per_process, 1);
  EXPECT_EQ(p.blas_threads, 1);
  EXPECT_EQ(p.kokkos_threads, 1);
  // A mask wider than the online CPUs (offline CPUs in it) counts only the online ones.
  EXPECT_EQ(plan_threads(inputs(8, 4)).per_process, 4);
  EXPECT_FALSE(plan_threads(inputs(8, 4)).bound);
}

TEST(ThreadPlan, NeverZeroNorMoreThanAllowedWithoutAsking) {
  for (int online = 1; online <= 9; ++online) {
    for (int affinity = 0; affinity <= online + 1; ++affinity) {
      for (int ranks = 0; ranks <= 10; ++ranks) {
        const ThreadPlan p = plan_threads(inputs(affinity, online, ranks));
        const std::string at =
            std::to_string(affinity) + "/" + std::to_string(online) + " x" + std::to_string(ranks);
        EXPECT_GE(p.per_process, 1) << at;
        EXPECT_GE(p.blas_threads, 1) << at;
        EXPECT_GE(p.kokkos_threads, 1) << at;
        EXPECT_LE(p.blas_threads, p.allowed_cpus) << at;
        EXPECT_LE(p.kokkos_threads, p.allowed_cpus) << at;
        EXPECT_LE(p.allowed_cpus, online) << at;
      }
    }
  }
}

TEST(ThreadPlan, UserEnvironmentWins) {
  ThreadInputs in = inputs(4, 4, 1);
  in.omp_num_threads = 8;  // more than allowed, one process alone: the user asked, so be it
  ThreadPlan p = plan_threads(in);
  EXPECT_EQ(p.per_process, 4);
  EXPECT_EQ(p.blas_threads, 8);
  EXPECT_EQ(p.kokkos_threads, 8);
  EXPECT_EQ(p.clamped_from, 0);
  EXPECT_EQ(p.reason,
            "4 threads per process (4 CPUs allowed, 1 rank on this node), overridden by "
            "OMP_NUM_THREADS=8");

  in.openblas_num_threads = 3;  // OpenBLAS' own variable beats OMP_NUM_THREADS for BLAS
  p = plan_threads(in);
  EXPECT_EQ(p.blas_threads, 3);
  EXPECT_EQ(p.kokkos_threads, 8);
  EXPECT_EQ(p.reason,
            "4 threads per process (4 CPUs allowed, 1 rank on this node), overridden by "
            "OPENBLAS_NUM_THREADS=3, OMP_NUM_THREADS=8");

  in.kokkos_num_threads = 2;
  p = plan_threads(in);
  EXPECT_EQ(p.blas_threads, 3);
  EXPECT_EQ(p.kokkos_threads, 2);
  EXPECT_EQ(p.reason.find("OMP_NUM_THREADS"), std::string::npos) << p.reason;

  // Several ranks on the node: within their share the settings win; beyond it they are clamped.
  in = inputs(8, 8, 2);
  in.omp_num_threads = 3;
  p = plan_threads(in);
  EXPECT_EQ(p.blas_threads, 3);
  EXPECT_EQ(p.kokkos_threads, 3);
  EXPECT_EQ(p.clamped_from, 0);
  in.omp_num_threads = 6;
  in.kokkos_host_parallel = true;
  p = plan_threads(in);
  EXPECT_EQ(p.clamped_from, 6);
  EXPECT_EQ(p.blas_threads, 4);
  EXPECT_EQ(p.kokkos_threads, 4);
  EXPECT_FALSE(p.oversubscribed);
  EXPECT_NE(p.reason.find("; clamped to 4 threads per rank"), std::string::npos) << p.reason;

  // Only OPENBLAS_NUM_THREADS: Kokkos keeps the plan.
  in = inputs(8, 8);
  in.openblas_num_threads = 1;
  p = plan_threads(in);
  EXPECT_EQ(p.blas_threads, 1);
  EXPECT_EQ(p.kokkos_threads, 8);
}

TEST(ThreadPlan, ParsesThreadCounts) {
  EXPECT_EQ(parse_thread_count(nullptr), 0);
  EXPECT_EQ(parse_thread_count(""), 0);
  EXPECT_EQ(parse_thread_count("0"), 0);
  EXPECT_EQ(parse_thread_count("-2"), 0);
  EXPECT_EQ(parse_thread_count("two"), 0);
  EXPECT_EQ(parse_thread_count("3x"), 0);
  EXPECT_EQ(parse_thread_count("99999999999"), 0);
  EXPECT_EQ(parse_thread_count("1"), 1);
  EXPECT_EQ(parse_thread_count(" 12 "), 12);
  EXPECT_EQ(parse_thread_count("4,2"), 4);  // OpenMP nested list: the outer level
}

TEST(ThreadPlan, LocalRanksFromLaunchers) {
  std::string from;
  FakeEnv env;
  EXPECT_EQ(local_ranks_from_env(env.lookup(), &from), 1);
  EXPECT_EQ(from, "");

  env.vars = {{"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}, {"MPI_LOCALNRANKS", "5"}};
  EXPECT_EQ(local_ranks_from_env(env.lookup(), &from), 2);
  EXPECT_EQ(from, "OMPI_COMM_WORLD_LOCAL_SIZE");

  env.vars = {{"MPI_LOCALNRANKS", "5"}};  // MPICH / Hydra
  EXPECT_EQ(local_ranks_from_env(env.lookup(), &from), 5);
  EXPECT_EQ(from, "MPI_LOCALNRANKS");

  env.vars = {{"SLURM_NTASKS_PER_NODE", "4"}, {"SLURM_TASKS_PER_NODE", "2(x3)"}};
  EXPECT_EQ(local_ranks_from_env(env.lookup(), &from), 4);
  EXPECT_EQ(from, "SLURM_NTASKS_PER_NODE");

  // SLURM_TASKS_PER_NODE: this node's entry of the compressed list.
  env.vars = {{"SLURM_TASKS_PER_NODE", "2(x3),1"}};
  EXPECT_EQ(local_ranks_from_env(env.lookup(), &from), 2);
  EXPECT_EQ(from, "SLURM_TASKS_PER_NODE");
  env.vars["SLURM_NODEID"] = "2";
  EXPECT_EQ(local_ranks_from_env(env.lookup(), nullptr), 2);
  env.vars["SLURM_NODEID"] = "3";
  EXPECT_EQ(local_ranks_from_env(env.lookup(), nullptr), 1);
  env.vars = {{"SLURM_TASKS_PER_NODE", "3,1(x2),6"}, {"SLURM_NODEID", "3"}};
  EXPECT_EQ(local_ranks_from_env(env.lookup(), nullptr), 6);
  env.vars["SLURM_NODEID"] = "4";  // past the list: no information
  EXPECT_EQ(local_ranks_from_env(env.lookup(), &from), 1);
  EXPECT_EQ(from, "");

  // Junk is ignored, not trusted.
  env.vars = {{"OMPI_COMM_WORLD_LOCAL_SIZE", "0"}, {"SLURM_TASKS_PER_NODE", "2(x"}};
  EXPECT_EQ(local_ranks_from_env(env.lookup(), &from), 1);
}

TEST(ThreadPlan, ReadsTheProcessAndItsEnvironment) {
  FakeEnv env;
  env.vars = {{"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
              {"OMP_NUM_THREADS", "3,1"},
              {"OPENBLAS_NUM_THREADS", "junk"},
              {"KOKKOS_NUM_THREADS", "5"}};
  const ThreadInputs in = read_thread_inputs(env.lookup());
  EXPECT_GE(in.affinity_cpus, 1);  // this test process runs somewhere
  EXPECT_GE(in.online_cpus, in.affinity_cpus);
  EXPECT_EQ(in.local_ranks, 2);
  EXPECT_EQ(in.local_ranks_from, "OMPI_COMM_WORLD_LOCAL_SIZE");
  EXPECT_EQ(in.omp_num_threads, 3);
  EXPECT_EQ(in.openblas_num_threads, 0);
  EXPECT_EQ(in.kokkos_num_threads, 5);
}

TEST(ThreadPlan, BlasHookReportsWhatItDid) {
  // kktrain gets the system BLAS through Kokkos Kernels (libblas.so.3: OpenBLAS on Debian);
  // this test links neither, so it loads it itself. Another BLAS is reported, not an error.
  dlopen("libblas.so.3", RTLD_NOW | RTLD_GLOBAL);
  ThreadPlan p = plan_threads(inputs(2, 2));
  const std::string got = apply_blas_threads(p);
  if (std::string(blas_threads_library()).empty()) {
    EXPECT_EQ(got, "BLAS threads not settable (no openblas_set_num_threads)");
    return;
  }
  EXPECT_EQ(got, "OpenBLAS up to 2 (1 per 64M multiply-adds of a product)");
  EXPECT_EQ(apply_blas_threads(plan_threads(inputs(2, 2, 2))), "OpenBLAS 1");
  ThreadInputs in = inputs(2, 2, 1);
  in.openblas_num_threads = 2;  // the user's count, for every product
  p = plan_threads(in);
  EXPECT_TRUE(p.blas_user_set);
  EXPECT_EQ(apply_blas_threads(p), "OpenBLAS 2");
  fit_blas_threads(128, 128, 32);
  EXPECT_EQ(blas_threads_in_use(), 2);
}

TEST(BlasThreads, SmallProductsRunOnOneThread) {
  // Every product of the default model (N 1024 tokens, C 128, F 344, V 256, T 128, D 32): the
  // largest, gate/up (1024 x 688 x 128), is 1.3 x kBlasWorkPerThread.
  for (const auto& s : {std::array<int64_t, 3>{128, 128, 32},
                        {128, 32, 128},
                        {1024, 256, 128},
                        {1024, 128, 128},
                        {1024, 688, 128},
                        {688, 128, 1024},
                        {1024, 128, 344}}) {
    EXPECT_EQ(blas_threads_for_product(s[0], s[1], s[2], 2), 1) << s[0] << "x" << s[1];
  }
  EXPECT_EQ(blas_threads_for_product(0, 5, 5, 8), 1);  // never 0
  EXPECT_EQ(blas_threads_for_product(-1, 5, 5, 8), 1);
}

TEST(BlasThreads, LargeProductsUseUpToTheLimit) {
  const int64_t w = kBlasWorkPerThread;
  EXPECT_EQ(blas_threads_for_product(w, 2, 1, 2), 2);
  EXPECT_EQ(blas_threads_for_product(w, 2, 1, 1), 1);  // never above the limit
  EXPECT_EQ(blas_threads_for_product(w, 3, 1, 8), 3);  // one thread per kBlasWorkPerThread
  EXPECT_EQ(blas_threads_for_product(w, 3, 2, 8), 6);
  EXPECT_EQ(blas_threads_for_product(8192, 8192, 8192, 64), 64);
  EXPECT_EQ(blas_threads_for_product(4096, 4096, 4096, 0), 1);  // a limit below 1 counts as 1
  // A (2048 x 1024) @ (1024 x 1024) projection of a larger model takes 2 threads on 2 cores.
  EXPECT_EQ(blas_threads_for_product(2048, 1024, 1024, 2), 2);
}

TEST(BlasThreads, FitsTheLibraryProductByProduct) {
  dlopen("libblas.so.3", RTLD_NOW | RTLD_GLOBAL);  // see BlasHookReportsWhatItDid
  if (std::string(blas_threads_library()).empty()) {
    GTEST_SKIP() << "this BLAS has no openblas_set_num_threads";
  }
  set_blas_thread_limit(2, true);
  EXPECT_EQ(blas_thread_limit(), 2);
  EXPECT_EQ(blas_threads_in_use(), 2);
  fit_blas_threads(1024, 688, 128);  // small: one thread
  EXPECT_EQ(blas_threads_in_use(), 1);
  fit_blas_threads(2048, 1024, 1024);  // large: the limit
  EXPECT_EQ(blas_threads_in_use(), 2);
  use_blas_threads(8);  // never above the limit
  EXPECT_EQ(blas_threads_in_use(), 2);
  set_blas_thread_limit(1, true);
  fit_blas_threads(2048, 1024, 1024);
  EXPECT_EQ(blas_threads_in_use(), 1);
  set_blas_thread_limit(2, false);  // the user's count: kept for every product
  fit_blas_threads(128, 128, 32);
  EXPECT_EQ(blas_threads_in_use(), 2);
}

TEST(ThreadPlan, SummaryLine) {
  const ThreadPlan p = plan_threads(inputs(2, 2, 2));
  EXPECT_EQ(thread_summary(p, "OpenBLAS 1", "Kokkos Serial"),
            "threads: 1 thread per process (2 CPUs allowed, 2 ranks on this node); OpenBLAS 1, "
            "Kokkos Serial");
}

}  // namespace
}  // namespace kktrain
