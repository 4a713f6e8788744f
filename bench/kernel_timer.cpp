// A Kokkos Tools library that times every kernel and profile region by name: what the profile
// tables in bench/README.md come from. Load it into any kktrain program with
//
//   KOKKOS_PROFILE_LIBRARY=build/bench/libkktrain_kernel_timer.so build/bench/bench_model ...
//
// (Kokkos 4.x: KOKKOS_TOOLS_LIBS). Kokkos calls the kokkosp_* functions below around every
// parallel_for / reduce / scan and every pushRegion / popRegion; gemm() (ops/gemm.cpp) pushes a
// region named after each product's shape while a tool is loaded, so oneDNN's and BLAS' time is
// attributed too. Times are self times (a region's time minus the kernels and regions inside it),
// host wall clock: meaningful for host backends, where kernels are synchronous.
//
// When the program marks regions named "bench_step" (bench_model does, around its timed steps),
// only time inside them counts, and shares are of the total time inside them. At exit it prints
// the 25 largest entries to stderr, and all of them to KKTRAIN_KERNEL_TIMER_OUT (a JSON file) when
// that is set.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Totals {
  double self_s = 0.0;
  int64_t calls = 0;
};

struct Frame {
  std::string name;
  double start = 0.0, children = 0.0;
  bool in_step = false;  // began inside a bench_step region
};

struct State {
  std::map<std::string, Totals> totals, step_totals;  // everything; inside bench_step only
  std::vector<Frame> stack;
  int step_depth = 0;       // bench_step regions open
  bool saw_step = false;    // the program marks steps: count only inside them
  double step_total = 0.0;  // wall time inside bench_step regions
};

State& state() {
  static State s;
  return s;
}

const char* const kStep = "bench_step";

void begin(const std::string& name) {
  State& s = state();
  if (name == kStep) {
    s.saw_step = true;
    ++s.step_depth;
  }
  s.stack.push_back(Frame{name, now(), 0.0, s.step_depth > 0});
}

void end() {
  State& s = state();
  if (s.stack.empty()) return;
  const Frame f = s.stack.back();
  s.stack.pop_back();
  const double elapsed = now() - f.start;
  if (!s.stack.empty()) s.stack.back().children += elapsed;
  if (f.name == kStep) {
    --s.step_depth;
    s.step_total += elapsed;
    return;
  }
  for (auto* m : {&s.totals, f.in_step ? &s.step_totals : nullptr}) {
    if (m == nullptr) continue;
    Totals& t = (*m)[f.name];
    t.self_s += elapsed - f.children;
    t.calls += 1;
  }
}

}  // namespace

extern "C" {

void kokkosp_init_library(int, uint64_t, uint32_t, void*) {}

void kokkosp_begin_parallel_for(const char* name, uint32_t, uint64_t* id) {
  *id = 0;
  begin(name);
}
void kokkosp_end_parallel_for(uint64_t) {
  end();
}
void kokkosp_begin_parallel_reduce(const char* name, uint32_t, uint64_t* id) {
  *id = 0;
  begin(name);
}
void kokkosp_end_parallel_reduce(uint64_t) {
  end();
}
void kokkosp_begin_parallel_scan(const char* name, uint32_t, uint64_t* id) {
  *id = 0;
  begin(name);
}
void kokkosp_end_parallel_scan(uint64_t) {
  end();
}
void kokkosp_push_profile_region(const char* name) {
  begin(name);
}
void kokkosp_pop_profile_region() {
  end();
}

void kokkosp_finalize_library() {
  State& s = state();
  const auto& chosen = s.saw_step ? s.step_totals : s.totals;
  std::vector<std::pair<std::string, Totals>> rows(chosen.begin(), chosen.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.self_s > b.second.self_s; });
  double counted = 0.0;
  for (const auto& r : rows) counted += r.second.self_s;
  const double total = s.saw_step ? s.step_total : counted;
  std::fprintf(stderr, "kernel_timer: %.3f s %s, %.3f s of it in kernels and GEMMs\n", total,
               s.saw_step ? "inside bench_step regions" : "in kernels and regions", counted);
  std::fprintf(stderr, "%8s %6s %9s  %s\n", "self s", "share", "calls", "kernel or region");
  for (std::size_t i = 0; i < rows.size() && i < 25; ++i) {
    const Totals& t = rows[i].second;
    std::fprintf(stderr, "%8.3f %5.1f%% %9lld  %s\n", t.self_s, 100.0 * t.self_s / total,
                 static_cast<long long>(t.calls), rows[i].first.c_str());
  }
  if (const char* path = std::getenv("KKTRAIN_KERNEL_TIMER_OUT")) {
    if (FILE* f = std::fopen(path, "w")) {
      std::fprintf(f, "{\"total_s\": %.6f, \"entries\": [", total);
      for (std::size_t i = 0; i < rows.size(); ++i) {
        // The label escaped by nlohmann::json (quotes, backslashes, control characters).
        const std::string name =
            nlohmann::json(rows[i].first)
                .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        std::fprintf(f, "%s{\"name\": %s, \"self_s\": %.6f, \"calls\": %lld}", i ? ", " : "",
                     name.c_str(), rows[i].second.self_s,
                     static_cast<long long>(rows[i].second.calls));
      }
      std::fprintf(f, "]}\n");
      std::fclose(f);
    }
  }
}

}  // extern "C"
