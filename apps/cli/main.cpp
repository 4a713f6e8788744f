// kktrain: the command-line entry point. Dispatches to subcommands, owns process-wide runtime
// setup (MPI when launched by mpirun, Kokkos when the command computes), and turns every error
// into one line on stderr with the documented exit status.
#include <mpi.h>
#include <sys/resource.h>

#include <Kokkos_Core.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "apps/build_info.hpp"
#include "apps/cli/commands.hpp"
#include "apps/train/memory_plan.hpp"
#include "core/errors.hpp"
#include "core/launch_count.hpp"
#include "core/log.hpp"
#include "core/version.hpp"
#include "io/h5.hpp"
#include "ops/gemm.hpp"
#include "optim/audit.hpp"
#include "parallel/mpi_world.hpp"
#include "parallel/threads.hpp"

// Everything lives in namespace kktrain (no using-directive at global scope: with CUDA, a global
// `using namespace kktrain` makes kktrain::log collide with CUDA's own math functions).
namespace kktrain {

namespace {

std::vector<Command> all_commands() {
  return {train_command(),  config_command(),  audit_command(),    grads_command(),
          export_command(), inspect_command(), generate_command(), tokenize_command(),
          render_command(), eval_command()};
}

void print_main_help(const std::vector<Command>& cmds) {
  std::printf(
      "usage: kktrain COMMAND [ARGS...]\n\n"
      "Mixed-precision training of Llama-style decoder LMs on Kokkos.\n\n"
      "commands:\n");
  for (const auto& c : cmds) std::printf("  %-8s %s\n", c.spec.name, c.spec.summary);
  std::printf(
      "\nRun 'kktrain COMMAND --help' for a command's arguments. Launch with\n"
      "'mpirun -np N kktrain train CONFIG' to train on N ranks.\n"
      "Exit status: 0 success, 1 run failure, 2 invalid input (config, override, data, file).\n");
}

// The version, then what this build runs on: Kokkos and where kernels run, GEMM per dtype, BLAS,
// MPI (the library found at run time, and whether it takes device buffers), HDF5, NCCL, oneDNN.
void print_version() {
  std::printf("kktrain %s (Kokkos %d.%d.%d)\n", kKktrainVersion, KOKKOS_VERSION / 10000,
              KOKKOS_VERSION / 100 % 100, KOKKOS_VERSION % 100);
  std::printf("Kokkos: %s\n", KKTRAIN_BUILD_KOKKOS);
  std::printf("GEMM: %s\n", gemm_backends_summary().c_str());
  std::printf("BLAS: %s\n", KKTRAIN_BUILD_BLAS);
  char lib[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0;
  MPI_Get_library_version(lib, &len);  // allowed before MPI_Init
  std::string runtime(lib, static_cast<std::size_t>(len));
  runtime = runtime.substr(0, runtime.find_first_of("\n,"));
  std::printf("MPI: %s; at run time: %s; GPU-aware: %s\n", KKTRAIN_BUILD_MPI, runtime.c_str(),
              mpi_is_gpu_aware() ? "yes" : "no");
  std::printf("HDF5: %s\n", KKTRAIN_BUILD_HDF5);
  std::printf("NCCL: %s\n", KKTRAIN_BUILD_NCCL);
  std::printf("oneDNN: %s\n", KKTRAIN_BUILD_ONEDNN);
  std::printf("GPU BLAS: %s\n", KKTRAIN_BUILD_GPU_BLAS);
}

// Kokkos::initialize failed (it throws on a device runtime's error). A CUDA/HIP runtime reserves
// far more virtual address space than it uses, so under a finite RLIMIT_AS (ulimit -v) it does
// not start at all (seen on an H200: cudaGetDeviceCount "out of memory" under 8 GiB): that is
// the user's setting, named as such (exit 2, like the memory check's refusal of the same limit).
Error kokkos_start_failure(const std::string& what) {
  const std::string space = Kokkos::DefaultExecutionSpace::name();
  rlimit lim{};
  if (device_memory_tracked() && getrlimit(RLIMIT_AS, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY) {
    return InputError("the Kokkos " + space +
                      " runtime did not start under RLIMIT_AS (ulimit -v) of " +
                      format_bytes(static_cast<double>(lim.rlim_cur)) + " (" + what +
                      "): GPU runtimes reserve more address space than they use; run without "
                      "the limit (ulimit -v unlimited): the run's memory is checked against the "
                      "device's free memory");
  }
  return RuntimeFailure("the Kokkos " + space + " runtime did not start: " + what);
}

int dispatch(int argc, char** argv, MpiRuntime& mpi) {
  const auto cmds = all_commands();
  if (argc < 2) throw UsageError("no command given (run 'kktrain --help' for the commands)");
  if (!std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help") ||
      !std::strcmp(argv[1], "help")) {
    print_main_help(cmds);
    return 0;
  }
  if (!std::strcmp(argv[1], "--version")) {
    print_version();
    return 0;
  }
  const std::string name = argv[1];
  for (const auto& c : cmds) {
    if (name != c.spec.name) continue;
    std::vector<std::string> rest(argv + 2, argv + argc);
    ParsedArgs args = parse_args(c.spec, rest);
    if (args.help) {
      std::fputs(command_help(c.spec).c_str(), stdout);
      return 0;
    }
    AppContext ctx;
    ctx.mpi = &mpi;
    if (!c.needs_kokkos) return c.run(args, ctx);
    // Use the cores this process was given and no more (parallel/threads.hpp).
    const ThreadInputs inputs = read_thread_inputs();
    const ThreadPlan threads = plan_threads(inputs);
    ctx.threads_warning = oversubscription_warning(threads, inputs);
    const std::string blas = apply_blas_threads(threads);
    std::optional<KokkosSession> kokkos;
    prepare_launch_counting();  // metrics' kernel_launches, without fences around kernels
    try {
      kokkos.emplace(argv[0], threads.kokkos_threads);
    } catch (const std::exception& e) {
      throw kokkos_start_failure(e.what());
    }
    start_launch_counting();
    ctx.threads = thread_summary(threads, blas, kokkos->describe());  // train prints it
    return c.run(args, ctx);
  }
  throw UsageError("unknown command '" + name + "' (run 'kktrain --help')");
}

}  // namespace

int run_main(int argc, char** argv) {
  // Thread settings that oversubscribe the cores: restarted with waits that yield (threads.hpp).
  restart_to_yield_if_oversubscribed(argv);
  h5::start_library();  // before MPI: HDF5 then hooks nothing into MPI_Finalize (io/h5.hpp)
  MpiRuntime mpi(&argc, &argv);
  log::set_rank(mpi.rank());
  const bool many = mpi.active() && mpi.size() > 1;
  const std::string who = many ? "kktrain[rank " + std::to_string(mpi.rank()) + "]" : "kktrain";
  int rc = 0;
  bool same_on_all_ranks = false;  // config and usage errors: every rank reads the same input
  bool returned_normally = false;  // every rank returns the same status (e.g. stopped by signal)
  try {
    rc = dispatch(argc, argv, mpi);
    returned_normally = true;
  } catch (const CollectiveError& e) {  // every rank knows; one of them says what happened
    if (e.printed_here())
      std::fprintf(stderr, "%s: error: %s\n", who.c_str(), log::one_line(e.what()).c_str());
    rc = e.exit_code();
    same_on_all_ranks = true;
  } catch (const ConfigError& e) {
    if (mpi.rank() == 0)
      std::fprintf(stderr, "kktrain: error: %s\n", log::one_line(e.what()).c_str());
    rc = e.exit_code();
    same_on_all_ranks = true;
  } catch (const UsageError& e) {
    if (mpi.rank() == 0)
      std::fprintf(stderr, "kktrain: error: %s\n", log::one_line(e.what()).c_str());
    rc = e.exit_code();
    same_on_all_ranks = true;
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: error: %s\n", who.c_str(), log::one_line(e.what()).c_str());
    rc = e.exit_code();
  } catch (const std::bad_alloc& e) {
    // Kokkos's allocation failures (RawMemoryAllocationFailure) say what and how much in their
    // first lines; the rest is a traceback notice.
    std::string what = e.what();
    what = what.substr(0, what.find("\n"));
    std::fprintf(stderr,
                 "%s: error: out of memory: %s (kktrain audit CONFIG shows what a run needs)\n",
                 who.c_str(), log::one_line(what.empty() ? "an allocation failed" : what).c_str());
    rc = 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: internal error: %s\n", who.c_str(),
                 log::one_line(e.what()).c_str());
    rc = 1;
  }
  // Everything a command printed must have reached stdout (a full disk, a closed pipe): a lost
  // result is a failed run, not a success.
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int err = errno;
  if ((!flushed || std::ferror(stdout)) && rc == 0) {
    std::fprintf(stderr, "%s: error: writing standard output failed: %s\n", who.c_str(),
                 err != 0 ? std::strerror(err) : "a write did not complete");
    rc = 1;
  }
  const bool threw = rc != 0 && !returned_normally;
  if (threw && many && !same_on_all_ranks) {
    // A failure on one rank must not leave the others hanging in a collective.
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, rc);
  }
  h5::finish_library();  // before MPI_Finalize (mpi's destructor)
  return rc;
}

}  // namespace kktrain

int main(int argc, char** argv) {
  return kktrain::run_main(argc, argv);
}
