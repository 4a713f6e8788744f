// The precision audit: for every parameter, trainable or not, the dtypes of its storage,
// gradient, optimizer moments and master copy with the bytes each costs, plus totals, the
// compute/reduce/output dtypes and the precision warnings. Planned from the config and the
// parameter registry without allocating anything, through the same plan_state() the optimizers
// allocate from.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/param_registry.hpp"
#include "optim/optimizer.hpp"

namespace kktrain {

struct AuditRow {
  const ParamInfo* param = nullptr;
  ParamStateInfo state;
  std::optional<DType> grad;  // null when frozen
  int64_t bytes_per_element = 0;
  int64_t bytes = 0;
};

// Resident bytes of one rank's shards.
struct RankBytes {
  int rank = 0;
  int64_t bytes_params = 0, bytes_grads = 0, bytes_moments = 0, bytes_master = 0;
  int64_t total() const { return bytes_params + bytes_grads + bytes_moments + bytes_master; }
};

// The predicted training peak of one rank (apps/train/memory_plan.hpp fills it; docs/memory.md).
struct PeakBreakdown {
  int64_t parameters = 0, gradients = 0, optimizer_state = 0;  // resident shards (per_rank)
  int64_t compute_weights = 0;  // cast / gathered compute copies (FsdpUnits weight slots)
  int64_t activations = 0;      // what the configured run keeps from forward to backward
  int64_t activations_without_checkpointing = 0, activations_with_checkpointing = 0;
  int64_t workspaces = 0;  // scratch, head, batch, unit gradient slots, wires, GEMM scratch
  int64_t data = 0;        // the data path: a step's token windows, the embedded corpus if used
  int64_t baseline = 0;    // the process before the model (Kokkos, MPI, libraries)
  int64_t total() const {
    return parameters + gradients + optimizer_state + compute_weights + activations + workspaces +
           data + baseline;
  }
  // The counted group with the most bytes, and its bytes.
  std::pair<std::string, int64_t> largest() const;
};

struct AuditReport {
  std::vector<AuditRow> rows;
  int world = 1;       // ranks the parameters are sharded over
  RankBytes per_rank;  // the rank with the most resident bytes (rank 0 holds the most rows)
  std::string optimizer;
  ResolvedPrecision precision;
  int64_t total_elements = 0, trainable_elements = 0;
  int64_t bytes_params = 0, bytes_grads = 0, bytes_moments = 0, bytes_master = 0;
  int64_t bytes_trainable = 0;  // everything attributable to trainable parameters
  std::vector<std::string> warnings;
  std::optional<PeakBreakdown> peak;  // the predicted training peak, when planned
  // The same model and run under the reference's two patterns (the configured optimizer and
  // storage replaced): name, description, predicted peak, or no value with the reason.
  struct PatternPeak {
    std::string name, description;
    std::optional<PeakBreakdown> peak;
    std::string error;
  };
  std::vector<PatternPeak> pattern_peaks;
  // A mixture-of-experts model: its routers (protected fp32 parameters: fp32 storage, compute
  // and gradient whatever the compute dtype) and the expert parameters' elements, in all and
  // held by each rank.
  struct Moe {
    std::vector<std::string> routers;
    int64_t expert_elements = 0;
    std::vector<int64_t> expert_elements_per_rank;
    int expert_parallel = 1;
  };
  std::optional<Moe> moe;
  double bytes_per_trainable() const {
    return trainable_elements ? static_cast<double>(bytes_trainable) / trainable_elements : 0.0;
  }
};

// The precision warnings of a configuration (in order):
//  - torch Adam/AdamW with trainable bf16 parameters, LoRA adapters included (the "risky
//    pattern" of docs/precision.md; train.fail_on_precision_warning turns it into an error);
//  - optimizer settings that have no effect on these parameters.
// The first element of the pair is true when the risky-pattern warning is among them.
std::pair<bool, std::vector<std::string>> precision_warnings(const Config& cfg,
                                                             const ParamRegistry& params);

// `config_warnings` are warnings raised earlier (config loading); they lead the list.
AuditReport precision_audit(const Config& cfg, const ParamRegistry& params,
                            const std::vector<std::string>& config_warnings);

std::string audit_table(const AuditReport& r);
// "predicted peak ..." lines of the table (also logged by train).
std::string peak_text(const PeakBreakdown& p);
std::string format_bytes(double bytes);  // "1.50 GiB"
std::string audit_json(const AuditReport& r);

}  // namespace kktrain
