// A training step's two synchronizations (core/host_sync.hpp): everything the host must learn
// from the device or from the other ranks during a step is gathered into these two waits, so
// the number of waits does not grow with layers, units or micro-batches.
//
//   step scalars  after the last backward, before the optimizer: the step's loss, multi-token
//                 loss and gradient sum of squares, accumulated on the device (DeviceSums), read
//                 back and summed over ranks together (the optimizer needs the clip factor).
//   step end      after the optimizer: stop signals, errors (a failed metrics write, the next
//                 step's token windows that could not be drawn) and, on logged steps, the
//                 metrics' maxima (peak memory) and sums (updates lost to rounding), reduced
//                 over ranks together.
//
// Values are those of the separate reductions they replace: each element is reduced on its own
// by the same operation.
#pragma once

#include <cstdint>
#include <exception>
#include <vector>

#include "core/device_sums.hpp"
#include "core/host_sync.hpp"
#include "io/metrics.hpp"
#include "model/preference_loss.hpp"
#include "model/transformer.hpp"
#include "parallel/communicator.hpp"

namespace kktrain {

// The device slots a step accumulates into (ForwardOptions::loss_sums and grad_sum_squares).
struct StepSlots {
  static constexpr int kLoss = ForwardOptions::kLossSlot, kMtp = ForwardOptions::kMtpSlot;
  static constexpr int kGradSquares = ForwardOptions::kForwardSlots;  // after the forward's own
  static constexpr int kPairs = kGradSquares + 1;  // preference pairs: PairMeans' kPairMeans
  static constexpr int kCount = kPairs + kPairMeans;
};

struct StepScalars {
  double loss = 0.0;       // the mean over micro-batches and ranks of the micro-batch losses
  double mtp_loss = 0.0;   // the same for the multi-token-prediction loss
  double grad_norm = 0.0;  // the global gradient norm
  double aux_loss = 0.0;   // the mean over micro-batches and ranks of the MoE load-balancing loss
  PairMeans pairs;         // preference pairs: the means over the global batch's pairs
};

// How a step's loss slot was filled: each micro-batch added its own mean (windows: the step's
// loss is their mean over micro-batches and ranks), or its share of the global batch's mean
// (examples, ForwardOptions::loss_tokens: the step's loss is their sum).
enum class StepLoss { micro_batch_means, global_shares };

// One wait: the device sums read back and reduced over the ranks, with `aux_sum` (this rank's
// sum over micro-batches of the MoE load-balancing loss, already on the host).
StepScalars reduce_step_scalars(const DeviceSums& sums, int64_t micro_steps, double aux_sum,
                                Communicator& comm, StepLoss loss = StepLoss::micro_batch_means);

// What each rank brings to the step's end.
struct StepEndInputs {
  int signal = 0;                  // a stop signal this rank received (0: none)
  std::exception_ptr error;        // this rank's failure since the last agreement
  bool logged = false;             // a logged step: the metrics values below are reduced too
  double peak_rss_bytes = 0.0;     // maximized
  double peak_device_bytes = 0.0;  // maximized
  std::vector<uint64_t> counts;    // summed (counts of elements: exact in double below 2^53)
};

struct StepEnd {
  int signal = 0;       // the largest signal number any rank received
  bool failed = false;  // some rank brought an error (agree_on_errors then says whose)
  double peak_rss_bytes = 0.0, peak_device_bytes = 0.0;
  std::vector<uint64_t> counts;
};

// One wait on several ranks (none on one: nothing to learn).
StepEnd agree_step_end(const StepEndInputs& in, Communicator& comm);

// A metrics row's synchronization columns: host_syncs (the global ones) and host_syncs_by_cause
// (every cause, `collective` included: the host's waits for buffer collectives), then this rank's
// kernel_launches and deep_copies (core/launch_count.hpp).
void add_host_sync_columns(JsonLine& row, const HostSyncCounts& syncs);

}  // namespace kktrain
