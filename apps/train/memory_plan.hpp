// The predicted training peak of one rank (docs/memory.md): the audit's resident shards, the
// unit machinery's buffers (Transformer::unit_buffer_plan -> FsdpUnits::plan) and the working
// buffers of a micro-batch (Transformer::buffer_plan), all from the code that allocates them,
// plus a measured constant for the process before the model. Nothing is allocated.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/config.hpp"
#include "model/transformer.hpp"
#include "optim/audit.hpp"

namespace kktrain {

// The process apart from the model and the data, measured on the Debian host build (Kokkos 3.4
// Serial, Open MPI, HDF5, OpenBLAS, oneDNN; docs/memory.md): `kktrain train` has 21.1 MiB
// resident right before the model is allocated, and a 1-layer C=32 model (0.6 MiB predicted)
// peaks at 24.6 MiB over its steps on a token file (first-use buffers of OpenBLAS and oneDNN's
// JIT kernels), 28.6 MiB on the embedded corpus (its 4 MiB of ids: PeakBreakdown::data).
constexpr int64_t kBaselineBytes = int64_t(24) << 20;

// `model` is the planned model of `cfg` (plan_model, for the rank and world of `audit`).
PeakBreakdown predict_peak(const Config& cfg, const Transformer& model, const AuditReport& audit);

// Bytes this rank may use: `configured` (train.memory_available_bytes) when set; the device's free
// memory on CUDA/HIP builds; on host builds the smallest of the node's MemAvailable and the memory
// cgroup's room (each shared by the ranks_on_node ranks of this node) and the process's RLIMIT_AS
// / RLIMIT_DATA headroom (apps/train/memory_limits.hpp); -1 when unknown. `source` names where it
// came from.
int64_t available_memory_bytes(std::optional<int64_t> configured, std::string* source,
                               int ranks_on_node);

// Peak resident memory of this process so far (bytes): VmHWM of /proc/self/status, the
// high-water mark of this program's own address space. (getrusage's ru_maxrss also keeps the peak
// of the process image exec replaced: launched from a large parent, e.g. a Python harness with
// PyTorch loaded, it reports the parent's size.) ru_maxrss where /proc is not there.
double peak_rss_bytes();

// A CUDA or HIP build: device_used_bytes() measures the device.
bool device_memory_tracked();
// The device's used bytes now (total - free) on CUDA/HIP builds; -1 on host builds.
int64_t device_used_bytes();

}  // namespace kktrain
