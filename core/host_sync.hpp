// Host synchronizations: every place the host waits for the device or for the other ranks.
//
// On a GPU each wait drains the queue of kernels and collectives the host has issued ahead, so
// a training step is shaped by how many it has. Every wait in kktrain goes through host_sync()
// (a Kokkos fence, counted) or, where the wait is inside a library call (a device-to-host copy,
// a host-scalar MPI reduction, an agreement, a blocking MPI collective on buffers), is counted
// at that call (count_host_sync, count_collective_wait). The code around a wait says why it
// waits (SyncScope), so a step's metrics row can say what it waited for:
//
//   step_scalars  the step's loss, multi-token loss and gradient sum of squares read back and
//                 summed over ranks (one wait: the optimizer needs the clipping factor)
//   step_end      the step's end agreed over ranks: stop signals, errors (the next step's token
//                 windows are drawn before it, so a bad window ends every rank here), and on
//                 logged steps the metrics' maxima and sums (one wait)
//   collective    a buffer collective the host waits for (MPI on host memory progresses only
//                 inside MPI calls; NCCL on a stream needs no host wait)
//   routing       a mixture-of-experts layer's token counts per expert, read in forward (and
//                 its exchange plan): dropless routing sizes its products and all-to-all on the
//                 host, one wait per sparse layer and pass (dense models: none)
//   setup         anything before the first step or after the last (allocation, loads, checks)
//   io            checkpoints, exports and other file writes of a step
//   validation    validation loss
//   profiling     fences that close a profiled region (only with a Kokkos tool loaded)
//
// A step's global synchronizations (metrics `host_syncs`) are the waits of every cause but
// `collective`, which is reported apart (`host_syncs_by_cause`). Beside them, a step's kernel
// launches (`kernel_launches`, `deep_copies`: core/launch_count.hpp).
#pragma once

#include <array>
#include <cstdint>

#include "core/launch_count.hpp"

namespace kktrain {

enum class SyncCause {
  step_scalars,
  step_end,
  collective,
  routing,
  setup,
  io,
  validation,
  profiling
};
constexpr int kSyncCauses = 8;

const char* sync_cause_name(SyncCause c);

// Waits inside a scope count under its cause (the innermost scope's; `setup` outside any).
// A scope made with one_wait groups the waits its code does back to back (a device readback and
// the reduction of its values over ranks) into one synchronization, counted when it ends.
class SyncScope {
 public:
  explicit SyncScope(SyncCause cause, bool one_wait = false);
  ~SyncScope();
  SyncScope(const SyncScope&) = delete;
  SyncScope& operator=(const SyncScope&) = delete;
};

// Waits for all device work this process issued (Kokkos::fence) and counts it.
void host_sync();
// Counts a wait done inside a library call (a device-to-host copy, an MPI reduction of host
// scalars, an agreement): the caller waits at that call whatever kktrain does.
void count_host_sync();
// Counts the host's wait for a buffer collective (cause `collective`, never grouped).
void count_collective_wait();
// The fence before a library that runs on the host reads device buffers (MPI): part of the
// collective's wait, which count_collective_wait counts.
void collective_fence();

// How many times the device has drained since the process started: every host_sync() and
// collective_fence(), and every readback noted with note_device_drained() (a copy to host memory
// without an execution-space instance, which fences the device first). Work queued before a
// drain has run; UploadStaging reuses its pinned bytes on that knowledge.
int64_t device_drains();
void note_device_drained();

// Counts since the process started, by cause, and the kernel launches and deep copies queued
// (core/launch_count.hpp), so that a step's row says both how often it waited and how much it
// launched.
struct HostSyncCounts {
  std::array<int64_t, kSyncCauses> by_cause{};
  LaunchCounts launches;
  int64_t of(SyncCause c) const { return by_cause[static_cast<int>(c)]; }
  // Global synchronizations: every cause but `collective`.
  int64_t global() const;
  HostSyncCounts since(const HostSyncCounts& earlier) const;
};
HostSyncCounts host_sync_counts();

}  // namespace kktrain
