#include "apps/train/memory_plan.hpp"

#include <sys/resource.h>
#include <algorithm>
#include <cstdlib>

#include <fstream>
#include <sstream>
#include <string>

#include "apps/train/app_model.hpp"
#include "apps/train/memory_limits.hpp"
#include "core/kokkos_compat.hpp"
#include "core/upload_staging.hpp"
#include "io/data.hpp"
#include "model/dense_block.hpp"
#include "ops/gemm.hpp"

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime.h>
#elif defined(KOKKOS_ENABLE_HIP)
#include <hip/hip_runtime.h>
#endif

namespace kktrain {

namespace {

int64_t group_bytes(const std::vector<BufferSpec>& plan,
                    std::initializer_list<const char*> groups) {
  int64_t n = 0;
  for (const BufferSpec& s : plan) {
    for (const char* g : groups) {
      if (s.group == g) n += s.bytes * s.copies;
    }
  }
  return n;
}

// What a forward + backward keeps: the kept activations, one recomputed layer under activation
// checkpointing, and the MTP head's per-depth tensors.
int64_t kept_activations(const std::vector<BufferSpec>& plan) {
  return group_bytes(plan, {"activations", "recompute", "mtp"});
}

// The converted GEMM path (ops/gemm_converted.cpp) widens bf16 operands and results into three
// fp32 scratch buffers that grow to the largest operand of their role, up to the panel budget.
int64_t gemm_scratch_bytes(const Config& cfg, Rounding compute, int64_t B, int64_t T) {
  if (compute == Rounding::fp32) return 0;
  const GemmOptions gemm = gemm_options(cfg.model);
  const bool converted = gemm_backend_for(gemm, DType::bfloat16, DType::bfloat16,
                                          DType::bfloat16) == GemmBackend::converted ||
                         gemm_backend_for(gemm, DType::bfloat16, DType::bfloat16, DType::float32) ==
                             GemmBackend::converted;
  if (!converted) return 0;
  const ModelConfig& m = cfg.model;
  const int64_t N = B * T, C = m.hidden_size, F = m.intermediate_size, V = m.vocab_size;
  const int64_t Q = (m.num_heads + 2 * m.num_kv_heads) * m.head_dim();
  const int64_t widest = std::max({Q, 2 * F, 2 * C, m.num_heads * m.head_dim()});
  // The LM head's activations are one chunk of rows of logits (model.loss_chunk_tokens).
  int64_t act = std::max(N * widest, std::min(N, m.loss_chunk_tokens) * V);
  int64_t weight = std::max(widest, V) * std::max(C, F);
  if (m.moe.enabled()) {  // the experts' grouped GEMMs run one expert's product at a time
    const int64_t Fe = m.moe.intermediate_size, Fs = m.moe.shared_expert_intermediate_size;
    act = std::max({act, N * m.moe.top_k * std::max(2 * Fe, C), N * 2 * Fs});
    weight = std::max({weight, 2 * Fe * C, 2 * Fs * C});
  }
  // Each of the three scratch buffers holds at most the panel budget (larger products run in
  // panels).
  const int64_t cap = gemm.limits.converted_scratch_elems;
  return 4 * (std::min(std::max(act, weight), cap) * 2 + std::min(act, cap));
}

}  // namespace

PeakBreakdown predict_peak(const Config& cfg, const Transformer& model, const AuditReport& audit) {
  PeakBreakdown p;
  const RankBytes& r = audit.per_rank;
  p.parameters = r.bytes_params;
  p.gradients = r.bytes_grads;
  p.optimizer_state = r.bytes_moments + r.bytes_master;
  const int64_t B = cfg.data.micro_batch_size, T = cfg.data.seq_len;
  const int64_t W = audit.world;
  const bool accumulates = cfg.data.global_batch_size / (B * W) > 1;
  const std::vector<BufferSpec> units = model.unit_buffer_plan(
      UnitPlanOptions{cfg.distributed.reshard_after_forward, accumulates, grad_sync_of(cfg),
                      cfg.distributed.nonblocking_collectives});
  p.compute_weights = group_bytes(units, {"compute_weights"});
  const std::vector<BufferSpec> acts = model.buffer_plan(B, T);
  p.activations = kept_activations(acts);
  for (const bool ckpt : {false, true}) {
    ModelConfig mc = cfg.model;
    mc.activation_checkpointing = ckpt;
    const Transformer alt(mc, cfg.precision, Allocation::after_prepare, cfg.peft);
    (ckpt ? p.activations_with_checkpointing : p.activations_without_checkpointing) =
        kept_activations(alt.buffer_plan(B, T));
  }
  p.workspaces = group_bytes(acts, {"batch", "head", "scratch"}) +
                 group_bytes(units, {"units", "model"}) +
                 gemm_scratch_bytes(cfg, model.roundings().compute, B, T);
#if !defined(KOKKOS_ENABLE_CUDA) && !defined(KOKKOS_ENABLE_HIP)
  // The pinned upload staging of a step's micro-batches (host memory: on GPU builds it is not
  // part of the device's budget).
  const int64_t micro_batches = std::max<int64_t>(1, cfg.data.global_batch_size / (B * W));
  p.workspaces += static_cast<int64_t>(
      UploadStaging::reserved_bytes_for(model.upload_plan(B, T), micro_batches));
#endif
  p.data = data_resident_bytes(cfg.data, static_cast<int>(W));
  p.baseline = kBaselineBytes;
  return p;
}

int64_t available_memory_bytes(std::optional<int64_t> configured, std::string* source,
                               int ranks_on_node) {
  if (configured) {
    *source = "train.memory_available_bytes";
    return *configured;
  }
#if defined(KOKKOS_ENABLE_CUDA) || defined(KOKKOS_ENABLE_HIP)
  // The device's free memory, shared by the ranks of this node that Kokkos puts on it (ranks go
  // to devices round-robin by local rank).
  size_t free_b = 0, total_b = 0;
  int devices = 1;
#if defined(KOKKOS_ENABLE_CUDA)
  const bool ok = cudaMemGetInfo(&free_b, &total_b) == cudaSuccess;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 1;
  *source = "cudaMemGetInfo free";
#else
  const bool ok = hipMemGetInfo(&free_b, &total_b) == hipSuccess;
  if (hipGetDeviceCount(&devices) != hipSuccess) devices = 1;
  *source = "hipMemGetInfo free";
#endif
  const int sharing =
      std::max(1, (ranks_on_node + std::max(1, devices) - 1) / std::max(1, devices));
  if (sharing > 1) *source += ", shared by " + std::to_string(sharing) + " ranks on the device";
  return ok ? static_cast<int64_t>(free_b) / sharing : -1;
#else
  const MemoryLimit m = host_memory_limit(ranks_on_node);
  *source = m.source;
  return m.bytes;
#endif
}

double peak_rss_bytes() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "VmHWM:") {
      double kib = 0.0;
      if (status >> kib) return kib * 1024.0;
      break;
    }
  }
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) * 1024.0;  // Linux reports KiB
}

bool device_memory_tracked() {
#if defined(KOKKOS_ENABLE_CUDA) || defined(KOKKOS_ENABLE_HIP)
  return true;
#else
  return false;
#endif
}

int64_t device_used_bytes() {
#if defined(KOKKOS_ENABLE_CUDA)
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return -1;
  return static_cast<int64_t>(total_b - free_b);
#elif defined(KOKKOS_ENABLE_HIP)
  size_t free_b = 0, total_b = 0;
  if (hipMemGetInfo(&free_b, &total_b) != hipSuccess) return -1;
  return static_cast<int64_t>(total_b - free_b);
#else
  return -1;
#endif
}

}  // namespace kktrain
