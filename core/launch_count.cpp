// Kernel launches counted through Kokkos Tools callbacks (core/launch_count.hpp has the what and
// why).
#include "core/launch_count.hpp"

#include <Kokkos_Core.hpp>
#include <atomic>
#include <cstring>

namespace kktrain {

namespace {

namespace kt = Kokkos::Tools::Experimental;

// Atomic: kernels may be launched from several host threads (the communication side's).
std::atomic<int64_t> g_kernels{0}, g_copies{0};
bool g_started = false, g_external = false;
// The callbacks a loaded tool had set, called after counting.
kt::EventSet g_previous{};

void on_parallel_for(const char* name, uint32_t dev, uint64_t* id) {
  g_kernels.fetch_add(1, std::memory_order_relaxed);
  if (g_previous.begin_parallel_for != nullptr) g_previous.begin_parallel_for(name, dev, id);
}
void on_parallel_reduce(const char* name, uint32_t dev, uint64_t* id) {
  g_kernels.fetch_add(1, std::memory_order_relaxed);
  if (g_previous.begin_parallel_reduce != nullptr) g_previous.begin_parallel_reduce(name, dev, id);
}
void on_parallel_scan(const char* name, uint32_t dev, uint64_t* id) {
  g_kernels.fetch_add(1, std::memory_order_relaxed);
  if (g_previous.begin_parallel_scan != nullptr) g_previous.begin_parallel_scan(name, dev, id);
}
void on_deep_copy(Kokkos::Tools::SpaceHandle dst, const char* dst_name, const void* dst_ptr,
                  Kokkos::Tools::SpaceHandle src, const char* src_name, const void* src_ptr,
                  uint64_t size) {
  g_copies.fetch_add(1, std::memory_order_relaxed);
  if (g_previous.begin_deep_copy != nullptr) {
    g_previous.begin_deep_copy(dst, dst_name, dst_ptr, src, src_name, src_ptr, size);
  }
}

#if KOKKOS_VERSION >= 30500
void no_global_fences(const uint32_t, kt::ToolSettings* settings) {
  settings->requires_global_fencing = false;
}
#endif

// Whether any callback but kktrain's own settings request is set: a tool library was loaded.
bool any_tool(kt::EventSet set) {
#if KOKKOS_VERSION >= 30500
  if (set.request_tool_settings == &no_global_fences) set.request_tool_settings = nullptr;
#endif
  kt::EventSet none{};
  std::memset(&none, 0, sizeof(none));
  return std::memcmp(&set, &none, sizeof(set)) != 0;
}

}  // namespace

void prepare_launch_counting() {
#if KOKKOS_VERSION >= 30500
  kt::set_request_tool_settings_callback(&no_global_fences);
#endif
}

void start_launch_counting() {
  if (g_started) return;
  g_previous = kt::get_callbacks();
  g_external = any_tool(g_previous);
  kt::set_begin_parallel_for_callback(&on_parallel_for);
  kt::set_begin_parallel_reduce_callback(&on_parallel_reduce);
  kt::set_begin_parallel_scan_callback(&on_parallel_scan);
  kt::set_begin_deep_copy_callback(&on_deep_copy);
  g_started = true;
}

LaunchCounts launch_counts() {
  return LaunchCounts{g_kernels.load(std::memory_order_relaxed),
                      g_copies.load(std::memory_order_relaxed)};
}

bool external_tool_loaded() {
  return g_started ? g_external : Kokkos::Tools::profileLibraryLoaded();
}

}  // namespace kktrain
