// A Kokkos Tools library that counts the global fences inside each training step, for
// tests/cli/test_fence_counts.py: the step's every host wait must be one kktrain reports
// (metrics.jsonl host_syncs + host_syncs_by_cause.collective; core/host_sync.hpp).
//
//   KOKKOS_PROFILE_LIBRARY=lib (Kokkos 3.x) / KOKKOS_TOOLS_LIBS=lib (4.x), and on Kokkos < 3.5
//   also LD_PRELOAD=lib; KKTRAIN_FENCE_COUNTS=file: at exit, one line per step,
//   "<drains> <fences>", to file (file.<rank> under Open MPI's mpirun).
//   KKTRAIN_FENCE_BACKTRACE=1: a backtrace on stderr at each drain inside a step (addr2line -C -f
//   -e kktrain on its offsets names the waiting code).
//
// A step is a profile region named "kktrain_step" (apps/cli/cmd_train.cpp marks each step). Inside
// one, `fences` counts every global fence (Kokkos::fence(), and the ones a deep_copy without an
// execution-space instance does) and `drains` those that follow device work since the previous
// global fence: a kernel, a deep_copy begun, or a profile region opened (gemm() marks each
// product with one while a tool is loaded: BLAS and oneDNN calls are no Kokkos kernels). A
// readback is a fence before its copy and one after it (the second drains nothing), so a host
// wait is one drain however many fences it takes.
// Where fences come from:
//   Kokkos >= 3.5  kokkosp_begin_fence with a global device id (instance bits 0), counted for
//                  the default execution space's type only (Kokkos::fence() reports one event per
//                  backend).
//   Kokkos < 3.5   fences never reach tools: this library defines Kokkos::fence() itself (loaded
//                  first, LD_PRELOAD) and calls the real one. Instance fences (exec.fence()) are
//                  not global and not counted on either path.
// kokkosp_request_tool_settings turns off the global fence Kokkos otherwise adds around each
// kernel while a tool is loaded.
#include <dlfcn.h>
#include <execinfo.h>
#include <Kokkos_Macros.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#if KOKKOS_VERSION >= 30500
#include <Kokkos_Core.hpp>
#endif

namespace {

struct Counter {
  int in_step = 0;    // open kktrain_step regions
  bool work = false;  // a kernel ran since the last global fence
  int64_t drains = 0, fences = 0;
  std::vector<std::string> names;  // region stack
  std::vector<std::pair<int64_t, int64_t>> steps;
};

Counter& counter() {
  static Counter c;
  return c;
}

void global_fence() {
  Counter& c = counter();
  if (c.in_step > 0) {
    ++c.fences;
    c.drains += c.work;
    if (c.work && std::getenv("KKTRAIN_FENCE_BACKTRACE") != nullptr) {
      void* frames[16];
      const int n = backtrace(frames, 16);
      std::fprintf(stderr, "fence_counter: step %zu drain %lld\n", c.steps.size() + 1,
                   static_cast<long long>(c.drains));
      backtrace_symbols_fd(frames, n, 2);
    }
  }
  c.work = false;
}

void kernel() {
  counter().work = true;
}

}  // namespace

#if KOKKOS_VERSION < 30500
namespace Kokkos {
void fence() {
  using Fn = void (*)();
  static const Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "_ZN6Kokkos5fenceEv"));
  if (real == nullptr) std::abort();
  global_fence();
  real();
}
}  // namespace Kokkos
#endif

extern "C" {

struct SpaceHandle {
  char name[64];
};

struct KokkosToolSettings {
  bool requires_global_fencing;
  bool padding[255];
};

void kokkosp_request_tool_settings(const uint32_t, KokkosToolSettings* s) {
  s->requires_global_fencing = false;
}

void kokkosp_init_library(const int, const uint64_t, const uint32_t, void*) {}

void kokkosp_finalize_library() {
  const char* out = std::getenv("KKTRAIN_FENCE_COUNTS");
  if (out == nullptr) return;
  std::string path = out;
  if (const char* rank = std::getenv("OMPI_COMM_WORLD_RANK")) path += std::string(".") + rank;
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return;
  for (const auto& s : counter().steps) {
    std::fprintf(f, "%lld %lld\n", static_cast<long long>(s.first),
                 static_cast<long long>(s.second));
  }
  std::fclose(f);
}

void kokkosp_push_profile_region(const char* name) {
  Counter& c = counter();
  c.names.emplace_back(name);
  c.work = true;  // a profiled region's work may be a library's (gemm(): BLAS, oneDNN)
  if (c.names.back() == "kktrain_step" && c.in_step++ == 0) c.drains = c.fences = 0;
}

void kokkosp_pop_profile_region() {
  Counter& c = counter();
  if (c.names.empty()) return;
  if (c.names.back() == "kktrain_step" && --c.in_step == 0)
    c.steps.emplace_back(c.drains, c.fences);
  c.names.pop_back();
}

void kokkosp_begin_deep_copy(SpaceHandle, const char*, const void*, SpaceHandle, const char*,
                             const void*, uint64_t) {
  kernel();
}
void kokkosp_end_deep_copy() {}
void kokkosp_begin_parallel_for(const char*, const uint32_t, uint64_t*) {
  kernel();
}
void kokkosp_end_parallel_for(const uint64_t) {}
void kokkosp_begin_parallel_reduce(const char*, const uint32_t, uint64_t*) {
  kernel();
}
void kokkosp_end_parallel_reduce(const uint64_t) {}
void kokkosp_begin_parallel_scan(const char*, const uint32_t, uint64_t*) {
  kernel();
}
void kokkosp_end_parallel_scan(const uint64_t) {}

#if KOKKOS_VERSION >= 30500
void kokkosp_begin_fence(const char*, const uint32_t device_id, uint64_t*) {
  using namespace Kokkos::Tools::Experimental;
  const ExecutionSpaceIdentifier id = identifier_from_devid(device_id);
  const auto own = DeviceTypeTraits<Kokkos::DefaultExecutionSpace>::id;
  if (id.instance_id == 0 && id.type == own) global_fence();
}
void kokkosp_end_fence(const uint64_t) {}
#endif

}  // extern "C"
