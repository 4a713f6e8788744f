// Host synchronizations counted by cause (core/host_sync.hpp has the what and why).
#include "core/host_sync.hpp"

#include <Kokkos_Core.hpp>
#include <atomic>
#include <vector>

namespace kktrain {

namespace {

// Atomic: helper threads (OpenBLAS, I/O) never sync today, but a count must not tear if one does.
std::array<std::atomic<int64_t>, kSyncCauses> g_counts{};
std::atomic<int64_t> g_drains{0};

struct Scope {
  SyncCause cause;
  bool one_wait;
  bool waited;
};
// The scopes open on this thread, innermost last.
thread_local std::vector<Scope> t_scopes;

void add(SyncCause cause) {
  g_counts[static_cast<int>(cause)].fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

SyncScope::SyncScope(SyncCause cause, bool one_wait) {
  t_scopes.push_back(Scope{cause, one_wait, false});
}

SyncScope::~SyncScope() {
  const Scope s = t_scopes.back();
  t_scopes.pop_back();
  if (s.one_wait && s.waited) {
    // An enclosing grouping scope takes it over; otherwise it is one wait of its own.
    for (auto it = t_scopes.rbegin(); it != t_scopes.rend(); ++it) {
      if (it->one_wait) {
        it->waited = true;
        return;
      }
    }
    add(s.cause);
  }
}

const char* sync_cause_name(SyncCause c) {
  switch (c) {
    case SyncCause::step_scalars:
      return "step_scalars";
    case SyncCause::step_end:
      return "step_end";
    case SyncCause::collective:
      return "collective";
    case SyncCause::routing:
      return "routing";
    case SyncCause::setup:
      return "setup";
    case SyncCause::io:
      return "io";
    case SyncCause::validation:
      return "validation";
    case SyncCause::profiling:
      return "profiling";
  }
  return "unknown";
}

void count_host_sync() {
  if (t_scopes.empty()) return add(SyncCause::setup);
  for (auto it = t_scopes.rbegin(); it != t_scopes.rend(); ++it) {
    if (it->one_wait) {
      it->waited = true;
      return;
    }
  }
  add(t_scopes.back().cause);
}

void count_collective_wait() {
  add(SyncCause::collective);
}

void collective_fence() {
  Kokkos::fence();
  note_device_drained();
}

void host_sync() {
  Kokkos::fence();
  note_device_drained();
  count_host_sync();
}

int64_t device_drains() {
  return g_drains.load(std::memory_order_acquire);
}

void note_device_drained() {
  g_drains.fetch_add(1, std::memory_order_acq_rel);
}

int64_t HostSyncCounts::global() const {
  int64_t n = 0;
  for (int c = 0; c < kSyncCauses; ++c) {
    if (c != static_cast<int>(SyncCause::collective)) n += by_cause[c];
  }
  return n;
}

HostSyncCounts HostSyncCounts::since(const HostSyncCounts& earlier) const {
  HostSyncCounts d;
  for (int c = 0; c < kSyncCauses; ++c) d.by_cause[c] = by_cause[c] - earlier.by_cause[c];
  d.launches = launches.since(earlier.launches);
  return d;
}

HostSyncCounts host_sync_counts() {
  HostSyncCounts h;
  for (int c = 0; c < kSyncCauses; ++c) h.by_cause[c] = g_counts[c].load(std::memory_order_relaxed);
  h.launches = launch_counts();
  return h;
}

}  // namespace kktrain
